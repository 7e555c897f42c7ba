"""Honest: torch.bmm instead of the einsum parser."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.bmm(A, B)
