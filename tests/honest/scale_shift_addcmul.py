"""Honest: addcmul fuses the scale and shift, then ReLU in place."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(dim))
        self.shift = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return torch.addcmul(self.shift, x, self.scale).clamp_(min=0)
