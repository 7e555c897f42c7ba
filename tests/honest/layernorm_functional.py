"""Honest: F.layer_norm on the module's own parameters (skips the module call overhead)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return F.layer_norm(x, self.norm.normalized_shape, self.norm.weight, self.norm.bias, self.norm.eps)
