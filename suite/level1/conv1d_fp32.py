"""1D convolution, kernel 5, padding 2, 128 -> 128 channels on 32 sequences of length 16384, fp32."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, C_IN, C_OUT, LENGTH = (2, 8, 8, 64) if SMALL else (32, 128, 128, 16384)


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel_size=5, padding=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, C_IN, LENGTH)]


def get_init_inputs():
    return [C_IN, C_OUT]
