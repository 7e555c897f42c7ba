"""Summarise `kernelrl bench` output folders: the rate by the wall clock, where the GPU stage went, how the verdicts read.

Usage: python benchmarks/bench_runs.py RUN [RUN ...] [--by-level] [--corpus CORPUS_JSON] [--out FILE]

Each RUN is a `kernelrl bench --out` folder: its `runs.jsonl` (one line per run or slice: wall time, tasks judged,
tasks without a verdict by status) and its `results.jsonl` (one verdict per task, with the seconds of each phase;
`results.jsonl.gz` or `.xz` in a folder kept under benchmarks/results/).
For each RUN (and each level of it, with `--by-level`) one row: tasks, the summed wall clock of its runs and the
rate it gives (tasks without a verdict named beside it), the devices' busy share (and the host's CPU busy share, where
the runs read it), the mean seconds a task of each GPU-stage phase
(correctness, alone: the wait for the device to itself before timing, timing, graphs, recheck: the re-measurement of
speedups above 3x, finish) and of the stage,
the rate the stage alone bounds, the range and median of the speedups of `ok` verdicts, and how many tasks ran 60 or more graph replays a side (the adaptive rounds went on
because the two sides' medians were not yet precise enough). Rows for a level leave the wall clock out: a run's
wall time is not split by level; so do the rows for each kind of candidate that `--corpus` gives (the corpus.json
benchmarks/real_corpus.py wrote: its candidates' files and kinds). Markdown to stdout, or to `--out`.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from kernelrl.bench.result import TaskResult  # noqa: E402
from kernelrl.bench.resume import PACKED, RESULTS_FILE, kept_results  # noqa: E402
from kernelrl.bench.runs import UNJUDGED, read_runs  # noqa: E402

PHASES = ("correctness", "alone", "timing", "graphs", "recheck", "finish")
LONG_GRAPH = 60  # replays a side: the adaptive rounds ran past their first pass


def load(run: Path) -> tuple[list[TaskResult], list[dict]]:
    """The results (`kept_results`: results.jsonl, or a kept results.jsonl.gz or .xz; the last line of a task wins, a
    line cut short is skipped) and the run lines of one bench output folder."""
    if not any((run / name).is_file() for name in (RESULTS_FILE, *(RESULTS_FILE + s for s in PACKED))):
        raise SystemExit(f"{run}: no {RESULTS_FILE} (not a `kernelrl bench --out` folder)")
    return list(kept_results(run).values()), read_runs(run)


def summarise(rows: list[TaskResult], runs: list[dict] | None) -> dict:
    """One summary row; `runs` None leaves the wall clock out."""
    phases = [r.verdict.phases for r in rows if r.verdict is not None and r.verdict.phases]
    out: dict = {"tasks": len(rows)}
    for p in PHASES:
        out[p] = statistics.fmean(ph.get(p, 0.0) for ph in phases) if phases else None
    stage = sum(ph.get(p, 0.0) for ph in phases for p in PHASES)
    out["stage"] = stage / len(phases) if phases else None
    out["stage_per_hour"] = 3600 * len(phases) / stage if stage > 0 else None
    ok = sorted(r.speedup for r in rows if r.correct and r.speedup is not None)
    out["speedups"] = (ok[0], statistics.median(ok), ok[-1]) if ok else None
    out["long_graphs"] = sum(1 for r in rows if r.verdict is not None and r.verdict.reference_graph is not None
                             and r.verdict.reference_graph.n >= LONG_GRAPH)
    if runs is not None:  # judged per hour as `kernelrl bench` counts them (`run_record`), over all runs together
        wall, judged = sum(r["wall_s"] for r in runs), sum(r["judged"] for r in runs)
        out["runs"], out["run_tasks"], out["wall_s"] = len(runs), judged, wall
        out["per_hour"] = 3600 * judged / wall if wall > 0 else None
        out["unjudged"] = {s: n for s in UNJUDGED if (n := sum(r.get(s, 0) for r in runs))}
        busy = [b for r in runs for b in (r.get("device_busy") or {}).values()]
        out["busy"] = (min(busy), max(busy)) if busy else None
        # the whole run's share: each slice's mean over its devices, weighted by its wall clock
        spans = [(statistics.fmean(d.values()), r["wall_s"]) for r in runs if (d := r.get("device_busy"))]
        span = sum(w for _, w in spans)
        out["busy_share"] = sum(b * w for b, w in spans) / span if span > 0 else None
        cpu = [(r["cpu_busy"], r["wall_s"]) for r in runs if r.get("cpu_busy") is not None]  # runs that read it
        out["cpu_busy"] = sum(b * w for b, w in cpu) / sum(w for _, w in cpu) if cpu else None
    return out


def kinds(corpus: Path) -> dict[str, str]:
    """Candidate file name -> its kind, from a corpus.json of benchmarks/real_corpus.py."""
    manifest = json.loads(corpus.read_text())
    return {c["file"]: c["kind"] for entries in manifest["tasks"].values() for c in entries}


def table(named: list[tuple[str, dict]]) -> str:
    def f(x, fmt):
        return "" if x is None else format(x, fmt)

    head = ("| run | tasks | wall clock | per hour | busy | " + " | ".join(PHASES)
            + " | GPU stage | bound per hour | speedups (min, median, max) | 60+ replays |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for name, s in named:
        wall = ""
        if "wall_s" in s:
            wall = f"{s['run_tasks']} judged in {s['wall_s']:.1f} s ({s['runs']} run{'' if s['runs'] == 1 else 's'})"
            if s["unjudged"]:
                wall += "; not judged: " + ", ".join(f"{n} {status}" for status, n in s["unjudged"].items())
        busy = "" if not s.get("busy") else (f"{s['busy'][0]:.0%}" if s["busy"][0] == s["busy"][1]
                                              else f"{s['busy_share']:.1%} ({s['busy'][0]:.0%}–{s['busy'][1]:.0%})")
        if s.get("cpu_busy") is not None:  # the host's cores, every process on them: near 100% when they bound it
            busy += f"; CPU {s['cpu_busy']:.0%}"
        sp = "" if not s["speedups"] else "{:.3f}, {:.3f}, {:.3f}".format(*s["speedups"])
        lines.append(f"| {name} | {s['tasks']} | {wall} | {f(s.get('per_hour'), '.0f')} | {busy} | "
                     + " | ".join(f(s[p], ".2f") for p in PHASES)
                     + f" | {f(s['stage'], '.2f')} | {f(s['stage_per_hour'], '.0f')} | {sp} | {s['long_graphs']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--by-level", action="store_true", help="a row for each level of each run as well")
    ap.add_argument("--corpus", type=Path, help="a corpus.json of benchmarks/real_corpus.py: a row for each kind too")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    named = []
    kind_of = kinds(args.corpus) if args.corpus else {}
    for run in args.runs:
        rows, runs = load(run)
        named.append((run.name, summarise(rows, runs)))
        if args.by_level:
            for level in sorted({r.level for r in rows}):
                named.append((f"{run.name} {level}", summarise([r for r in rows if r.level == level], None)))
        for kind in sorted(set(kind_of.values())):
            of_kind = [r for r in rows if kind_of.get(Path(r.candidate or "").name) == kind]
            named.append((f"{run.name} {kind}", summarise(of_kind, None)))
    text = table(named)
    if args.out:
        args.out.write_text(text)
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
