"""A CUDA kernel that writes far out of bounds: an illegal address must end in a verdict."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
__global__ void bad(float* y) { y[(size_t)1 << 40] = 1.f; }
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    bad<<<1, 1>>>(y.data_ptr<float>());
    return y;
}
"""
ext = load_inline(name="kernelrl_gpu_test_illegal", cpp_sources="torch::Tensor run(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()

    def forward(self, x):
        return ext.run(x)
