"""Run GEMM kernels a few times each on one shape, for a profiler to read (Nsight Compute on the H200).

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats --kernel-name regex:cluster \\
        python3 benchmarks/gemm_profile.py --shape 64x64x16384 --kernels clusterk:64x64x64_s8_w4_tma/c16 \\
        probe:64x64x128_s6_tma/c1 tiled:64x64x128_s4_w4

A kernel is a registry name (kernelrl.gemm.registry) or `probe:<label>/c<splits>`, a cluster split-K variant of
benchmarks/gemm_probe.py (built there; cluster size 1 runs one block per tile: the main loop alone). Every
kernel is checked against the fp64 reference first, then launched `--launches` times.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def launchers(names: list[str], m: int, n: int, k: int) -> dict:
    """{name: launcher}; the probe's variants are linked into one library first."""
    from kernelrl.gemm import clusterk
    from kernelrl.gemm.registry import make_launcher

    probes = {name: name[len("probe:"):].split("/c") for name in names if name.startswith("probe:")}
    if probes:
        from gemm_probe import build_clusterk_variants

        lib, _ = build_clusterk_variants(sorted({label for label, _ in probes.values()}))
    return {name: clusterk.launcher(lib, "probe_" + probes[name][0], name, int(probes[name][1]), m, n, k)
            if name in probes else make_launcher(name, m, n, k) for name in names}


def main() -> None:
    import torch

    from kernelrl.gemm import check as chk

    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, help="MxNxK")
    ap.add_argument("--kernels", nargs="+", required=True)
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args()
    m, n, k = (int(x) for x in args.shape.lower().split("x"))
    a, b = chk.random_inputs(m, n, k)
    ref = chk.reference(a, b)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    for name, fn in launchers(args.kernels, m, n, k).items():
        res = chk.check(fn, a, b, ref)
        print(f"{name} {m}x{n}x{k}: {'ok' if res.ok else res.reason}", flush=True)
        for _ in range(args.launches):
            fn(a, b, c)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
