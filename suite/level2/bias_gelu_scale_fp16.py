"""Add a bias vector, exact (erf) GELU, then multiply by a learned per-column scale, 32768 x 8192, fp16."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

KERNELRL = {"dtype": "float16", "atol": 1e-2, "rtol": 1e-2}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
ROWS, COLS = (256, 512) if SMALL else (32768, 8192)


class Model(nn.Module):
    def __init__(self, cols: int):
        super().__init__()
        self.bias = nn.Parameter((0.5 * torch.randn(cols)).to(torch.float16))
        self.scale = nn.Parameter((1.0 + 0.2 * torch.randn(cols)).to(torch.float16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x + self.bias) * self.scale


def get_inputs():
    return [torch.randn(ROWS, COLS, dtype=torch.float16)]


def get_init_inputs():
    return [COLS]
