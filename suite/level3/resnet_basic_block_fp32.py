"""ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN plus identity, ReLU; 32 x 128 x 56 x 56, fp32."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-3}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, CHANNELS, SIZE = (2, 8, 16) if SMALL else (32, 128, 56)


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS]
