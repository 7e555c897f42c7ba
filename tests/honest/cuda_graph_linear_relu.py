"""Honest (CUDA): the linear + ReLU is captured once in a CUDA graph and replayed per call on a copy of the input."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.graph = None

    def _capture(self, x):
        self.static_in = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                torch.relu(self.linear(self.static_in))
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_out = torch.relu(self.linear(self.static_in))

    def forward(self, x):
        if self.graph is None or x.shape != self.static_in.shape:
            self._capture(x)
        self.static_in.copy_(x)
        self.graph.replay()
        return self.static_out.clone()
