"""Residual add then RMS normalisation (statistics in fp32) with a learned scale, 16384 x 8192, bf16."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "bfloat16", "atol": 2e-2, "rtol": 2e-2}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
ROWS, HIDDEN = (256, 512) if SMALL else (16384, 8192)


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((1.0 + 0.1 * torch.randn(hidden)).to(torch.bfloat16))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = (x + residual).float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def get_inputs():
    return [torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16), torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)]


def get_init_inputs():
    return [HIDDEN]
