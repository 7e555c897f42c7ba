"""(x + y) * z on 64 x 256 fp32 tensors (a tiny task for smoke runs)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y, z):
        return (x + y) * z


def get_inputs():
    return [torch.randn(64, 256), torch.randn(64, 256), torch.randn(64, 256)]


def get_init_inputs():
    return []
