"""Attention core through PyTorch's fused scaled_dot_product_attention (fp32), never materialising the scores."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # Default scale is 1/sqrt(head dim), as in the reference; inputs stay fp32, so fp32 kernels are chosen.
        return F.scaled_dot_product_attention(q, k, v)
