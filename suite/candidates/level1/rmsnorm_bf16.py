"""RMSNorm in one CUDA kernel: fp32 statistics, the reference's bf16 roundings, two reads of each row."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

KERNELS = r"""
#include <cuda_runtime.h>
#include <cuda_bf16.h>

template <int THREADS>
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float partial[THREADS / 32];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffff, v, off);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < THREADS / 32; ++w) total += partial[w];
    return total;
}

// out = w * bf16(x * rsqrt(mean(x^2) + eps)), each product rounded to bf16 as in the reference.
__device__ __forceinline__ __nv_bfloat16 rms_out(__nv_bfloat16 x, __nv_bfloat16 w, float inv) {
    float n = __bfloat162float(__float2bfloat16_rn(__bfloat162float(x) * inv));
    return __float2bfloat16_rn(__bfloat162float(w) * n);
}

template <int THREADS, bool VEC>
__global__ void rmsnorm_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                               __nv_bfloat16* __restrict__ out, long long cols, float eps) {
    const long long base = (long long)blockIdx.x * cols;
    float ss = 0.f;
    if (VEC) {
        const uint4* row = reinterpret_cast<const uint4*>(x + base);
        for (long long i = threadIdx.x; i < cols / 8; i += THREADS) {
            uint4 pack = row[i];
            const __nv_bfloat16* v = reinterpret_cast<const __nv_bfloat16*>(&pack);
            #pragma unroll
            for (int j = 0; j < 8; ++j) { float f = __bfloat162float(v[j]); ss += f * f; }
        }
    } else {
        for (long long i = threadIdx.x; i < cols; i += THREADS) { float f = __bfloat162float(x[base + i]); ss += f * f; }
    }
    float inv = rsqrtf(block_sum<THREADS>(ss) / (float)cols + eps);
    if (VEC) {
        const uint4* row = reinterpret_cast<const uint4*>(x + base);
        const uint4* wv = reinterpret_cast<const uint4*>(w);
        uint4* orow = reinterpret_cast<uint4*>(out + base);
        for (long long i = threadIdx.x; i < cols / 8; i += THREADS) {
            uint4 xp = row[i], wp = wv[i], op;
            const __nv_bfloat16* xv = reinterpret_cast<const __nv_bfloat16*>(&xp);
            const __nv_bfloat16* ww = reinterpret_cast<const __nv_bfloat16*>(&wp);
            __nv_bfloat16* ov = reinterpret_cast<__nv_bfloat16*>(&op);
            #pragma unroll
            for (int j = 0; j < 8; ++j) ov[j] = rms_out(xv[j], ww[j], inv);
            orow[i] = op;
        }
    } else {
        for (long long i = threadIdx.x; i < cols; i += THREADS) out[base + i] = rms_out(x[base + i], w[i], inv);
    }
}

void launch_rmsnorm(const void* x, const void* w, void* out, long long rows, long long cols, float eps,
                    cudaStream_t stream) {
    constexpr int THREADS = 512;
    auto aligned = [](const void* p) { return reinterpret_cast<unsigned long long>(p) % 16 == 0; };
    bool vec = cols % 8 == 0 && aligned(x) && aligned(w) && aligned(out);
    auto xb = static_cast<const __nv_bfloat16*>(x);
    auto wb = static_cast<const __nv_bfloat16*>(w);
    auto ob = static_cast<__nv_bfloat16*>(out);
    if (vec) rmsnorm_kernel<THREADS, true><<<(unsigned)rows, THREADS, 0, stream>>>(xb, wb, ob, cols, eps);
    else rmsnorm_kernel<THREADS, false><<<(unsigned)rows, THREADS, 0, stream>>>(xb, wb, ob, cols, eps);
}
"""

LAUNCHER = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

torch::Tensor rmsnorm_bf16(torch::Tensor x, torch::Tensor w, double eps) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda(), "rmsnorm_bf16: expected CUDA tensors");
    TORCH_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16, "rmsnorm_bf16: expected bf16");
    TORCH_CHECK(x.dim() >= 1 && w.dim() == 1 && w.size(0) == x.size(-1),
                "rmsnorm_bf16: weight must have the size of the last dimension");
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto out = torch::empty_like(xc);
    long long cols = xc.size(-1);
    if (xc.numel() == 0) return out;
    long long rows = xc.numel() / cols;
    TORCH_CHECK(rows < (1LL << 31), "rmsnorm_bf16: too many rows for one grid");
    launch_rmsnorm(xc.data_ptr(), wc.data_ptr(), out.data_ptr(), rows, cols, (float)eps,
                   at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kernelrl_suite_rmsnorm_bf16_v1",
    cpp_sources="torch::Tensor rmsnorm_bf16(torch::Tensor x, torch::Tensor w, double eps);",
    cuda_sources=KERNELS + LAUNCHER,
    functions=["rmsnorm_bf16"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((1.0 + 0.1 * torch.randn(hidden)).to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.rmsnorm_bf16(x, self.weight, self.eps)
