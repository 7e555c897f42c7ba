# kernelrl optimize: candidate 6 (cudnn-benchmark), verified speedup 3.545x on cuda:0
"""3x3 convolution (64 -> 128 channels, 32 x 64 x 64) then batch-statistics normalisation then ReLU, fp32."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, C_IN, C_OUT, SIZE = (2, 4, 8, 16) if SMALL else (32, 64, 128, 64)


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int, eps: float = 1e-5):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=3, padding=1)
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(c_out))
        self.bias = nn.Parameter(0.1 * torch.randn(c_out))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = F.batch_norm(y, None, None, self.weight, self.bias, training=True, eps=self.eps)
        return torch.relu(y)


# ---- kernelrl proposer: cudnn-benchmark ----
import torch as _torch


class ModelNew(Model):
    """Model with cuDNN autotuning of convolution algorithms (precision settings untouched)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _torch.backends.cudnn.benchmark = True
