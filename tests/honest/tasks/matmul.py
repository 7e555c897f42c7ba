"""Matrix multiplication C = A @ B, fp32, 128 x 256 x 128."""
import torch
import torch.nn as nn

M, K, N = 128, 256, 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
