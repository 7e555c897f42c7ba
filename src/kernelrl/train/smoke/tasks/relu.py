"""ReLU on a 64 x 256 fp32 tensor (a tiny task for smoke runs)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
