"""Linear layer followed by exact GELU, fp32, batch 64, 256 -> 256."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
in_features = 256
out_features = 256


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
