# kernelrl optimize: candidate 4 (cuda-graph), verified speedup 1.000x on cuda:0
"""Three-layer MLP 4096 -> 4096 -> 4096 -> 1024 with ReLU, batch 4096, fp32."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, IN, HIDDEN, OUT = (64, 128, 128, 32) if SMALL else (4096, 4096, 4096, 1024)


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, out_features),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


# ---- kernelrl proposer: cuda-graph ----
import torch as _torch


def _kernelrl_map(fn, obj):
    """Apply fn to every tensor in a (nested) tuple/list output."""
    if isinstance(obj, _torch.Tensor):
        return fn(obj)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_kernelrl_map(fn, o) for o in obj)
    return obj


class ModelNew(Model):
    """Model replayed from a CUDA graph per input signature; inputs are copied in and outputs copied out
    on every call, so each call computes its own result."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kernelrl_graphs = {}

    def forward(self, *args):
        key = tuple((tuple(a.shape), a.dtype, str(a.device), a.stride()) if isinstance(a, _torch.Tensor)
                    else ("value", repr(a)) for a in args)
        entry = self._kernelrl_graphs.get(key)
        if entry is None:
            entry = self._kernelrl_graphs[key] = self._kernelrl_capture(args)
        graph, static_in, static_out = entry
        for buf, a in zip(static_in, args):
            if isinstance(a, _torch.Tensor):
                buf.copy_(a)
        graph.replay()
        return _kernelrl_map(_torch.clone, static_out)

    def _kernelrl_capture(self, args):
        static_in = [a.clone() if isinstance(a, _torch.Tensor) else a for a in args]
        # Warm-up runs belong on a side stream before capture (PyTorch's documented capture recipe).
        side = _torch.cuda.Stream()
        side.wait_stream(_torch.cuda.current_stream())
        with _torch.no_grad(), _torch.cuda.stream(side):
            for _ in range(3):
                super().forward(*static_in)
        _torch.cuda.current_stream().wait_stream(side)
        graph = _torch.cuda.CUDAGraph()
        with _torch.no_grad(), _torch.cuda.graph(graph):
            static_out = super().forward(*static_in)
        return graph, static_in, static_out
