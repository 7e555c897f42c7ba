"""Evaluator overhead and repeatability: one candidate evaluated N times with a warm build cache.

Usage: python benchmarks/eval_overhead.py OUT_DIR [--device cuda] [--repeats 5]
Writes OUT_DIR/eval_overhead.json and OUT_DIR/eval_overhead.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.task import Candidate, Task

ROOT = Path(__file__).resolve().parents[1]
PAIRS = {
    "cuda": [("tests/data/eval_gpu/softmax_rows.py", "tests/data/eval_gpu/softmax_cuda.py"),
             ("tests/data/eval_gpu/softmax_rows.py", "tests/data/eval_gpu/softmax_triton.py")],
    "cpu": [("tests/data/eval/scale_add.py", "tests/data/eval/correct.py"),
            ("tests/data/eval/scale_add.py", "tests/data/eval/cpp_correct.py")],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    cache = tempfile.mkdtemp(prefix="kernelrl-eval-")  # empty: "cold" includes the build
    for ref_path, cand_path in PAIRS["cuda" if args.device.startswith("cuda") else "cpu"]:
        task, cand = Task.from_file(ROOT / ref_path), Candidate.from_file(ROOT / cand_path)
        with Evaluator(EvalConfig(device=args.device, cache_dir=cache)) as ev:
            t0 = time.monotonic()
            cold = ev.evaluate(task, cand)  # builds and caches; starts the reference worker
            cold_s = time.monotonic() - t0
            runs = []
            for _ in range(args.repeats):
                t0 = time.monotonic()
                v = ev.evaluate(task, cand)
                runs.append({"seconds": time.monotonic() - t0, "status": v.status, "speedup": v.speedup,
                             "speedup_method": v.speedup_method, "speedup_stderr": v.speedup_stderr,
                             "latency_speedup": v.latency_speedup, "graph_speedup": v.graph_speedup,
                             "timed_calls": v.candidate_timing.n if v.candidate_timing else None,
                             "ref_us": v.reference.median_us if v.reference else None,
                             "cand_us": v.candidate_timing.median_us if v.candidate_timing else None,
                             "phases": v.phases})
        rows.append({"task": task.name, "candidate": Path(cand_path).stem, "cold_status": cold.status,
                     "cold_phases": cold.phases,
                     "cold_seconds": cold_s, "warm_seconds_median": statistics.median(r["seconds"] for r in runs),
                     "warm_seconds_max": max(r["seconds"] for r in runs),
                     "methods": sorted({r["speedup_method"] or "" for r in runs}),
                     **spread(runs, "speedup"), **spread(runs, "latency_speedup"), "runs": runs})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "runs"}, indent=1))
        print("warm phases:", [r["phases"] for r in runs])
        write(args, rows)


def spread(runs: list[dict], key: str) -> dict:
    """`key`s of the runs, their median and spread ((max - min) / median)."""
    xs = [r[key] for r in runs if r[key]]
    med = statistics.median(xs) if xs else None
    return {f"{key}s": xs, f"{key}_median": med, f"{key}_spread": (max(xs) - min(xs)) / med if xs else None}


def write(args, rows):
    env = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU, {os.cpu_count()} cores",
           "torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}
    (args.out / "eval_overhead.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    lines = [f"# Evaluator overhead and repeatability ({env['device']}, torch {env['torch']}, {env['date']})", "",
             "Each candidate evaluated once cold (build + reference worker start), then "
             f"{args.repeats} times warm. Spread = (max − min) / median of the warm speedups.", "",
             "Speedup = the verdict's `speedup`, by its method (cuda_graph: device time, both programs replayed "
             "from CUDA graphs). Latency = eager calls between events on an idle device, launch work included.", "",
             "| task | candidate | cold s | warm s (median / max) | method | speedup median | spread | "
             "latency speedup | latency spread |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def pct(x):
        return f"{100 * x:.2f}%" if x is not None else "n/a"

    def x(v):
        return f"{v:.3f}" if v else "n/a"

    for r in rows:
        lines.append(f"| {r['task']} | {r['candidate']} | {r['cold_seconds']:.1f} | "
                     f"{r['warm_seconds_median']:.1f} / {r['warm_seconds_max']:.1f} | {', '.join(r['methods'])} | "
                     f"{x(r['speedup_median'])} | {pct(r['speedup_spread'])} | {x(r['latency_speedup_median'])} | "
                     f"{pct(r['latency_speedup_spread'])} |")
    (args.out / "eval_overhead.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
