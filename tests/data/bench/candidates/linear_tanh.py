import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Wrong: sigmoid where the reference has tanh (matched by file name from the top folder)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)

    def forward(self, x):
        return torch.sigmoid(self.linear(x))
