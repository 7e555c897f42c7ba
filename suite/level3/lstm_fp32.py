"""Two-layer LSTM (input 256, hidden 512) over 64 sequences of 512 steps, returning every step's output, fp32."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-3}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, STEPS, IN, HIDDEN = (2, 16, 16, 32) if SMALL else (64, 512, 256, 512)


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int, layers: int):
        super().__init__()
        self.lstm = nn.LSTM(in_features, hidden, num_layers=layers, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0]


def get_inputs():
    return [torch.randn(BATCH, STEPS, IN)]


def get_init_inputs():
    return [IN, HIDDEN, 2]
