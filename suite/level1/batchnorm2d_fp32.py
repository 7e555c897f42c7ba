"""Batch normalisation with batch statistics over 192 x 128 x 128 x 128 fp32 feature maps, learned affine."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, CHANNELS, SIZE = (4, 8, 16) if SMALL else (192, 128, 128)


class Model(nn.Module):
    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Batch statistics whatever the module's train/eval mode, so the operator is always the same.
        return F.batch_norm(x, None, None, self.weight, self.bias, training=True, eps=self.eps)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE) * 1.5 + 0.3]


def get_init_inputs():
    return [CHANNELS]
