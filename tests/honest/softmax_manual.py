"""Honest: softmax written out (subtract the row max, exp in place, divide in place)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = x - x.amax(dim=-1, keepdim=True)
        y.exp_()
        return y.div_(y.sum(dim=-1, keepdim=True))
