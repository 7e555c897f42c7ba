"""Transposed 3x3 convolution, stride 2 (64 -> 64 channels, 32 x 64 x 64), add a bias, then hardtanh(-1, 1), fp32."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

KERNELRL = {"dtype": "float32", "atol": 1e-5, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, C_IN, C_OUT, SIZE = (2, 8, 8, 8) if SMALL else (32, 64, 64, 64)


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(c_in, c_out, kernel_size=3, stride=2, padding=1, output_padding=1)
        self.bias = nn.Parameter(0.1 * torch.randn(c_out, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The default init gives outputs of about unit scale, so the clamp keeps most values unclipped.
        return F.hardtanh(self.deconv(x) + self.bias, -1.0, 1.0)


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_OUT]
