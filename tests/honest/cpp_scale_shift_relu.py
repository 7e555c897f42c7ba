"""Honest: a C++ extension (load_inline) fusing scale, shift and ReLU in one pass over the data."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cpp = r"""
#include <torch/extension.h>

torch::Tensor scale_shift_relu(torch::Tensor x, torch::Tensor scale, torch::Tensor shift) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    const float* ps = scale.data_ptr<float>();
    const float* pb = shift.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    for (int64_t i = 0; i < rows; ++i) {
        const float* r = px + i * cols;
        float* o = po + i * cols;
        for (int64_t j = 0; j < cols; ++j) {
            float v = r[j] * ps[j] + pb[j];
            o[j] = v > 0.f ? v : 0.f;
        }
    }
    return out;
}
"""
_ext = load_inline(name="honest_scale_shift_relu", cpp_sources=_cpp, functions=["scale_shift_relu"],
                   extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(dim))
        self.shift = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return _ext.scale_shift_relu(x, self.scale.detach(), self.shift.detach())
