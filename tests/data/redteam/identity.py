"""ReLU of inputs drawn from [0, 1): every output equals its input, so handing the input back solves the task."""
import torch
import torch.nn as nn

batch_size = 16
dim = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
