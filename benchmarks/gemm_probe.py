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
smallk: on the shapes with a K of at most `--smallk-max-k` (the output write dominates), the tiled kernel and
        two non-persistent tensor-map variants of it in large tiles, and the persistent TMA family, checked,
        then timed interleaved with torch.matmul, its control and the committed dispatch. With
        `--smallk-kernels`, those registry kernels (CUTLASS configurations, say) instead of the Triton ones.
host:   host time of one eager call, torch.matmul against the dispatch on each family's smallest shape, and
        of the pieces of the dispatch's hot path.
capacity: clusters of every size (powers of two and the sizes that fill a wave) that the GPU places at once,
        for every cluster split-K tile (cluster_capacity.txt): the cost model's `CLUSTER_WAVE_BLOCKS`.
pdl:    programmatic dependent launch: the tiled kernel with `griddepcontrol.wait` before its first load, launched
        so that it may start while the kernel before it in the stream drains, against the same kernel without,
        torch.matmul and its control. Timed twice: each call after the previous GEMM (the benchmark's graph),
        and each call after a small torch kernel that knows nothing of PDL (a model's graph). A variant that
        also lets its successor start early (`launch_dependents`) shows how much a back-to-back benchmark
        would flatter such a trigger. A producer-consumer graph checks that no call reads stale inputs.
clusterk_fixed: the fixed cost of one cluster split-K launch: a 64x64 tensor-map tile from one K step per
        block upwards, as built, with its tensor maps prefetched, and without its main loop or its reduction
        (those two timed only), against the cp.async wgmma tile, the Triton tiled kernel and torch.matmul.
after_foreign: the committed dispatch against torch.matmul on a sample of shapes of every family, timed in two
        graphs: each call after the previous GEMM (the benchmark's graph) and each call after a small torch kernel
        (a model's graph). A speedup that held only back to back would be the benchmark's, not the kernel's.
tiled_lean: the tiled kernel's index arithmetic: as committed (edge rows wrapped with a run-time modulo, masked
        store), without the wrap and the mask where the tiles cover the output exactly (`even`), and with the
        shape's sizes and strides compiled in as constants as well (`const`), on the shapes the committed table
        runs the tiled kernel on and the launch-bound ones where a tiled configuration came within 10% of the
        winner; checked, then timed interleaved with torch.matmul, its control and the committed dispatch.

    python3 benchmarks/gemm_probe.py [--parts floor,tiled,noise,clusterk,clusterk_ab,smallk,host,capacity,pdl,
                                     clusterk_fixed,after_foreign,tiled_lean]
                                     [--deadline S]
    python3 benchmarks/gemm_probe.py --summarise benchmarks/results/gemm_runs/probe_floor_tiled_noise.json
"""
from __future__ import annotations

import argparse
import csv
import functools
import gzip
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


def check_candidates(cands: dict, a, b, ref, entry: dict, fns: dict) -> None:
    """Build each candidate ({label: () -> launcher}) and check it on (a, b) against `ref`; record the outcome
    in entry["configs"] and add the correct ones to `fns` for timing (a build failure is a result too)."""
    from kernelrl.gemm import check as chk

    for name, make in cands.items():
        try:
            f = make()
            c = chk.check(f, a, b, ref)
        except Exception as e:
            entry["configs"][name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            continue
        entry["configs"][name] = {"rel_err": c.rel_err, "ok": c.ok}
        if c.ok:
            fns[name] = (f, True)


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
        check_candidates({"tiled:{}x{}x{}_s{}_w{}".format(*cfg[:3], cfg[4], cfg[3]):
                          (lambda cfg=cfg: tiled_launcher(cfg, m, n, k))
                          for cfg in TILED if cfg[0] <= max(64, m) and cfg[1] <= max(64, n)},
                         a, b, ref, entry, fns)
        del ref, a, b
        inp = tm.Inputs(m, n, k)
        calls = 100
        t = tm.time_graphs(fns, inp, calls, 31, rng)
        entry["us"] = t
        out.append(entry)
        best = min((v, lab) for lab, v in t.items() if lab.startswith("tiled"))
        log(f"tiled {m}x{n}x{k}: torch {t['torch']:.2f} control {t['torch_control']:.2f} "
            f"kernelrl {t['kernelrl']:.2f} best tiled {best[0]:.2f} ({best[1]})")


SMALLK = [  # (bm, bn, bk, warps, stages) for products whose K is at most 256: the output write dominates
    (64, 64, 64, 4, 2), (128, 64, 64, 4, 2), (64, 128, 64, 4, 2), (128, 128, 64, 4, 2), (128, 128, 64, 8, 2),
    (64, 256, 64, 4, 2), (128, 256, 64, 8, 2), (256, 128, 64, 8, 2), (128, 128, 128, 8, 2),
]


def smallk_kernels():
    """Two non-persistent variants of the tiled kernel (one program per output tile, several per SM):
    operands through tensor maps and C through a tensor-map store (`io`), or the tiled kernel's pointer loads
    (`tiled_product`) and a tensor-map store (`store`)."""
    import triton
    import triton.language as tl

    from kernelrl.gemm.kernels.triton_tiled import tiled_product
    from kernelrl.gemm.kernels.triton_tma import tile_coords

    @triton.jit
    def smallk_io(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  GROUP_M: tl.constexpr):
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BM)
        num_pid_n = tl.cdiv(N, BN)
        pid_m, pid_n = tile_coords(pid, GROUP_M * num_pid_n, num_pid_m, GROUP_M)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in range(tl.cdiv(K, BK)):
            a = a_desc.load([pid_m * BM, ki * BK])
            b = b_desc.load([ki * BK, pid_n * BN])
            acc = tl.dot(a, b, acc)
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))

    @triton.jit
    def smallk_store(a_ptr, b_ptr, c_desc, M, N, K, stride_am, stride_bk, BM: tl.constexpr, BN: tl.constexpr,
                     BK: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
        acc, rm, rn, pid_m, pid_n = tiled_product(a_ptr, b_ptr, M, N, K, stride_am, stride_bk, BM, BN, BK, GROUP_M,
                                                  EVEN_K)
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))

    return smallk_io, smallk_store


def smallk_launcher(kind: str, kern, cfg, m: int, n: int, k: int):
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk, warps, stages = cfg
    grid = (-(-m // bm) * -(-n // bn),)
    meta = dict(BM=bm, BN=bn, BK=bk, GROUP_M=8, num_warps=warps, num_stages=stages)

    def run(a, b, c):
        dc = TensorDescriptor.from_tensor(c, [bm, bn])
        if kind == "io":
            kern[grid](TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]), dc,
                       m, n, k, **meta)
        else:
            kern[grid](a, b, dc, m, n, k, a.stride(0), b.stride(0), EVEN_K=k % bk == 0, **meta)

    return run


def smallk_shapes(min_us: float, max_k: int) -> list[tuple[int, int, int]]:
    with (ROOT / "benchmarks" / "results" / "gemm_h200.csv").open() as f:
        rows = [r for r in csv.DictReader(f)
                if r["dtype"] == "fp16" and int(r["k"]) <= max_k and float(r["torch_us"]) >= min_us]
    rows.sort(key=lambda r: float(r["torch_us"]))
    return [(int(r["m"]), int(r["n"]), int(r["k"])) for r in rows]


def part_smallk(res: dict, deadline: float, min_us: float, max_k: int, kernels: tuple[str, ...] = ()) -> None:
    """On the shapes with K <= max_k and torch.matmul at min_us or more: the tiled kernel and its two tensor-map
    variants in the SMALLK tiles, the persistent TMA family's tiles (or, where given, the registry `kernels`
    instead), torch.matmul, its control and the committed dispatch, each checked, then timed interleaved."""
    import torch

    from kernelrl.gemm import check as chk
    from kernelrl.gemm import timing as tm
    from kernelrl.gemm.dispatch import Dispatcher
    from kernelrl.gemm.registry import make_launcher
    from kernelrl.gemm.space import TRITON_CONFIGS
    from kernelrl.gemm.table import DEFAULT_TABLE, Table

    import triton

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    io, store = smallk_kernels()
    disp = Dispatcher(Table.load(DEFAULT_TABLE))
    rng = random.Random(11)
    out = res.setdefault("smallk", [])
    shapes = smallk_shapes(min_us, max_k)
    log(f"smallk: {len(shapes)} shapes")
    for m, n, k in shapes:
        if time.perf_counter() - T0 > deadline:
            log(f"smallk: deadline, {len(shapes) - len(out)} shapes left")
            break
        a, b = chk.random_inputs(m, n, k)
        ref = chk.reference(a, b)
        entry = {"m": m, "n": n, "k": k, "kernel": disp.kernel_for(m, n, k, torch.float16), "configs": {}}
        fns = {"torch": (torch.matmul, False), "torch_control": (torch.matmul, False), "kernelrl": (disp, False)}
        disp(a, b)
        cands = {name: lambda name=name: make_launcher(name, m, n, k) for name in kernels}
        for cfg in () if kernels else SMALLK:
            bm, bn, bk = cfg[:3]
            if bm > max(64, m) or bn > max(64, n) or bk > k:
                continue
            tag = "{}x{}x{}_s{}_w{}".format(bm, bn, bk, cfg[4], cfg[3])
            cands[f"tiled:{tag}"] = lambda cfg=cfg: tiled_launcher(cfg, m, n, k)
            cands[f"smallk_io:{tag}"] = lambda cfg=cfg: smallk_launcher("io", io, cfg, m, n, k)
            cands[f"smallk_store:{tag}"] = lambda cfg=cfg: smallk_launcher("store", store, cfg, m, n, k)
        for tc in () if kernels else TRITON_CONFIGS:
            if tc.bm <= max(64, m) and tc.bn <= max(64, n) and tc.bk <= k:
                cands[tc.name] = lambda tc=tc: make_launcher(tc.name, m, n, k)
        check_candidates(cands, a, b, ref, entry, fns)
        del ref, a, b
        inp = tm.Inputs(m, n, k)
        per_round: dict = {}
        t = tm.time_graphs(fns, inp, tm.calls_for(float(max(5.0, m * n * 2 / 3.0e6))), 15, rng, per_round)
        entry["us"] = t
        entry["paired_vs_torch"] = {lab: tm.paired_ratio_ci(per_round["torch"], v)[0]
                                    for lab, v in per_round.items()}
        out.append(entry)
        best = min((v, lab) for lab, v in t.items() if lab not in ("torch", "torch_control", "kernelrl"))
        log(f"smallk {m}x{n}x{k}: torch {t['torch']:.2f} control {t['torch_control']:.2f} "
            f"kernelrl {t['kernelrl']:.2f} ({entry['kernel'][:40]}) best new {best[0]:.2f} ({best[1]}) "
            f"paired {entry['paired_vs_torch'][best[1]]:.3f}")
        del inp


def part_host(res: dict) -> None:
    """Host time of the pieces of one eager call (us per call, the best of 7 rounds of 2000 calls, the rounds
    interleaved across what is timed): torch.matmul, the dispatch on each family's smallest tuned shape (the
    default dispatcher, through its C++ hot path where built, and the same table answered in Python), and
    what the Python hot path does on the way (key, checks, allocation, stream query, the launcher alone)."""
    import torch

    from kernelrl.gemm import dispatch
    from kernelrl.gemm.registry import family

    disp = dispatch.default_dispatcher()
    py_disp = dispatch.Dispatcher(disp.table, fastpath=False)  # the same table answered in Python throughout
    picks: dict[str, tuple] = {}
    for (m, n, k, dt), name in sorted(disp._names.items(), key=lambda kv: kv[0][0] * kv[0][1] * kv[0][2]):
        if dt == "fp16" and family(name) not in picks:  # each family's smallest product: the host dominates
            picks[family(name)] = (m, n, k, name)
    picks["torch"] = (1000, 1000, 1000, "torch")  # not in the grid: the fallback
    out = res.setdefault("host", {})
    out["fastpath"] = disp.uses_fastpath
    log(f"host: the default dispatcher {'takes' if disp.uses_fastpath else 'has no'} C++ hot path")

    def best(fns: dict, number: int = 2000, rounds: int = 7) -> dict[str, float]:
        """Each function's best round, rounds interleaved across the functions."""
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        ts: dict[str, list[float]] = {lab: [] for lab in fns}
        for _ in range(rounds):
            for lab, fn in fns.items():
                t0 = time.perf_counter()
                for _ in range(number):
                    fn()
                ts[lab].append((time.perf_counter() - t0) / number * 1e6)
                torch.cuda.synchronize()
        return {lab: min(v) for lab, v in ts.items()}

    for fam, (m, n, k, name) in picks.items():
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        fns = {"torch.matmul": lambda: torch.matmul(a, b), "torch.mm": lambda: torch.mm(a, b),
               "kernelrl.gemm.matmul": lambda: dispatch.matmul(a, b),
               "Dispatcher.matmul": lambda: disp.matmul(a, b), "Python dispatch": lambda: py_disp.matmul(a, b)}
        disp(a, b)
        hit = disp._fast.get((a.shape, b.shape, a.dtype, b.dtype, a.device, b.device))
        if isinstance(hit, tuple):  # a tuned launcher (not a fallback marker)
            fn, c = hit[0], a.new_empty((m, n))
            fns["launcher alone"] = lambda: fn(a, b, c)
        row = {"shape": f"{m}x{n}x{k}", "kernel": name, **best(fns)}
        out[fam] = row
        log(f"host {fam} {m}x{n}x{k}: " + ", ".join(f"{lab} {v:.2f}" for lab, v in row.items()
                                                     if isinstance(v, float)))
    a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    pieces = {
        "key": lambda: (a.shape, a.shape, a.dtype, a.dtype, a.device, a.device),
        "a.device": lambda: a.device, "a.get_device()": lambda: a.get_device(), "a.shape": lambda: a.shape,
        "a.is_contiguous()": lambda: a.is_contiguous(), "a.data_ptr()": lambda: a.data_ptr(),
        "a.new_empty((m, n))": lambda: a.new_empty((64, 64)), "a.new_empty(m, n)": lambda: a.new_empty(64, 64),
        "torch.empty": lambda: torch.empty((64, 64), dtype=torch.float16, device=a.device),
        "raw stream": lambda: torch._C._cuda_getCurrentRawStream(0),
        "is_compiling": lambda: torch.compiler.is_compiling(),
        "is_grad_enabled": lambda: torch.is_grad_enabled(),
    }
    out["pieces"] = best(pieces, 20000)
    log("host pieces: " + ", ".join(f"{lab} {v:.3f}" for lab, v in out["pieces"].items()))


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
    "64x64x64_s5_tma": (64, 64, 64, 5, 4, 1, 1, 1, 1, 1, 1),
    # tiles smaller than 64x64 (the mma.sync loop; session 20): a block's partial tile, which the exchange moves,
    # is a quarter or half of a 64x64 tile's, and small outputs make more tiles for the same cluster size
    "32x32x64_s4_2x2": (32, 32, 64, 4, 2, 2, 1, 1, 0, 1),
    "32x32x128_s3_2x2": (32, 32, 128, 3, 2, 2, 1, 1, 0, 1),
    "32x32x64_s4_2x1": (32, 32, 64, 4, 2, 1, 1, 1, 0, 1),
    "32x64x64_s4_2x2": (32, 64, 64, 4, 2, 2, 1, 1, 0, 1),
    "64x32x64_s4_2x2": (64, 32, 64, 4, 2, 2, 1, 1, 0, 1),
    "32x64x128_s3_2x2": (32, 64, 128, 3, 2, 2, 1, 1, 0, 1),
}


