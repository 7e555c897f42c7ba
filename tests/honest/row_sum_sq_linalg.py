"""Honest: the row sums of squares as a batched dot product (einsum), no x*x intermediate."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.einsum("ij,ij->i", x, x)
