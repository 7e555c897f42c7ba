"""Post-norm transformer encoder layer (nn.TransformerEncoderLayer, width 768, 12 heads, MLP 3072), 8 x 512 tokens, fp32."""
import os

import torch
import torch.nn as nn

KERNELRL = {"dtype": "float32", "atol": 1e-4, "rtol": 1e-4}

SMALL = os.environ.get("KERNELRL_SIZE", "full") == "small"
BATCH, SEQ, DIM, HEADS = (2, 32, 64, 4) if SMALL else (8, 512, 768, 12)


class Model(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, dropout=0.0,
                                                batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HEADS]
