import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Correct, but it waits for the device inside forward, which no CUDA graph can capture."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        y = torch.softmax(x, dim=-1) * self.scale
        torch.cuda.synchronize()
        return y
