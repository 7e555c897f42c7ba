"""KernelBench identity calibration: every reference judged against itself, so every speedup should be 1.

Usage:
  python benchmarks/kernelbench_identity.py write SUITE CANDS [--level 1 --level 2 ...]
      writes one identity candidate per reference (the reference with `Model` renamed `ModelNew`) into CANDS,
      named as KernelBench's generation runs name theirs: level_1_problem_12_sample_0_kernel.py
  kernelrl bench SUITE --candidates CANDS --out RUN --device cuda [--level N] [--resume] [--time-limit S]
      judges them (resumable: --resume skips the tasks RUN/results.jsonl already holds)
  python benchmarks/kernelbench_identity.py report RUN OUT [--low 0.97 --high 1.03]
      writes OUT/calibration.md and OUT/calibration.csv: per task its status, speedup, standard error and
      method; the share of tasks inside [low, high] (goal: >= 95% of all tasks, every task ok); and the
      tasks whose programs could not be captured in CUDA graphs, with the reason.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import statistics
import sys
from pathlib import Path

from kernelrl.bench.resume import RESULTS_FILE, kept_results
from kernelrl.bench.result import TaskResult
from kernelrl.bench.suite import SuiteError, discover, level_sort_key, problem_id, select_levels
from kernelrl.task import identity_candidate

GOAL = 0.95  # share of all tasks whose identity speedup lies inside the band


def write(suite_dir: Path, out: Path, levels: list[str]) -> list[Path]:
    """One identity candidate per reference of `suite_dir` (levels as named), in KernelBench's flat layout."""
    suite = discover(suite_dir)
    suite = select_levels(suite, levels) if levels else suite
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for st in suite.tasks:
        pid = problem_id(Path(st.rel_path).name)
        if pid is None or not st.level.startswith("level"):
            print(f"not a KernelBench problem file, no candidate: {st.rel_path}", file=sys.stderr)
            continue
        path = out / f"level_{st.level[len('level'):]}_problem_{pid}_sample_0_kernel.py"
        path.write_text(identity_candidate(st.task).source)
        written.append(path)
    return written


def graph_failure(r: TaskResult) -> str:
    """Why a task's speedup is not device time from CUDA graphs ('' when it is)."""
    v = r.verdict
    if v is None or v.speedup_method == "cuda_graph":
        return ""
    why = [f.message for f in v.flags if f.check == "cuda_graph"]
    return why[0] if why else f"speedup measured by {v.speedup_method or 'nothing'}"


def rows(results: list[TaskResult], low: float, high: float) -> list[dict]:
    """One calibration row per task."""
    out = []
    for r in results:
        v = r.verdict
        stderr = v.speedup_stderr if v is not None else None
        out.append({"task": r.task, "level": r.level, "status": r.status,
                    "speedup": r.eager_speedup, "stderr": stderr, "method": r.method or "",
                    "in_band": r.status == "ok" and r.eager_speedup is not None and low <= r.eager_speedup <= high,
                    "not_captured": graph_failure(r) if r.status == "ok" else "",
                    "message": "" if r.status == "ok" else (r.message or "").replace("\n", " ")[:300]})
    return out


