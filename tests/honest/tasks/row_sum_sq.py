"""Sum of squares of each row, fp32, 512 x 1024 -> 512."""
import torch
import torch.nn as nn

batch_size = 512
dim = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return (x * x).sum(dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
