"""3x3 convolution (64 -> 128 channels, 32 x 128 x 128), ReLU, then 2x2 max pooling, fp32."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, C_IN, C_OUT, SIZE = (2, 4, 8, 16) if SMALL else (32, 64, 128, 128)


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(torch.relu(self.conv(x)), kernel_size=2)


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_OUT]
