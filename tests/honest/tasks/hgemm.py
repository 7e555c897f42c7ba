"""Half-precision matrix multiplication, fp16, 1024 x 1024 x 1024 (GPU)."""
import torch
import torch.nn as nn

M = K = N = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K).half(), torch.randn(K, N).half()]


def get_init_inputs():
    return []
