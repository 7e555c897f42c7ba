"""Two GEMM measurements on the GPU that decide what to try next; JSON under $OUT.

floor:  what one kernel costs in a CUDA-graph replay when it does (almost) nothing, against torch.matmul on
        the smallest shapes: how much room is left under ~2.2 us.
tiled:  the plain Triton tiled kernel (kernels/triton_tiled.py) in several tile configurations on the shapes
        where torch.matmul takes under `--tiled-max-us`, checked, then timed interleaved with torch.matmul,
        a torch.matmul control and the committed dispatch.
noise:  where the spread of two identical programs comes from: torch.matmul captured four times over one
        input set, one of those graphs entered twice, and a capture over a second input set.
clusterk: variants of the cluster split-K kernel (kernels/cluster_splitk.cu: pipeline depth, K step, warps,
        pushed or pulled reduction, L2 fetch hint, cp.async or the bulk tensor copy engine), built here under
        their own symbols, at every cluster size including 1 (no split: the main loop alone) on a few deep-K
        shapes, timed interleaved with torch.matmul and two single-block Triton tiled kernels.
clusterk_ab: the cluster split-K kernels of the current source against the same configurations built from the
        source at an earlier revision (`--ab-rev`, built here), on shapes they win in the committed table,
        checked, then timed interleaved with torch.matmul (and, where given, a configuration with groups).

    python3 benchmarks/gemm_probe.py [--parts floor,tiled,noise,clusterk,clusterk_ab] [--deadline S]
    python3 benchmarks/gemm_probe.py --summarise benchmarks/results/gemm_runs/probe_floor_tiled_noise.json
"""
from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
OUT = Path(os.environ.get("OUT", "/tmp/gemm_probe"))
T0 = time.perf_counter()

TILED = [  # (bm, bn, bk, warps, stages)
    (32, 32, 64, 1, 3), (32, 32, 128, 2, 3), (32, 64, 64, 2, 3), (64, 32, 64, 2, 3), (64, 64, 64, 4, 3),
    (64, 64, 128, 4, 3), (64, 128, 64, 4, 3), (128, 64, 64, 4, 3), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3),
    (64, 256, 64, 4, 3), (128, 256, 64, 8, 3),
]


def log(msg: str) -> None:
    line = f"[{time.perf_counter() - T0:7.1f}s] {msg}"
    print(line, flush=True)
    with (OUT / "gemm_probe.log").open("a") as f:
        f.write(line + "\n")


def interleaved(graphs: list[tuple[str, object]], calls: int, rounds: int, rng: random.Random) -> dict:
    """Replay each (label, graph) `rounds` times in a shuffled order per round; every sample per label, us/call.
    A graph may appear under two labels (the same executable graph timed twice)."""
    import torch

    order = list(range(len(graphs)))
    for _ in range(2):
        for i in order:
            graphs[i][1].replay()
    ev = {lab: [] for lab, _ in graphs}
    for _ in range(rounds):
        rng.shuffle(order)
        for i in order:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            graphs[i][1].replay()
            e1.record()
            ev[graphs[i][0]].append((e0, e1))
    torch.cuda.synchronize()
    return {lab: [e0.elapsed_time(e1) * 1e3 / calls for e0, e1 in v] for lab, v in ev.items()}


def tiled_launcher(cfg, m, n, k):
    from kernelrl.gemm.registry import make_launcher
    from kernelrl.gemm.space import TiledConfig

    bm, bn, bk, warps, stages = cfg
    return make_launcher(TiledConfig(bm, bn, bk, stages, warps).name, m, n, k)


