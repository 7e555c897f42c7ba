"""Group norm followed by one fused in-place SiLU kernel instead of separate sigmoid and multiply passes."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, groups: int, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(channels))
            self.norm.bias.copy_(0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # y is a fresh tensor owned by this call, so computing SiLU in place is safe.
        return F.silu(self.norm(x), inplace=True)
