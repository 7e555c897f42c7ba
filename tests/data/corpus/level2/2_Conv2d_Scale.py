import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A convolution, then its output divided by a constant."""
    def __init__(self, in_channels, out_channels, kernel_size, divisor):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.divisor = divisor

    def forward(self, x):
        x = self.conv(x)
        x = F.gelu(x)
        return x / self.divisor


def get_inputs():
    return [torch.randn(4, 3, 16, 16)]


def get_init_inputs():
    return [3, 8, 3, 2.0]
