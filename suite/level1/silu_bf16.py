"""SiLU activation x * sigmoid(x) on a 32768 x 40960 bf16 tensor."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "bfloat16", "atol": 1e-2, "rtol": 1e-2}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
ROWS, COLS = (256, 512) if SMALL else (32768, 40960)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x)


def get_inputs():
    return [(torch.randn(ROWS, COLS) * 3.0).to(torch.bfloat16)]


def get_init_inputs():
    return []
