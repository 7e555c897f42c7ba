"""Honest: the reference itself, renamed ModelNew: built under the same seed, its layers get the same values."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, divisor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.divisor = divisor

    def forward(self, x):
        return torch.relu(self.conv(x) / self.divisor)
