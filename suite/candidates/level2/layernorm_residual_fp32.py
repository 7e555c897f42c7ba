"""Residual add and LayerNorm in one Triton kernel per row (two-pass mean and variance, fp32)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add_layernorm_kernel(x_ptr, r_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for start in tl.range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < n_cols
        acc += tl.load(x_ptr + base + cols, mask=inside, other=0.0) + tl.load(r_ptr + base + cols, mask=inside,
                                                                             other=0.0)
    mean = tl.sum(acc, 0) / n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for start in tl.range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < n_cols
        h = tl.load(x_ptr + base + cols, mask=inside, other=0.0) + tl.load(r_ptr + base + cols, mask=inside,
                                                                          other=0.0)
        d = tl.where(inside, h - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, 0) / n_cols + eps)
    for start in tl.range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < n_cols
        h = tl.load(x_ptr + base + cols, mask=inside, other=0.0) + tl.load(r_ptr + base + cols, mask=inside,
                                                                          other=0.0)
        w = tl.load(w_ptr + cols, mask=inside, other=0.0)
        b = tl.load(b_ptr + cols, mask=inside, other=0.0)
        tl.store(out_ptr + base + cols, (h - mean) * rstd * w + b, mask=inside)


def add_layernorm(x, residual, weight, bias, eps: float) -> torch.Tensor:
    """LayerNorm(x + residual) over the last dimension with affine weight and bias; fp32 tensors."""
    if not (x.dtype == residual.dtype == weight.dtype == bias.dtype == torch.float32) or x.shape != residual.shape \
            or weight.shape != x.shape[-1:] or bias.shape != x.shape[-1:]:
        raise ValueError("add_layernorm: expected fp32 x and residual of one shape and affine over the last dim")
    x, residual = x.contiguous(), residual.contiguous()
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    n_cols = x.shape[-1]
    block = min(triton.next_power_of_2(n_cols), 4096)
    _add_layernorm_kernel[(x.numel() // n_cols,)](x, residual, weight.contiguous(), bias.contiguous(), out, n_cols,
                                                  eps, BLOCK=block, num_warps=8)
    return out


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.norm.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return add_layernorm(x, residual, self.norm.weight, self.norm.bias, self.norm.eps)
