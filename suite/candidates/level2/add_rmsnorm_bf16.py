"""Residual add and RMSNorm in one Triton kernel per row, with the reference's bf16 roundings."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for start in tl.range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < n_cols
        x = tl.load(x_ptr + base + cols, mask=inside, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + base + cols, mask=inside, other=0.0).to(tl.float32)
        h = (x + r).to(tl.bfloat16).to(tl.float32)  # the reference adds in bf16, then upcasts
        acc += h * h
    inv = 1.0 / tl.sqrt(tl.sum(acc, 0) / n_cols + eps)
    for start in tl.range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < n_cols
        x = tl.load(x_ptr + base + cols, mask=inside, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + base + cols, mask=inside, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=inside, other=0.0).to(tl.float32)
        h = (x + r).to(tl.bfloat16).to(tl.float32)
        normed = (h * inv).to(tl.bfloat16).to(tl.float32)
        tl.store(out_ptr + base + cols, (w * normed).to(tl.bfloat16), mask=inside)


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * bf16(rmsnorm(x + residual)) over the last dimension; bf16 tensors."""
    if not (x.dtype == residual.dtype == weight.dtype == torch.bfloat16) or x.shape != residual.shape \
            or weight.shape != x.shape[-1:]:
        raise ValueError("add_rmsnorm: expected bf16 x and residual of one shape and a weight over the last dim")
    x, residual = x.contiguous(), residual.contiguous()
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    n_cols = x.shape[-1]
    block = min(triton.next_power_of_2(n_cols), 4096)
    _add_rmsnorm_kernel[(x.numel() // n_cols,)](x, residual, weight.contiguous(), out, n_cols, eps,
                                                BLOCK=block, num_warps=8)
    return out


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((1.0 + 0.1 * torch.randn(hidden)).to(torch.bfloat16))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return add_rmsnorm(x, residual, self.weight, self.eps)
