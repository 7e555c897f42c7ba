"""The suite on the GPU machine: every reference timed eager and torch.compile'd, every honest candidate judged.

Usage: python benchmarks/suite_device.py OUT_DIR [--device cuda:0,cuda:1] [--time-budget-s 480]
                                          [--no-compile] [--only NAME,...] [--suite suite]
Tasks with a candidate go first; the work is spread over every listed GPU (default: all of them). Writes
OUT_DIR/results.jsonl as it goes (one TaskResult per line, so a run cut short keeps what it measured), then
summary.json, results.csv, report.md and speedups.png (the bench report over the eager baseline) and
references.md / references.csv (eager vs torch.compile per reference). Tasks not started within the time
budget are listed in OUT_DIR/not_reached.txt.
"""
from __future__ import annotations

import argparse
import csv
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

from kernelrl.bench.baselines import BaselineCache, device_name
from kernelrl.bench.report import software, summary_dict, write_report
from kernelrl.bench.runner import BenchConfig, run_suite
from kernelrl.bench.suite import discover
from kernelrl.evaluate import EvalConfig

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--suite", type=Path, default=ROOT / "suite")
    ap.add_argument("--candidates", type=Path, default=None, help="default: SUITE/candidates")
    ap.add_argument("--device", default="", help="comma-separated devices (default: every CUDA device)")
    ap.add_argument("--time-budget-s", type=float, default=480.0, help="start no new task after this long (s)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile timings of the references")
    ap.add_argument("--only", default="", help="comma-separated task names (e.g. level1/softmax_fp32)")
    ap.add_argument("--device-name", default="", help="with --report-from: the GPU's name, when no summary.json")
    ap.add_argument("--report-from", type=Path, nargs="*", default=None,
                    help="no run: rebuild OUT_DIR's reports from these results.jsonl files (later lines win)")
    args = ap.parse_args()
    if args.report_from is not None:
        return report_from(args)

    start = time.monotonic()
    devices = tuple(d for d in args.device.split(",") if d) or tuple(
        f"cuda:{i}" for i in range(torch.cuda.device_count())) or ("cpu",)
    suite = discover(args.suite, args.candidates or args.suite / "candidates")
    tasks = [t for t in suite.tasks if not args.only or t.name in args.only.split(",")]
    tasks.sort(key=lambda t: t.candidate_path is None)  # honest candidates first
    suite = replace(suite, tasks=tuple(tasks))

    args.out.mkdir(parents=True, exist_ok=True)
    eval_cfg = EvalConfig()
    config = BenchConfig(devices=devices, baseline="eager", eval=eval_cfg, time_references=True,
                         compiled_references=not args.no_compile)
    cache = BaselineCache(eval_cfg.cache_path / "bench" / "baselines.sqlite")
    log = (args.out / "results.jsonl").open("w")
    (args.out / "run.json").write_text(json.dumps({"device_names": list(dict.fromkeys(map(device_name, devices))),
                                                   "software": software()}))

    def record(r):
        log.write(json.dumps(r.to_dict()) + "\n")
        log.flush()
        print(f"{time.monotonic() - start:6.0f}s {r.device:7s} {r.task:45s} {r.status:15s} "
              f"{'' if r.speedup is None else f'{r.speedup:.2f}x'} ref {r.reference_us or 0:.0f} us, "
              f"compiled {r.reference_compiled_us or 0:.0f} us", flush=True)

    print(f"{len(tasks)} tasks on {', '.join(devices)}; budget {args.time_budget_s:.0f} s", flush=True)
    results = run_suite(suite, config, cache, on_result=record, deadline=start + args.time_budget_s)
    log.close()

    summary = summary_dict(results, "eager", devices=devices, suite=str(args.suite),
                           device_names=tuple(dict.fromkeys(device_name(d) for d in devices)))
    write_report(results, summary, args.out)
    write_references(results, args.out)
    done = {r.task for r in results}
    missed = [t.name for t in tasks if t.name not in done]
    (args.out / "not_reached.txt").write_text("".join(f"{n}\n" for n in missed))
    print(json.dumps({k: summary[k] for k in ("total", "correct", "fast_p", "geomean_speedup", "counts")}))
    print(f"done in {time.monotonic() - start:.0f} s; {len(missed)} tasks not reached")
    if missed:
        print("continue with: --only " + ",".join(missed))


def report_from(args) -> None:
    """Rebuild the reports from the results.jsonl of one or more runs (a run cut short keeps its lines)."""
    from kernelrl.bench.result import TaskResult

    by_task = {}
    for path in args.report_from:
        for line in path.read_text().splitlines():
            if line.strip():
                r = TaskResult.from_dict(json.loads(line))
                by_task[r.task] = r
    results = sorted(by_task.values(), key=lambda r: r.task)
    devices = tuple(sorted({r.device for r in results}))
    args.out.mkdir(parents=True, exist_ok=True)
    names, software = [], None  # as the runs recorded them in summary.json, when they got that far
    for path in args.report_from:
        meta = path.parent / "run.json"
        if meta.exists():
            run = json.loads(meta.read_text())
            names += run.get("device_names", [])
            software = run.get("software", software)
    summary = summary_dict(results, "eager", devices=devices, suite=str(args.suite),
                           device_names=tuple(dict.fromkeys(names or [args.device_name])))
    if software:
        summary["software"] = software
    write_report(results, summary, args.out)
    write_references(results, args.out)
    with (args.out / "results.jsonl").open("w") as f:
        f.writelines(json.dumps(r.to_dict()) + "\n" for r in results)
    print(json.dumps({k: summary[k] for k in ("total", "correct", "fast_p", "geomean_speedup", "counts")}))


def write_references(results, out: Path) -> None:
    """Eager vs torch.compile per reference, as CSV and markdown (times in ms)."""
    rows = []
    for r in results:
        eager, comp = r.reference_us, r.reference_compiled_us
        rows.append({"task": r.task, "level": r.level, "eager_ms": eager / 1e3 if eager else None,
                     "compiled_ms": comp / 1e3 if comp else None,
                     "compile_speedup": eager / comp if eager and comp else None, "method": r.method,
                     "status": r.status, "description": r.description})
    with (out / "references.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["task"])
        w.writeheader()
        w.writerows(rows)
    lines = ["# Suite references: eager vs torch.compile", "",
             "Median time per call of each reference (L2 flushed), by the method verdicts compare on: "
             "cuda_graph is device time, the program replayed from a CUDA graph; cuda_events is the latency of "
             "an eager call. torch.compile speedup = eager / compiled.", "",
             "| task | eager (ms) | torch.compile (ms) | compile speedup | method | description |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['task']} | {_f(row['eager_ms'], 3)} | {_f(row['compiled_ms'], 3)} | "
                     f"{_f(row['compile_speedup'], 2, '×')} | {row['method'] or ''} | {row['description']} |")
    (out / "references.md").write_text("\n".join(lines) + "\n")


def _f(v, digits: int, unit: str = "") -> str:
    return "" if v is None else f"{v:.{digits}f}{unit}"


if __name__ == "__main__":
    main()
