"""A residual add of a drawn term that is under KernelBench's absolute tolerance in some draws of the weights (level
2's 51_Gemm_Subtract_GlobalAvgPool_LogSumExp_GELU_ResidualAdd, in miniature: x plus a GELU of a mean near zero):
the input handed back passes under kernelbench where the shift is under about 1e-2, and never under strict."""
import torch
import torch.nn as nn

batch_size = 64
dim = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.shift = nn.Parameter(torch.randn(1) * 0.01)

    def forward(self, x):
        return x + self.shift


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