def calibration_md(table: list[dict], low: float, high: float, header: dict) -> str:
    """The calibration report as markdown."""
    n = len(table)
    ok = sum(r["status"] == "ok" for r in table)
    inside = sum(r["in_band"] for r in table)
    share = inside / n if n else 0.0
    speedups = sorted(r["speedup"] for r in table if r["status"] == "ok" and r["speedup"] is not None)
    lines = ["# KernelBench identity calibration", "",
             f"Every reference judged against itself (`Model` renamed `ModelNew`) by `kernelrl bench` on "
             f"{header.get('devices') or '?'} (torch {header.get('torch', '?')}, CUDA {header.get('cuda', '?')}), "
             f"precision policy {header.get('policy', 'strict')}. A speedup should be 1: the spread around 1 is "
             "what the measurement itself adds.", "",
             "| | |", "|---|---|",
             f"| tasks judged | {n} |",
             f"| ok | {ok} ({'every task' if ok == n else f'{n - ok} not ok'}) |",
             f"| speedup inside [{low:g}, {high:g}] | {inside} of {n} = {100 * share:.1f}% "
             f"(goal >= {100 * GOAL:.0f}%: {'met' if share >= GOAL and ok == n else 'not met'}) |"]
    if speedups:
        q = statistics.quantiles(speedups, n=20) if len(speedups) > 1 else [speedups[0]] * 19
        lines += [f"| speedup median · 5th–95th percentile · min–max | {statistics.median(speedups):.3f} · "
                  f"{q[0]:.3f}–{q[-1]:.3f} · {speedups[0]:.3f}–{speedups[-1]:.3f} |"]
    methods: dict[str, int] = {}
    for r in table:
        if r["status"] == "ok":
            methods[r["method"]] = methods.get(r["method"], 0) + 1
    lines += [f"| speedup method | {', '.join(f'{m} {c}' for m, c in sorted(methods.items())) or '—'} |", ""]
    lines += ["## Per level", "", "| level | tasks | ok | inside the band | share |", "|---|---|---|---|---|"]
    for level in sorted({r["level"] for r in table}):
        part = [r for r in table if r["level"] == level]
        k = sum(r["in_band"] for r in part)
        lines.append(f"| {level} | {len(part)} | {sum(r['status'] == 'ok' for r in part)} | {k} | "
                     f"{100 * k / len(part):.1f}% |")
    lines.append("")
    failed = [r for r in table if r["status"] != "ok"]
    if failed:
        lines += ["## Not ok", "", "| task | status | reason |", "|---|---|---|"]
        lines += [f"| {r['task']} | {r['status']} | {_cell(r['message'])} |" for r in failed]
        lines.append("")
    outside = [r for r in table if r["status"] == "ok" and not r["in_band"]]
    if outside:
        lines += ["## Outside the band", "", "| task | speedup | ± stderr | method |", "|---|---|---|---|"]
        lines += [f"| {r['task']} | {_x(r['speedup'])} | {_pct(r['stderr'])} | {r['method']} |" for r in outside]
        lines.append("")
    uncaptured = [r for r in table if r["not_captured"]]
    lines += ["## Not captured in CUDA graphs", ""]
    if uncaptured:
        lines += ["These tasks' speedups are per-call latency (eager calls), not device time.", "",
                  "| task | reason |", "|---|---|"]
        lines += [f"| {r['task']} | {_cell(r['not_captured'])} |" for r in uncaptured]
    else:
        lines += ["None: every ok task was timed by CUDA-graph replay."]
    lines += ["", "## Every task", "", "| task | status | speedup | ± stderr | method | inside |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {r['task']} | {r['status']} | {_x(r['speedup'])} | {_pct(r['stderr'])} | {r['method']} | "
              f"{'yes' if r['in_band'] else 'no'} |" for r in table]
    return "\n".join(lines) + "\n"


def report(run: Path, out: Path, low: float, high: float) -> Path:
    """calibration.md and calibration.csv under `out` from a bench run folder's results."""
    results = _results(run)
    if not results:
        raise SystemExit(f"error: {run}: no results ({RESULTS_FILE} or summary.json); run kernelrl bench with "
                         f"--out {run} first")
    header = {}
    s = _summary(run)
    if s is not None:
        sw = s.get("software", {})
        header = {"devices": ", ".join(s.get("device_names") or s.get("devices") or []), "torch": sw.get("torch"),
                  "cuda": sw.get("cuda"), "policy": s.get("policy", "strict")}
    table = rows(results, low, high)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "calibration.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(table[0]))
        w.writeheader()
        w.writerows(table)
    md = out / "calibration.md"
    md.write_text(calibration_md(table, low, high, header))
    return md


def _results(run: Path) -> list[TaskResult]:
    """Every task's latest result: from results.jsonl (resumed runs add up there; results.jsonl.gz in a kept
    folder), else summary.json."""
    done = kept_results(run)
    if done:
        latest = {r.task: r for r in done.values()}
        return sorted(latest.values(), key=lambda r: (level_sort_key(r.level), problem_id(r.task.split("/")[-1] + ".py")
                                                      or 0, r.task))
    s = _summary(run)
    return [TaskResult.from_dict(t) for t in s.get("tasks", [])] if s is not None else []


def _summary(run: Path) -> dict | None:
    """The run's summary.json (summary.json.gz in a kept folder), or None."""
    plain, packed = run / "summary.json", run / "summary.json.gz"
    if plain.is_file():
        return json.loads(plain.read_text())
    if packed.is_file():
        return json.loads(gzip.decompress(packed.read_bytes()))
    return None


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:200]


def _x(v) -> str:
    return "" if v is None else f"{v:.3f}"


def _pct(v) -> str:
    return "" if v is None else f"{100 * v:.2f}%"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write identity candidates in KernelBench's layout")
    w.add_argument("suite", type=Path)
    w.add_argument("cands", type=Path)
    w.add_argument("--level", action="append", default=[], help="only this level (repeat for several)")
    r = sub.add_parser("report", help="the calibration table of a bench run's results")
    r.add_argument("run", type=Path, help="the folder given to kernelrl bench --out")
    r.add_argument("out", type=Path, help="where calibration.md and calibration.csv go")
    r.add_argument("--low", type=float, default=0.97)
    r.add_argument("--high", type=float, default=1.03)
    args = ap.parse_args(argv)
    if args.cmd == "write":
        try:
            written = write(args.suite, args.cands, args.level)
        except SuiteError as e:
            raise SystemExit(f"error: {e}")
        print(f"wrote {len(written)} identity candidates to {args.cands}")
    else:
        print(f"wrote {report(args.run, args.out, args.low, args.high)}")


if __name__ == "__main__":
    main()