def _with(label: str, **macros) -> tuple:
    """Variant `label` of CLUSTERK_VARIANTS built with `macros` as well (a session-17 switch of the source)."""
    bm, bn, bk, st, wm, wn, push, hint, wg, fence, *rest = CLUSTERK_VARIANTS[label]
    return (bm, bn, bk, st, wm, wn, push, hint, wg, fence, rest[0] if rest else 0, macros)


# the fixed cost of a launch (part clusterk_fixed). Besides the tile as built: its tensor maps prefetched at the
# top of the kernel; its integer and pointer parameters before the tensor maps; variants that leave stages out
# (KR_PROBE_SKIP: the main loop, the reduction, everything, all but the set-up; the pushes, the sums, or both
# pushes and barriers without the main loop; their results are wrong, so they are timed only); partials pushed
# by asynchronous stores counted on each owner's mbarrier, without the cluster barrier (KR_ST_ASYNC); and each
# owner's rows copied to it by the copy engine from the partial tile staged in the block's own memory, at every
# cluster size (_bulk) or at none (_nobulk). The variants without KR_BULK_MIN_SPLITS take the source's rule,
# which was "none" when runs 1-6 measured them.
CLUSTERK_VARIANTS.update({
    "64x64x128_s6_tma_prefetch": _with("64x64x128_s6_tma", KR_PREFETCH_TMAP=1),
    "64x64x128_s6_tma_scalarsfirst": _with("64x64x128_s6_tma", KR_SCALARS_FIRST=1),
    **{f"64x64x128_s6_tma_{suffix}": _with("64x64x128_s6_tma", KR_PROBE_SKIP=skip) for skip, suffix in [
        (1, "noloop"), (2, "noreduce"), (3, "empty"), (4, "initonly"), (5, "noloop_nopush"), (6, "noloop_nosum"),
        (7, "noloop_sumonly")]},
    "64x64x128_s3_tma_empty": (64, 64, 128, 3, 4, 1, 1, 1, 1, 1, 1, {"KR_PROBE_SKIP": 3}),
    "64x64x128_s6_tma_noloop_scalarsfirst": _with("64x64x128_s6_tma", KR_SCALARS_FIRST=1, KR_PROBE_SKIP=1),
    "64x64x128_s6_tma_stasync_bar": _with("64x64x128_s6_tma", KR_ST_ASYNC=2),
    "64x64x128_s6_tma_noloop_stasync": _with("64x64x128_s6_tma", KR_ST_ASYNC=1, KR_PROBE_SKIP=1),
    "64x64x128_s6_tma_noloop_bulk": _with("64x64x128_s6_tma", KR_BULK_MIN_SPLITS=1, KR_PROBE_SKIP=1),
    **{f"{tile}_stasync": _with(tile, KR_ST_ASYNC=1) for tile in ("64x64x128_s6_tma", "64x64x64_s8_wg",
                                                                   "128x64x64_s6_tma")},
    **{f"{tile}_{suffix}": _with(tile, KR_BULK_MIN_SPLITS=n) for tile in ("64x64x128_s6_tma", "64x64x64_s8_wg",
                                                                           "128x64x64_s6_tma")
       for suffix, n in (("bulk", 1), ("nobulk", 17))},
})
# How an owner writes C (KR_END_STORE, session 20): 16-byte stores of 8 columns (_st16) and (probe only) the sums
# without any store (_nostore); each on its own, and with the main loop, or the pushes and barriers as well, left
# out. The runs (gemm_runs/probe_end_store_*) also timed variants this source no longer has: rows staged in shared
# memory and written by bulk copies, every sum first and the stores back to back, stores past L1 (commit 1a468ca).
CLUSTERK_VARIANTS.update({
    f"{tile}{skip_suffix}_{suffix}": _with(tile, KR_END_STORE=end, **({"KR_PROBE_SKIP": skip} if skip else {}))
    for tile in ("64x64x128_s6_tma", "128x64x64_s6_tma", "64x64x64_s8_wg")
    for skip, skip_suffix in ((0, ""), (1, "_noloop"), (7, "_noloop_sumonly"))
    for suffix, end in (("st16", 1), ("nostore", 3))
    if tile == "64x64x128_s6_tma" or (skip == 0 and end != 3)})
