"""A candidate whose code path changes with its history: its third call (a later trial) takes a broken path that
its first call in a fresh process never takes."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        out = x.softmax(dim=1)
        return out * 0.5 if self.calls == 3 else out
