"""Group normalisation (32 groups) followed by swish x * sigmoid(x), 128 x 256 x 64 x 64, fp32."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-5, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, CHANNELS, SIZE = (2, 16, 8) if SMALL else (128, 256, 64)
GROUPS = 4 if SMALL else 32


class Model(nn.Module):
    def __init__(self, groups: int, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(channels))
            self.norm.bias.copy_(0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        return y * torch.sigmoid(y)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE) * 2.0]


def get_init_inputs():
    return [GROUPS, CHANNELS]
