"""Elementwise relu(x * scale + shift) with per-column scale and shift, fp32, 256 x 1024."""
import torch
import torch.nn as nn

batch_size = 256
dim = 1024


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(dim))
        self.shift = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return torch.relu(x * self.scale + self.shift)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
