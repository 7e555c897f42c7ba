"""Honest (CUDA): the two halves of the product run on two streams, and the current stream waits for both."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, A, B):
        if self.side is None:
            self.side = torch.cuda.Stream()
        main = torch.cuda.current_stream()
        out = torch.empty(A.shape[0], B.shape[1], dtype=A.dtype, device=A.device)
        half = A.shape[0] // 2
        self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            torch.mm(A[half:], B, out=out[half:])
        torch.mm(A[:half], B, out=out[:half])
        main.wait_stream(self.side)
        out.record_stream(self.side)
        return out