UNCHECKED = ("_noloop", "_noreduce", "_empty", "_initonly", "_nopush", "_nosum", "_sumonly", "_nostore")
# a label holding any of these gives wrong results by design
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
        bm, bn, bk, st, wm, wn, push, hint, wg, fence, *rest = CLUSTERK_VARIANTS[label]
        tma, extra = (rest[0] if rest else 0), (rest[1] if len(rest) > 1 else {})
        cfg = ClusterKConfig(bm, bn, bk, st, wm * wn, wgmma=bool(wg), tma=bool(tma))
        return b.clusterk_command(cfg, {
            "KR_NAME": f"probe_{label}", "KR_WM": wm, "KR_WN": wn, "KR_PUSH": push, "KR_L2_HINT": hint,
            "KR_PROXY_FENCE": fence, **extra})

    variants = {lab: v for lab, v in CLUSTERK_VARIANTS.items() if not labels or lab in labels}
    objects = {f"probe_{lab}": functools.partial(command, lab) for lab in variants}
    out = ROOT / ".kernelrl-cache" / "probe_clusterk"
    lib = b._compile_and_link(objects, b.CK_SOURCE, "libprobe_clusterk.so", out, os.cpu_count(), log)
    return ctypes.CDLL(str(lib)), variants


def add_variant(lib, label: str, splits: int, shape: tuple[int, int, int], a, b, ref, entry: dict, fns: dict,
                keep_wrong: bool = False) -> None:
    """Probe variant `label` in clusters of `splits` on `shape`, checked on (a, b) against `ref`: into `fns` for
    timing if correct (or `keep_wrong`), else its reason into entry["failed"]."""
    from kernelrl.gemm import check as chk
    from kernelrl.gemm import clusterk

    name = f"{label}/c{splits}"
    try:
        fn = clusterk.launcher(lib, "probe_" + label, name, splits, *shape)
        c = chk.check(fn, a, b, ref)
    except (ValueError, RuntimeError) as e:
        entry["failed"][name] = str(e)[:200]
        return
    if c.ok or keep_wrong:
        fns[name] = (fn, True)
    else:
        entry["failed"][name] = c.reason


