"""Small image classifier: three conv-BN-ReLU stages with pooling, global average pool, linear head; 128 x 3 x 128 x 128, fp32."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-3}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, SIZE = (2, 32) if SMALL else (128, 128)


def stage(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


class Model(nn.Module):
    def __init__(self, num_classes: int):
        super().__init__()
        self.features = nn.Sequential(
            stage(3, 64), nn.MaxPool2d(2),
            stage(64, 128), nn.MaxPool2d(2),
            stage(128, 256),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(256, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


def get_inputs():
    return [torch.randn(BATCH, 3, SIZE, SIZE)]


def get_init_inputs():
    return [100]
