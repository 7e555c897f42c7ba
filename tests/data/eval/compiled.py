import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
        self.b = nn.Parameter(torch.randn(n))
        self.run = torch.compile(self._forward, dynamic=False)

    def _forward(self, x):
        return torch.relu(x * self.w + self.b)

    def forward(self, x):
        return self.run(x)
