"""A diagonal matrix times a matrix, C = diag(A) @ B, fp32, N = 2048, M = 512 (KernelBench level 1, problem 12)."""
import torch
import torch.nn as nn

N = 2048
M = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.diag(A) @ B


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
