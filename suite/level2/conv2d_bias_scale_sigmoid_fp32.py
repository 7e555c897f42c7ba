"""3x3 convolution (128 -> 128 channels, 32 x 64 x 64), add a per-channel bias, scale, then sigmoid, fp32."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-5, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, C_IN, C_OUT, SIZE = (2, 8, 8, 16) if SMALL else (32, 128, 128, 64)


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int, scale: float):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=3, padding=1)
        self.bias = nn.Parameter(0.1 * torch.randn(c_out, 1, 1))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid((self.conv(x) + self.bias) * self.scale)


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_OUT, 2.0]
