"""HGEMM on Hopper: per-shape kernel search against honest baselines, and a tuned drop-in `matmul`."""
from kernelrl.gemm.dispatch import matmul, set_table, warmup
from kernelrl.gemm.shapes import Shape, grid

__all__ = ["matmul", "warmup", "set_table", "Shape", "grid"]
