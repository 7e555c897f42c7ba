"""Benchmark the dispatch against torch.matmul and cuBLASLt (heuristic top-1, autotuned) in every timing mode.

One CSV row per shape; resumable like the tuner (rows already in the file are skipped).
"""
from __future__ import annotations

import csv
import gzip
import math
import random
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from kernelrl.gemm import check as chk
from kernelrl.gemm import timing as tm
from kernelrl.gemm.dispatch import Dispatcher
from kernelrl.gemm.registry import make_launcher
from kernelrl.gemm.shapes import Shape
from kernelrl.gemm.tune import DTYPE_NAMES, estimate_torch_us

IMPLS = ("torch", "cublaslt_heuristic", "cublaslt_autotune", "kernelrl")
PLACEMENTS = 3  # sets of input buffers the graph-mode rounds are spread over (as the tuner's final timing)
EAGER_MODES = ("offline", "cold", "server", "latency", "host")
# Columns of per-round paired speedups (graph mode): the median over the timing rounds of the baseline's time
# over kernelrl's in the same round (torch.matmul's over its control's for the control). Each round replays
# every implementation once, in a shuffled order, so a clock or power state that lasts a round hits both sides
# of a ratio alike; the ratio of two columns' medians can take them from different rounds.
PAIRED = {"torch": "speedup_paired", "cublaslt_heuristic": "speedup_vs_heuristic_paired",
          "cublaslt_autotune": "speedup_vs_autotune_paired", "torch_control": "control_paired"}


LAYOUTS = ("nn", "nt")  # nn: A @ B, both row-major; nt: x @ W.T with W an nn.Linear weight (n, k) row-major


def columns() -> list[str]:
    cols = ["m", "n", "k", "layout", "weight", "dtype", "torch_us", "cublaslt_heuristic_us", "cublaslt_autotune_us", "kernelrl_us",
            "torch_control_us",
            "kernel", "rel_err", "torch_rel_err", "cublaslt_autotune_kernel",
            "speedup_ci_lo", "speedup_ci_hi", "control_ci_lo", "control_ci_hi",
            *PAIRED.values()]
    cols += [f"{impl}_{mode}_us" for mode in EAGER_MODES for impl in IMPLS]
    return cols


def _impls(s: Shape, dtype: torch.dtype, record: dict, disp: Dispatcher, layout: str = "nn",
           kept: bool = False) -> dict[str, tuple]:
    """impl -> (function, calling convention: takes an output argument, or `timing.LINEAR`).

    In the nt layout torch is `F.linear` on the (n, k) weight, what `nn.Linear` runs; cuBLASLt takes the same
    weight laid out once as (k, n) storage, and so does kernelrl where `gemm.patch` lays the layer out (`kept`:
    it leaves the layer to F.linear)."""
    out: dict[str, tuple] = {"torch": (F.linear, tm.LINEAR) if layout == "nt" else (torch.matmul, False)}
    heur = record.get("cublaslt_heuristic")
    auto = record.get("cublaslt_autotune")
    if heur:
        out["cublaslt_heuristic"] = (make_launcher(heur, s.m, s.n, s.k, dtype), True)
    if auto:
        out["cublaslt_autotune"] = (make_launcher(auto, s.m, s.n, s.k, dtype), True)
    out["kernelrl"] = (F.linear, tm.LINEAR) if kept else (disp, False)
    return out


