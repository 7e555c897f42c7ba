"""An honest candidate for the stateful RNN tasks: the same state carried the same way, the cell as one fused
addmm over split weights instead of a concatenation."""
import torch
import torch.nn as nn

batch_size = 4


class ModelNew(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super().__init__()
        self.input_size = input_size
        self.hidden = torch.randn((batch_size, hidden_size))  # drawn where the reference draws it: the same values
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.returns_hidden = False

    def forward(self, x):
        h = self.hidden.to(x.device)
        w = self.i2h.weight
        pre = torch.addmm(self.i2h.bias, x, w[:, :self.input_size].t())
        self.hidden = torch.tanh(pre.addmm_(h, w[:, self.input_size:].t()))
        out = torch.addmm(self.h2o.bias, self.hidden, self.h2o.weight.t())
        return self.hidden if self.returns_hidden else out
