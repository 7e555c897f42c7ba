"""Square matrix multiplication C = A @ B in fp32 (4096 x 4096 x 4096, TF32 not allowed)."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-4}

N = 128 if os.environ.get("KERNELRL_SIZE", "full") == "small" else 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    # B is scaled by 1/sqrt(N) so outputs are O(1) and tolerances mean the same at every size.
    return [torch.randn(N, N), torch.randn(N, N) / N ** 0.5]


def get_init_inputs():
    return []
