"""A task whose Model takes five seconds to build (a large model's construction, say)."""
import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        time.sleep(5.0)

    def forward(self, x):
        return torch.exp(x)


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
