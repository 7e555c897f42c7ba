"""Mean cross-entropy loss of 16384 rows of fp32 logits over a 32000-entry vocabulary."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# Input 1 holds class indices: the evaluator must keep those values, never re-draw them.
KERNELRL = {"dtype": "float32", "atol": 1e-5, "rtol": 1e-5, "fixed_inputs": [1]}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
ROWS, VOCAB = (64, 1000) if SMALL else (16384, 32000)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(ROWS, VOCAB) * 2.0, torch.randint(0, VOCAB, (ROWS,))]


def get_init_inputs():
    return []
