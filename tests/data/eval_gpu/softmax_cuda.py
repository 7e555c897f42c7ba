"""One-pass-per-row softmax in CUDA (load_inline): read once for max/sum with online rescaling, once to write."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void softmax_scale(const float* __restrict__ x, float* __restrict__ y, int n, float scale) {
    const float* row = x + (size_t)blockIdx.x * n;
    float* out = y + (size_t)blockIdx.x * n;
    float m = -INFINITY, s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = row[i];
        float nm = fmaxf(m, v);
        s = s * __expf(m - nm) + __expf(v - nm);
        m = nm;
    }
    __shared__ float sm[32], ss[32];
    for (int off = 16; off > 0; off >>= 1) {
        float om = __shfl_xor_sync(0xffffffff, m, off), os = __shfl_xor_sync(0xffffffff, s, off);
        float nm = fmaxf(m, om);
        s = s * __expf(m - nm) + os * __expf(om - nm);
        m = nm;
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        int nw = blockDim.x / 32;
        m = lane < nw ? sm[lane] : -INFINITY;
        s = lane < nw ? ss[lane] : 0.f;
        for (int off = 16; off > 0; off >>= 1) {
            float om = __shfl_xor_sync(0xffffffff, m, off), os = __shfl_xor_sync(0xffffffff, s, off);
            float nm = fmaxf(m, om);
            s = (s == 0.f ? 0.f : s * __expf(m - nm)) + (os == 0.f ? 0.f : os * __expf(om - nm));
            m = nm;
        }
        if (lane == 0) { sm[0] = m; ss[0] = s; }
    }
    __syncthreads();
    m = sm[0];
    float inv = scale / ss[0];
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = __expf(row[i] - m) * inv;
}

torch::Tensor run(torch::Tensor x, double scale) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int n = xc.size(-1);
    int rows = xc.numel() / n;
    softmax_scale<<<rows, 512, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(),
                                                                     n, (float)scale);
    return y;
}
"""
ext = load_inline(name="kernelrl_gpu_test_softmax", cpp_sources="torch::Tensor run(torch::Tensor x, double scale);",
                  cuda_sources=cuda_src, functions=["run"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return ext.run(x, self.scale)
