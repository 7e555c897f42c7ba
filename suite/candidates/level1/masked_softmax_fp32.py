"""Masked softmax as one Triton kernel per row: online max/sum over the unmasked entries, then one write."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _masked_softmax_kernel(x_ptr, mask_ptr, out_ptr, n_cols, mask_rows, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    m_row = mask_ptr + (row % mask_rows) * n_cols
    o_row = out_ptr + row * n_cols
    run_max = tl.full([BLOCK], float("-inf"), tl.float32)
    run_sum = tl.zeros([BLOCK], tl.float32)
    for start in tl.range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < n_cols
        keep = inside & (tl.load(m_row + cols, mask=inside, other=1) == 0)
        v = tl.load(x_row + cols, mask=keep, other=float("-inf"))
        new_max = tl.maximum(run_max, v)
        alpha = tl.where(new_max == float("-inf"), 0.0, tl.exp(run_max - new_max))
        run_sum = run_sum * alpha + tl.where(keep, tl.exp(v - new_max), 0.0)
        run_max = new_max
    row_max = tl.max(run_max, 0)
    total = tl.sum(tl.where(run_max == float("-inf"), 0.0, run_sum * tl.exp(run_max - row_max)), 0)
    for start in tl.range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < n_cols
        keep = inside & (tl.load(m_row + cols, mask=inside, other=1) == 0)
        v = tl.load(x_row + cols, mask=keep, other=float("-inf"))
        tl.store(o_row + cols, tl.where(keep, tl.exp(v - row_max) / total, 0.0), mask=inside)


def masked_softmax(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(x.masked_fill(mask, -inf), dim=-1) for float32 x and a bool mask over its last two dims."""
    if x.dtype != torch.float32 or mask.dtype != torch.bool or tuple(mask.shape) != tuple(x.shape[-2:]):
        raise ValueError("masked_softmax: expected float32 scores and a bool mask matching their last two dims")
    x = x.contiguous()
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    n_cols = x.shape[-1]
    block = min(triton.next_power_of_2(n_cols), 2048)
    _masked_softmax_kernel[(x.numel() // n_cols,)](x, mask.contiguous().view(torch.uint8), out, n_cols,
                                                   mask.shape[0], BLOCK=block, num_warps=8)
    return out


class ModelNew(nn.Module):
    def __init__(self, seq: int):
        super().__init__()
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return masked_softmax(scores, self.mask)
