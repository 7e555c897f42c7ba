"""Honest (CUDA, fp16 task): torch.mm into a fresh fp16 output (cuBLAS tensor cores, fp32 accumulation)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        out = torch.empty(A.shape[0], B.shape[1], dtype=A.dtype, device=A.device)
        return torch.mm(A, B, out=out)
