"""Causal scaled dot-product attention, 16 x 16 heads x 4096 tokens x 128 dims, bf16."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

KERNELRL = {"dtype": "bfloat16", "atol": 2e-2, "rtol": 2e-2}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, HEADS, SEQ, DIM = (1, 2, 64, 32) if SMALL else (16, 16, 4096, 128)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    shape = (BATCH, HEADS, SEQ, DIM)
    return [torch.randn(shape, dtype=torch.bfloat16) for _ in range(3)]


def get_init_inputs():
    return []
