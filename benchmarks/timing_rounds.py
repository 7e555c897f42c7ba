"""How many timing rounds a speedup needs: the evaluator's stopping rules replayed on the round medians that two runs
of the same candidates kept, and how far the two runs' speedups then disagree (median, 90th percentile, max).

- Graph replay (`TimedRounds._graphs`): at least LEAST rounds, then more until the speedup's robust relative
  standard error is under `timing_precision`, `max_timing_rounds` at most; for each LEAST of `--least`.
- Eager latency where graph replay gives the speedup (`Evaluator._evaluate`): at least `latency_rounds`, then more
  until the latency speedup's error is under `latency_precision`, MOST at most; for each MOST of `--eager-most`.

Usage: python benchmarks/timing_rounds.py RUN_A RUN_B [--least 5,3,2] [--eager-most 15,5,3] [--out FILE.md]
RUN_A and RUN_B are `kernelrl bench --out` folders (results.jsonl, or results.jsonl.gz or .xz where kept); tasks `ok` in both
with a graph-replay speedup count. The speedup of the first k rounds is the ratio of the medians of their round
medians (a verdict's is the ratio of the medians of all its calls: the report's last line gives how far the two
readings of the full graph rounds are apart). Both runs must have measured at least as many rounds as a rule asks
for; one that asks for fewer takes their first rounds.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernelrl.evaluate import EvalConfig  # noqa: E402
from kernelrl.bench.resume import kept_results  # noqa: E402
from kernelrl.evaluate.timing import _relative_stderr  # noqa: E402
from speedup_spread import GOAL, emit, quantile  # noqa: E402

TIMINGS = {"graph": ("reference_graph", "candidate_graph"), "eager": ("reference", "candidate_timing")}


def rounds_of(results, timing: str = "graph") -> dict[str, tuple[list[float], list[float], float]]:
    """Task key -> (reference round medians, candidate round medians, the verdict's speedup) of the `timing`
    ("graph" or "eager") of each ok verdict whose speedup is graph replay."""
    out = {}
    for key, r in results.items():
        v = r.verdict
        if r.status != "ok" or v is None or v.speedup_method != "cuda_graph":
            continue
        ref_t, cand_t = (getattr(v, name) for name in TIMINGS[timing])
        if ref_t and cand_t and ref_t.round_medians_us and len(ref_t.round_medians_us) == len(cand_t.round_medians_us):
            out[key] = (list(ref_t.round_medians_us), list(cand_t.round_medians_us), v.speedup)
    return out


def stop(ref: list[float], cand: list[float], least: int, precision: float, most: int | None = None) -> int:
    """The rounds the stopping rule takes on these rounds (all it may, up to the rounds kept, where it would ask for
    more)."""
    last = min(most or len(ref), len(ref))
    for k in range(min(least, last), last + 1):
        if _relative_stderr(ref[:k], cand[:k]) <= precision:
            return k
    return last


def speedup(ref: list[float], cand: list[float], k: int) -> float:
    return statistics.median(ref[:k]) / statistics.median(cand[:k])


def compare(a: dict, b: dict, least: int, precision: float, most: int | None = None) -> dict:
    spreads, taken = [], []
    for key in sorted(set(a) & set(b)):
        (ra, ca, _), (rb, cb, _) = a[key], b[key]
        ka, kb = stop(ra, ca, least, precision, most), stop(rb, cb, least, precision, most)
        taken += [ka, kb]
        spreads.append(abs(speedup(rb, cb, kb) / speedup(ra, ca, ka) - 1))
    return {"tasks": len(spreads), "rounds": statistics.mean(taken), "median": statistics.median(spreads),
            "p90": quantile(spreads, 0.9), "max": max(spreads)}


def table(first: str, rows: list[tuple[int, dict]]) -> str:
    lines = [f"| {first} | tasks | rounds taken (mean) | median spread | p90 spread | max | goal (0.5% / 2%) |",
             "|---|---|---|---|---|---|---|"]
    for n, c in rows:
        met = "met" if c["median"] <= GOAL["median"] and c["p90"] <= GOAL["p90"] else "not met"
        lines.append(f"| {n} | {c['tasks']} | {c['rounds']:.2f} | {c['median']:.2%} | {c['p90']:.2%} | "
                     f"{c['max']:.2%} | {met} |")
    return "\n".join(lines)


def _numbers(ap, flag: str, text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ap.error(f"{flag} {text!r}: give whole numbers, comma-separated")
    if not values or min(values) < 2:
        ap.error(f"{flag}: at least 2 rounds (one round has no error)")
    return values


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--least", default="5,3,2", help="graph replay: the least rounds to try, comma-separated")
    ap.add_argument("--eager-most", default="15,5,3", help="eager latency: the most rounds to try, comma-separated")
    ap.add_argument("--out", type=Path, help="write the report here (markdown)")
    args = ap.parse_args(argv)
    for run in (args.run_a, args.run_b):
        if not run.is_dir():
            ap.error(f"{run} is not a bench output folder")
    leasts, mosts = _numbers(ap, "--least", args.least), _numbers(ap, "--eager-most", args.eager_most)
    kept_a, kept_b = kept_results(args.run_a), kept_results(args.run_b)
    a, b = rounds_of(kept_a), rounds_of(kept_b)
    if not set(a) & set(b):
        print("no task is ok with a graph-replay speedup in both runs", file=sys.stderr)
        return 1
    cfg = EvalConfig()
    graph = table("least rounds", [(n, compare(a, b, n, cfg.timing_precision)) for n in leasts])
    ea, eb = rounds_of(kept_a, "eager"), rounds_of(kept_b, "eager")
    eager = table("most rounds", [(n, compare(ea, eb, cfg.latency_rounds, cfg.latency_precision, n)) for n in mosts])
    apart = [abs(speedup(r, c, len(r)) / s - 1) for r, c, s in a.values()]
    text = (f"Timing rounds replayed on `{args.run_a}` and `{args.run_b}` (|B/A - 1| per task).\n\n"
            f"Graph replay, the verdict's speedup (stopping at a relative error of {cfg.timing_precision:.1%}):\n\n"
            f"{graph}\n\nEager latency where graph replay gives the speedup (at least {cfg.latency_rounds} rounds, "
            f"stopping at a relative error of {cfg.latency_precision:.0%}):\n\n{eager}\n\n"
            f"The ratio of graph round medians against the verdict's speedup over all of `{args.run_a}`'s rounds: "
            f"{statistics.median(apart):.3%} apart at the median, {max(apart):.3%} at most.\n")
    return emit(text, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
