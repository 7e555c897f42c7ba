"""`correct.py` with a build that takes 2 s (a load_inline compile, say): a job that stays on its evaluator long
enough for a test to see it there."""
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        time.sleep(2.0)
        self.w = nn.Parameter(torch.randn(n))
        self.b = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return torch.addcmul(self.b, x, self.w).clamp_min_(0)