def part_floor(res: dict) -> None:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def noop(x_ptr):
        pass

    @triton.jit
    def write_tile(c_ptr, BM: tl.constexpr, BN: tl.constexpr):
        r = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
        tl.store(c_ptr + r, tl.zeros((BM, BN), dtype=tl.float16))

    from kernelrl.gemm import timing as tm

    calls = 100
    out = {}
    for (m, n, k) in [(64, 64, 64), (128, 128, 128), (256, 256, 256)]:
        inp = tm.Inputs(m, n, k)
        x = torch.empty(64 * 64, dtype=torch.float16, device="cuda")
        bodies = {
            "noop_1cta": lambda: [noop[(1,)](x) for _ in range(calls)],
            "noop_132cta": lambda: [noop[(132,)](x) for _ in range(calls)],
            "write64x64": lambda: [write_tile[(1,)](x, BM=64, BN=64) for _ in range(calls)],
            "torch_out": lambda: [torch.matmul(inp.a[i % len(inp)], inp.b[i % len(inp)], out=inp.c[i % len(inp)])
                                  for i in range(calls)],
            "torch": lambda: [torch.matmul(inp.a[i % len(inp)], inp.b[i % len(inp)]) for i in range(calls)],
            "tiled_64x64x64_w4": lambda f=tiled_launcher((64, 64, 64, 4, 3), m, n, k):
                [f(inp.a[i % len(inp)], inp.b[i % len(inp)], inp.c[i % len(inp)]) for i in range(calls)],
        }
        graphs = [(lab, tm.capture_graph(b)) for lab, b in bodies.items()]
        s = interleaved(graphs, calls, 31, random.Random(1))
        out[f"{m}x{n}x{k}"] = {lab: statistics.median(v) for lab, v in s.items()}
        log(f"floor {m}x{n}x{k}: " + " ".join(f"{lab} {statistics.median(v):.2f}" for lab, v in s.items()))
    res["floor"] = out


