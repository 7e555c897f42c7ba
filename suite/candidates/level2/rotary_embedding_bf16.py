"""Rotary embedding in one Triton pass: each tile reads x once (plus its rotated half) and writes once."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, n_rows, seq, dim, half,
                 BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_D)
    inside = (rows < n_rows)[:, None] & (cols < dim)[None, :]
    rows64 = rows.to(tl.int64)
    pos = rows64 % seq
    first = cols < half
    partner = tl.where(first, cols + half, cols - half)
    sign = tl.where(first, -1.0, 1.0)
    x = tl.load(x_ptr + rows64[:, None] * dim + cols[None, :], mask=inside, other=0.0).to(tl.float32)
    xp = tl.load(x_ptr + rows64[:, None] * dim + partner[None, :], mask=inside, other=0.0).to(tl.float32)
    c = tl.load(cos_ptr + pos[:, None] * dim + cols[None, :], mask=inside, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + pos[:, None] * dim + cols[None, :], mask=inside, other=0.0).to(tl.float32)
    # The reference rounds each product to bf16 before adding them.
    a = (x * c).to(tl.bfloat16).to(tl.float32)
    b = (sign[None, :] * xp * s).to(tl.bfloat16).to(tl.float32)
    tl.store(out_ptr + rows64[:, None] * dim + cols[None, :], (a + b).to(tl.bfloat16), mask=inside)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin for bf16 x of shape (..., seq, dim) and cos/sin of shape (seq, dim)."""
    if x.dtype != torch.bfloat16 or x.dim() < 2 or tuple(cos.shape) != tuple(x.shape[-2:]) \
            or cos.shape != sin.shape or x.shape[-1] % 2:
        raise ValueError("rotary: expected bf16 x (..., seq, dim) with even dim and cos/sin of shape (seq, dim)")
    x = x.contiguous()
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    seq, dim = x.shape[-2], x.shape[-1]
    n_rows = x.numel() // dim
    block_d = triton.next_power_of_2(dim)
    block_r = max(1, 4096 // block_d)
    _rope_kernel[(triton.cdiv(n_rows, block_r),)](x, cos.contiguous(), sin.contiguous(), out, n_rows, seq, dim,
                                                  dim // 2, BLOCK_R=block_r, BLOCK_D=block_d, num_warps=4)
    return out


class ModelNew(nn.Module):
    def __init__(self, seq: int, dim: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
        emb = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", emb.cos().to(torch.bfloat16))
        self.register_buffer("sin", emb.sin().to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rotary(x, self.cos, self.sin)
