import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
torch::Tensor fused(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* px = xc.data_ptr<float>();
    const float* pw = w.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    int64_t n = w.numel(), rows = xc.numel() / n;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < n; ++c) {
            float v = px[r * n + c] * pw[c] + pb[c];
            po[r * n + c] = v > 0.f ? v : 0.f;
        }
    return out;
}
"""
ext = load_inline(name="kernelrl_test_cpp_correct", cpp_sources=src, functions=["fused"],
                  extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
        self.b = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return ext.fused(x, self.w, self.b)
