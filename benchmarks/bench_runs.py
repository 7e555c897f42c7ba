"""Summarise `kernelrl bench` output folders: the rate by the wall clock, where the GPU stage went, how the verdicts read.

Usage: python benchmarks/bench_runs.py RUN [RUN ...] [--by-level] [--out FILE]

Each RUN is a `kernelrl bench --out` folder: its `runs.jsonl` (one line per run or slice: wall time, tasks judged)
and its `results.jsonl` (one verdict per task, with the seconds of each phase). For each RUN (and each level of it,
with `--by-level`) one row: tasks, the summed wall clock of its runs and the rate it gives, the mean seconds a task
of each GPU-stage phase (correctness, timing, graphs, finish) and of the stage, the rate the stage alone bounds,
the range and median of the speedups of `ok` verdicts, and how many tasks ran 60 or more graph replays a side (the
adaptive rounds went on because the two sides' medians were not yet precise enough). Rows for a level leave the
wall clock out: a run's wall time is not split by level. Markdown to stdout, or to `--out`.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

PHASES = ("correctness", "timing", "graphs", "finish")
LONG_GRAPH = 60  # replays a side: the adaptive rounds ran past their first pass


def _lines(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load(run: Path) -> tuple[list[dict], list[dict]]:
    """The verdict rows (each `result` of results.jsonl) and the run lines of one bench output folder."""
    if not (run / "results.jsonl").is_file():
        raise SystemExit(f"{run}: no results.jsonl (not a `kernelrl bench --out` folder)")
    return [r["result"] for r in _lines(run / "results.jsonl")], _lines(run / "runs.jsonl")


def summarise(rows: list[dict], runs: list[dict] | None) -> dict:
    """One summary row; `runs` None leaves the wall clock out."""
    judged = [r for r in rows if (r.get("verdict") or {}).get("phases")]
    out: dict = {"tasks": len(rows)}
    for p in PHASES:
        out[p] = statistics.fmean(r["verdict"]["phases"].get(p, 0.0) for r in judged) if judged else None
    stage = sum(sum(r["verdict"]["phases"].get(p, 0.0) for p in PHASES) for r in judged)
    out["stage"] = stage / len(judged) if judged else None
    out["stage_per_hour"] = 3600 * len(judged) / stage if stage > 0 else None
    ok = sorted(r["speedup"] for r in rows if r.get("status") == "ok" and r.get("speedup") is not None)
    out["speedups"] = (ok[0], statistics.median(ok), ok[-1]) if ok else None
    out["long_graphs"] = sum(1 for r in judged if ((r["verdict"].get("reference_graph") or {}).get("n") or 0)
                             >= LONG_GRAPH)
    if runs is not None:
        wall, tasks = sum(r["wall_s"] for r in runs), sum(r["tasks"] for r in runs)
        out["runs"], out["run_tasks"], out["wall_s"] = len(runs), tasks, wall
        out["per_hour"] = 3600 * tasks / wall if wall > 0 else None
        busy = [b for r in runs for b in (r.get("device_busy") or {}).values()]
        out["busy"] = (min(busy), max(busy)) if busy else None
    return out


def table(named: list[tuple[str, dict]]) -> str:
    def f(x, fmt):
        return "" if x is None else format(x, fmt)

    head = ("| run | tasks | wall clock | per hour | busy | " + " | ".join(PHASES)
            + " | GPU stage | bound per hour | speedups (min, median, max) | 60+ replays |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for name, s in named:
        wall = ""
        if "wall_s" in s:
            wall = f"{s['run_tasks']} tasks in {s['wall_s']:.1f} s ({s['runs']} run{'' if s['runs'] == 1 else 's'})"
        busy = "" if not s.get("busy") else (f"{s['busy'][0]:.0%}" if s["busy"][0] == s["busy"][1]
                                              else f"{s['busy'][0]:.0%}–{s['busy'][1]:.0%}")
        sp = "" if not s["speedups"] else "{:.3f}, {:.3f}, {:.3f}".format(*s["speedups"])
        lines.append(f"| {name} | {s['tasks']} | {wall} | {f(s.get('per_hour'), '.0f')} | {busy} | "
                     + " | ".join(f(s[p], ".2f") for p in PHASES)
                     + f" | {f(s['stage'], '.2f')} | {f(s['stage_per_hour'], '.0f')} | {sp} | {s['long_graphs']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--by-level", action="store_true", help="a row for each level of each run as well")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    named = []
    for run in args.runs:
        rows, runs = load(run)
        named.append((run.name, summarise(rows, runs)))
        if args.by_level:
            for level in sorted({r.get("level", "") for r in rows}):
                named.append((f"{run.name} {level}", summarise([r for r in rows if r.get("level", "") == level],
                                                                None)))
    text = table(named)
    if args.out:
        args.out.write_text(text)
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
