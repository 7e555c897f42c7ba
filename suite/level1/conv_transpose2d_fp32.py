"""Transposed 2D convolution, 4x4 kernel, stride 2, padding 1 (2x upsampling), 128 -> 64 channels, fp32."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, C_IN, C_OUT, SIZE = (2, 8, 4, 8) if SMALL else (32, 128, 64, 64)


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(c_in, c_out, kernel_size=4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.deconv(x)


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_OUT]
