"""What one correctness trial and one timed call cost on large KernelBench tasks, piece by piece, in one process.

Usage: python benchmarks/eval_phases.py KERNELBENCH_DIR OUT_DIR [--tasks level1/99_TripletMarginLoss.py,...]

For each task: drawing its inputs on the host and moving them to the device (as KernelBench does) against drawing
them on the device (as the harness does); one reference call; fresh inputs for a timed call, drawn again on the
device against the affine permutation of the drawn ones; and the trip of the outputs to the parent: device to host, then the worker-to-parent message
inline through a socket against through the spill file. Medians of `--repeats`. Writes OUT_DIR/eval_phases.json
and OUT_DIR/eval_phases.md.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

import torch

from kernelrl.evaluate.harness import Harness
from kernelrl.sandbox import wire

DEFAULT = ("level1/99_TripletMarginLoss.py,level2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling.py,"
           "level1/23_Softmax.py")


def _timed(fn, repeats: int, sync) -> float:
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _send(message: bytes) -> None:
    a, b = socket.socketpair()
    ca, cb = Connection(a.detach()), Connection(b.detach())
    got = []
    reader = threading.Thread(target=lambda: got.append(cb.recv_bytes()))
    reader.start()
    ca.send_bytes(message)
    reader.join()
    ca.close()
    cb.close()
    wire.decode(got[0])


def profile(path: Path, device: str, repeats: int) -> dict:
    source = path.read_text()
    if device == "cuda":
        device = "cuda:0"
    h = Harness({"role": "reference", "device": device, "seed": 1, "task_source": source}, {}, str(path.parent))
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    row = {"task": f"{path.parent.name}/{path.stem}"}

    def host_inputs():
        h._seed(5)
        return [x.to(device) if isinstance(x, torch.Tensor) else x for x in h.task.get_inputs()]

    row["inputs_host_s"] = _timed(host_inputs, repeats, sync)
    row["inputs_device_s"] = _timed(lambda: h.inputs(5), repeats, sync)
    xs = h.inputs(5)
    row["input_bytes"] = sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))
    with torch.no_grad():
        row["call_s"] = _timed(lambda: h.model(*xs), repeats, sync)
        outs, _ = h._outputs(h.model(*xs))
    row["output_bytes"] = sum(o.numel() * o.element_size() for o in outs)
    row["fresh_inputs_s"] = _timed(lambda: h.fresh(xs, 9), repeats, sync)  # a new draw on the device
    h.drawn_on_device = False
    row["permuted_inputs_s"] = _timed(lambda: h.fresh(xs, 9), repeats, sync)  # the affine permutation instead
    host = {}

    def to_host():
        host.update({f"out{i}": o.detach().to("cpu", copy=True) for i, o in enumerate(outs)})

    row["outputs_to_host_s"] = _timed(to_host, repeats, sync)
    row["message_inline_s"] = _timed(lambda: _send(wire.encode({}, host)), repeats, sync)
    spill = os.memfd_create("eval-phases")
    try:
        def spilled():
            wire.decode(wire.encode({}, host, spill), spill)
            os.ftruncate(spill, 0)
        row["message_spilled_s"] = _timed(spilled, repeats, sync)
    finally:
        os.close(spill)
    del xs, outs, host
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernelbench", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--tasks", default=DEFAULT)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
           "torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}
    rows = []
    for name in args.tasks.split(","):
        rows.append(profile(args.kernelbench / name, args.device, args.repeats))
        print(json.dumps(rows[-1]), flush=True)
        (args.out / "eval_phases.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    cols = ["inputs_host_s", "inputs_device_s", "call_s", "fresh_inputs_s", "permuted_inputs_s", "outputs_to_host_s",
            "message_inline_s", "message_spilled_s"]
    lines = [f"# One trial's pieces on large KernelBench tasks ({env['device']}, torch {env['torch']}, {env['date']})",
             "", f"`benchmarks/eval_phases.py`, medians of {args.repeats}, seconds.", "",
             "| task | input GB | output GB | " + " | ".join(c[:-2].replace("_", " ") for c in cols) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in cols) + " |"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['input_bytes'] / 1e9:.2f} | {r['output_bytes'] / 1e9:.2f} | "
                     + " | ".join(f"{r[c]:.3f}" for c in cols) + " |")
    (args.out / "eval_phases.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
