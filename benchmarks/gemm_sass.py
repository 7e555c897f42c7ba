"""The machine code of the Triton GEMM kernels, without a GPU: compile every configuration of the tiled, split-K
and persistent TMA families for sm_90a and print one line per configuration with a hash of its SASS (register
choice and instruction order included; line info, labels and addresses left out). Two revisions whose lines
match run the same instructions, so a refactor of a kernel's source needs no new timing to show that it costs
nothing.

    python benchmarks/gemm_sass.py > before.txt   # at one revision
    python benchmarks/gemm_sass.py > after.txt    # at the other
    diff before.txt after.txt

Needs Triton (the `gemm` extra) and its bundled `cuobjdump`; compiles 144 kernels (about 150 s on two cores).

`--clusterk SOURCE` does the same for the CUDA cluster split-K family: every configuration the search uses,
compiled by nvcc from SOURCE (a copy of kernels/cluster_splitk.cu at any revision) with the build's own command,
into `--build-dir` (objects already there from the same source are reused, as the build reuses them), one line per
kernel (configuration and template arguments) with a hash of its SASS. The anonymous namespace's part of the
kernel names is left out, since it carries a hash of the file's path.

    git show REV:src/kernelrl/gemm/kernels/cluster_splitk.cu > /tmp/old.cu
    python benchmarks/gemm_sass.py --clusterk /tmp/old.cu --build-dir /tmp/old_ck > before.txt
    python benchmarks/gemm_sass.py --clusterk src/kernelrl/gemm/kernels/cluster_splitk.cu > after.txt
"""
from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;")
# the anonymous namespace's mangled name, which carries a hash of the source file's path
_ANON = re.compile(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]{8}")


