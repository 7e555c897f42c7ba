import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()

    def forward(self, x):
        raise ValueError("shape mismatch in my kernel")
