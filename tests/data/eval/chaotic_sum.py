"""sin of a row sum times 1e7: the fp32 sum's rounding (about 1e-6) becomes a phase error of several radians, so
the fp32 output is as far from the exact (float64) one as from any other draw's (a chaotic reference, as KernelBench's
level3/24_EfficientNetB2 is under most draws of its weights)."""
import torch
import torch.nn as nn

GAIN = 1e7


class Model(nn.Module):
    def forward(self, x):
        return torch.sin(x.sum(dim=1, keepdim=True) * GAIN)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
