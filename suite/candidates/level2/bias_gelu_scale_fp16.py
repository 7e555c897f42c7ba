"""Bias add, exact GELU and per-column scale in one vectorised CUDA pass, with the reference's fp16 roundings."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

KERNELS = r"""
#include <cuda_runtime.h>
#include <cuda_fp16.h>

// The reference rounds to fp16 after each op: t = half(x + b); g = half(gelu(t)); out = half(g * s).
__device__ __forceinline__ __half bgs(__half x, __half b, __half s) {
    float t = __half2float(__float2half_rn(__half2float(x) + __half2float(b)));
    float g = __half2float(__float2half_rn(0.5f * t * (1.f + erff(t * 0.70710678118654752f))));
    return __float2half_rn(g * __half2float(s));
}

__global__ void bgs_vec_kernel(const uint4* __restrict__ x, const __half* __restrict__ b,
                               const __half* __restrict__ s, uint4* __restrict__ out,
                               long long nvec, long long cols) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nvec;
         i += (long long)gridDim.x * blockDim.x) {
        long long col = (i * 8) % cols;  // cols % 8 == 0, so a pack never crosses a row
        uint4 xp = x[i], bp = *reinterpret_cast<const uint4*>(b + col), sp = *reinterpret_cast<const uint4*>(s + col);
        uint4 op;
        const __half* xv = reinterpret_cast<const __half*>(&xp);
        const __half* bv = reinterpret_cast<const __half*>(&bp);
        const __half* sv = reinterpret_cast<const __half*>(&sp);
        __half* ov = reinterpret_cast<__half*>(&op);
        #pragma unroll
        for (int j = 0; j < 8; ++j) ov[j] = bgs(xv[j], bv[j], sv[j]);
        out[i] = op;
    }
}

__global__ void bgs_scalar_kernel(const __half* __restrict__ x, const __half* __restrict__ b,
                                  const __half* __restrict__ s, __half* __restrict__ out,
                                  long long n, long long cols) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        long long col = i % cols;
        out[i] = bgs(x[i], b[col], s[col]);
    }
}

void launch_bias_gelu_scale(const void* x, const void* b, const void* s, void* out, long long n, long long cols,
                            int sms, cudaStream_t stream) {
    auto aligned = [](const void* p) { return reinterpret_cast<unsigned long long>(p) % 16 == 0; };
    const int threads = 256;
    long long max_blocks = (long long)sms * 8;
    if (cols % 8 == 0 && aligned(x) && aligned(b) && aligned(s) && aligned(out)) {
        long long nvec = n / 8;
        long long blocks = (nvec + threads - 1) / threads;
        if (blocks > max_blocks) blocks = max_blocks;
        bgs_vec_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
            static_cast<const uint4*>(x), static_cast<const __half*>(b), static_cast<const __half*>(s),
            static_cast<uint4*>(out), nvec, cols);
    } else {
        long long blocks = (n + threads - 1) / threads;
        if (blocks > max_blocks) blocks = max_blocks;
        bgs_scalar_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
            static_cast<const __half*>(x), static_cast<const __half*>(b), static_cast<const __half*>(s),
            static_cast<__half*>(out), n, cols);
    }
}
"""

LAUNCHER = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

torch::Tensor bias_gelu_scale(torch::Tensor x, torch::Tensor b, torch::Tensor s) {
    TORCH_CHECK(x.is_cuda() && b.is_cuda() && s.is_cuda(), "bias_gelu_scale: expected CUDA tensors");
    TORCH_CHECK(x.scalar_type() == at::kHalf && b.scalar_type() == at::kHalf && s.scalar_type() == at::kHalf,
                "bias_gelu_scale: expected float16 tensors");
    TORCH_CHECK(x.dim() >= 1 && b.dim() == 1 && s.dim() == 1 && b.size(0) == x.size(-1) && s.size(0) == x.size(-1),
                "bias_gelu_scale: bias and scale must have the size of the last dimension");
    auto xc = x.contiguous();
    auto bc = b.contiguous();
    auto sc = s.contiguous();
    auto out = torch::empty_like(xc);
    if (xc.numel() == 0) return out;
    int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    launch_bias_gelu_scale(xc.data_ptr(), bc.data_ptr(), sc.data_ptr(), out.data_ptr(), xc.numel(), xc.size(-1),
                           sms, at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kernelrl_suite_bias_gelu_scale_fp16_v1",
    cpp_sources="torch::Tensor bias_gelu_scale(torch::Tensor x, torch::Tensor b, torch::Tensor s);",
    cuda_sources=KERNELS + LAUNCHER,
    functions=["bias_gelu_scale"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, cols: int):
        super().__init__()
        self.bias = nn.Parameter((0.5 * torch.randn(cols)).to(torch.float16))
        self.scale = nn.Parameter((1.0 + 0.2 * torch.randn(cols)).to(torch.float16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.bias_gelu_scale(x, self.bias, self.scale)
