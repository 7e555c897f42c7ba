"""Honest: two linear layers with no activation between them merged into one (W2 W1, W2 b1 + b2), computed per call."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, d_in, d_hidden, d_out):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        w = self.fc2.weight @ self.fc1.weight
        b = torch.addmv(self.fc2.bias, self.fc2.weight, self.fc1.bias)
        return torch.addmm(b, x, w.t())
