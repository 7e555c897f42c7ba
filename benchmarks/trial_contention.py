"""How much the correctness trials slow down beside other work on the host's cores or on the GPU.

Usage: python benchmarks/trial_contention.py KERNELBENCH_DIR OUT_DIR [--tasks level1/19_ReLU.py,...] [--repeats 2]
       [--loads none,cpu,gpu,gil,cpu+gpu] [--corpus CORPUS_DIR [--kinds plain,triton] [--per-task 2]]

Each task's identity candidate (with `--corpus`, a folder benchmarks/real_corpus.py wrote: up to `--per-task` of the
task's candidates there, of `--kinds`, each its own row) is judged `--repeats` times under each load (one
evaluator: the reference worker is started once per task), and every phase of its verdict recorded:
- none: nothing else runs;
- cpu: a busy loop on every core builds use (`placement.build_cpus`), as compilers and workers starting up keep
  them in a bench run;
- gpu: another process keeps the GPU busy with back-to-back matrix products, as a candidate's first call beside the
  GPU stage does while it autotunes or runs;
- gil: a thread of the evaluator's own process runs Python 20 ms in every 100 (the global interpreter lock held a
  fifth of the time), as the CPU lanes' threads do beside the GPU stage's in `kernelrl bench`;
- cpu+gpu: both of the first.
Writes OUT_DIR/trial_contention.json (every verdict's phases, after each load) and prints the median correctness
phase of each task (or candidate) under each load, with its ratio to `none`. With `--corpus` and `--loads none`, the
candidates a bench run judged, alone on the device: what their trials take without the run around them.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.evaluate.placement import build_cpus
from kernelrl.task import Candidate, Task, identity_candidate

DEFAULT = ("level2/82_Conv2d_Tanh_Scaling_BiasAdd_Max.py,level1/82_conv_depthwise_2D_square_input_square_kernel.py,"
           "level1/64_conv_transposed_1D.py,level2/28_BMM_InstanceNorm_Sum_ResidualAdd_Multiply.py")

SPIN = "import os, sys\nos.sched_setaffinity(0, [int(sys.argv[1])])\nwhile True:\n    pass\n"
GPU = ("import torch\nx = torch.randn(4096, 4096, device='cuda')\nwhile True:\n"
       "    for _ in range(20):\n        y = x @ x\n    torch.cuda.synchronize()\n")


class GilLoad:
    """A thread of this process that holds the interpreter lock `busy_s` of every `busy_s + idle_s` seconds."""

    def __init__(self, busy_s: float = 0.02, idle_s: float = 0.08):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(busy_s, idle_s), daemon=True)
        self._thread.start()

    def _run(self, busy_s: float, idle_s: float) -> None:
        while not self._stop.is_set():
            end = time.perf_counter() + busy_s
            while time.perf_counter() < end:
                pass
            time.sleep(idle_s)

    def kill(self) -> None:
        self._stop.set()

    def wait(self) -> None:
        self._thread.join()


def start_load(load: str) -> list:
    procs = []
    if "gil" in load.split("+"):
        procs.append(GilLoad())
    if "cpu" in load.split("+"):
        for core in build_cpus(torch.device("cuda")) or []:
            procs.append(subprocess.Popen([sys.executable, "-c", SPIN, str(core)]))
    if "gpu" in load.split("+"):
        procs.append(subprocess.Popen([sys.executable, "-c", GPU]))
        time.sleep(5.0)  # its CUDA context up and its products running
    return procs


def stop_load(procs: list) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def candidates(rel: str, task: Task, corpus: Path | None, kinds: set[str], per_task: int) -> list:
    """(row name, Candidate) for a task: its identity candidate, or up to `per_task` of its candidates of `kinds` in a
    benchmarks/real_corpus.py folder (`corpus.json` names each one's file and kind)."""
    if corpus is None:
        return [(rel, identity_candidate(task))]
    manifest = json.loads((corpus / "corpus.json").read_text())
    chosen = [c for c in manifest["tasks"].get(rel.removesuffix(".py"), []) if c["kind"] in kinds][:per_task]
    return [(f"{rel} {c['kind']} {c['file']}", Candidate.from_file(corpus / c["file"])) for c in chosen]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernelbench", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--tasks", default=DEFAULT)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--loads", default="none,cpu,gpu,cpu+gpu")
    ap.add_argument("--corpus", type=Path, help="a benchmarks/real_corpus.py folder: its candidates, not identity")
    ap.add_argument("--kinds", default="plain,compile,cuda_graph,triton", help="with --corpus: the kinds judged")
    ap.add_argument("--per-task", type=int, default=2, help="with --corpus: at most this many candidates a task")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tasks = []  # (row name, task, candidate)
    for rel in args.tasks.split(","):
        path = args.kernelbench / rel
        task = Task.from_source(path.read_text(), name=path.stem, level=path.parent.name, path=str(path))
        for name, cand in candidates(rel, task, args.corpus, set(args.kinds.split(",")), args.per_task):
            tasks.append((name, task, cand))
    rows = []
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "build_cores": build_cpus(torch.device("cuda"))}
    with Evaluator(EvalConfig(device="cuda")) as evaluator:
        for rel, task, cand in tasks:  # each reference started, each candidate built, before any load
            evaluator.evaluate(task, cand)
        for load in args.loads.split(","):
            procs = start_load(load)
            try:
                for rel, task, cand in tasks:
                    for r in range(args.repeats):
                        v = evaluator.evaluate(task, cand)
                        rows.append({"load": load, "task": rel, "repeat": r, "status": v.status, "phases": v.phases})
                        print(load, rel, v.status, v.phases, flush=True)
            finally:
                stop_load(procs)
            (args.out / "trial_contention.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    loads = args.loads.split(",")
    print("| task | " + " | ".join(f"correctness, {lo} (s)" for lo in loads) + " |")
    print("| --- |" + " ---: |" * len(loads))
    for rel, _, _ in tasks:
        med = {lo: statistics.median(r["phases"].get("correctness", 0.0) for r in rows
                                     if r["task"] == rel and r["load"] == lo) for lo in loads}
        base = med[loads[0]] or 1e-9
        print(f"| {rel} | " + " | ".join(f"{med[lo]:.3f} ({med[lo] / base:.2f}x)" for lo in loads) + " |")


if __name__ == "__main__":
    main()
