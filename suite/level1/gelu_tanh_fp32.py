"""GELU with the tanh approximation, written out elementwise, on a 16384 x 8192 fp32 tensor."""
import math
import os

import torch
import torch.nn as nn

# atol 3e-4 (of the output's RMS, in a verdict): tanh implementations part where tanh nears +-1, and on one CPU
# F.gelu(approximate="tanh") was 1.7e-4 from this formula there (x near +-3.8); rtol 1e-4 still sees fp16 math.
KERNELRL = {"dtype": "float32", "atol": 3e-4, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
ROWS, COLS = (256, 512) if SMALL else (16384, 8192)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
        return 0.5 * x * (1.0 + torch.tanh(inner))


def get_inputs():
    return [torch.randn(ROWS, COLS) * 2.0]


def get_init_inputs():
    return []
