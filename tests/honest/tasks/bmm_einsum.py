"""Batched matrix multiplication written as einsum, fp32, 16 x 64 x 128 x 64."""
import torch
import torch.nn as nn

batch, M, K, N = 16, 64, 128, 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.einsum("bmk,bkn->bmn", A, B)


def get_inputs():
    return [torch.randn(batch, M, K), torch.randn(batch, K, N)]


def get_init_inputs():
    return []