def sass(cubin: bytes, cuobjdump: str) -> list[str]:
    """The instructions of a cubin, one per line, without their addresses and encodings."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True, check=True).stdout
    return [m.group(1) for m in map(_INSTRUCTION.search, out.splitlines()) if m]


def _bundled_cuobjdump() -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


# the shape the tiled kernel's fixed form is compiled for here: every tiled configuration covers it
FIXED_SHAPE = (512, 512, 1024)


def kernels():
    """(label, jit function, signature, constexprs, options) for every configuration of the three families. A tiled
    configuration is compiled with and without K masks, each with and without its edge handling in M and N (the
    form with it keeps the label it had before `EVEN_MN` existed), and in its fixed form for FIXED_SHAPE."""
    from kernelrl.gemm import space
    from kernelrl.gemm.kernels.triton_splitk import matmul_splitk
    from kernelrl.gemm.kernels.triton_tiled import matmul_tiled, matmul_tiled_fixed
    from kernelrl.gemm.kernels.triton_tma import matmul_tma_persistent

    ptr = {n: "*fp16" for n in ("a_ptr", "b_ptr", "c_ptr")}
    ints = ("M", "N", "K")
    for c in space.TILED_CONFIGS:
        sig = {**ptr, **{n: "i32" for n in (*ints, "stride_am", "stride_bk", "stride_cm")}}
        opts = dict(num_warps=c.warps, num_stages=c.stages)
        for even in (True, False):
            for even_mn in (False, True):
                const = dict(BM=c.bm, BN=c.bn, BK=c.bk, GROUP_M=8, EVEN_K=even, EVEN_MN=even_mn)
                yield f"{c.name} EVEN_K={even}{' EVEN_MN' if even_mn else ''}", matmul_tiled, sig, const, opts
        m, n, k = FIXED_SHAPE
        const = dict(M=m, N=n, K=k, stride_am=k, stride_bk=n, stride_cm=n, BM=c.bm, BN=c.bn, BK=c.bk, GROUP_M=8,
                     EVEN_K=True, EVEN_MN=True)
        yield f"{c.name}_fixed {m}x{n}x{k}", matmul_tiled_fixed, ptr, const, opts
    for c in space.SPLITK_TILES:
        sig = {**ptr, "ws_ptr": "*fp32", "cnt_ptr": "*i32", **{n: "i32" for n in (*ints, "k_chunk", "splits")}}
        for reduce in (True, False):
            const = dict(BM=c.bm, BN=c.bn, BK=c.bk, GROUP_M=8, REDUCE=reduce)
            yield (f"{c.name.split('/')[0]} REDUCE={reduce}", matmul_splitk, sig, const,
                   dict(num_warps=c.warps, num_stages=c.stages))
    for c in space.TRITON_CONFIGS:
        sig = {"a_desc": f"tensordesc<fp16[{c.bm},{c.bk}]>", "b_desc": f"tensordesc<fp16[{c.bk},{c.bn}]>",
               "c_desc": f"tensordesc<fp16[{c.bm},{c.bn}]>", **{n: "i32" for n in ints}}
        const = dict(BM=c.bm, BN=c.bn, BK=c.bk, GROUP_M=c.group_m, NUM_SMS=space.NUM_SMS, WARP_SPECIALIZE=c.ws,
                     FLATTEN=False, ACC_FP16=False)
        yield c.name, matmul_tma_persistent, sig, const, dict(num_warps=c.warps, num_stages=c.stages)


def clusterk_lines(source: Path, build_dir: Path, cuobjdump: str, only: str = ""):
    """(symbol, SASS hash, instruction count) of every cluster split-K configuration compiled from `source`."""
    from kernelrl.gemm import build as b
    from kernelrl.gemm.space import CLUSTERK_TILES

    configs = [c for c in CLUSTERK_TILES if only in c.symbol]

    def command(cfg) -> list[str]:
        cmd = b.clusterk_command(cfg)
        return [str(source.resolve()) if a == str(b.CK_SOURCE) else a for a in cmd]

    b._compile_and_link({c.symbol: (lambda c=c: command(c)) for c in configs}, source, "libsass_clusterk.so",
                        build_dir, None, lambda msg: print(msg, file=sys.stderr))
    digest = b._digest(source)
    for c in configs:
        out = subprocess.run([cuobjdump, "-sass", str(build_dir / f"{c.symbol}.{digest}.o")], capture_output=True,
                             text=True, check=True).stdout
        functions: dict[str, list[str]] = {}
        name = ""
        for line in out.splitlines():
            if "Function :" in line:  # the kernel's template arguments, without the file's namespace hash
                name = _ANON.sub("", line.split("Function :")[1].strip())
                functions[name] = []
            elif (m := _INSTRUCTION.search(line)) and name:
                functions[name].append(m.group(1))
        for name, lines in sorted(functions.items()):
            yield f"{c.symbol} {name}", hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16], len(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="only configurations whose label contains this")
    ap.add_argument("--clusterk", type=Path, metavar="SOURCE", help="the cluster split-K family, from SOURCE")
    ap.add_argument("--build-dir", type=Path, help="where --clusterk's objects go (default: the build's own)")
    ap.add_argument("--cuobjdump", default="", help="cuobjdump to use (default: the one Triton bundles)")
    args = ap.parse_args()
    if args.clusterk:
        from kernelrl.gemm import build as b

        tool = args.cuobjdump or _bundled_cuobjdump()
        for symbol, digest, n in clusterk_lines(args.clusterk, args.build_dir or b.DEFAULT_BUILD_DIR, tool,
                                                args.only):
            print(f"{symbol} {digest} {n}", flush=True)
        return
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cuobjdump = args.cuobjdump or _bundled_cuobjdump()
    target = GPUTarget("cuda", 90, 32)
    for label, fn, sig, const, opts in kernels():
        if args.only not in label:
            continue
        sig = {**sig, **{k: "constexpr" for k in const}}
        compiled = triton.compile(ASTSource(fn, sig, const), target=target, options=opts)
        lines = sass(compiled.asm["cubin"], cuobjdump)
        digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
        print(f"{label} {digest} {len(lines)}", flush=True)


if __name__ == "__main__":
    main()
