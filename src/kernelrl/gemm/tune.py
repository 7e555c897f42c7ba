"""The per-shape search: check and time every pruned candidate of every family, keep the best.

Results go to a JSONL file, one line per (shape, dtype); a rerun skips what the file already holds, so a
search that stops (a device lease ending) resumes where it stopped.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import tempfile
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelrl.gemm import check as chk
from kernelrl.gemm.registry import make_launcher
from kernelrl.gemm.shapes import Shape
from kernelrl.gemm.space import (FIXED_SUFFIX, CutlassVariant, TiledConfig, clusterk_candidates,
                                 clusterk_fill_candidates, clusterk_small_candidates, cutlass_candidates,
                                 cutlass_epi_candidates, cutlass_runtime_variants, roofline_us, splitk_candidates,
                                 tiled_candidates, tiled_fixed_variant, triton_candidates)
from kernelrl.gemm.timing import Inputs, calls_for, paired_ratio_ci, time_graph, time_graphs_placed

DTYPE_NAMES = {"fp16": torch.float16, "bf16": torch.bfloat16}
BROKEN: set[str] = set()  # Triton kernels (name up to the run-time part) that failed to compile in this process


def compile_key(name: str) -> str | None:
    """The part of a Triton kernel's name that decides its compilation (None for other families)."""
    return name.split("/", 1)[0] if name.startswith(("triton:", "splitk:", "tiled:")) else None


def short_name(name: str, lt_rank: dict[str, str]) -> str:
    """Candidate name for the record: cuBLASLt blobs become `cublaslt#<heuristic rank>`."""
    return lt_rank.get(name, name)


@dataclass(frozen=True)
class TuneOptions:
    """How hard the search looks (candidates per family) and how it decides."""

    lt_autotune: int = 32  # heuristic algorithms timed for the cuBLASLt autotune baseline
    lt_extra: int = 32  # further heuristic algorithms the kernelrl search may use (small shapes only)
    lt_extra_below_us: float = 100.0  # ... for shapes whose estimate is under this
    lt_splitk_top: int = 3  # split-K variants of the best few heuristic algorithms
    lt_enum_top: int = 24  # configurations from the enumerated algorithm space (beyond the heuristic's list)
    lt_enum_above_us: float = 8.0  # ... for shapes whose estimate is above this (below, launch cost decides)
    lt_enum_below_us: float = 1000.0  # ... and below this (above, cuBLAS's own choice is within a few percent)
    triton_top: int = 4
    splitk_top: int = 8  # Triton split-K configurations (shapes with a small output and a deep K only)
    tiled_top: int = 24  # Triton tiled configurations (launch-bound shapes only)
    clusterk_top: int = 24  # CUDA cluster split-K configurations (few output tiles, deep K only) ...
    clusterk_grouped_top: int = 10  # ... and ones with several clusters per output tile ...
    clusterk_fill_top: int = 4  # ... and ones with a cluster size other than a power of two that fills a wave
    clusterk_small_top: int = 16  # ... and ones with a tile smaller than 64x64 (the smallest outputs only)
    cutlass_top: int = 10
    cutlass_epi_top: int = 7  # ... and the ping-pong ones with the larger epilogue subtile
    finalists: int = 3  # re-timed against the baselines, interleaved
    margin: float = 0.005  # a kernel must beat torch.matmul by this fraction to replace it (medians) ...
    ci_floor: float = 1.0  # ... and the low end of the 95% interval of its speedup, paired by round, reach this
    replays: int = 3
    final_rounds: int = 15
    final_placements: int = 3  # sets of buffers the final rounds are spread over, each with its own graphs


def estimate_torch_us(s: Shape) -> float:
    """Roofline estimate of one product, microseconds."""
    return roofline_us(s)


# How hard a search seeded from another dtype's records looks on its own (`tune(..., seeds=...)`): the
# cuBLASLt baselines in full, each other family's few best by the cost model, no enumerated cuBLASLt space and
# no Triton split-K (it won no fp16 shape); the seeds carry what the full search found for the same shape.
SEEDED = TuneOptions(lt_enum_top=0, splitk_top=0, triton_top=2, tiled_top=6, clusterk_top=6,
                     clusterk_grouped_top=2, clusterk_small_top=4, cutlass_top=4, cutlass_epi_top=3)
SEEDS_PER_SHAPE = 4  # a seeding record's winner plus its fastest few other launchable candidates


def seed_names(record: dict, top: int = SEEDS_PER_SHAPE) -> list[str]:
    """Candidates worth timing first for the same shape in another dtype: `record`'s winner and its fastest
    other candidates that can be launched by name (cuBLASLt algorithms recorded by heuristic rank only cannot;
    torch.matmul is always timed anyway), at most `top` in all. The names hold no dtype: every family builds
    fp16 and bf16 kernels, and a cuBLASLt algorithm that does not exist for the other dtype fails its check
    like any candidate that cannot run."""
    timed = sorted((r["us"], name) for name, r in record.get("candidates", {}).items()
                   if r.get("us") is not None and ":" in name and name != "torch")
    names = [record["best"]] if record.get("best") not in (None, "torch") else []
    names += [name for _, name in timed if name not in names]
    return names[:top]


