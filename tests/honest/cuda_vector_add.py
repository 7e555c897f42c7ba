"""Honest (CUDA): a load_inline kernel adding two vectors with float4 loads, on the current stream."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void add4(const float4* x, const float4* y, float4* o, int64_t n4) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n4) { float4 a = x[i], b = y[i]; o[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
}

torch::Tensor vector_add(torch::Tensor x, torch::Tensor y) {
    auto out = torch::empty_like(x);
    int64_t n4 = x.numel() / 4;
    int threads = 256;
    add4<<<(n4 + threads - 1) / threads, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const float4*>(x.data_ptr<float>()), reinterpret_cast<const float4*>(y.data_ptr<float>()),
        reinterpret_cast<float4*>(out.data_ptr<float>()), n4);
    return out;
}
"""
_cpp = "torch::Tensor vector_add(torch::Tensor x, torch::Tensor y);"
_ext = load_inline(name="honest_cuda_vector_add", cpp_sources=_cpp, cuda_sources=_cuda, functions=["vector_add"],
                   verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return _ext.vector_add(x.contiguous(), y.contiguous())