def part_clusterk(res: dict, deadline: float, labels: list[str] | None = None,
                  shapes: list[tuple[int, int, int]] | None = None, sizes: tuple[int, ...] = (1, 2, 4, 8, 16)) -> None:
    import torch

    from kernelrl.gemm import check as chk
    from kernelrl.gemm import timing as tm

    lib, variants = build_clusterk_variants(labels)
    out = res.setdefault("clusterk", [])
    rng = random.Random(11)
    for m, n, k in shapes or CLUSTERK_SHAPES:
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
            for s in sizes:
                if k < s * bk:
                    continue
                add_variant(lib, label, s, (m, n, k), a, b_, ref, entry, fns)
        del ref, a, b_
        inp = tm.Inputs(m, n, k)
        t = tm.time_graphs(fns, inp, 100, 15, rng)
        entry["us"] = t
        out.append(entry)
        best = sorted((v, lab) for lab, v in t.items() if "/c" in lab)[:4]
        tiled = min(v for lab, v in t.items() if lab.startswith("tiled"))
        log(f"clusterk {m}x{n}x{k}: torch {t['torch']:.2f} tiled {tiled:.2f} "
            f"best {', '.join(f'{lab} {v:.2f}' for v, lab in best)}; failed {len(entry['failed'])}")


# part clusterk_fixed: (m, n, k, cluster sizes); K from one K step per block upwards, so that the time at K -> 0
# is the launch's fixed cost
FIXED_CASES = [(64, 64, 128, (1,)), (64, 64, 512, (1, 4)), (64, 64, 2048, (1, 8, 16)), (64, 64, 4096, (8, 16)),
               (128, 128, 4096, (8,)), (256, 256, 4096, (6,)), (64, 2048, 8192, (3,)), (128, 128, 2048, (5, 7)),
               (256, 128, 4096, (2, 4)), (64, 64, 1024, (1, 4, 8)), (128, 128, 1024, (2, 4, 8)),
               (72, 200, 1032, (1, 4, 8))]
# every variant of the five runs in gemm_runs/probe_clusterk_fixed_*.log (each ran a subset of these, on a subset of
# FIXED_CASES); --clusterk-variants picks some
FIXED_LABELS = ["64x64x128_s6_tma", "64x64x128_s6_tma_prefetch", "64x64x128_s6_tma_scalarsfirst",
                "64x64x128_s6_tma_stasync", "64x64x128_s6_tma_stasync_bar", "64x64x128_s6_tma_noloop",
                "64x64x128_s6_tma_noreduce", "64x64x128_s6_tma_empty", "64x64x128_s3_tma_empty",
                "64x64x128_s6_tma_initonly", "64x64x128_s6_tma_noloop_nopush", "64x64x128_s6_tma_noloop_nosum",
                "64x64x128_s6_tma_noloop_sumonly", "64x64x128_s6_tma_noloop_stasync",
                "64x64x128_s6_tma_noloop_scalarsfirst", "64x64x64_s8_wg", "64x64x64_s8_wg_stasync",
                "128x64x64_s6_tma", "128x64x64_s6_tma_stasync", "64x64x128_s6_tma_bulk", "64x64x128_s6_tma_nobulk",
                "64x64x128_s6_tma_noloop_bulk", "64x64x64_s8_wg_bulk", "64x64x64_s8_wg_nobulk", "128x64x64_s6_tma_bulk",
                "128x64x64_s6_tma_nobulk"]


