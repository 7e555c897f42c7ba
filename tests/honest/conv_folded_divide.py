"""Honest: the division by a constant is folded into the convolution's weight and bias once, in __init__.

conv(x) / d == conv'(x) with W' = W / d and b' = b / d: the same function with one pass over the output fewer.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, divisor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        with torch.no_grad():
            self.conv.weight.div_(divisor)
            self.conv.bias.div_(divisor)

    def forward(self, x):
        return torch.relu_(self.conv(x))
