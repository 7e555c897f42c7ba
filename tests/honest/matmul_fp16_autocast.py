"""Honest under the kernelbench policy: an fp32 matmul computed by fp16 autocast (16-bit tensor-core math).

Its error (about 4e-4 of the output's RMS, as TF32's) is outside the strict policy's fp32 tolerance and well
inside KernelBench's atol = rtol = 1e-2: `incorrect` under strict, `ok` with a precision warning under
kernelbench. (bf16's 8-bit mantissa, about 3e-3 of the RMS with long tails, does not reliably stay inside 1e-2.)
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        with torch.autocast(device_type=A.device.type, dtype=torch.float16):
            C = torch.matmul(A, B)
        return C.float()
