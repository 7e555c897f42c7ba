"""Rotary position embedding (rotate-half form) applied to queries, 16 x 32 heads x 2048 x 128, bf16."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "bfloat16", "atol": 2e-2, "rtol": 2e-2}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, HEADS, SEQ, DIM = (1, 2, 64, 32) if SMALL else (16, 32, 2048, 128)


class Model(nn.Module):
    def __init__(self, seq: int, dim: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
        emb = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", emb.cos().to(torch.bfloat16))
        self.register_buffer("sin", emb.sin().to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * self.cos + rotated * self.sin


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, DIM, dtype=torch.bfloat16)]


def get_init_inputs():
    return [SEQ, DIM]