def bench_shape(s: Shape, dtype: torch.dtype, record: dict, disp: Dispatcher, flusher: tm.L2Flusher,
                rng: random.Random, layout: str = "nn", relaid: set | None = None) -> dict:
    """Every implementation in every mode on one shape; the CSV row. `relaid`: the layers `gemm.patch` lays
    out (`Table.relaid_layers`, nt layout only; default: the dispatcher's table's)."""
    kept = layout == "nt" and (s.n, s.k, record["dtype"]) not in (
        disp.table.relaid_layers() if relaid is None else relaid)
    row: dict = {"m": s.m, "n": s.n, "k": s.k, "layout": layout, "dtype": record["dtype"],
                 "weight": "" if layout == "nn" else "kept" if kept else "relaid",
                 "kernel": "torch" if kept else disp.kernel_for(s.m, s.n, s.k, dtype),
                 "cublaslt_autotune_kernel": record.get("cublaslt_autotune") or ""}
    impls = _impls(s, dtype, record, disp, layout, kept)
    a, b = chk.random_inputs(s.m, s.n, s.k, dtype)
    ref = chk.reference(a, b)
    row["rel_err"] = chk.rel_err(F.linear(a, b.t().contiguous()) if kept else disp(a, b), ref)
    row["torch_rel_err"] = chk.rel_err(F.linear(a, b.t().contiguous()) if layout == "nt" else torch.matmul(a, b),
                                       ref)
    del ref, a, b
    est = estimate_torch_us(s)
    calls = tm.calls_for(est)
    few = 5 if est > 2000 else (10 if est > 200 else 20)
    # the primary figure: graph replay, the implementations' replays interleaved; torch.matmul timed a second
    # time as its own control, so that the spread between two identical programs shows the noise floor
    graphed = {**impls, "torch_control": impls["torch"]}
    rounds = 21 if est > 50 else 31  # short kernels: more rounds against replay noise
    # the rounds spread over PLACEMENTS sets of buffers, each with its own graphs (see time_graphs_placed)
    inp = tm.Inputs(s.m, s.n, s.k, dtype, weights=layout == "nt")
    per_round: dict[str, list[float]] = {}
    tm.time_graphs_placed(graphed, inp, calls, rounds, PLACEMENTS, rng, per_round)
    for impl, times in per_round.items():
        row[f"{impl}_us"] = statistics.median(times)
    # 95% intervals of torch's time over kernelrl's (and over the control's), paired within each round: a shape
    # whose whole interval lies below 0.98 is measurably slower, not just unlucky in its medians
    _, row["speedup_ci_lo"], row["speedup_ci_hi"] = tm.paired_ratio_ci(per_round["torch"], per_round["kernelrl"])
    _, row["control_ci_lo"], row["control_ci_hi"] = tm.paired_ratio_ci(per_round["torch"], per_round["torch_control"])
    for impl, col in PAIRED.items():
        num, den = (per_round["torch"], per_round[impl]) if impl == "torch_control" else \
            (per_round.get(impl), per_round["kernelrl"])
        row[col] = tm.paired_ratio_ci(num, den)[0] if num else ""
    order = list(impls)
    rng.shuffle(order)
    for impl in order:
        fn, takes_out = impls[impl]
        row[f"{impl}_offline_us"] = tm.time_offline(fn, inp, calls, 3, out=takes_out)
        row[f"{impl}_cold_us"] = tm.time_cold(fn, inp, few, flusher, out=takes_out)
        row[f"{impl}_server_us"] = tm.time_server(fn, inp, few, out=takes_out, rng=rng)
        row[f"{impl}_latency_us"] = tm.time_latency(fn, inp, few, out=takes_out)
        row[f"{impl}_host_us"] = tm.time_host(fn, inp, min(calls, 50), out=takes_out)
    return row


def bench(shapes: list[Shape], records: dict[tuple, dict], disp: Dispatcher, out: Path, dtype: str = "fp16",
          deadline_s: float = math.inf, log=print, layout: str = "nn") -> int:
    """Benchmark every shape not yet in `out` (cheapest first) that has a tuning record, in `layout` (LAYOUTS).
    A gzipped `out` (`.csv.gz`, as benchmarks/results/ keeps them) is resumed in a plain copy and packed again."""
    out = Path(out)
    if out.suffix == ".gz":
        plain = out.with_suffix(".unpacked")
        before = gzip.decompress(out.read_bytes()) if out.is_file() else None
        if before is not None:
            plain.write_bytes(before)
        try:
            return bench(shapes, records, disp, plain, dtype, deadline_s, log, layout)
        finally:
            if plain.is_file():
                after = plain.read_bytes()
                if after != before:
                    out.write_bytes(gzip.compress(after, mtime=0))
                plain.unlink()
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: use one of {', '.join(LAYOUTS)}")
    t0 = time.perf_counter()
    done = set()
    if out.is_file():
        with out.open() as f:
            reader = csv.DictReader(f)
            if reader.fieldnames and reader.fieldnames != columns():
                raise ValueError(f"{out} was written with other columns than this benchmark writes: benchmark "
                                 "every shape afresh into a new file (gemm_device.py --fresh-bench)")
            done = {(int(r["m"]), int(r["n"]), int(r["k"]), r["dtype"]) for r in reader if r["layout"] == layout}
    todo = sorted((s for s in shapes if (s.m, s.n, s.k, dtype) not in done and (s.m, s.n, s.k, dtype) in records),
                  key=estimate_torch_us)
    new = not out.is_file()
    flusher = tm.L2Flusher()
    rng = random.Random(12345)
    relaid = disp.table.relaid_layers()
    n = 0
    with out.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns(), extrasaction="ignore")
        if new:
            w.writeheader()
        for s in todo:
            if time.perf_counter() - t0 + estimate_torch_us(s) * 200 / 1e6 > deadline_s:
                log(f"deadline reached: {len(todo) - n} shapes left to benchmark")
                break
            row = bench_shape(s, DTYPE_NAMES[dtype], records[(s.m, s.n, s.k, dtype)], disp, flusher, rng, layout,
                              relaid)
            w.writerow(row)
            f.flush()
            n += 1
            log(f"bench {s}: torch {row['torch_us']:.2f} kernelrl {row['kernelrl_us']:.2f} us ({row['kernel'][:40]}"
                f"{', weight kept' if row['weight'] == 'kept' else ''})")
    return n
