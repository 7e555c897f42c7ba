"""Linear layer (8192 x 4096 -> 2048) with bias followed by ReLU, fp32."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, IN, OUT = (128, 256, 128) if SMALL else (8192, 4096, 2048)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN)]


def get_init_inputs():
    return [IN, OUT]