def splits_may_pay(s: Shape, max_outputs: int = 2048 * 2048) -> bool:
    """Whether splitting K may pay on a shape: a deep K over an output of at most `max_outputs` elements (by
    default about two waves of 128x128 tiles; beyond that every SM already has whole tiles to work on). The
    first search adds split-K variants of the heuristic's best on outputs of at most 1024x1024; the
    neighbourhood offers other split counts up to the default."""
    return s.k >= 1024 and s.m * s.n <= max_outputs


def candidates(s: Shape, dtype: torch.dtype, opt: TuneOptions, stats: dict | None = None,
               seeds: tuple[str, ...] = ()) -> tuple[list[str], list[str], set[str]]:
    """(all candidate names, the cuBLASLt autotune baseline's names, the names from the enumerated cuBLASLt
    space) for one shape; `seeds` are timed too (e.g. `seed_names` of another dtype's record); `stats` gets
    the size of that space and the checks it took."""
    names = ["torch", *seeds]
    lt_names: list[str] = []
    enumerated: set[str] = set()
    try:
        from kernelrl.gemm import cublaslt

        want = opt.lt_autotune + (opt.lt_extra if estimate_torch_us(s) < opt.lt_extra_below_us else 0)
        algos = cublaslt.heuristics(s.m, s.n, s.k, dtype, count=want)
        lt_names = [a.name for a in algos[:opt.lt_autotune]]
        names += [a.name for a in algos]
        if splits_may_pay(s, max_outputs=1024 * 1024):
            for a in algos[:opt.lt_splitk_top]:
                for sp in (2, 4, 8, 16):
                    v = cublaslt.with_splitk(a, s.m, s.n, s.k, sp, dtype)
                    if v is not None:
                        names.append(v.name)
        if opt.lt_enum_top > 0 and opt.lt_enum_above_us < estimate_torch_us(s) <= opt.lt_enum_below_us:
            space, checked = cublaslt.enumerate_space(s.m, s.n, s.k, dtype)
            if stats is not None:
                stats.update(lt_space=len(space), lt_checks=checked)
            known = {cublaslt.config_key(a.info) for a in algos}
            infos = [(c.algo.info, c.waves) for c in space]
            enumerated = {space[i].algo.name for i in cublaslt.pick(infos, known, opt.lt_enum_top)}
            names += sorted(enumerated)
    except (OSError, FileNotFoundError, RuntimeError) as e:
        print(f"cuBLASLt family unavailable for {s}: {e}")
    names += [c.name for c in triton_candidates(s, opt.triton_top)]
    dtype_name = next(name for name, dt in DTYPE_NAMES.items() if dt == dtype)
    for family_names in FAMILY_CANDIDATES.values():
        names += family_names(s, dtype_name, opt)
    seen, out = set(), []
    for n in names:
        if n not in seen:
            seen.add(n)
            out.append(n)
    return out, lt_names, enumerated


def tune_shape(s: Shape, dtype: torch.dtype, opt: TuneOptions = TuneOptions(), seeds: tuple[str, ...] = ()
               ) -> dict:
    """Check and time every candidate (and every one of `seeds`) for one shape; returns the JSON-able record."""
    t_start = time.perf_counter()
    stats: dict = {"seeds": list(seeds)} if seeds else {}
    names, lt_names, enumerated = candidates(s, dtype, opt, stats, tuple(seeds))
    lt_rank = {}  # cuBLASLt blob -> "cublaslt#<i>" (heuristic or split-K) or "cublaslt#<i>e" (enumerated)
    for name in names:
        if name.startswith("cublaslt:"):
            lt_rank[name] = f"cublaslt#{len(lt_rank)}" + ("e" if name in enumerated else "")
    inp = Inputs(s.m, s.n, s.k, dtype)
    calls = calls_for(estimate_torch_us(s))
    results, launchers = _measure(s, dtype, names, inp, calls, opt)
    lt_timed = [n for n in lt_names if "us" in results.get(n, {})]
    lt_best = min(lt_timed, key=lambda n: results[n]["us"], default=None)
    heur = lt_names[0] if lt_names and lt_names[0] in lt_timed else None
    final_us, best = _final(results, launchers, [lt_best, heur], inp, calls, opt)
    return {
        "m": s.m, "n": s.n, "k": s.k, "dtype": next(k for k, v in DTYPE_NAMES.items() if v == dtype),
        "torch_us": final_us["torch"],
        "cublaslt_heuristic": lt_names[0] if lt_names else None,
        "cublaslt_heuristic_us": final_us.get(lt_names[0]) if lt_names else None,
        "cublaslt_autotune": lt_best,
        "cublaslt_autotune_us": final_us.get(lt_best) if lt_best else None,
        "best": best, "best_label": short_name(best, lt_rank), "best_us": final_us[best],
        "torch_rel_err": results["torch"]["rel_err"], "best_rel_err": results[best]["rel_err"],
        "calls_per_graph": calls, "input_sets": len(inp), **stats,
        "candidates": {short_name(n, lt_rank): r for n, r in results.items()},
        "seconds": time.perf_counter() - t_start,
    }


