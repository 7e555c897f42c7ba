"""Honest (Triton): one program per row computes a numerically stable softmax."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, o_ptr, cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(o_ptr + row * stride + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, cols = x.shape
        _softmax[(rows,)](x, out, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols))
        return out
