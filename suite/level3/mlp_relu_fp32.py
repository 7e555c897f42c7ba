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


def get_inputs():
    return [torch.randn(BATCH, IN)]


def get_init_inputs():
    return [IN, HIDDEN, OUT]