def _measure(s: Shape, dtype: torch.dtype, names: list[str], inp: Inputs, calls: int, opt: TuneOptions
             ) -> tuple[dict[str, dict], dict[str, object]]:
    """Check every candidate on fresh inputs against a float64 reference, and time those that pass:
    ({name: record entry}, {name: launcher of a passing candidate}). `names` must include torch."""
    a, b = chk.random_inputs(s.m, s.n, s.k, dtype)
    ref = chk.reference(a, b)
    results: dict[str, dict] = {}
    launchers: dict[str, object] = {}
    for name in names:
        if compile_key(name) in BROKEN:
            results[name] = {"ok": False, "why": "did not compile for an earlier shape"}
            continue
        try:
            fn = make_launcher(name, s.m, s.n, s.k, dtype)
            res = chk.check(fn, a, b, ref)
            entry = {"rel_err": res.rel_err, "ok": res.ok, "why": res.reason}
            if res.ok:
                entry["us"] = time_graph(fn, inp, calls, opt.replays)
                launchers[name] = fn
        except Exception as e:  # a candidate that cannot build or run is recorded, never fatal
            entry = {"ok": False, "why": f"{type(e).__name__}: {str(e)[:300]}"}
            if compile_key(name) and not isinstance(e, torch.cuda.OutOfMemoryError):
                BROKEN.add(compile_key(name))  # a configuration that does not compile fails for every shape
            torch.cuda.synchronize()
        results[name] = entry
    if "us" not in results.get("torch", {}):
        raise RuntimeError(f"torch.matmul itself failed its check on {s}: {results.get('torch')}")
    return results, launchers


