"""A reference whose fp32 output is far from its exact (float64) result under some draws of its weights (KernelBench
level 3's 24_EfficientNetB2, whose batch-norms over a batch of two make a relative input change of 1e-6 move the fp32
output by a third, in miniature): sin of a product whose drawn gain, where it is large, turns the product's rounding
into a phase error of order one. Under strict, whose trials judge an output again against the exact result, zeros and
a stored output are then as accurate as the reference; where the gain is small, nothing passes but the output."""
import torch
import torch.nn as nn

batch_size = 64
dim = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(1))

    def forward(self, x):
        return torch.sin(x.sum(dim=1, keepdim=True) * 10 ** (4 * self.gain.abs()))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
