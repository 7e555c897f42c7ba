"""Matrix multiplication C = A @ B, fp32, 128 x 256 x 128, A scaled by 1/sqrt(K) so that outputs are of unit size:
KernelBench's absolute atol of 1e-2 admits TF32 or fp16 rounding there (not on outputs of size sqrt(K))."""
import torch
import torch.nn as nn

M, K, N = 128, 256, 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K) / K ** 0.5, torch.randn(K, N)]


def get_init_inputs():
    return []
