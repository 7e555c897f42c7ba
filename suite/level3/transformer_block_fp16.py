"""Pre-norm causal transformer block (attention written with matmuls, GELU MLP), 8 x 1024 tokens, width 1024, 16 heads, fp16."""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

KERNELRL = {"dtype": "float16", "atol": 3e-2, "rtol": 3e-2}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, SEQ, DIM, HEADS = (2, 32, 64, 4) if SMALL else (8, 1024, 1024, 16)


class Model(nn.Module):
    def __init__(self, dim: int, heads: int, seq: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1))
        self.to(torch.float16)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.heads

        def split(t):
            return t.view(b, s, h, d // h).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // h)
        scores = scores.masked_fill(self.mask[:s, :s], float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(out.transpose(1, 2).reshape(b, s, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM, dtype=torch.float16)]


def get_init_inputs():
    return [DIM, HEADS, SEQ]