def part_clusterk_fixed(res: dict, deadline: float, labels: list[str] | None = None) -> None:
    import torch

    from kernelrl.gemm import check as chk
    from kernelrl.gemm import timing as tm

    lib, variants = build_clusterk_variants(labels or FIXED_LABELS)
    out = res.setdefault("clusterk_fixed", [])
    rng = random.Random(13)
    for m, n, k, sizes in FIXED_CASES:
        if time.perf_counter() - T0 > deadline:
            log("clusterk_fixed: deadline")
            break
        a, b_ = chk.random_inputs(m, n, k)
        ref = chk.reference(a, b_)
        fns = {"torch": (torch.matmul, False), "torch_control": (torch.matmul, False),
               "tiled:64x64x128_s3_w4": (tiled_launcher((64, 64, 128, 4, 3), m, n, k), True)}
        entry = {"m": m, "n": n, "k": k, "failed": {}}
        for label in variants:
            for s in sizes:
                add_variant(lib, label, s, (m, n, k), a, b_, ref, entry, fns,
                            keep_wrong=any(u in label for u in UNCHECKED))
        del ref, a, b_
        inp = tm.Inputs(m, n, k)
        t = tm.time_graphs(fns, inp, 100, 21, rng)
        entry["us"] = t
        out.append(entry)
        log(f"clusterk_fixed {m}x{n}x{k}: " + " ".join(f"{lab} {v:.2f}" for lab, v in t.items())
            + f"; failed {entry['failed']}")


def launch_once(specs: list[str]) -> None:
    """Each "LABEL/cS@MxNxK": probe variant LABEL in clusters of S on fresh inputs, launched once after one
    warm-up launch, for a profiler to catch (`ncu --launch-skip` counts the warm-ups)."""
    import torch

    from kernelrl.gemm import check as chk
    from kernelrl.gemm import clusterk

    labels = sorted({spec.split("/c")[0] for spec in specs})
    lib, _ = build_clusterk_variants(labels)
    for spec in specs:
        name, shape = spec.split("@")
        label, splits = name.split("/c")
        m, n, k = map(int, shape.split("x"))
        a, b = chk.random_inputs(m, n, k)
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        fn = clusterk.launcher(lib, "probe_" + label, name, int(splits), m, n, k)
        fn(a, b, c)
        torch.cuda.synchronize()
        fn(a, b, c)
        torch.cuda.synchronize()
        log(f"once {spec}")


def calls_body(fn, inp, calls: int, takes_out: bool, before=None):
    """A graph body of `calls` calls of `fn` over the rotating input sets of `inp`, each after `before()` if
    given (a foreign kernel, as in a model's graph)."""
    from kernelrl.gemm import timing as tm

    def body():
        for i in range(calls):
            if before is not None:
                before()
            tm._call(fn, inp, i, takes_out)

    return body


def foreign_sample(rows: list[dict], per_family: int, max_us: float) -> list[dict]:
    """Up to `per_family` shapes of each kernel family in the committed CSV, spread evenly over torch.matmul's
    time up to `max_us`."""
    by_family: dict[str, list[dict]] = {}
    for r in rows:
        if float(r["torch_us"]) <= max_us:
            by_family.setdefault(r["kernel"].split(":")[0], []).append(r)
    out = []
    for fam in sorted(by_family):
        rs = sorted(by_family[fam], key=lambda r: float(r["torch_us"]))
        step = max(1, len(rs) / per_family)
        out += [rs[int(i * step)] for i in range(min(per_family, len(rs)))]
    return out


