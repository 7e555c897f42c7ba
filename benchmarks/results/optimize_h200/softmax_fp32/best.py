# kernelrl optimize: candidate 2 (compile), verified speedup 1.519x on cuda:0
"""Softmax over the last dimension of a 16384 x 8192 fp32 matrix."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-6, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
ROWS, COLS = (256, 512) if SMALL else (16384, 8192)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


# ---- kernelrl proposer: compile ----
import torch as _torch


class ModelNew(Model):
    """Model under torch.compile(mode='default')."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kernelrl_forward = _torch.compile(super().forward, mode='default', dynamic=False)

    def forward(self, *args, **kwargs):
        return self._kernelrl_forward(*args, **kwargs)
