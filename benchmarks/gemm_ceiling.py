"""How fast could a memory-bound GEMM be? Times, per shape, torch.matmul against a kernel that only moves the
product's compulsory bytes (reads A and B once, writes C) in the same graph-replay harness as the benchmark.

A GEMM with a small M or N and a deep K is bound by reading the other operand. This plain streaming kernel's
time, launch included, is what such a GEMM could reach with a main loop that costs nothing; it is not a tight
floor (on small products its fixed cost is a few microseconds). Where the bytes dominate, torch_us / floor_us
estimates the speedup a new kernel could give. On the H200:

    python3 benchmarks/gemm_ceiling.py --out $OUT/gemm_ceiling.csv   [--shapes 64x4096x4096,...]

Default shapes: one side of at most 256, the other of at least 2048, K of at least 1024 (the grid's skinny
memory-bound shapes).
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

PROGRAMS_PER_SM = 8
BLOCK = 4096


@triton.jit
def stream_bytes(a_ptr, b_ptr, c_ptr, sums_ptr, NA, NB, NC, BLOCK: tl.constexpr):
    """Each program reads its strided share of A and B, writes its share of C (zeros), and stores the sum of
    what it read (so the loads cannot be dropped)."""
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(pid * BLOCK, NB, step):
        acc += tl.load(b_ptr + start + offs, mask=start + offs < NB, other=0.0).to(tl.float32)
    for start in range(pid * BLOCK, NA, step):
        acc += tl.load(a_ptr + start + offs, mask=start + offs < NA, other=0.0).to(tl.float32)
    zero = tl.zeros((BLOCK,), dtype=c_ptr.dtype.element_ty)
    for start in range(pid * BLOCK, NC, step):
        tl.store(c_ptr + start + offs, zero, mask=start + offs < NC)
    tl.store(sums_ptr + pid, tl.sum(acc, axis=0))


def floor_fn(sums: torch.Tensor):
    programs = sums.numel()

    def run(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        stream_bytes[(programs,)](a, b, c, sums, a.numel(), b.numel(), c.numel(), BLOCK=BLOCK, num_warps=8)

    return run


def skinny_grid():
    from kernelrl.gemm.shapes import grid

    return [s for s in grid() if min(s.m, s.n) <= 256 and max(s.m, s.n) >= 2048 and s.k >= 1024]


def main() -> None:
    from kernelrl.gemm.registry import make_launcher
    from kernelrl.gemm.shapes import read_shapes
    from kernelrl.gemm.timing import Inputs, calls_for, paired_ratio_ci, time_graphs

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="", help="MxNxK list (default: the grid's skinny shapes)")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    shapes = read_shapes(args.shapes) if args.shapes else skinny_grid()
    props = torch.cuda.get_device_properties(0)
    sums = torch.empty(props.multi_processor_count * PROGRAMS_PER_SM, device="cuda", dtype=torch.float32)
    floor = floor_fn(sums)
    fields = ["m", "n", "k", "bytes", "torch_us", "floor_us", "ratio_paired", "ratio_lo", "ratio_hi",
              "torch_tbps", "floor_tbps"]
    t0 = time.time()
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for s in shapes:
            inp = Inputs(s.m, s.n, s.k)
            a, b, c = inp.a[0], inp.b[0], inp.c[0]
            floor(a, b, c)
            expect = a.float().sum() + b.float().sum()
            torch.cuda.synchronize()
            assert torch.allclose(sums.sum(), expect, rtol=1e-3, atol=1e-2 * (a.numel() + b.numel()) ** 0.5), s
            assert not c.any(), s
            est = s.bytes() / 4.0e6  # us at 4 TB/s
            per_round: dict = {}
            t = time_graphs({"torch": (make_launcher("torch", s.m, s.n, s.k), True), "floor": (floor, True)},
                            inp, calls_for(est), rounds=args.rounds, per_round=per_round)
            ratio, lo, hi = paired_ratio_ci(per_round["torch"], per_round["floor"])
            row = {"m": s.m, "n": s.n, "k": s.k, "bytes": s.bytes(), "torch_us": t["torch"], "floor_us": t["floor"],
                   "ratio_paired": ratio, "ratio_lo": lo, "ratio_hi": hi,
                   "torch_tbps": s.bytes() / t["torch"] / 1e6, "floor_tbps": s.bytes() / t["floor"] / 1e6}
            w.writerow(row)
            f.flush()
            print(f"[{time.time() - t0:6.1f}s] {s.m}x{s.n}x{s.k}: torch {t['torch']:.2f} us, floor {t['floor']:.2f} us "
                  f"({ratio:.3f}x; {row['floor_tbps']:.2f} TB/s)", flush=True)
            del inp


if __name__ == "__main__":
    main()
