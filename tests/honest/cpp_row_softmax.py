"""Honest: a C++ extension computing a numerically stable row softmax in one kernel (max, exp-sum, scale)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cpp = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor row_softmax(torch::Tensor x) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    for (int64_t i = 0; i < rows; ++i) {
        const float* r = px + i * cols;
        float* o = po + i * cols;
        float m = r[0];
        for (int64_t j = 1; j < cols; ++j) m = r[j] > m ? r[j] : m;
        double s = 0.0;
        for (int64_t j = 0; j < cols; ++j) { o[j] = std::exp(r[j] - m); s += o[j]; }
        const float inv = static_cast<float>(1.0 / s);
        for (int64_t j = 0; j < cols; ++j) o[j] *= inv;
    }
    return out;
}
"""
_ext = load_inline(name="honest_row_softmax", cpp_sources=_cpp, functions=["row_softmax"],
                   extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.row_softmax(x)
