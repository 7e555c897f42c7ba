"""Linear, dropout (training mode, p = 0.2) and softmax, fp32, batch 64, 128 -> 96: KernelBench level2/66's shape of
problem. The output is random, so a candidate agrees with the reference only by drawing the same dropout mask."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, dropout_p):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x):
        x = self.matmul(x)
        x = self.dropout(x)
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.rand(64, 128)]


def get_init_inputs():
    return [128, 96, 0.2]
