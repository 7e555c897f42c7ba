"""Transformer feed-forward block LayerNorm -> Linear 4096->16384 -> GELU -> Linear 16384->4096 + residual, 8192 tokens, bf16."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "bfloat16", "atol": 3e-2, "rtol": 3e-2}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
TOKENS, DIM = (128, 128) if SMALL else (8192, 4096)


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * dim, dim)
        self.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(self.norm(x))))


def get_inputs():
    return [torch.randn(TOKENS, DIM, dtype=torch.bfloat16)]


def get_init_inputs():
    return [DIM]