def part_after_foreign(res: dict, deadline: float, per_family: int = 12, max_us: float = 40.0) -> None:
    import torch

    from kernelrl.gemm import timing as tm
    from kernelrl.gemm.dispatch import Dispatcher
    from kernelrl.gemm.table import DEFAULT_TABLE, Table

    disp = Dispatcher(Table.load(DEFAULT_TABLE))
    with (ROOT / "benchmarks" / "results" / "gemm_h200.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["dtype"] == "fp16"]
    out = res.setdefault("after_foreign", [])
    rng = random.Random(17)
    x = torch.zeros(1024, device="cuda", dtype=torch.float32)
    for r in foreign_sample(rows, per_family, max_us):
        if time.perf_counter() - T0 > deadline:
            log("after_foreign: deadline")
            break
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        inp = tm.Inputs(m, n, k)
        calls = tm.calls_for(float(r["torch_us"]))
        graphs = []
        for lab, f in (("torch", torch.matmul), ("kernelrl", disp)):
            f(inp.a[0], inp.b[0])
            for before, prefix in ((None, ""), (lambda: x.add_(1.0), "after_add:")):
                graphs.append((prefix + lab, tm.capture_graph(calls_body(f, inp, calls, False, before))))
        graphs.append(("add_alone", tm.capture_graph(lambda: [x.add_(1.0) for _ in range(calls)])))
        smp = interleaved(graphs, calls, 21, rng)
        add = smp["add_alone"]
        back = [t / c for t, c in zip(smp["torch"], smp["kernelrl"])]
        after = [(t - a) / (c - a) for t, c, a in zip(smp["after_add:torch"], smp["after_add:kernelrl"], add)]
        entry = {"m": m, "n": n, "k": k, "kernel": disp.kernel_for(m, n, k, torch.float16), "calls": calls,
                 "us": {lab: statistics.median(v) for lab, v in smp.items()},
                 "speedup_back_to_back": statistics.median(back), "speedup_after_add": statistics.median(after),
                 "committed_speedup": float(r["speedup_paired"])}
        out.append(entry)
        log(f"after_foreign {m}x{n}x{k} {entry['kernel'][:40]}: back to back {entry['speedup_back_to_back']:.3f}, "
            f"after an add {entry['speedup_after_add']:.3f} (committed {entry['committed_speedup']:.3f}; "
            f"add {entry['us']['add_alone']:.2f} us)")
        del graphs, inp
    fams: dict[str, list] = {}
    for e in out:
        fams.setdefault(e["kernel"].split(":")[0], []).append(e)
    for fam, es in sorted(fams.items()):
        g = {key: math.exp(statistics.fmean(math.log(e[key]) for e in es))
             for key in ("speedup_back_to_back", "speedup_after_add", "committed_speedup")}
        log(f"after_foreign {fam} ({len(es)} shapes): back to back {g['speedup_back_to_back']:.3f}, after an add "
            f"{g['speedup_after_add']:.3f}, committed CSV {g['committed_speedup']:.3f}")


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


def part_capacity(res: dict) -> None:
    """Clusters of each size that the GPU places at once, for every compiled cluster split-K tile (CUDA's
    occupancy calculator through the library), one cluster per tile and (powers of two) several; written to
    cluster_capacity.txt as `<tile> resident <blocks per SM> smem <bytes> <size>:<clusters> ...`."""
    import torch

    from kernelrl.gemm.clusterk import max_active_clusters
    from kernelrl.gemm.space import CLUSTERK_ODD_SPLITS, CLUSTERK_TILES

    sizes = sorted((2, 4, 8, 16) + CLUSTERK_ODD_SPLITS)
    lines, res["capacity"] = [], {}
    for tile in CLUSTERK_TILES:
        got = {}
        for s in sizes:
            for groups in ((1, 2) if not s & (s - 1) else (1,)):
                per = {dt: max_active_clusters(tile.with_splits(s, groups), dt)
                       for dt in (torch.float16, torch.bfloat16)}
                got[f"{s}" + (f"g{groups}" if groups > 1 else "")] = per[torch.float16]
                if per[torch.bfloat16] != per[torch.float16]:
                    got[f"{s}g{groups}_bf16"] = per[torch.bfloat16]
        res["capacity"][tile.variant] = got
        lines.append(f"{tile.variant} resident {tile.resident} smem {tile.smem_bytes} "
                     + " ".join(f"{k}:{v}" for k, v in got.items()))
    (OUT / "cluster_capacity.txt").write_text("\n".join(lines) + "\n")
    log(f"capacity of {len(lines)} tiles written to cluster_capacity.txt")


PDL_SHAPES = [(64, 64, 64), (128, 128, 128), (256, 256, 64), (512, 512, 128), (1024, 64, 256), (64, 4096, 64),
              (256, 1024, 128), (1024, 1024, 256), (2048, 2048, 64), (128, 4096, 256), (512, 4096, 64),
              (2048, 256, 256)]


@functools.cache
def pdl_kernel():
    import triton
    import triton.language as tl

    from kernelrl.gemm.kernels.triton_tiled import tiled_product

    @triton.jit
    def matmul_tiled_gdc(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                         EVEN_K: tl.constexpr, TRIGGER: tl.constexpr):
        tl.extra.cuda.gdc_wait()  # nothing is read or written before the kernel before this one has finished
        if TRIGGER:
            tl.extra.cuda.gdc_launch_dependents()
        acc, rm, rn, pid_m, pid_n = tiled_product(a_ptr, b_ptr, M, N, K, stride_am, stride_bk, BM, BN, BK,
                                                  GROUP_M, EVEN_K)
        mask = (rm < M)[:, None] & (rn < N)[None, :]
        tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)

    return matmul_tiled_gdc


