"""Honest under the kernelbench policy: an fp32 matmul that lets the GPU use TF32 tensor cores.

It switches TF32 on for float32 matmuls, as many LLM-written KernelBench solutions do: `rejected` as a
precision downgrade under the strict policy, `ok` with the setting reported as a warning under kernelbench.
(On a CPU the setting changes nothing numerically; on a GPU the error is about 1e-3 of the output's RMS.)
"""
import torch
import torch.nn as nn

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)
