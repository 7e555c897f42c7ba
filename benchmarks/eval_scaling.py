"""Scaling over the GPUs of one host through Ray: the same candidates judged by a RayScheduler on 1 GPU, then on 2
(or as `--gpus` says); candidates per hour on each and the ratio to one GPU (goal: >= 1.9x).

Usage: python benchmarks/eval_scaling.py KERNELBENCH_DIR OUT_DIR [--gpus 1,2] [--limit 96] [--budget-s 200]
                                         [--lookahead 2] [--seed 0] [--corpus CORPUS_DIR]
KERNELBENCH_DIR holds level1/ and level2/ (on the GPU machine: .kb/suite). The candidates are identity candidates
of `--limit` level-1 and level-2 tasks, or with `--corpus` the real-like corpus that benchmarks/real_corpus.py wrote
there for KERNELBENCH_DIR (its corpus.json): every candidate of `--limit` tasks of any level. Each run starts its own
local Ray instance with that many GPUs and an empty build cache, submits every job at once, and counts the verdicts
that arrive within `--budget-s`: the rate over the whole budget (actor start-up included) and the steady rate
from the first verdict on, which the ratio uses. Writes OUT_DIR/eval_scaling.json and OUT_DIR/eval_scaling.md.
Needs Ray (`pip install "kernelrl[ray]"`; benchmarks/fetch_wheels.sh fetches its wheels).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

import ray
import torch

from eval_throughput import jobs, judge  # the same identity candidates as the one-GPU benchmark
from kernelrl.evaluate import EvalConfig
from kernelrl.scale.ray_backend import RayScheduler
from kernelrl.task import Candidate, Task


def corpus_jobs(root: Path, corpus: Path, limit: int, seed: int) -> list[tuple[Task, Candidate]]:
    """Every candidate of `limit` tasks (drawn with `seed`) of a real-like corpus (benchmarks/real_corpus.py)."""
    tasks = json.loads((corpus / "corpus.json").read_text())["tasks"]
    out = []
    for key in sorted(random.Random(seed).sample(sorted(tasks), min(limit, len(tasks)))):
        task = Task.from_file(root / f"{key}.py")
        out += [(task, Candidate.from_file(corpus / c["file"])) for c in tasks[key]]
    return out


def run(work, gpus: int, budget_s: float, lookahead: int) -> dict:
    """Every job submitted to a RayScheduler on a fresh local Ray instance with `gpus` GPUs; verdicts timed."""
    ray.init(num_gpus=gpus, include_dashboard=False, log_to_driver=False)
    t0 = time.monotonic()
    config = EvalConfig(device="cuda", cache_dir=tempfile.mkdtemp(prefix=f"kernelrl-scaling-{gpus}-"))
    sched = RayScheduler(config, lookahead=lookahead)
    finished: dict[int, float] = {}
    futures = []
    for i, (task, cand) in enumerate(work):
        fut = sched.submit(task, cand)
        fut.add_done_callback(lambda _f, i=i: finished.setdefault(i, time.monotonic() - t0))
        futures.append(fut)
    deadline = t0 + budget_s
    while time.monotonic() < deadline and len(finished) < len(futures):
        time.sleep(0.5)
    stats = sched.stats()
    sched.close()
    ray.shutdown()
    in_budget = sorted(i for i, t in finished.items() if t <= budget_s)
    rows = [dict(judge(futures[i].result, *work[i]), finished_s=finished[i]) for i in in_budget]
    times = sorted(r["finished_s"] for r in rows)
    window = (times[-1] if len(times) == len(work) else budget_s) - times[0] if len(times) > 1 else 0.0
    return {"gpus": gpus, "judged": len(rows), "jobs": len(work), "budget_s": budget_s,
            "first_verdict_s": times[0] if times else None,
            "per_hour": 3600.0 * len(rows) / budget_s,
            "steady_per_hour": 3600.0 * (len(rows) - 1) / window if window > 0 else 0.0,
            "statuses": {s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})},
            "device_busy": stats.device_busy, "retried": stats.retried, "rows": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernelbench", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--gpus", default="1,2", help="GPU counts to run on, in order")
    ap.add_argument("--limit", type=int, default=96, help="tasks drawn")
    ap.add_argument("--corpus", type=Path, help="a real-like corpus folder (benchmarks/real_corpus.py) instead of "
                                                "identity candidates")
    ap.add_argument("--budget-s", type=float, default=200.0, help="verdicts counted until this long, per run (s)")
    ap.add_argument("--lookahead", type=int, default=2, help="jobs prepared ahead of each GPU")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not (args.kernelbench / "level1").is_dir():
        ap.error(f"{args.kernelbench} has no level1/ folder: pass the KernelBench checkout (../shared/kernelbench)")
    counts = [int(g) for g in args.gpus.split(",")]
    if max(counts) > torch.cuda.device_count():
        ap.error(f"--gpus asks for {max(counts)} GPUs; this host has {torch.cuda.device_count()}")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.corpus is not None and not (args.corpus / "corpus.json").is_file():
        ap.error(f"{args.corpus} has no corpus.json: write it with benchmarks/real_corpus.py")
    work = corpus_jobs(args.kernelbench, args.corpus, args.limit, args.seed) if args.corpus \
        else jobs(args.kernelbench, "python", args.limit, args.seed)
    runs = []
    for n in counts:
        runs.append(run(work, n, args.budget_s, args.lookahead))
        print(json.dumps({k: v for k, v in runs[-1].items() if k != "rows"}), flush=True)
        write(args, runs)


def write(args, runs):
    base = runs[0]["steady_per_hour"] / runs[0]["gpus"] if runs[0]["steady_per_hour"] else None
    env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "ray": ray.__version__,
           "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "budget_s": args.budget_s,
           "limit": args.limit, "lookahead": args.lookahead, "seed": args.seed,
           "corpus": "real-like" if args.corpus else "identity"}
    (args.out / "eval_scaling.json").write_text(json.dumps({"env": env, "runs": runs}, indent=1))
    lines = [f"# Evaluation scaling through Ray ({env['device']}, {env['cpus']} CPUs, torch {env['torch']}, "
             f"Ray {env['ray']}, {env['date']})", "",
             f"`benchmarks/eval_scaling.py`, "
             + (f"the real-like corpus's candidates of {args.limit} KernelBench tasks" if args.corpus
                else f"{args.limit} KernelBench level 1-2 identity candidates")
             + f" ({runs[0]['jobs']} jobs, seed {args.seed}), lookahead {args.lookahead}, verdicts counted for "
             f"{args.budget_s:g} s per run, each run "
             "on a fresh local Ray instance with an empty build cache. Steady rate: from the first verdict to the "
             "last one within the budget. Ratio: steady rate over the first run's per GPU.", "",
             "| GPUs | judged | first verdict s | candidates / hour | steady / hour | ratio | busy per GPU | "
             "statuses |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        ratio = f"{r['steady_per_hour'] / base:.2f}x" if base else "n/a"
        busy = ", ".join(f"{100 * b:.0f}%" for b in r["device_busy"].values())
        st = ", ".join(f"{k} {v}" for k, v in r["statuses"].items())
        lines.append(f"| {r['gpus']} | {r['judged']}/{r['jobs']} | {r['first_verdict_s'] or 0:.0f} | "
                     f"{r['per_hour']:.0f} | {r['steady_per_hour']:.0f} | {ratio} | {busy} | {st} |")
    (args.out / "eval_scaling.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
