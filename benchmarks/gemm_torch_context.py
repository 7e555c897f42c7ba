"""Why do torch.matmul and a tuned kernel compare differently from one run to the next?

`context`: for a few shapes, the tuner's final choice (`tune.augment_shape` with no new candidates) and the
benchmark's row (`bench.bench_shape`) alternate, each twice, with the SM clock and power read before each.
`placement`: for a few shapes, torch.matmul, its control and the tuned kernel are timed, paired by round, on
three sets of input buffers allocated one after another (all held), then on the first set again with the
graphs captured afresh: whether a ratio moves with the buffers or with the graphs.
Run on the GPU machine from the repository root (results under $OUT):
    python3 benchmarks/gemm_torch_context.py [context|placement ...]
"""
from __future__ import annotations

import functools
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
OUT = Path(os.environ.get("OUT", "/tmp/gemm_out"))
SHAPES = [(256, 4096, 2048), (4096, 256, 2048), (256, 8192, 128), (256, 1024, 12288)]
PLACEMENT_SHAPES = [(256, 4096, 2048), (256, 1024, 12288), (12288, 64, 16384), (4096, 256, 2048)]


@functools.cache
def _records() -> dict:
    from kernelrl.gemm.table import read_records

    return {(r["m"], r["n"], r["k"], r["dtype"]): r
            for r in read_records(ROOT / "benchmarks" / "results" / "gemm_tune_h200.jsonl.gz")}


def tuned(m: int, n: int, k: int) -> tuple[dict, str]:
    """The committed fp16 tuning record of a shape and the kernel it chose (before any demotion)."""
    rec = _records()[(m, n, k, "fp16")]
    return rec, rec.get("demoted", {}).get("kernel") or rec["best"]


def clocks() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable ({e})"


def context() -> None:
    import torch

    from kernelrl.gemm.bench import PAIRED, bench_shape
    from kernelrl.gemm.dispatch import Dispatcher
    from kernelrl.gemm.shapes import Shape
    from kernelrl.gemm.table import Entry, Table
    from kernelrl.gemm.timing import L2Flusher
    from kernelrl.gemm.tune import DTYPE_NAMES, augment_shape

    OUT.mkdir(parents=True, exist_ok=True)
    flusher, rng, lines = L2Flusher(), random.Random(1), []
    for m, n, k in SHAPES:
        rec, best = tuned(m, n, k)
        rec = {**rec, "best": best}
        disp = Dispatcher(Table((Entry(m, n, k, "fp16", best, 1.0, 1.0),)))
        for rep in range(2):
            c = clocks()
            a = augment_shape(rec, [])
            lines.append(f"{m}x{n}x{k} rep{rep} tune-final [{c}]: torch {a['torch_us']:.2f} "
                         f"{a['best_label'][:40]} {a['best_us']:.2f}")
            c = clocks()
            row = bench_shape(Shape(m, n, k), DTYPE_NAMES["fp16"], rec, disp, flusher, rng)
            lines.append(f"{m}x{n}x{k} rep{rep} bench [{c}]: torch {row['torch_us']:.2f} control "
                         f"{row['torch_control_us']:.2f} kernel {row['kernelrl_us']:.2f} paired "
                         f"{row[PAIRED['torch']]:.3f} ({row['speedup_ci_lo']:.3f}-{row['speedup_ci_hi']:.3f})")
            print(lines[-2], lines[-1], sep="\n", flush=True)
        torch.cuda.synchronize()
    (OUT / "gemm_torch_context.log").write_text("\n".join(lines) + "\n")


def placement() -> None:
    import torch

    from kernelrl.gemm import timing as tm
    from kernelrl.gemm.registry import make_launcher
    from kernelrl.gemm.tune import as_dispatched

    OUT.mkdir(parents=True, exist_ok=True)
    rng, lines = random.Random(2), []
    for m, n, k in PLACEMENT_SHAPES:
        rec, best = tuned(m, n, k)
        fns = {"torch": (torch.matmul, False), "control": (torch.matmul, False),
               "kernel": (as_dispatched(make_launcher(best, m, n, k)), False)}
        calls = tm.calls_for(rec["torch_us"])
        held = []
        for label in ("set0", "set1", "set2", "set0-again"):
            if label != "set0-again":
                held.append(tm.Inputs(m, n, k))
            inp = held[0] if label == "set0-again" else held[-1]
            pr: dict = {}
            med = tm.time_graphs(fns, inp, calls, 15, rng, pr)
            r, lo, hi = tm.paired_ratio_ci(pr["torch"], pr["kernel"])
            c, clo, chi = tm.paired_ratio_ci(pr["torch"], pr["control"])
            lines.append(f"{m}x{n}x{k} {label} [{clocks()}] a0=0x{inp.a[0].data_ptr():x}: torch {med['torch']:.2f} "
                         f"kernel {med['kernel']:.2f} torch/kernel {r:.3f} ({lo:.3f}-{hi:.3f}) "
                         f"torch/control {c:.3f} ({clo:.3f}-{chi:.3f}) [{best[:40]}]")
            print(lines[-1], flush=True)
        del held
        torch.cuda.synchronize()
    (OUT / "gemm_placement.log").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    for part in sys.argv[1:] or ["context", "placement"]:
        {"context": context, "placement": placement}[part]()
