"""Tall-skinny matrix multiplication (16384 x 8192) @ (8192 x 256) in fp32."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
M, K, N = (256, 128, 16) if SMALL else (16384, 8192, 256)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N) / K ** 0.5]


def get_init_inputs():
    return []
