import torch
import torch.nn as nn


class Model(nn.Module):
    """A matrix product."""
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 64
K = 32
N = 48


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
