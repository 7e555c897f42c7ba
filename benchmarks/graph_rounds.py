"""How many CUDA-graph replay rounds a speedup needs: the evaluator's stopping rule (`TimedRounds._graphs`: at least
LEAST rounds, then more until the speedup's robust relative standard error is under `timing_precision`, 15 at most)
replayed on the round medians that two runs of the same candidates kept, for each LEAST asked. Per LEAST: the rounds
a verdict would take on average, and how far the two runs' speedups then disagree (median, 90th percentile, max).

Usage: python benchmarks/graph_rounds.py RUN_A RUN_B [--least 5,3,2] [--out FILE.md]
RUN_A and RUN_B are `kernelrl bench --out` folders (results.jsonl, or results.jsonl.gz where kept); tasks `ok` in both
with a graph-replay speedup count. The speedup of the first k rounds is the ratio of the medians of their round
medians (a verdict's is the ratio of the medians of all its replays: the table's last line gives how far the two
readings of the full rounds are apart).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernelrl.bench.resume import kept_results  # noqa: E402
from kernelrl.evaluate import EvalConfig  # noqa: E402
from kernelrl.evaluate.timing import _relative_stderr  # noqa: E402
from speedup_spread import GOAL, emit, quantile  # noqa: E402


def rounds_of(results) -> dict[str, tuple[list[float], list[float], float]]:
    """Task key -> (reference round medians, candidate round medians, the verdict's speedup), graph-replayed ok ones."""
    out = {}
    for key, r in results.items():
        v = r.verdict
        if r.status != "ok" or v is None or v.speedup_method != "cuda_graph" or not v.reference_graph \
                or not v.candidate_graph:
            continue
        ref, cand = v.reference_graph.round_medians_us, v.candidate_graph.round_medians_us
        if ref and cand and len(ref) == len(cand):
            out[key] = (list(ref), list(cand), v.speedup)
    return out


def stop(ref: list[float], cand: list[float], least: int, precision: float) -> int:
    """The rounds the stopping rule takes on these rounds (all of them where it would ask for more)."""
    for k in range(min(least, len(ref)), len(ref) + 1):
        if _relative_stderr(ref[:k], cand[:k]) <= precision:
            return k
    return len(ref)


def speedup(ref: list[float], cand: list[float], k: int) -> float:
    return statistics.median(ref[:k]) / statistics.median(cand[:k])


def compare(a: dict, b: dict, least: int, precision: float) -> dict:
    spreads, taken = [], []
    for key in sorted(set(a) & set(b)):
        (ra, ca, _), (rb, cb, _) = a[key], b[key]
        ka, kb = stop(ra, ca, least, precision), stop(rb, cb, least, precision)
        taken += [ka, kb]
        spreads.append(abs(speedup(rb, cb, kb) / speedup(ra, ca, ka) - 1))
    return {"tasks": len(spreads), "rounds": statistics.mean(taken), "median": statistics.median(spreads),
            "p90": quantile(spreads, 0.9), "max": max(spreads)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--least", default="5,3,2", help="the least rounds to try, comma-separated")
    ap.add_argument("--out", type=Path, help="write the table here (markdown)")
    args = ap.parse_args(argv)
    for run in (args.run_a, args.run_b):
        if not run.is_dir():
            ap.error(f"{run} is not a bench output folder")
    try:
        leasts = [int(x) for x in args.least.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--least {args.least!r}: give whole numbers, comma-separated")
    if not leasts or min(leasts) < 2:
        ap.error("--least: at least 2 rounds (one round has no error)")
    a, b = rounds_of(kept_results(args.run_a)), rounds_of(kept_results(args.run_b))
    if not set(a) & set(b):
        print("no task is ok with a graph-replay speedup in both runs", file=sys.stderr)
        return 1
    precision = EvalConfig().timing_precision
    rows = ["| least rounds | tasks | rounds taken (mean) | median spread | p90 spread | max | goal (0.5% / 2%) |",
            "|---|---|---|---|---|---|---|"]
    for least in leasts:
        c = compare(a, b, least, precision)
        met = "met" if c["median"] <= GOAL["median"] and c["p90"] <= GOAL["p90"] else "not met"
        rows.append(f"| {least} | {c['tasks']} | {c['rounds']:.2f} | {c['median']:.2%} | {c['p90']:.2%} | "
                    f"{c['max']:.2%} | {met} |")
    apart = [abs(speedup(r, c, len(r)) / s - 1) for r, c, s in a.values()]
    text = (f"Graph-replay rounds replayed on `{args.run_a}` and `{args.run_b}` (stopping at a relative error of "
            f"{precision:.1%}; |B/A - 1| per task):\n\n" + "\n".join(rows) + "\n\n"
            f"The ratio of round medians against the verdict's speedup over all of `{args.run_a}`'s rounds: "
            f"{statistics.median(apart):.3%} apart at the median, {max(apart):.3%} at most.\n")
    return emit(text, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
