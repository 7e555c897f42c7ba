"""MobileNetV2 inverted residual block (1x1 expand x6, depthwise 3x3, 1x1 project, identity), 64 x 64 x 56 x 56, fp32."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-3}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, CHANNELS, SIZE = (2, 8, 16) if SMALL else (64, 64, 56)


class Model(nn.Module):
    def __init__(self, channels: int, expand: int):
        super().__init__()
        hidden = channels * expand
        self.block = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS, 6]
