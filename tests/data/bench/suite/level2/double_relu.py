"""relu(relu(x) - 0.5): two activations in a row."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(torch.relu(x) - 0.5)


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return []
