"""Does torch.matmul time differently in the tuner's final round than in the benchmark? For a few shapes, the
tuner's final choice (`tune.augment_shape` with no new candidates) and the benchmark's row (`bench.bench_shape`)
alternate, each twice, with the SM clock and power read before each; prints torch.matmul's time and the
winner's in each. Run on the GPU machine from the repository root (results under $OUT):
    python3 benchmarks/gemm_torch_context.py
"""
from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
OUT = Path(os.environ.get("OUT", "/tmp/gemm_out"))
SHAPES = [(256, 4096, 2048), (4096, 256, 2048), (256, 8192, 128), (256, 1024, 12288)]


def clocks() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable ({e})"


def main() -> None:
    import torch

    from kernelrl.gemm.bench import PAIRED, bench_shape
    from kernelrl.gemm.dispatch import Dispatcher
    from kernelrl.gemm.shapes import Shape
    from kernelrl.gemm.table import Entry, Table
    from kernelrl.gemm.timing import L2Flusher
    from kernelrl.gemm.tune import DTYPE_NAMES, augment_shape

    OUT.mkdir(parents=True, exist_ok=True)
    src = ROOT / "benchmarks" / "results" / "gemm_tune_h200.jsonl.gz"
    recs = {(r["m"], r["n"], r["k"], r["dtype"]): r for r in map(json.loads, gzip.open(src, "rt"))}
    flusher, rng, lines = L2Flusher(), random.Random(1), []
    for m, n, k in SHAPES:
        rec = recs[(m, n, k, "fp16")]
        best = rec.get("demoted", {}).get("kernel") or rec["best"]
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


if __name__ == "__main__":
    main()
