"""HGEMM on Hopper: per-shape kernel search against honest baselines, a tuned drop-in `matmul`, and `linear` /
`patch` that put it inside a model's `nn.Linear` layers."""
from kernelrl.gemm.dispatch import matmul, set_table, warmup
from kernelrl.gemm.linear import linear, patch, unpatch
from kernelrl.gemm.shapes import Shape, grid

__all__ = ["matmul", "warmup", "set_table", "linear", "patch", "unpatch", "Shape", "grid"]
