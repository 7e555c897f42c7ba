"""2-D convolution (3x3, padding 1), divided by a constant, then ReLU, fp32, 4 x 8 x 32 x 32 -> 16 channels
(KernelBench level 2 style)."""
import torch
import torch.nn as nn

batch_size = 4
in_channels, out_channels = 8, 16
size = 32
divisor = 3.0


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, divisor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.divisor = divisor

    def forward(self, x):
        return torch.relu(self.conv(x) / self.divisor)


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels, divisor]
