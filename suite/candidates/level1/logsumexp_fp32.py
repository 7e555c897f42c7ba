"""Row-wise log-sum-exp in one pass over memory: a CUDA kernel with an online (max, sum) per thread."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Pure CUDA part (no torch headers), so it can be compile-checked on its own.
KERNELS = r"""
#include <cuda_runtime.h>
#include <math.h>

// Merge two online log-sum-exp states (max m, sum of exp(x - m) s).
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    if (mn == -INFINITY) { m = mn; s = 0.f; return; }
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

__device__ __forceinline__ void lse_push(float& m, float& s, float v) {
    if (v > m) { s = s * expf(m - v) + 1.f; m = v; }
    else if (v != -INFINITY) { s += expf(v - m); }
}

template <int THREADS, bool VEC>
__global__ void lse_rows_kernel(const float* __restrict__ x, float* __restrict__ out, long long cols) {
    const float* row = x + (long long)blockIdx.x * cols;
    float m = -INFINITY, s = 0.f;
    if (VEC) {
        const float4* row4 = reinterpret_cast<const float4*>(row);
        long long n4 = cols / 4;
        for (long long i = threadIdx.x; i < n4; i += THREADS) {
            float4 v = __ldg(row4 + i);
            lse_push(m, s, v.x); lse_push(m, s, v.y); lse_push(m, s, v.z); lse_push(m, s, v.w);
        }
    } else {
        for (long long i = threadIdx.x; i < cols; i += THREADS) lse_push(m, s, __ldg(row + i));
    }
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffff, m, off);
        float s2 = __shfl_xor_sync(0xffffffff, s, off);
        lse_merge(m, s, m2, s2);
    }
    __shared__ float sm[THREADS / 32], ss[THREADS / 32];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = lane < THREADS / 32 ? sm[lane] : -INFINITY;
        s = lane < THREADS / 32 ? ss[lane] : 0.f;
        for (int off = 16; off > 0; off >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffff, m, off);
            float s2 = __shfl_xor_sync(0xffffffff, s, off);
            lse_merge(m, s, m2, s2);
        }
        if (lane == 0) out[blockIdx.x] = (m == -INFINITY) ? -INFINITY : m + logf(s);
    }
}

void launch_lse_rows(const float* x, float* out, long long rows, long long cols, cudaStream_t stream) {
    constexpr int THREADS = 256;
    bool vec = (cols % 4 == 0) && (reinterpret_cast<unsigned long long>(x) % 16 == 0);
    if (vec) lse_rows_kernel<THREADS, true><<<(unsigned)rows, THREADS, 0, stream>>>(x, out, cols);
    else lse_rows_kernel<THREADS, false><<<(unsigned)rows, THREADS, 0, stream>>>(x, out, cols);
}
"""

LAUNCHER = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

torch::Tensor logsumexp_lastdim(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "logsumexp_lastdim: expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "logsumexp_lastdim: expected float32");
    TORCH_CHECK(x.dim() >= 1, "logsumexp_lastdim: expected at least one dimension");
    auto xc = x.contiguous();
    long long cols = xc.size(-1);
    auto sizes = xc.sizes().vec();
    sizes.pop_back();
    auto out = torch::empty(sizes, xc.options());
    if (out.numel() == 0) return out;
    if (cols == 0) return out.fill_(-INFINITY);
    long long rows = xc.numel() / cols;
    TORCH_CHECK(rows < (1LL << 31), "logsumexp_lastdim: too many rows for one grid");
    launch_lse_rows(xc.data_ptr<float>(), out.data_ptr<float>(), rows, cols,
                    at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kernelrl_suite_logsumexp_fp32_v1",
    cpp_sources="torch::Tensor logsumexp_lastdim(torch::Tensor x);",
    cuda_sources=KERNELS + LAUNCHER,
    functions=["logsumexp_lastdim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.logsumexp_lastdim(x)
