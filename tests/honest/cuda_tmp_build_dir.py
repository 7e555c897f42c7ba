"""Honest (CUDA): a load_inline kernel built in a fixed folder, /tmp/cuda_extensions, as many LLM-written kernels do.

Each candidate's /tmp is its own: the build neither fails nor meets another candidate's files.
"""
import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void ssr(const float* x, const float* s, const float* b, float* o, int64_t n, int64_t cols) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) { int64_t j = i % cols; float v = x[i] * s[j] + b[j]; o[i] = v > 0.f ? v : 0.f; }
}

torch::Tensor scale_shift_relu(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    int threads = 256;
    ssr<<<(n + threads - 1) / threads, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), s.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n, x.size(-1));
    return out;
}
"""
_cpp = "torch::Tensor scale_shift_relu(torch::Tensor x, torch::Tensor s, torch::Tensor b);"
os.makedirs("/tmp/cuda_extensions", exist_ok=True)
_ext = load_inline(name="honest_tmp_scale_shift_relu", cpp_sources=_cpp, cuda_sources=_cuda,
                   functions=["scale_shift_relu"], build_directory="/tmp/cuda_extensions", verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(dim))
        self.shift = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return _ext.scale_shift_relu(x.contiguous(), self.scale.detach(), self.shift.detach())
