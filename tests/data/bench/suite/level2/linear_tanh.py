"""Linear layer followed by tanh."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)

    def forward(self, x):
        return torch.tanh(self.linear(x))


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return [64, 48]
