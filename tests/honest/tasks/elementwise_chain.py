"""An elementwise chain tanh(2x + 1) * sigmoid(x), fp32, 256 x 1024."""
import torch
import torch.nn as nn

batch_size = 256
dim = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = x * 2.0
        y = y + 1.0
        y = torch.tanh(y)
        return y * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
