"""Honest: state kept on the candidate's own class (a kernel chosen once per process), not on the reference."""
import torch
import torch.nn as nn


def _scale_shift_relu(x, scale, shift):
    return torch.addcmul(shift, x, scale).clamp_(min=0)


class ModelNew(nn.Module):
    _kernel = None  # shared by every instance: chosen once
    _flag = False

    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(dim))
        self.shift = nn.Parameter(torch.randn(dim))
        if ModelNew._kernel is None:
            ModelNew._kernel = _scale_shift_relu
        ModelNew._flag = True

    def forward(self, x):
        return ModelNew._kernel(x, self.scale, self.shift)
