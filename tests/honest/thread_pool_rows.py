"""Honest: a thread pool kept from __init__ on; each call splits the rows across it and waits for every part."""
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = ThreadPoolExecutor(max_workers=2)

    def forward(self, x):
        out = torch.empty_like(x)
        parts = [self.pool.submit(torch.softmax, xc, -1, out=oc) for xc, oc in zip(x.chunk(2), out.chunk(2))]
        for p in parts:
            p.result()
        return out