def as_dispatched(fn):
    """`fn(a, b, c)` called the way `kernelrl.gemm.matmul` calls it: a fresh output per call, as torch.matmul
    makes one (inside a graph the allocator hands the same block to each call, so where the output goes
    is the same for every implementation timed this way)."""
    def call(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        c = a.new_empty((a.shape[0], b.shape[1]))
        fn(a, b, c)
        return c

    return call


def _final(results: dict[str, dict], launchers: dict, baselines: list[str | None], inp: Inputs, calls: int,
           opt: TuneOptions, barred: frozenset[str] = frozenset()) -> tuple[dict[str, float], str]:
    """Time the fastest few candidates, torch.matmul and the baselines again, replays interleaved so that
    drift hits all alike, each called as the dispatch calls it (torch.matmul(a, b) itself, the others with a
    fresh output), the rounds spread over `opt.final_placements` sets of buffers as the benchmark spreads its
    own; (their times, the winner: torch unless a kernel beats it by the margin with medians and is measurably
    not slower: the 95% interval of torch's time over its own, paired within each round, starts at
    `opt.ci_floor` or above). Kernels in `barred` (a benchmark sent them back to torch.matmul on this shape) are
    timed only as baselines and never win."""
    timed = {n: r["us"] for n, r in results.items() if "us" in r and n not in barred}
    torch_err = results["torch"]["rel_err"]
    # a winner must also keep its error within twice torch's (the dispatch promise), not only under the bound
    rivals = sorted((n for n in timed if n != "torch" and results[n]["rel_err"] <= 2 * torch_err),
                    key=timed.get)[:opt.finalists]
    final_set = list(dict.fromkeys(["torch", *rivals, *(b for b in baselines if b)]))
    fns = {n: (torch.matmul if n == "torch" else as_dispatched(launchers[n]), False) for n in final_set}
    per_round: dict[str, list[float]] = {}
    final_us = time_graphs_placed(fns, inp, calls, opt.final_rounds, opt.final_placements, per_round=per_round)
    best = min((n for n in final_us if n != "torch" and n not in barred and results[n]["rel_err"] <= 2 * torch_err),
               key=final_us.get, default="torch")
    if best == "torch" or final_us[best] > final_us["torch"] * (1 - opt.margin):
        return final_us, "torch"
    _, low, _ = paired_ratio_ci(per_round["torch"], per_round[best])
    return final_us, best if low >= opt.ci_floor else "torch"


def augment_shape(record: dict, names: list[str], opt: TuneOptions = TuneOptions(), tag: str = "") -> dict:
    """A shape's record after searching `names` (e.g. a new family's candidates) as well: the new candidates,
    the record's winner, its baselines and its two fastest other relaunchable candidates are checked and
    timed, the fastest few are timed again, interleaved, and the winner is chosen afresh. The other
    candidates' results are kept as recorded."""
    t_start = time.perf_counter()
    s = Shape(record["m"], record["n"], record["k"])
    dtype = DTYPE_NAMES[record["dtype"]]
    inp = Inputs(s.m, s.n, s.k, dtype)
    calls = record.get("calls_per_graph") or calls_for(estimate_torch_us(s))
    barred = demoted_kernels(record)
    old = [n for n in dict.fromkeys(["torch", record["best"], record.get("cublaslt_heuristic"),
                                     record.get("cublaslt_autotune"), *_runners_up(record, 2)]) if n]
    new_names = [n for n in names if n not in old and n not in barred]
    results, launchers = _measure(s, dtype, old + new_names, inp, calls, opt)
    final_us, best = _final(results, launchers, old[1:], inp, calls, opt, barred)
    new = {n: results[n] for n in names if n in results}
    best_label = record.get("best_label", record["best"]) if best == record["best"] else best
    return {**record,
            "torch_us": final_us["torch"],
            "cublaslt_heuristic_us": final_us.get(record.get("cublaslt_heuristic")),
            "cublaslt_autotune_us": final_us.get(record.get("cublaslt_autotune")),
            "best": best, "best_label": best_label, "best_us": final_us[best],
            "torch_rel_err": results["torch"]["rel_err"], "best_rel_err": results[best]["rel_err"],
            "candidates": {**record["candidates"], **new},
            "augmented": sorted(set(record.get("augmented", [])) | ({tag} if tag else set())),
            "seconds": record.get("seconds", 0.0) + time.perf_counter() - t_start}


def demoted_kernels(record: dict) -> frozenset[str]:
    """The kernels a benchmark sent back to torch.matmul on the record's shape (`demote`, `demote_consistent`):
    a later search times them as baselines at most and never chooses them again."""
    last = record.get("demoted", {}).get("kernel")
    return frozenset(record.get("demoted_kernels", [])) | ({last} if last else frozenset())


def _runners_up(record: dict, n: int) -> list[str]:
    """The `n` fastest recorded candidates besides torch, the winner and the demoted kernels that can be launched
    again by name (cuBLASLt candidates are recorded under their rank only, except the winner and the
    baselines)."""
    barred = demoted_kernels(record)
    timed = [(r["us"], name) for name, r in record.get("candidates", {}).items()
             if "us" in r and ":" in name and name != record["best"] and name not in barred]
    return [name for _, name in sorted(timed)[:n]]


FAMILY_CANDIDATES = {
    "splitk": lambda s, dtype, opt: [c.name for c in splitk_candidates(s, opt.splitk_top)],
    "tiled": lambda s, dtype, opt: [c.name for c in tiled_candidates(s, opt.tiled_top)],
    "clusterk": lambda s, dtype, opt: [c.name for c in clusterk_candidates(s, opt.clusterk_top,
                                                                          opt.clusterk_grouped_top)
                                       + clusterk_fill_candidates(s, opt.clusterk_fill_top)],
    "clusterk-small": lambda s, dtype, opt: [c.name for c in clusterk_small_candidates(s, opt.clusterk_small_top)],
    "cutlass": lambda s, dtype, opt: _cutlass_names(dtype, lambda: cutlass_candidates(s, opt.cutlass_top)),
    "cutlass-epi": lambda s, dtype, opt: _cutlass_names(dtype, lambda: cutlass_epi_candidates(s, opt.cutlass_epi_top)),
}


def _cutlass_names(dtype: str, variants) -> list[str]:
    """The names of `variants()` (CUTLASS variants), or none for bf16 where the library lacks its bf16 kernels:
    those are built only on request (`kernelrl gemm build --bf16`)."""
    return [v.name for v in variants()] if dtype == "fp16" or _cutlass_has_bf16() else []


def _cutlass_has_bf16() -> bool:
    """Whether the CUTLASS library found holds the bf16 kernels (False where there is no library)."""
    from kernelrl.gemm.cutlass import built_for

    try:
        return built_for(torch.bfloat16)
    except (OSError, FileNotFoundError):
        return False


def augment(path: Path, family: str, shapes: list[Shape] | None = None, opt: TuneOptions = TuneOptions(),
            deadline_s: float = math.inf, log=print, dtype: str | None = None) -> int:
    """Search `family` on every recorded shape (of `dtype` only, if given) that has candidates of it the record
    has no result for (all of them the first time, the new ones after the family's space grew; cheapest first),
    appending each shape's new record as it is made (the last record of a shape is the one that counts, so a
    stopped run resumes) and leaving one record per shape at the end; returns the number of shapes left for a
    later run."""
    if family not in FAMILY_CANDIDATES:
        raise ValueError(f"unknown family to add {family!r}: one of {sorted(FAMILY_CANDIDATES)}")

    def new_names(s: Shape, record: dict) -> list[str] | None:
        names = [n for n in FAMILY_CANDIDATES[family](s, record["dtype"], opt)
                 if n not in record.get("candidates", {})]
        return names or None

    return _revisit(path, new_names, family, shapes, opt, deadline_s, log, dtype)


REDECIDED = "redecided"  # the tag of records whose winner was chosen again by `redecide` (the first time)


def redecide(path: Path, shapes: list[Shape] | None = None, opt: TuneOptions = TuneOptions(),
             deadline_s: float = math.inf, log=print, tag: str = REDECIDED) -> int:
    """Choose every recorded shape's winner again, as `augment` does but with no new candidates: torch, the
    recorded winner, the baselines and the two fastest other candidates are checked and timed afresh, as the
    dispatch calls them. For records decided before the final timing changed (a new `tag` for each change:
    records that carry it are not visited again). Resumes like `augment`; returns the number of shapes left."""
    def once(s: Shape, record: dict) -> list[str] | None:
        return None if tag in record.get("augmented", []) else []

    return _revisit(path, once, tag, shapes, opt, deadline_s, log)


def _timed(record: dict, matches) -> list[tuple[float, str]]:
    """(time, name) of a record's correct, timed candidates whose name `matches`, fastest first."""
    return sorted((r["us"], n) for n, r in record.get("candidates", {}).items()
                  if matches(n) and r.get("ok") and r.get("us"))


def retime(path: Path, pattern: str, within: float = 1.1, top: int = 2, shapes: list[Shape] | None = None,
           opt: TuneOptions = TuneOptions(), deadline_s: float = math.inf, log=print, dtype: str | None = None,
           tag: str = "") -> int:
    """After a kernel changed: on every recorded shape (of `dtype`, if given) whose fastest recorded candidate
    named by the regular expression `pattern` took at most `within` times the winner's time, time its `top`
    fastest such candidates again with the shape's finalists (as `augment` does with new ones) and choose the
    winner afresh. Records visited carry `tag` (default "retime:" + pattern) and are not visited again; resumes
    like `augment`; returns the number of shapes left."""
    matches = re.compile(pattern).fullmatch
    tag = tag or f"retime:{pattern}"

    def names(s: Shape, record: dict) -> list[str] | None:
        if tag in record.get("augmented", []):
            return None
        timed = _timed(record, matches)
        if not timed or timed[0][0] > within * record["best_us"]:
            return None
        return [n for _, n in timed[:top]]

    return _revisit(path, names, tag, shapes, opt, deadline_s, log, dtype)


def _close_variants(path: Path, tag: str, matches, variants, within: float, top: int, reference,
                    shapes: list[Shape] | None, opt: TuneOptions, deadline_s: float, log, dtype: str | None) -> int:
    """On every recorded shape (of `dtype`, if given): take its `top` fastest recorded candidates whose name
    `matches` and that took at most `within` times `reference(record)`, time the names `variants(name, shape)`
    gives for them (those not recorded yet) with the shape's finalists, and choose the winner afresh. Records
    visited carry `tag` and are not visited again; resumes like `augment`; returns the number of shapes left."""
    def names(s: Shape, record: dict) -> list[str] | None:
        if tag in record.get("augmented", []):
            return None
        timed = _timed(record, matches)[:top]
        if not timed:
            return None
        limit = within * reference(record)
        bases = [n for us, n in timed if us <= limit]
        new = [n for n in dict.fromkeys(v for b in bases for v in variants(b, s))
               if n not in record.get("candidates", {})]
        return new or None

    return _revisit(path, names, tag, shapes, opt, deadline_s, log, dtype)


CUTLASS_RUNTIME = "cutlass-runtime"  # the tag of records whose CUTLASS run-time neighbours were searched


def cutlass_runtime(path: Path, within: float = 1.03, top: int = 2, shapes: list[Shape] | None = None,
                    opt: TuneOptions = TuneOptions(), deadline_s: float = math.inf, log=print,
                    dtype: str | None = None, tag: str = CUTLASS_RUNTIME) -> int:
    """On every recorded shape (of `dtype`, if given) whose fastest recorded CUTLASS candidates took at most
    `within` times the winner's time: time the run-time neighbours (`space.cutlass_runtime_variants`: raster
    order and swizzle, nothing to compile) of its `top` fastest such candidates with the shape's finalists, and
    choose the winner afresh (`_close_variants`)."""
    return _close_variants(
        path, tag, lambda n: n.startswith("cutlass:"),
        lambda n, s: [v.name for v in cutlass_runtime_variants(CutlassVariant.parse(n), s)],
        within, top, lambda record: record["best_us"], shapes, opt, deadline_s, log, dtype)


TILED_FIXED = "tiled-fixed"  # the tag of records whose tiled kernels were searched with their sizes compiled in


def tiled_fixed(path: Path, within: float = 1.10, top: int = 2, shapes: list[Shape] | None = None,
                opt: TuneOptions = TuneOptions(), deadline_s: float = math.inf, log=print,
                dtype: str | None = None, tag: str = TILED_FIXED) -> int:
    """On every recorded shape (of `dtype`, if given) whose fastest recorded tiled candidates took at most
    `within` times its fastest recorded candidate (the same harness; the winner's final time is taken another
    way): time the fixed variants (`space.tiled_fixed_variant`: the shape's sizes compiled in, where the tiles
    cover it) of its `top` fastest such candidates with the shape's finalists, and choose the winner afresh
    (`_close_variants`)."""
    def fixed(name: str, s: Shape) -> list[str]:
        v = tiled_fixed_variant(TiledConfig.parse(name), s)
        return [v.name] if v else []

    return _close_variants(
        path, tag, lambda n: n.startswith("tiled:") and not n.endswith(FIXED_SUFFIX), fixed, within, top,
        lambda record: _timed(record, lambda n: True)[0][0], shapes, opt, deadline_s, log, dtype)


NEIGHBOURS = "lt-neighbours"  # the tag of records whose cuBLASLt neighbourhood `neighbourhood` searched


def listed_names(record: dict, heuristic: list[str], autotune: int = TuneOptions.lt_autotune) -> dict[str, str]:
    """{"cublaslt#<i>": full name} for the cuBLASLt candidates a record holds under their rank only: the ranks
    `tune_shape` gave them, the record's cuBLASLt seeds first, then `heuristic` (the heuristic's list for the
    shape, best first). Empty when that does not give back the record's own autotune baseline (the fastest
    of the list's first `autotune` as recorded): the list is then not the one the record was made with."""
    order = list(dict.fromkeys([n for n in record.get("seeds", []) if n.startswith("cublaslt:")] + heuristic))
    ranks = {f"cublaslt#{i}": name for i, name in enumerate(order)}
    baseline = set(heuristic[:autotune])
    timed = [(r["us"], n) for n, r in record.get("candidates", {}).items()
             if n in ranks and ranks[n] in baseline and r.get("us")]
    if not timed or ranks[min(timed)[1]] != record.get("cublaslt_autotune"):
        return {}
    return ranks


def neighbour_bases(record: dict, within: float = 1.05) -> list[str]:
    """The cuBLASLt configurations whose neighbourhood is worth searching on a recorded shape: the fastest of
    the heuristic's list (the autotune baseline) and the winner if it is a cuBLASLt configuration, when the
    fastest of them took at most `within` times the winner's time (elsewhere another family wins by more than
    a neighbour is likely to gain)."""
    bases = [n for n in dict.fromkeys([record.get("cublaslt_autotune"), record.get("best")])
             if n and n.startswith("cublaslt:")]
    times = [t for t in (record["best_us"] if n == record.get("best") else record.get("cublaslt_autotune_us")
                         for n in bases) if t]
    return bases if times and min(times) <= within * record["best_us"] else []


def close_listed(record: dict, listed: dict[str, str], close: float = 1.03, top: int = 1,
                 exclude: Collection[str] = ()) -> list[str]:
    """Up to `top` more of the heuristic's list (`listed`: `listed_names`) worth searching around, none of
    `exclude`: the fastest, where they took at most `close` times the time of the list's fastest."""
    timed = sorted((r["us"], listed[n]) for n, r in record.get("candidates", {}).items()
                   if n in listed and r.get("us"))
    return [n for us, n in timed if us <= close * timed[0][0] and n not in exclude][:top]


def neighbourhood(path: Path, within: float = 1.05, per_base: int = 12, shapes: list[Shape] | None = None,
                  opt: TuneOptions = TuneOptions(), deadline_s: float = math.inf, log=print, dtype: str | None = None,
                  tag: str = NEIGHBOURS, extra: int = 0, close: float = 1.03) -> int:
    """Search the cuBLASLt configurations one attribute away (`cublaslt.neighbours`) from each recorded shape's
    `neighbour_bases` (with `extra` > 0, also from `close_listed`), up to `per_base` of each (the attributes in
    turn, `cublaslt.interleave`; other tiles are those of the heuristic's list, other split counts only where
    `splits_may_pay`), leaving out the heuristic's own list (every one of it was timed): they are
    timed with the shape's finalists and the winner chosen afresh, as `augment` does. Records visited carry
    `tag`; resumes like `augment`; returns the number of shapes left."""
    from kernelrl.gemm import cublaslt

    def names(s: Shape, record: dict) -> list[str] | None:
        bases = [] if tag in record.get("augmented", []) else neighbour_bases(record, within)
        if not bases:
            return None
        dt = DTYPE_NAMES[record["dtype"]]
        heuristic = cublaslt.heuristics(s.m, s.n, s.k, dt, count=opt.lt_autotune + opt.lt_extra)
        listed = [a.info for a in heuristic]
        known = {cublaslt.config_key(info) for info in listed}
        if extra:
            bases += close_listed(record, listed_names(record, [a.name for a in heuristic], opt.lt_autotune), close,
                                  extra, bases)
        tiles = tuple(dict.fromkeys(info["tile"] for info in listed))  # the tiles the heuristic lists, best first
        out: list[str] = []
        for base in bases:
            algo = cublaslt.LtAlgo.from_name(base)
            base_info = algo.info
            splits = tuple(cublaslt.splits_near(base_info["splitk"])) if splits_may_pay(s) else ()
            near = [(a, a.info) for a in cublaslt.neighbours(algo, s.m, s.n, s.k, dt, tiles=tiles, splits=splits)]
            near = [(a, info) for a, info in near if cublaslt.config_key(info) not in known]
            out += [near[i][0].name for i in cublaslt.interleave([info for _, info in near], base_info, per_base)]
        out = [n for n in dict.fromkeys(out) if n not in record.get("candidates", {})]
        return out or None

    return _revisit(path, names, tag, shapes, opt, deadline_s, log, dtype)


def _revisit(path: Path, names_for, tag: str, shapes: list[Shape] | None, opt: TuneOptions, deadline_s: float,
             log, dtype: str | None = None) -> int:
    """`augment_shape` on every recorded shape (of `dtype` only, if given) for which `names_for(shape, record)`
    is not None (cheapest first), appending each new record as it is made and compacting the file at the end."""
    from kernelrl.gemm.table import read_records

    t0 = time.perf_counter()
    by_key = {(r["m"], r["n"], r["k"], r["dtype"]): r for r in read_records(path)}
    wanted = None if shapes is None else {(s.m, s.n, s.k) for s in shapes}
    todo = []
    for key, r in by_key.items():
        if (dtype is not None and key[3] != dtype) or (wanted is not None and key[:3] not in wanted):
            continue
        s = Shape(*key[:3])
        names = names_for(s, r)
        if names is not None:
            todo.append((estimate_torch_us(s), key, names))
    todo.sort()
    n = 0
    for est, key, names in todo:
        if time.perf_counter() - t0 + 3 * est * 80 / 1e6 + 2.0 > deadline_s:
            log(f"deadline reached: {len(todo) - n} shapes left ({tag})")
            break
        old = by_key[key]
        by_key[key] = new = augment_shape(old, names, opt, tag=tag)
        with Path(path).open("a") as f:
            f.write(json.dumps(new) + "\n")
        n += 1
        was = old.get("best_label", old["best"])
        log(f"{Shape(*key[:3])} {key[3]} {tag}: torch {new['torch_us']:.2f}us best {new['best_label']} "
            f"{new['best_us']:.2f}us ({new['torch_us'] / new['best_us']:.3f}x; was {was})")
    if n:
        _rewrite(path, by_key.values())
    return len(todo) - n


def against_linear(path: Path, shapes: list[Shape] | None = None, opt: TuneOptions = TuneOptions(),
                   deadline_s: float = math.inf, log=print, dtype: str | None = None) -> int:
    """For `gemm.patch`, which lays an `nn.Linear` weight out once as (k, n) storage or leaves it as it is: on
    every recorded shape (of `dtype` only, if given) not yet visited, time the dispatch on the relaid weight (the
    record's winner, torch.matmul where that is torch) against `F.linear` on the (n, k) weight, interleaved, the
    rounds spread over `opt.final_placements` sets of buffers; the record gains `linear_us`, `relaid_us` and
    `vs_linear`, F.linear's time over the relaid one's (median of the per-round ratios), with its 95% interval
    (`vs_linear_ci`). `Table.relaid_layers` decides each layer's layout from them. Cheapest first, each record
    appended as it is made (resumes); returns the number of shapes left."""
    import torch.nn.functional as F

    from kernelrl.gemm.table import read_records
    from kernelrl.gemm.timing import LINEAR

    t0 = time.perf_counter()
    by_key = {(r["m"], r["n"], r["k"], r["dtype"]): r for r in read_records(path)}
    wanted = None if shapes is None else {(s.m, s.n, s.k) for s in shapes}
    todo = sorted((estimate_torch_us(Shape(*key[:3])), key) for key, r in by_key.items()
                  if "vs_linear" not in r and (dtype is None or key[3] == dtype)
                  and (wanted is None or key[:3] in wanted))
    n = 0
    for est, key in todo:
        if time.perf_counter() - t0 + 2 * est * 60 / 1e6 + 1.0 > deadline_s:
            log(f"deadline reached: {len(todo) - n} shapes left (against F.linear)")
            break
        r, s, dt = by_key[key], Shape(*key[:3]), DTYPE_NAMES[key[3]]
        relaid = torch.matmul if r["best"] == "torch" else as_dispatched(make_launcher(r["best"], *key[:3], dt))
        fns = {"linear": (F.linear, LINEAR), "relaid": (relaid, False)}
        inp = Inputs(s.m, s.n, s.k, dt, weights=True)
        per_round: dict[str, list[float]] = {}
        us = time_graphs_placed(fns, inp, r.get("calls_per_graph") or calls_for(est), opt.final_rounds,
                                opt.final_placements, per_round=per_round)
        ratio, lo, hi = paired_ratio_ci(per_round["linear"], per_round["relaid"])
        by_key[key] = new = {**r, "linear_us": us["linear"], "relaid_us": us["relaid"], "vs_linear": ratio,
                             "vs_linear_ci": [lo, hi]}
        with Path(path).open("a") as f:
            f.write(json.dumps(new) + "\n")
        n += 1
        log(f"{s} {key[3]}: F.linear {us['linear']:.2f}us, {r['best_label'] if 'best_label' in r else r['best']} on "
            f"the relaid weight {us['relaid']:.2f}us ({ratio:.3f}x [{lo:.3f}, {hi:.3f}])")
    if n:
        _rewrite(path, by_key.values())
    return len(todo) - n


def _rewrite(path: Path, records) -> None:
    """Replace the records file with `records`, one per line, through a temporary file (never half written)."""
    tmp = Path(f"{path}.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    tmp.replace(path)


def _demote(path: Path, verdicts: list[tuple], log) -> int:
    """Send back to torch.matmul each recorded shape of `verdicts` ((m, n, k, dtype), kernel, evidence, what to
    log) whose record's winner is that kernel; the record keeps what was demoted and the evidence (`demoted`).
    Returns the number demoted."""
    from kernelrl.gemm.table import read_records

    by_key = {(r["m"], r["n"], r["k"], r["dtype"]): r for r in read_records(path)}
    n = 0
    for key, kernel, evidence, why in verdicts:
        rec = by_key.get(key)
        if rec is None or rec["best"] == "torch" or rec["best"] != kernel:
            continue
        by_key[key] = {**rec, "best": "torch", "best_label": "torch", "best_us": rec["torch_us"],
                       "best_rel_err": rec["torch_rel_err"],
                       "demoted": {"kernel": rec["best"], "label": rec.get("best_label", rec["best"]), **evidence},
                       "demoted_kernels": sorted(demoted_kernels(rec) | {rec["best"]})}
        n += 1
        log(f"{Shape(*key[:3])} {key[3]}: {rec.get('best_label', rec['best'])} demoted to torch ({why})")
    if n:
        _rewrite(path, by_key.values())
    return n


def _row_key(row: dict) -> tuple[int, int, int, str]:
    return int(row["m"]), int(row["n"]), int(row["k"]), row["dtype"]


def demote(path: Path, bench_rows: list[dict], log=print) -> int:
    """Send back to torch.matmul every recorded shape whose benchmark row (`bench.bench_shape`'s CSV row) ran
    the record's winner and found it measurably slower than torch.matmul: the whole 95% interval of torch's
    time over the kernel's, paired within each timing round, below 1. The tuner's final timing and the
    benchmark are separate runs, and a kernel that won one by a small margin can lose the other. The record
    keeps what was demoted and why (`demoted`); returns the number of shapes demoted. Benchmark afresh
    afterwards: the rows that decided a demotion must not also report its result."""
    verdicts = []
    for row in bench_rows:
        if row.get("speedup_ci_hi") in ("", None) or float(row["speedup_ci_hi"]) >= 1.0:
            continue
        interval = [float(row["speedup_ci_lo"]), float(row["speedup_ci_hi"])]
        verdicts.append((_row_key(row), row["kernel"], {"benchmark_speedup_interval": interval},
                         f"benchmark: {interval[0]:.3f}-{interval[1]:.3f}x"))
    return _demote(path, verdicts, log)


def demote_consistent(path: Path, runs: list[list[dict]], min_runs: int = 3, log=print) -> int:
    """Send back to torch.matmul every recorded shape whose winner was slower than torch.matmul (paired median
    speedup below 1) in every benchmark run of `runs` that ran it, and at least `min_runs` ran it. No single
    run need find it measurably slower (`demote`): a marginal winner that no run puts ahead of torch.matmul
    gains nothing and can fall below any threshold by noise alone. The record keeps the speedups
    (`benchmark_speedups`); returns the number of shapes demoted. Benchmark afresh afterwards."""
    seen: dict[tuple, dict[str, list[float]]] = {}
    for rows in runs:
        for row in rows:
            if row.get("speedup_paired") not in ("", None):
                seen.setdefault(_row_key(row), {}).setdefault(row["kernel"], []).append(float(row["speedup_paired"]))
    verdicts = [(key, kernel, {"benchmark_speedups": speedups},
                 f"{len(speedups)} benchmarks: " + ", ".join(f"{x:.3f}x" for x in speedups))
                for key, by_kernel in seen.items() for kernel, speedups in by_kernel.items()
                if kernel != "torch" and len(speedups) >= min_runs and max(speedups) < 1.0]
    return _demote(path, verdicts, log)


def done_keys(path: Path) -> set[tuple[int, int, int, str]]:
    """(m, n, k, dtype) of every record already in the results file."""
    keys = set()
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a stopped run
                keys.add((r["m"], r["n"], r["k"], r["dtype"]))
    return keys


def tune(shapes: list[Shape], out: Path, dtype: str = "fp16", opt: TuneOptions = TuneOptions(),
         deadline_s: float = math.inf, log=print, seeds: dict[tuple[int, int, int], list[str]] | None = None) -> int:
    """Tune every shape not yet in `out` (cheapest first) until done or `deadline_s` seconds pass; `seeds`
    gives shapes ((m, n, k)) candidates to time besides the search's own (see `seeds_from`)."""
    t0 = time.perf_counter()
    seeds = seeds or {}
    done = done_keys(out)
    todo = sorted((s for s in shapes if (s.m, s.n, s.k, dtype) not in done), key=estimate_torch_us)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("a") as f:
        for s in todo:
            if time.perf_counter() - t0 + 3 * estimate_torch_us(s) * 80 / 1e6 > deadline_s:
                log(f"deadline reached: {len(todo) - n} shapes left for the next run")
                break
            rec = tune_shape(s, DTYPE_NAMES[dtype], opt, tuple(seeds.get((s.m, s.n, s.k), ())))
            f.write(json.dumps(rec) + "\n")
            f.flush()
            n += 1
            log(f"{s} {dtype}: torch {rec['torch_us']:.2f}us best {rec['best']} {rec['best_us']:.2f}us "
                f"({rec['torch_us'] / rec['best_us']:.3f}x) [{rec['seconds']:.1f}s]")
    return n


def seeds_from(path: Path, dtype: str, top: int = SEEDS_PER_SHAPE) -> dict[tuple[int, int, int], list[str]]:
    """(m, n, k) -> `seed_names` of every shape's last record in `dtype` in the results file `path`: what a
    search in another dtype should time first. A shape's best kernels are much the same in fp16 and bf16 (the
    same tensor-core rate, the same bytes), so seeding a second dtype with the first one's finds its winners
    with a fraction of the search (`SEEDED`)."""
    from kernelrl.gemm.table import read_records

    if dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype {dtype!r} to seed from: one of {sorted(DTYPE_NAMES)}")
    return {(r["m"], r["n"], r["k"]): seed_names(r, top) for r in read_records(path) if r["dtype"] == dtype}


@contextlib.contextmanager
def plain_results(path: Path):
    """Yield a plain JSONL path to append to; a packed results file (`.gz`, `.xz`) is unpacked first and packed
    again after."""
    from kernelrl.gemm.table import PACKED, open_packed

    path = Path(path)
    if path.suffix not in PACKED:
        yield path
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / path.stem
        if path.is_file():
            with open_packed(path, "rb") as src, work.open("wb") as dst:
                shutil.copyfileobj(src, dst)
        try:
            yield work
        finally:
            if work.is_file():
                path.parent.mkdir(parents=True, exist_ok=True)
                with work.open("rb") as src, open_packed(path, "wb") as dst:
                    shutil.copyfileobj(src, dst)
