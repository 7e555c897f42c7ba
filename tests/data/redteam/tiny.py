"""Softmax over 8192 columns of inputs in [0, 1): every output is below 1e-3, so zeros pass an absolute 1e-2."""
import torch
import torch.nn as nn

batch_size = 16
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
