"""Batched matrix multiplication C[i] = A[i] @ B[i] in fp32 (64 batches of 1024 x 1024 x 1024)."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, M, K, N = (4, 64, 64, 64) if SMALL else (64, 1024, 1024, 1024)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N) / K ** 0.5]


def get_init_inputs():
    return []
