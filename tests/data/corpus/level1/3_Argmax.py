import torch
import torch.nn as nn


class Model(nn.Module):
    """Argmax over a dimension: an integer output."""
    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x):
        return torch.argmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [1]
