"""Scale, mask and softmax fused into one CUDA kernel per row (online max/sum, fp32 math, fp16 in and out)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

KERNELS = r"""
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <math.h>

__device__ __forceinline__ void sm_merge(float& m, float& s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    if (mn == -INFINITY) { m = mn; s = 0.f; return; }
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

// The reference rounds scores * scale to fp16 before the softmax.
__device__ __forceinline__ float scaled(__half x, float scale) {
    return __half2float(__float2half_rn(__half2float(x) * scale));
}

template <int THREADS>
__device__ __forceinline__ void block_merge(float& m, float& s) {
    __shared__ float sm[THREADS / 32], ss[THREADS / 32];
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffff, m, off), s2 = __shfl_xor_sync(0xffffffff, s, off);
        sm_merge(m, s, m2, s2);
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    m = -INFINITY; s = 0.f;
    for (int w = 0; w < THREADS / 32; ++w) sm_merge(m, s, sm[w], ss[w]);
}

// One block per row; row r of the scores uses row (r % mask_rows) of the [mask_rows, cols] mask.
template <int THREADS>
__global__ void scale_mask_softmax_kernel(const __half* __restrict__ x, const unsigned char* __restrict__ mask,
                                          __half* __restrict__ out, long long cols, long long mask_rows,
                                          float scale) {
    const long long base = (long long)blockIdx.x * cols;
    const unsigned char* mrow = mask + ((long long)blockIdx.x % mask_rows) * cols;
    float m = -INFINITY, s = 0.f;
    for (long long i = threadIdx.x; i < cols; i += THREADS) {
        if (mrow[i]) continue;
        float v = scaled(x[base + i], scale);
        if (v > m) { s = s * expf(m - v) + 1.f; m = v; }
        else if (v != -INFINITY) { s += expf(v - m); }
    }
    block_merge<THREADS>(m, s);
    // A fully masked row is NaN in the reference (softmax of all -inf).
    float inv = s > 0.f ? 1.f / s : NAN;
    for (long long i = threadIdx.x; i < cols; i += THREADS) {
        float p = mrow[i] ? (s > 0.f ? 0.f : NAN) : expf(scaled(x[base + i], scale) - m) * inv;
        out[base + i] = __float2half_rn(p);
    }
}

void launch_scale_mask_softmax(const void* x, const void* mask, void* out, long long rows, long long cols,
                               long long mask_rows, float scale, cudaStream_t stream) {
    constexpr int THREADS = 256;
    scale_mask_softmax_kernel<THREADS><<<(unsigned)rows, THREADS, 0, stream>>>(
        static_cast<const __half*>(x), static_cast<const unsigned char*>(mask), static_cast<__half*>(out),
        cols, mask_rows, scale);
}
"""

LAUNCHER = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

torch::Tensor scale_mask_softmax(torch::Tensor x, torch::Tensor mask, double scale) {
    TORCH_CHECK(x.is_cuda() && mask.is_cuda(), "scale_mask_softmax: expected CUDA tensors");
    TORCH_CHECK(x.scalar_type() == at::kHalf, "scale_mask_softmax: expected float16 scores");
    TORCH_CHECK(mask.scalar_type() == at::kBool, "scale_mask_softmax: expected a bool mask");
    TORCH_CHECK(x.dim() >= 2 && mask.dim() == 2 && mask.size(0) == x.size(-2) && mask.size(1) == x.size(-1),
                "scale_mask_softmax: the mask must match the last two dimensions of the scores");
    auto xc = x.contiguous();
    auto mc = mask.contiguous();
    auto out = torch::empty_like(xc);
    if (xc.numel() == 0) return out;
    long long cols = xc.size(-1);
    long long rows = xc.numel() / cols;
    TORCH_CHECK(rows < (1LL << 31), "scale_mask_softmax: too many rows for one grid");
    launch_scale_mask_softmax(xc.data_ptr(), mc.data_ptr(), out.data_ptr(), rows, cols, mc.size(0), (float)scale,
                              at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kernelrl_suite_scale_mask_softmax_fp16_v1",
    cpp_sources="torch::Tensor scale_mask_softmax(torch::Tensor x, torch::Tensor mask, double scale);",
    cuda_sources=KERNELS + LAUNCHER,
    functions=["scale_mask_softmax"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, seq: int, scale: float):
        super().__init__()
        self.scale = scale
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return _ext.scale_mask_softmax(scores, self.mask, self.scale)

