"""Linear layer (8192 x 8192 -> 8192) with bias followed by tanh-approximate GELU, bf16."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

KERNELRL = {"dtype": "bfloat16", "atol": 2e-2, "rtol": 2e-2}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, IN, OUT = (128, 256, 128) if SMALL else (8192, 8192, 8192)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features).to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x), approximate="tanh")


def get_inputs():
    return [torch.randn(BATCH, IN, dtype=torch.bfloat16)]


def get_init_inputs():
    return [IN, OUT]
