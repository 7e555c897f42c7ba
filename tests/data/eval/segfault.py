import ctypes
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()

    def forward(self, x):
        ctypes.string_at(0)  # reads address 0: SIGSEGV
        return x
