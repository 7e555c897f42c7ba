"""A clamp that every value reaches under some draws of the weights (KernelBench level 2's
58_ConvTranspose3d_LogSumExp_HardSwish_Subtract_Clamp, in miniature): sigmoid(x) - bias clamped to [-1, 1] is 1
whatever the input where the drawn bias is at most -1, -1 where it is at least 2, and depends on the input between."""
import torch
import torch.nn as nn

batch_size = 64
dim = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(1) * 4)

    def forward(self, x):
        return torch.clamp(torch.sigmoid(x) - self.bias, -1.0, 1.0)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
