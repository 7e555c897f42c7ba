"""2D max pooling, 3x3 window, stride 2, padding 1, on 192 x 128 x 128 x 128 fp32 feature maps."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 0.0, "rtol": 0.0}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, CHANNELS, SIZE = (2, 8, 16) if SMALL else (192, 128, 128)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return []
