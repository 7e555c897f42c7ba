import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
torch::Tensor fused(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    return torch::relu(x * w + b) undeclared_identifier;
}
"""
ext = load_inline(name="kernelrl_test_cpp_error", cpp_sources=src, functions=["fused"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
        self.b = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return ext.fused(x, self.w, self.b)
