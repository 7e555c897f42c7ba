import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y, z):
        return torch.addcmul(y * z, x, z)
