"""How far two runs of the same candidates disagree on their speedups: per task the ratio of the second run's speedup
to the first's, summarised by measuring method (the verdict's speedup: graph replay or eager per-call latency) and
for each of the two measurements a verdict carries (graph replay, eager latency).

Usage: python benchmarks/speedup_spread.py RUN_A RUN_B [--out FILE.md]
RUN_A and RUN_B are `kernelrl bench --out` folders (results.jsonl, or results.jsonl.gz or .xz where kept). Only tasks `ok`
in both runs count. The spread of one task is |speedup_B / speedup_A - 1|; the table gives its median and 90th
percentile, the goal being at most 0.5% and 2%.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from kernelrl.bench.resume import kept_results  # noqa: E402

GOAL = {"median": 0.005, "p90": 0.02}


def spreads(a: dict, b: dict) -> dict[str, list[float]]:
    """|B/A - 1| per task ok in both runs, grouped: by the verdict's method ("speedup: <method>"), and for the
    graph-replay and eager-latency speedups every verdict with both runs' values."""
    out: dict[str, list[float]] = {}
    for key in sorted(set(a) & set(b)):
        ra, rb = a[key], b[key]
        if ra.status != "ok" or rb.status != "ok" or ra.verdict is None or rb.verdict is None:
            continue
        va, vb = ra.verdict, rb.verdict
        pairs = {"speedup (all)": (va.speedup, vb.speedup),
                 f"speedup: {va.speedup_method}": (va.speedup, vb.speedup) if va.speedup_method == vb.speedup_method
                 else (None, None),
                 "graph replay": (va.graph_speedup, vb.graph_speedup),
                 "eager latency": (va.latency_speedup, vb.latency_speedup)}
        for name, (x, y) in pairs.items():
            if x and y and math.isfinite(x) and math.isfinite(y):
                out.setdefault(name, []).append(abs(y / x - 1))
    return out


def quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def table(groups: dict[str, list[float]]) -> str:
    rows = ["| measurement | tasks | median spread | p90 spread | max | goal (0.5% / 2%) |", "|---|---|---|---|---|---|"]
    for name, vals in groups.items():
        med, p90 = statistics.median(vals), quantile(vals, 0.9)
        met = "met" if med <= GOAL["median"] and p90 <= GOAL["p90"] else "not met"
        rows.append(f"| {name} | {len(vals)} | {med:.2%} | {p90:.2%} | {max(vals):.2%} | {met} |")
    return "\n".join(rows)


def emit(text: str, out: Path | None) -> int:
    """Print a report, and write it to `out` where one is named; the exit status."""
    print(text)
    if out:
        out.write_text(text)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--out", type=Path, help="write the table here (markdown)")
    args = ap.parse_args(argv)
    for run in (args.run_a, args.run_b):
        if not run.is_dir():
            ap.error(f"{run} is not a bench output folder")
    groups = spreads(kept_results(args.run_a), kept_results(args.run_b))
    if not groups:
        print("no task is ok in both runs", file=sys.stderr)
        return 1
    text = f"Speedup spread between `{args.run_a}` and `{args.run_b}` (|B/A - 1| per task ok in both):\n\n" \
           + table(groups) + "\n"
    return emit(text, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
