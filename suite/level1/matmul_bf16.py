"""Square matrix multiplication C = A @ B in bf16 with fp32 accumulation (8192 x 8192 x 8192)."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "bfloat16", "atol": 1e-2, "rtol": 1e-2}

N = 128 if os.environ.get("KERNELRL_SIZE", "full") == "small" else 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    a = torch.randn(N, N, dtype=torch.bfloat16)
    b = (torch.randn(N, N) / N ** 0.5).to(torch.bfloat16)
    return [a, b]


def get_init_inputs():
    return []
