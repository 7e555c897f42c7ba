"""Linear layer followed by GELU (tanh approximation) — a level-1-sized fused pair."""
import torch
import torch.nn as nn

M, K, N = (512, 1024, 1024) if __import__("os").environ.get("KERNELRL_SIZE") != "small" else (64, 128, 128)


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x), approximate="tanh")


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, N]