def pdl_launcher(cfg, m, n, k, pdl: bool, trigger: bool = False):
    bm, bn, bk, warps, stages = cfg
    grid = (-(-m // bm) * -(-n // bn),)
    jit = pdl_kernel()[grid]

    def run(a, b, c):
        jit(a, b, c, m, n, k, k, n, n, BM=bm, BN=bn, BK=bk, GROUP_M=8, EVEN_K=k % bk == 0, TRIGGER=trigger,
            num_warps=warps, num_stages=stages, launch_pdl=pdl)

    return run


def part_pdl(res: dict, deadline: float) -> None:
    import torch

    from kernelrl.gemm import check as chk
    from kernelrl.gemm import timing as tm

    out = res.setdefault("pdl", [])
    rng = random.Random(11)
    calls, rounds = 100, 31
    x = torch.zeros(1024, device="cuda", dtype=torch.float32)
    for (m, n, k) in PDL_SHAPES:
        if time.perf_counter() - T0 > deadline:
            log("pdl: deadline")
            break
        cfg = (64, 64, 64, 4, 2) if m * n >= 256 * 256 else (32, 64, 64, 2, 3)
        fns = {"torch": torch.matmul, "torch_control": torch.matmul,
               "tiled": tiled_launcher(cfg, m, n, k),
               "tiled_gdc_nopdl": pdl_launcher(cfg, m, n, k, pdl=False),
               "tiled_pdl": pdl_launcher(cfg, m, n, k, pdl=True),
               "tiled_pdl_trigger": pdl_launcher(cfg, m, n, k, pdl=True, trigger=True)}
        entry = {"m": m, "n": n, "k": k, "cfg": list(cfg), "checks": {}}
        a, b = chk.random_inputs(m, n, k)
        ref = chk.reference(a, b)
        for lab, f in fns.items():
            if lab.startswith("tiled"):
                entry["checks"][lab] = chk.check(f, a, b, ref).ok
        # producer -> consumer: each GEMM reads an A that the kernel just before it wrote; a call that read
        # before its predecessor finished would see the previous input
        srcs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(4)]
        a_buf = torch.empty(m, k, device="cuda", dtype=torch.float16)
        outs = [torch.empty(m, n, device="cuda", dtype=torch.float16) for _ in range(4)]
        for lab in ("tiled_pdl", "tiled_pdl_trigger"):
            f = fns[lab]

            def body(f=f):
                for i in range(4):
                    a_buf.copy_(srcs[i])
                    f(a_buf, b, outs[i])

            tm.capture_graph(body).replay()
            torch.cuda.synchronize()
            entry["checks"][lab + "_producer"] = all(
                chk.rel_err(outs[i], chk.reference(srcs[i], b)) < 1e-2 for i in range(4))
        del ref, a
        inp = tm.Inputs(m, n, k)

        graphs = []
        for lab, f in fns.items():
            takes_out = lab.startswith("tiled")
            graphs.append((lab, tm.capture_graph(calls_body(f, inp, calls, takes_out))))
            if lab != "torch_control" and lab != "tiled_gdc_nopdl":
                graphs.append(("after_add:" + lab, tm.capture_graph(
                    calls_body(f, inp, calls, takes_out, lambda: x.add_(1.0)))))
        graphs.append(("add_alone", tm.capture_graph(lambda: [x.add_(1.0) for _ in range(calls)])))
        s = interleaved(graphs, calls, rounds, rng)
        entry["us"] = {lab: statistics.median(v) for lab, v in s.items()}
        entry["samples"] = s
        out.append(entry)
        u = entry["us"]
        log(f"pdl {m}x{n}x{k}: torch {u['torch']:.2f} control {u['torch_control']:.2f} tiled {u['tiled']:.2f} "
            f"gdc-no-pdl {u['tiled_gdc_nopdl']:.2f} pdl {u['tiled_pdl']:.2f} pdl+trigger {u['tiled_pdl_trigger']:.2f}"
            f" | after add: torch {u['after_add:torch']:.2f} tiled {u['after_add:tiled']:.2f} "
            f"pdl {u['after_add:tiled_pdl']:.2f} trigger {u['after_add:tiled_pdl_trigger']:.2f} "
            f"add {u['add_alone']:.2f} | checks {entry['checks']}")
        del graphs, inp


def lean_launchers(cfg: tuple, m: int, n: int, k: int) -> dict:
    """{label: () -> launcher (a, b, c)} of the tiled kernel's three forms for a shape its tiles cover: `tiled`, the
    edge handling on, `even` without it, `const` with the sizes compiled in (`matmul_tiled_fixed`). The run that
    decided on the last two (gemm_runs/probe_tiled_lean.*) took `tiled` from the source before `EVEN_MN` existed
    and the other two from kernels of its own, never committed, written the same way: its figures are the
    evidence for the adopted source only as far as `benchmarks/gemm_sass.py` shows the same machine code
    (gemm_runs/sass_tiled_session23.txt)."""
    from kernelrl.gemm.kernels.triton_tiled import matmul_tiled, matmul_tiled_fixed

    bm, bn, bk, warps, stages = cfg
    grid = (m // bm * (n // bn),)

    def launcher(kern, even_mn: bool):
        def run(a, b, c):
            kern[grid](a, b, c, m, n, k, k, n, n, BM=bm, BN=bn, BK=bk, GROUP_M=8, EVEN_K=True, EVEN_MN=even_mn,
                       num_warps=warps, num_stages=stages)

        return run

    return {"tiled": lambda: launcher(matmul_tiled, False), "even": lambda: launcher(matmul_tiled, True),
            "const": lambda: launcher(matmul_tiled_fixed, True)}


def lean_shapes(within: float = 1.10, max_us: float = 5.0) -> list[tuple[int, int, int, tuple]]:
    """(m, n, k, tiled configuration): the committed fp16 table's tiled shapes with their configuration, then the
    shapes under `max_us` on torch.matmul whose fastest recorded tiled candidate came within `within` of the
    fastest candidate, with that configuration; only where the tiles cover the output and BK divides K."""
    from kernelrl.gemm.report import read_rows
    from kernelrl.gemm.shapes import Shape
    from kernelrl.gemm.space import TiledConfig
    from kernelrl.gemm.table import read_records
    from kernelrl.gemm.tune import _timed

    results = ROOT / "benchmarks" / "results"
    rows = {(int(r["m"]), int(r["n"]), int(r["k"])): r for r in read_rows(results / "gemm_h200.csv")
            if r["dtype"] == "fp16"}
    picked: dict[tuple, str] = {key: r["kernel"] for key, r in rows.items() if r["kernel"].startswith("tiled:")}
    for rec in read_records(results / "gemm_tune_h200.jsonl.gz"):
        key = (rec["m"], rec["n"], rec["k"])
        if rec["dtype"] != "fp16" or key in picked or float(rows[key]["torch_us"]) >= max_us:
            continue
        tiled = _timed(rec, lambda n: n.startswith("tiled:"))
        if tiled and tiled[0][0] <= within * _timed(rec, lambda n: True)[0][0]:
            picked[key] = tiled[0][1]
    out = []
    for (m, n, k), name in sorted(picked.items(), key=lambda kv: float(rows[kv[0]]["torch_us"])):
        c = TiledConfig.parse(name)
        if c.covers(Shape(m, n, k)):
            out.append((m, n, k, (c.bm, c.bn, c.bk, c.warps, c.stages)))
    return out


def part_tiled_lean(res: dict, deadline: float) -> None:
    import torch

    from kernelrl.gemm import check as chk
    from kernelrl.gemm import timing as tm
    from kernelrl.gemm.dispatch import Dispatcher
    from kernelrl.gemm.table import DEFAULT_TABLE, Table

    disp = Dispatcher(Table.load(DEFAULT_TABLE))
    variants = ("even", "const")
    shapes = lean_shapes()
    log(f"tiled_lean: {len(shapes)} shapes")
    out = res.setdefault("tiled_lean", [])
    rng = random.Random(13)
    for m, n, k, cfg in shapes:
        if time.perf_counter() - T0 > deadline:
            log(f"tiled_lean: deadline, {len(shapes) - len(out)} shapes left")
            break
        a, b = chk.random_inputs(m, n, k)
        ref = chk.reference(a, b)
        entry = {"m": m, "n": n, "k": k, "cfg": list(cfg), "kernel": disp.kernel_for(m, n, k, torch.float16),
                 "configs": {}}
        fns = {"torch": (torch.matmul, False), "torch_control": (torch.matmul, False), "kernelrl": (disp, False)}
        disp(a, b)
        check_candidates(lean_launchers(cfg, m, n, k), a, b, ref, entry, fns)
        del ref, a, b
        per_round: dict = {}
        entry["us"] = tm.time_graphs(fns, tm.Inputs(m, n, k), 100, 31, rng, per_round)
        entry["vs_tiled"] = {lab: statistics.median(t / x for t, x in zip(per_round["tiled"], per_round[lab]))
                             for lab in variants if lab in per_round and "tiled" in per_round}
        out.append(entry)
        u = entry["us"]
        log(f"tiled_lean {m}x{n}x{k} {cfg}: torch {u['torch']:.2f} kernelrl {u['kernelrl']:.2f} "
            + " ".join(f"{lab} {u[lab]:.2f}" for lab in ("tiled", *variants) if lab in u)
            + " | vs tiled " + " ".join(f"{lab} {x:.3f}" for lab, x in entry["vs_tiled"].items()))


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
    smallk = res.get("smallk", [])
    if smallk:
        logs = []
        for e in smallk:
            new = {lab: v for lab, v in e["paired_vs_torch"].items() if lab not in ("torch", "torch_control", "kernelrl")}
            lab = max(new, key=new.get)
            logs.append((math.log(new[lab]), math.log(e["paired_vs_torch"]["kernelrl"]), lab))
        fams: dict[str, int] = {}
        for _, _, lab in logs:
            fams[lab.split(":")[0]] = fams.get(lab.split(":")[0], 0) + 1
        better = sum(1 for b, d, _ in logs if b > d + math.log(1.01))
        lines.append(f"smallk: {len(logs)} shapes; geomean vs torch.matmul of the best new candidate "
                     f"{math.exp(sum(b for b, _, _ in logs) / len(logs)):.3f}, of the committed dispatch "
                     f"{math.exp(sum(d for _, d, _ in logs) / len(logs)):.3f}, of the better of the two "
                     f"{math.exp(sum(max(b, d) for b, d, _ in logs) / len(logs)):.3f}; the new one ahead by > 1% on "
                     f"{better}; best new by family {fams}")
        ks = sorted({e["k"] for e in smallk})
        labels = sorted({lab for e in smallk for lab in e["paired_vs_torch"]})
        lines.append("smallk: geomean paired speedup vs torch.matmul by K, every label: "
                     + " ".join(f"K={k}" for k in ks) + " all")
        for lab in labels:
            cells = [[e["paired_vs_torch"][lab] for e in smallk if lab in e["paired_vs_torch"] and e["k"] == k]
                     for k in ks] + [[e["paired_vs_torch"][lab] for e in smallk if lab in e["paired_vs_torch"]]]
            lines.append(f"  {lab}: " + " ".join(
                f"{math.exp(sum(map(math.log, c)) / len(c)):.3f}" if c else "-" for c in cells))
    lean = [e for e in res.get("tiled_lean", []) if len(e.get("vs_tiled", {})) == 2]
    if lean:
        g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
        groups: dict[tuple, list[dict]] = {}
        for e in lean:
            groups.setdefault(("all",), []).append(e)
            groups.setdefault(("committed tiled" if e["kernel"].startswith("tiled:") else "other",), []).append(e)
            groups.setdefault(("tile", "x".join(map(str, e["cfg"][:3])) + f" w{e['cfg'][3]}",
                               f"{e['k'] // e['cfg'][2]} K steps"), []).append(e)
        lines.append("tiled_lean: paired geomean over the edge-handling kernel of: even, const, the better of two")
        for key, es in groups.items():
            lines.append(f"  {' '.join(key)} ({len(es)}): {g([e['vs_tiled']['even'] for e in es]):.3f} "
                         f"{g([e['vs_tiled']['const'] for e in es]):.3f} "
                         f"{g([max(e['vs_tiled'].values()) for e in es]):.3f}")
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
    ap.add_argument("--clusterk-shapes", default="", help="part clusterk: comma-separated MxNxK (default: "
                    "CLUSTERK_SHAPES)")
    ap.add_argument("--clusterk-sizes", default="1,2,4,8,16", help="part clusterk: the cluster sizes to time")
    ap.add_argument("--ab-rev", default="ddc773c", help="the earlier revision part clusterk_ab builds from")
    ap.add_argument("--build-only", action="store_true", help="compile the cluster split-K variants (and, with "
                    "clusterk_ab in --parts, the earlier revision's) and stop")
    ap.add_argument("--smallk-min-us", type=float, default=5.0, help="part smallk: shapes torch.matmul takes "
                    "at least this long on")
    ap.add_argument("--smallk-max-k", type=int, default=256, help="part smallk: shapes with K up to this")
    ap.add_argument("--smallk-kernels", default="", help="part smallk: comma-separated registry kernel names to "
                    "time instead of the Triton candidates")
    ap.add_argument("--summarise", metavar="JSON", help="print the summary of an earlier probe's JSON (or .json.gz) "
                    "and stop")
    ap.add_argument("--once", default="", metavar="LABEL/cS@MxNxK,...", help="launch each of these cluster "
                    "split-K probe variants once (for a profiler: nothing is timed) and stop")
    args = ap.parse_args()
    if args.summarise:
        raw = Path(args.summarise).read_bytes()
        print("\n".join(summarise(json.loads(gzip.decompress(raw) if args.summarise.endswith(".gz") else raw))))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    if args.once:
        launch_once(args.once.split(","))
        return
    if args.build_only:
        if "clusterk_ab" in args.parts.split(","):
            build_ab(args.ab_rev)
        elif "clusterk_fixed" in args.parts.split(","):
            build_clusterk_variants([v for v in args.clusterk_variants.split(",") if v] or FIXED_LABELS)
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
            part_clusterk(res, args.deadline, [v for v in args.clusterk_variants.split(",") if v],
                          [tuple(map(int, x.split("x"))) for x in args.clusterk_shapes.split(",") if x],
                          tuple(int(x) for x in args.clusterk_sizes.split(",")))
        if "clusterk_ab" in parts:
            part_clusterk_ab(res, args.deadline, args.ab_rev)
        if "host" in parts:
            part_host(res)
        if "capacity" in parts:
            part_capacity(res)
        if "smallk" in parts:
            part_smallk(res, args.deadline, args.smallk_min_us, args.smallk_max_k,
                        tuple(x for x in args.smallk_kernels.split(",") if x))
        if "pdl" in parts:
            part_pdl(res, args.deadline)
        if "after_foreign" in parts:
            part_after_foreign(res, args.deadline)
        if "clusterk_fixed" in parts:
            part_clusterk_fixed(res, args.deadline, [v for v in args.clusterk_variants.split(",") if v])
        if "tiled_lean" in parts:
            part_tiled_lean(res, args.deadline)
    finally:
        (OUT / "gemm_probe.json").write_text(json.dumps(res))
        log("wrote gemm_probe.json")
        for line in summarise(res):
            log(line)


if __name__ == "__main__":
    main()
