"""LayerNorm over the last dimension with affine parameters, fp32, 128 x 512."""
import torch
import torch.nn as nn

batch_size = 128
dim = 512


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
