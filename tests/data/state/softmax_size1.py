"""A task whose output does not depend on its inputs: softmax over a dimension of size 1 is all ones."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(64, 1, 32)]


def get_init_inputs():
    return []
