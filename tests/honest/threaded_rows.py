"""Honest: rows split across a thread pool that is joined before forward returns."""
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        chunks = list(zip(x.chunk(2), out.chunk(2)))
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda c: torch.softmax(c[0], dim=-1, out=c[1]), chunks))
        return out
