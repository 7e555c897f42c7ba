import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x)   # syntax error: the evaluator reports compile_error
        return (x - 0.5).clamp_min(0)
