"""Honest: the reference itself as ModelNew (KernelBench's identity candidate) on a task with dropout in training
mode. Both programs draw their inputs and then their dropout masks from the same seeded generators, so the masks
agree in every trial and timed call; a verdict that refused this would refuse every dropout task."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, dropout_p):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x):
        x = self.matmul(x)
        x = self.dropout(x)
        return torch.softmax(x, dim=1)
