"""Two stacked linear layers without an activation, fp32, batch 64, 256 -> 512 -> 128."""
import torch
import torch.nn as nn

batch_size = 64
d_in, d_hidden, d_out = 256, 512, 128


class Model(nn.Module):
    def __init__(self, d_in, d_hidden, d_out):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(self.fc1(x))


def get_inputs():
    return [torch.randn(batch_size, d_in)]


def get_init_inputs():
    return [d_in, d_hidden, d_out]
