"""Cheat: does the work on a private stream, so events on the current stream see almost nothing."""
import torch
import torch.nn as nn

_stream = torch.cuda.Stream()


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        y = torch.empty_like(x)
        _stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_stream):
            for _ in range(20):  # make the hidden work large enough to matter
                y.copy_(torch.softmax(x, dim=-1) * self.scale)
        return y
