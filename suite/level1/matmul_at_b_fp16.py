"""Matrix multiplication with a transposed left operand, C = A.T @ B, in fp16 (8192 x 8192 x 8192)."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float16", "atol": 1e-2, "rtol": 1e-2}

N = 128 if os.environ.get("KERNELRL_SIZE", "full") == "small" else 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.t() @ b


def get_inputs():
    a = torch.randn(N, N, dtype=torch.float16)  # stored K x M
    b = (torch.randn(N, N) / N ** 0.5).to(torch.float16)
    return [a, b]


def get_init_inputs():
    return []
