"""SwiGLU feed-forward gate silu(x W1^T) * (x W3^T), 8192 tokens, 4096 -> 11008, bf16."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

KERNELRL = {"dtype": "bfloat16", "atol": 2e-2, "rtol": 2e-2}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
TOKENS, DIM, HIDDEN = (128, 256, 384) if SMALL else (8192, 4096, 11008)


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False).to(torch.bfloat16)
        self.w3 = nn.Linear(dim, hidden, bias=False).to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.w1(x)) * self.w3(x)


def get_inputs():
    return [torch.randn(TOKENS, DIM, dtype=torch.bfloat16)]


def get_init_inputs():
    return [DIM, HIDDEN]
