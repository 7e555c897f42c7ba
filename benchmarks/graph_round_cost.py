"""What a graph-replay timing round costs beside the replays it times, on KernelBench's gigabyte tasks.

Usage: python benchmarks/graph_round_cost.py KERNELBENCH_DIR OUT_DIR [--tasks level1/19_ReLU.py,...] [--rounds 5]

The task's reference is built in this process by the harness that timing workers run (`Harness`, the reference
role: trusted code) and timed by `op_graph` rounds as the evaluator asks for them (`_round_for` of its eager call
time), twice: with the captured graph kept between rounds (a worker's limit on what it keeps, `_idle_bytes`,
lifted) and captured again each round (the limit as it is; a graph and its buffers above it are dropped after
every round). Per round: the request's wall time, the replays' own device time, and the capture's share. Writes
OUT_DIR/graph_round_cost.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.evaluate.harness import Harness

DEFAULT = "level1/19_ReLU.py,level1/23_Softmax.py,level1/37_FrobeniusNorm_.py,level1/2_Standard_matrix_multiplication_.py"


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def rounds(h: Harness, shape: dict, n: int, keep: bool) -> dict:
    """`n` graph rounds of one seed; `keep`: the captured graph kept between rounds whatever its size."""
    limit = h._idle_bytes
    h._idle_bytes = math.inf if keep else limit
    captures, walls, device = [], [], []
    capture = h._capture

    def timed_capture(*a):
        sync()
        t0 = time.perf_counter()
        got = capture(*a)
        sync()
        captures.append(time.perf_counter() - t0)
        return got

    h._capture = timed_capture
    seed = 1234
    try:
        for r in range(n):
            op = {"op": "graph", "seed": seed, "sample_seed": r, "perm_seed": 1000 * r, "flush": True, **shape}
            sync()
            t0 = time.perf_counter()
            reply, _ = h.handle(op)
            if "times_us" not in reply:
                raise SystemExit(f"no graph replay: {reply}")
            walls.append(time.perf_counter() - t0)
            device.append(sum(reply["times_us"]) / 1e6)
        return {"kept": keep, "wall_s": walls, "device_s": device, "capture_s": captures,
                "held_bytes": sum(c.nbytes for c in h._graphs_held.values())}
    finally:
        h._capture = capture
        h._idle_bytes = limit
        h.op_rest({})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernelbench")
    ap.add_argument("out")
    ap.add_argument("--tasks", default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timer = Evaluator.__new__(Evaluator)
    timer.config = EvalConfig(device=args.device)
    results = []
    for name in args.tasks.split(","):
        source = (Path(args.kernelbench) / name).read_text()
        with tempfile.TemporaryDirectory() as scratch:
            h = Harness({"role": "reference", "device": args.device, "task_source": source, "seed": 7,
                         "fixed_inputs": []}, {}, scratch)
            xs = h.base_inputs(1234)
            with torch.no_grad():
                for _ in range(3):
                    h.model(*xs)
                sync()
                t0 = time.perf_counter()
                h.model(*xs)
                sync()
            call_us = (time.perf_counter() - t0) * 1e6
            shape = timer._round_for(call_us)
            in_bytes = sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))
            del xs
            h.op_rest({})
            row = {"task": name, "call_us": call_us, "input_bytes": in_bytes, "idle_bytes": h._idle_bytes,
                   **shape, "recaptured": rounds(h, shape, args.rounds, keep=False),
                   "kept": rounds(h, shape, args.rounds, keep=True)}
        results.append(row)
        a, b = row["recaptured"], row["kept"]
        print(f"{name}: call {call_us / 1e3:.2f} ms, inputs {in_bytes / 2**30:.1f} GiB, {shape['calls']} calls "
              f"+ {shape['warmup']} warm-up a round | a round captured again: {statistics.median(a['wall_s']):.3f} s "
              f"(capture {statistics.median(a['capture_s']):.3f} s) | kept: {statistics.median(b['wall_s'][1:]):.3f} s"
              f" | replays timed: {statistics.median(b['device_s']):.3f} s | held {b['held_bytes'] / 2**30:.1f} GiB",
              flush=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    (out / "graph_round_cost.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
