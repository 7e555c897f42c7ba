"""scale_add whose Model takes five seconds to build (a large model's construction, say)."""
import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        time.sleep(5.0)
        self.w = nn.Parameter(torch.randn(n))
        self.b = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return torch.relu(x * self.w + self.b)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [256]
