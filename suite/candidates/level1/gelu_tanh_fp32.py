"""Tanh-approximate GELU as one fused PyTorch kernel instead of eight elementwise passes."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Same formula, evaluated in fp32 inside one kernel: 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))).
        return F.gelu(x, approximate="tanh")