def part_tiled(res: dict, max_us: float, deadline: float) -> None:
    import torch

    from kernelrl.gemm import check as chk
    from kernelrl.gemm import timing as tm
    from kernelrl.gemm.dispatch import Dispatcher
    from kernelrl.gemm.table import DEFAULT_TABLE, Table

    disp = Dispatcher(Table.load(DEFAULT_TABLE))
    with (ROOT / "benchmarks" / "results" / "gemm_h200.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if float(r["torch_us"]) < max_us and r["dtype"] == "fp16"]
    rows.sort(key=lambda r: float(r["torch_us"]))
    rng = random.Random(7)
    out = res.setdefault("tiled", [])
    for r in rows:
        if time.perf_counter() - T0 > deadline:
            log(f"tiled: deadline, {len(rows) - len(out)} shapes left")
            break
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        a, b = chk.random_inputs(m, n, k)
        ref = chk.reference(a, b)
        entry = {"m": m, "n": n, "k": k, "kernel": disp.kernel_for(m, n, k, torch.float16), "configs": {}}
        fns = {"torch": (torch.matmul, False), "torch_control": (torch.matmul, False), "kernelrl": (disp, False)}
        disp(a, b)
        for cfg in TILED:
            bm, bn = cfg[0], cfg[1]
            if bm > max(64, m) or bn > max(64, n):
                continue
            name = "tiled:{}x{}x{}_s{}_w{}".format(*cfg[:3], cfg[4], cfg[3])
            try:
                f = tiled_launcher(cfg, m, n, k)
                c = chk.check(f, a, b, ref)
            except Exception as e:  # a compile failure is a result too
                entry["configs"][name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
                continue
            entry["configs"][name] = {"rel_err": c.rel_err, "ok": c.ok}
            if c.ok:
                fns[name] = (f, True)
        del ref, a, b
        inp = tm.Inputs(m, n, k)
        calls = 100
        t = tm.time_graphs(fns, inp, calls, 31, rng)
        entry["us"] = t
        out.append(entry)
        best = min((v, lab) for lab, v in t.items() if lab.startswith("tiled"))
        log(f"tiled {m}x{n}x{k}: torch {t['torch']:.2f} control {t['torch_control']:.2f} "
            f"kernelrl {t['kernelrl']:.2f} best tiled {best[0]:.2f} ({best[1]})")


def part_noise(res: dict, deadline: float) -> None:
    import torch

    from kernelrl.gemm import timing as tm
    from kernelrl.gemm.tune import estimate_torch_us
    from kernelrl.gemm.shapes import grid

    shapes = sorted(grid(), key=estimate_torch_us)
    pick = shapes[::25]  # 40 shapes across the size range
    rng = random.Random(3)
    out = res.setdefault("noise", [])
    for s in pick:
        if time.perf_counter() - T0 > deadline:
            log("noise: deadline")
            break
        est = estimate_torch_us(s)
        calls = tm.calls_for(est)
        rounds = 11 if est > 2000 else (15 if est > 50 else 31)
        inp = tm.Inputs(s.m, s.n, s.k)
        inp2 = tm.Inputs(s.m, s.n, s.k)

        def body(inp=inp):
            for i in range(calls):
                torch.matmul(inp.a[i % len(inp)], inp.b[i % len(inp)])

        gs = [tm.capture_graph(body) for _ in range(4)]
        g2 = tm.capture_graph(lambda: body(inp2))
        graphs = [(f"cap{i}", g) for i, g in enumerate(gs)] + [("cap0_again", gs[0]), ("inputs2", g2)]
        t = interleaved(graphs, calls, rounds, rng)
        med = {lab: statistics.median(v) for lab, v in t.items()}
        out.append({"m": s.m, "n": s.n, "k": s.k, "calls": calls, "rounds": rounds, "samples": t, "median": med})
        base = med["cap0"]
        log(f"noise {s}: " + " ".join(f"{lab} {v / base:.3f}" for lab, v in med.items()) + f" (cap0 {base:.2f} us)")
        del gs, g2, inp, inp2


CLUSTERK_VARIANTS = {  # label: (bm, bn, bk, stages, warps along M, warps along N, push, L2 hint, wgmma,
    # proxy fence[, bulk tensor copies])
    "64x64x128_s3_2x2_pull_nohint": (64, 64, 128, 3, 2, 2, 0, 0, 0, 1),  # as first measured in the search
    "64x64x128_s3_2x2_nohint": (64, 64, 128, 3, 2, 2, 1, 0, 0, 1),
    "64x64x128_s3_2x2": (64, 64, 128, 3, 2, 2, 1, 1, 0, 1),
    "64x64x128_s4_2x2": (64, 64, 128, 4, 2, 2, 1, 1, 0, 1),
    "64x64x64_s6_2x2": (64, 64, 64, 6, 2, 2, 1, 1, 0, 1),
    "64x64x64_s4_2x4": (64, 64, 64, 4, 2, 4, 1, 1, 0, 1),
    "64x64x32_s8_2x2": (64, 64, 32, 8, 2, 2, 1, 1, 0, 1),
    "128x128x64_s3_2x4_pull_nohint": (128, 128, 64, 3, 2, 4, 0, 0, 0, 1),
    "128x128x64_s3_2x4": (128, 128, 64, 3, 2, 4, 1, 1, 0, 1),
    "128x128x64_s4_2x4": (128, 128, 64, 4, 2, 4, 1, 1, 0, 1),
    # the wgmma main loop (one warpgroup per 64 rows)
    "64x64x64_s4_wg": (64, 64, 64, 4, 4, 1, 1, 1, 1, 1),
    "64x64x64_s8_wg": (64, 64, 64, 8, 4, 1, 1, 1, 1, 1),
    "64x64x128_s4_wg": (64, 64, 128, 4, 4, 1, 1, 1, 1, 1),
    "64x128x64_s6_wg": (64, 128, 64, 6, 4, 1, 1, 1, 1, 1),
    "128x128x64_s4_wg": (128, 128, 64, 4, 8, 1, 1, 1, 1, 1),
    "64x64x128_s6_wg": (64, 64, 128, 6, 4, 1, 1, 1, 1, 1),
    "64x64x64_s8_wg_nofence": (64, 64, 64, 8, 4, 1, 1, 1, 1, 0),
    "64x64x128_s6_wg_nofence": (64, 64, 128, 6, 4, 1, 1, 1, 1, 0),
    # the wgmma main loop fed by the bulk tensor copy engine (one thread issues a stage; mbarriers)
    "64x64x64_s6_tma": (64, 64, 64, 6, 4, 1, 1, 1, 1, 1, 1),
    "64x64x64_s8_tma": (64, 64, 64, 8, 4, 1, 1, 1, 1, 1, 1),
    "64x64x128_s4_tma": (64, 64, 128, 4, 4, 1, 1, 1, 1, 1, 1),
    "64x64x128_s6_tma": (64, 64, 128, 6, 4, 1, 1, 1, 1, 1, 1),
    "64x128x64_s6_tma": (64, 128, 64, 6, 4, 1, 1, 1, 1, 1, 1),
    "128x64x64_s6_tma": (128, 64, 64, 6, 8, 1, 1, 1, 1, 1, 1),
    "128x128x64_s4_tma": (128, 128, 64, 4, 8, 1, 1, 1, 1, 1, 1),
    # deeper K steps: fewer trips round the loop, whose fixed cost per step the copy engine did not remove
    "64x64x256_s3_tma": (64, 64, 256, 3, 4, 1, 1, 1, 1, 1, 1),
    "64x128x128_s3_tma": (64, 128, 128, 3, 4, 1, 1, 1, 1, 1, 1),
    "128x64x128_s3_tma": (128, 64, 128, 3, 8, 1, 1, 1, 1, 1, 1),
}
# --clusterk-variants: the labels to build and time (all by default)
CLUSTERK_SHAPES = [(64, 64, 2048), (64, 64, 4096), (64, 64, 16384), (128, 128, 8192), (512, 512, 4096),
                   (1024, 1024, 4096), (256, 2048, 8192)]


def build_clusterk_variants(labels: list[str] | None = None):
    """(library, {label: variant}) of the cluster split-K variants, compiled under their own symbols into
    .kernelrl-cache/probe_clusterk (objects already there from the same source are kept: build them here and
    carry the folder to a device without the CUTLASS headers)."""
    import ctypes

    from kernelrl.gemm import build as b
    from kernelrl.gemm.space import ClusterKConfig

    def command(label: str) -> list[str]:  # called only for an object not built yet
        bm, bn, bk, st, wm, wn, push, hint, wg, fence, *tma = CLUSTERK_VARIANTS[label]
        cfg = ClusterKConfig(bm, bn, bk, st, wm * wn, wgmma=bool(wg), tma=bool(tma and tma[0]))
        return b.clusterk_command(cfg, {
            "KR_NAME": f"probe_{label}", "KR_WM": wm, "KR_WN": wn, "KR_PUSH": push, "KR_L2_HINT": hint,
            "KR_PROXY_FENCE": fence})

    variants = {lab: v for lab, v in CLUSTERK_VARIANTS.items() if not labels or lab in labels}
    objects = {f"probe_{lab}": functools.partial(command, lab) for lab in variants}
    out = ROOT / ".kernelrl-cache" / "probe_clusterk"
    lib = b._compile_and_link(objects, b.CK_SOURCE, "libprobe_clusterk.so", out, os.cpu_count(), log)
    return ctypes.CDLL(str(lib)), variants


def part_clusterk(res: dict, deadline: float, labels: list[str] | None = None) -> None:
    import torch

    from kernelrl.gemm import check as chk
    from kernelrl.gemm import clusterk
    from kernelrl.gemm import timing as tm

    lib, variants = build_clusterk_variants(labels)
    out = res.setdefault("clusterk", [])
    rng = random.Random(11)
    for m, n, k in CLUSTERK_SHAPES:
        if time.perf_counter() - T0 > deadline:
            log("clusterk: deadline")
            break
        a, b_ = chk.random_inputs(m, n, k)
        ref = chk.reference(a, b_)
        fns = {"torch": (torch.matmul, False)}
        entry = {"m": m, "n": n, "k": k, "failed": {}}
        for cfg in [(64, 64, 128, 4, 4), (64, 64, 64, 3, 4)]:
            fns["tiled:{}x{}x{}_s{}_w{}".format(*cfg)] = (tiled_launcher((*cfg[:3], cfg[4], cfg[3]), m, n, k), True)
        for label, (bm, bn, bk, *_rest) in variants.items():
            if bm > m or bn > n:
                continue
            for s in (1, 2, 4, 8, 16):
                if k < s * bk:
                    continue
                name = f"{label}/c{s}"
                try:
                    fn = clusterk.launcher(lib, "probe_" + label, name, s, m, n, k)
                    c = chk.check(fn, a, b_, ref)
                except (ValueError, RuntimeError) as e:
                    entry["failed"][name] = str(e)[:200]
                    continue
                if c.ok:
                    fns[name] = (fn, True)
                else:
                    entry["failed"][name] = c.reason
        del ref, a, b_
        inp = tm.Inputs(m, n, k)
        t = tm.time_graphs(fns, inp, 100, 15, rng)
        entry["us"] = t
        out.append(entry)
        best = sorted((v, lab) for lab, v in t.items() if "/c" in lab)[:4]
        tiled = min(v for lab, v in t.items() if lab.startswith("tiled"))
        log(f"clusterk {m}x{n}x{k}: torch {t['torch']:.2f} tiled {tiled:.2f} "
            f"best {', '.join(f'{lab} {v:.2f}' for v, lab in best)}; failed {len(entry['failed'])}")


# --ab-rev: (m, n, k, cluster split-K kernel) pairs timed from both sources; names with groups (current only)
AB_CASES = [
    (64, 64, 2048, "64x64x64_s8_w4_wg/c8"), (128, 128, 4096, "64x64x64_s8_w4_wg/c16"),
    (128, 128, 2048, "64x64x128_s6_w4_tma/c8"), (64, 512, 8192, "64x64x128_s6_w4_tma/c8"),
    (1024, 64, 16384, "128x64x64_s6_w8_tma/c8"), (4096, 64, 8192, "64x64x128_s6_w4_tma/c2"),
    (64, 1024, 2048, "64x64x128_s4_w4_tma/c4"), (64, 64, 16384, "64x64x128_s6_w4_tma/c16"),
    (64, 64, 16384, "64x64x128_s4_w4_tma/c8g8"), (128, 64, 16384, "64x64x128_s4_w4_tma/c8g4"),
]


def build_ab(rev: str):
    """(library, {variant: (symbol, configuration)}) of AB_CASES' configurations compiled from
    kernels/cluster_splitk.cu as it was at git revision `rev`, under their own symbols, into
    .kernelrl-cache/probe_ab (the old source is written there too, so a device without git history or CUTLASS
    headers links the carried objects)."""
    import ctypes
    import subprocess

    from kernelrl.gemm import build as b
    from kernelrl.gemm.space import ClusterKConfig

    out = ROOT / ".kernelrl-cache" / "probe_ab"
    out.mkdir(parents=True, exist_ok=True)
    source = out / f"cluster_splitk_{rev}.cu"
    if not source.is_file():
        rel = b.CK_SOURCE.relative_to(ROOT)
        source.write_text(subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=ROOT, check=True, capture_output=True,
                                         text=True).stdout)
    variants = {}
    for *_, name in AB_CASES:
        cfg = ClusterKConfig.parse(f"clusterk:{name}")
        if cfg.groups == 1:
            variants[cfg.variant] = (f"ab_{cfg.symbol}", cfg)

    def command(symbol: str, cfg: ClusterKConfig) -> list[str]:
        cmd = b.clusterk_command(cfg, {"KR_NAME": symbol})
        return [*cmd[:-1], str(source)]  # the earlier source in place of the current one

    objects = {sym: functools.partial(command, sym, cfg) for sym, cfg in variants.values()}
    lib = b._compile_and_link(objects, source, "libprobe_ab.so", out, os.cpu_count(), log)
    return ctypes.CDLL(str(lib)), variants


def _old_abi_launcher(lib, symbol: str, splits: int, m: int, n: int, k: int):
    """A launcher over the C ABI before groups existed: run(a, b, c, m, n, k, splits, bf16, stream)."""
    import ctypes

    import torch

    run, can = getattr(lib, f"{symbol}_run"), getattr(lib, f"{symbol}_can_implement")
    run.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 5 + [ctypes.c_void_p]
    can.argtypes = [ctypes.c_int] * 5
    if can(m, n, k, splits, 0):
        raise ValueError(f"{symbol} cannot run {m}x{n}x{k} with {splits} splits")
    raw, dev = torch._C._cuda_getCurrentRawStream, torch.cuda.current_device()

    def launch(a, b, c):
        if run(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, splits, 0, raw(dev)):
            raise RuntimeError(f"{symbol} failed to launch")

    return launch


def part_clusterk_ab(res: dict, deadline: float, rev: str) -> None:
    import torch

    from kernelrl.gemm import check as chk
    from kernelrl.gemm import timing as tm
    from kernelrl.gemm.registry import make_launcher
    from kernelrl.gemm.space import ClusterKConfig

    lib, variants = build_ab(rev)
    out = res.setdefault("clusterk_ab", {"rev": rev, "shapes": []})
    rng = random.Random(5)
    by_shape: dict[tuple[int, int, int], list[str]] = {}
    for m, n, k, name in AB_CASES:
        by_shape.setdefault((m, n, k), []).append(name)
    for (m, n, k), names in by_shape.items():
        if time.perf_counter() - T0 > deadline:
            log("clusterk_ab: deadline")
            break
        a, b_ = chk.random_inputs(m, n, k)
        ref = chk.reference(a, b_)
        fns, failed = {"torch": (torch.matmul, False)}, {}
        for name in names:
            cfg = ClusterKConfig.parse(f"clusterk:{name}")
            pairs = [(f"new:{name}", functools.partial(make_launcher, f"clusterk:{name}", m, n, k))]
            if cfg.groups == 1:
                pairs.append((f"old:{name}", functools.partial(_old_abi_launcher, lib, variants[cfg.variant][0],
                                                               cfg.splits, m, n, k)))
            for label, make in pairs:
                try:
                    fn = make()
                    c = chk.check(fn, a, b_, ref)
                    if c.ok:
                        fns[label] = (fn, True)
                    else:
                        failed[label] = c.reason
                except (ValueError, RuntimeError, KeyError) as e:
                    failed[label] = str(e)[:200]
        del ref, a, b_
        t = tm.time_graphs(fns, tm.Inputs(m, n, k), 100, 21, rng)
        out["shapes"].append({"m": m, "n": n, "k": k, "us": t, "failed": failed})
        log(f"clusterk_ab {m}x{n}x{k}: " + ", ".join(f"{lab} {v:.3f}" for lab, v in t.items())
            + (f"; failed {failed}" if failed else ""))


def summarise(res: dict) -> list[str]:
    """The figures the findings quote from a probe's JSON: the tiled kernel's reach and the timing spread."""
    from kernelrl.gemm.shapes import Shape
    from kernelrl.gemm.space import roofline_us

    lines = []
    tiled = [e for e in res.get("tiled", []) if any(k.startswith("tiled") for k in e["us"])]
    if tiled:
        gain = {(e["m"], e["n"], e["k"]): e["us"]["torch"] / min(v for k, v in e["us"].items()
                                                                 if k.startswith("tiled")) for e in tiled}
        wins = [s for s, g in gain.items() if g > 1.01]
        lines.append(f"tiled: best configuration > 1.01x torch.matmul on {len(wins)} of {len(gain)} shapes; "
                     f"largest roofline estimate among them {max(roofline_us(Shape(*s)) for s in wins):.2f} us")
    stats: dict[str, list[float]] = {"median of each label": [], "median of paired ratios": []}
    for e in res.get("noise", []):
        base = e["samples"]["cap0"]
        for lab in ("cap1", "cap2", "cap3", "cap0_again"):
            v = e["samples"][lab]
            stats["median of each label"].append(math.log(statistics.median(v) / statistics.median(base)))
            stats["median of paired ratios"].append(math.log(statistics.median(x / y for x, y in zip(v, base))))
    for name, d in stats.items():
        if d:
            lines.append(f"noise, {name}: sd of log ratio {statistics.pstdev(d):.4f}, "
                         f"largest |log ratio| {max(map(abs, d)):.4f} ({len(d)} pairs)")
    again = [abs(math.log(e["median"]["cap0_again"] / e["median"]["cap0"])) for e in res.get("noise", [])]
    if again:
        lines.append(f"noise, the same graph timed under two labels: largest difference {math.expm1(max(again)):.1%}")
    moved = [(e["median"]["inputs2"] / e["median"]["cap0"], (e["m"], e["n"], e["k"])) for e in res.get("noise", [])]
    if moved:
        worst = max(moved, key=lambda t: abs(math.log(t[0])))
        lines.append(f"noise, second input set: largest change {worst[0]:.3f}x on {'x'.join(map(str, worst[1]))}")
    ab = res.get("clusterk_ab", {}).get("shapes", [])
    ratios = [e["us"][f"new:{lab[4:]}"] / v for e in ab for lab, v in e["us"].items()
              if lab.startswith("old:") and f"new:{lab[4:]}" in e["us"]]
    if ratios:
        lines.append(f"clusterk_ab: current source / revision {res['clusterk_ab']['rev']}, same configurations: "
                     f"geomean {math.exp(sum(map(math.log, ratios)) / len(ratios)):.4f}, "
                     f"range {min(ratios):.4f}-{max(ratios):.4f} ({len(ratios)} pairs)")
    for e in res.get("clusterk", []):
        t = e["us"]
        per_label: dict[str, tuple[float, str]] = {}
        for lab, v in t.items():
            if "/c" in lab:
                variant, split = lab.split("/")
                per_label[variant] = min(per_label.get(variant, (math.inf, "")), (v, split))
        tiled = min(v for lab, v in t.items() if lab.startswith("tiled"))
        no_split = {lab.split("/")[0]: v for lab, v in t.items() if lab.endswith("/c1")}
        lines.append(f"clusterk {e['m']}x{e['n']}x{e['k']}: torch {t['torch']:.2f} us, best tiled {tiled:.2f}; "
                     + "; ".join(f"{lab} {v:.2f} ({sp}; c1 {no_split.get(lab, math.nan):.2f})"
                                 for lab, (v, sp) in per_label.items()))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="floor,tiled,noise")
    ap.add_argument("--deadline", type=float, default=400.0)
    ap.add_argument("--tiled-max-us", type=float, default=6.0)
    ap.add_argument("--tiled-share", type=float, default=0.6, help="share of the deadline the tiled part may use")
    ap.add_argument("--clusterk-variants", default="", help="comma-separated labels of CLUSTERK_VARIANTS")
    ap.add_argument("--ab-rev", default="ddc773c", help="the earlier revision part clusterk_ab builds from")
    ap.add_argument("--build-only", action="store_true", help="compile the cluster split-K variants (and, with "
                    "clusterk_ab in --parts, the earlier revision's) and stop")
    ap.add_argument("--summarise", metavar="JSON", help="print the summary of an earlier probe's JSON and stop")
    args = ap.parse_args()
    if args.summarise:
        print("\n".join(summarise(json.loads(Path(args.summarise).read_text()))))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    if args.build_only:
        if "clusterk_ab" in args.parts.split(","):
            build_ab(args.ab_rev)
        else:
            build_clusterk_variants([v for v in args.clusterk_variants.split(",") if v])
        return
    import torch
    import triton

    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "commit": os.environ.get("KR_COMMIT", "")}
    parts = args.parts.split(",")
    try:
        if "floor" in parts:
            part_floor(res)
        if "tiled" in parts:
            part_tiled(res, args.tiled_max_us, args.deadline * args.tiled_share)
        if "noise" in parts:
            part_noise(res, args.deadline)
        if "clusterk" in parts:
            part_clusterk(res, args.deadline, [v for v in args.clusterk_variants.split(",") if v])
        if "clusterk_ab" in parts:
            part_clusterk_ab(res, args.deadline, args.ab_rev)
    finally:
        (OUT / "gemm_probe.json").write_text(json.dumps(res))
        log("wrote gemm_probe.json")
        for line in summarise(res):
            log(line)


if __name__ == "__main__":
    main()
