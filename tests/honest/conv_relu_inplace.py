"""Honest: F.conv2d, then ReLU in place on the convolution's output."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias, padding=1)
        return F.relu(y, inplace=True)
