"""Honest: the same math with the bias add folded into one addmm call."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        return torch.nn.functional.gelu(y, approximate="tanh")
