"""A task whose outputs sit under KernelBench's absolute 1e-2 tolerance: a zero output passes its rule."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 1e-3


def get_inputs():
    return [torch.randn(256, 64)]


def get_init_inputs():
    return []
