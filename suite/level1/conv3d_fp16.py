"""3D convolution, 3x3x3 kernel, padding 1, 64 -> 64 channels on 64 volumes of 32^3, fp16."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float16", "atol": 1e-2, "rtol": 1e-2}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, C_IN, C_OUT, SIZE = (1, 4, 4, 8) if SMALL else (64, 64, 64, 32)


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv3d(c_in, c_out, kernel_size=3, padding=1).to(torch.float16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE, SIZE, dtype=torch.float16)]


def get_init_inputs():
    return [C_IN, C_OUT]
