"""Honest: addmm then exact GELU (the same maths, one fewer intermediate)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(torch.addmm(self.linear.bias, x, self.linear.weight.t()))
