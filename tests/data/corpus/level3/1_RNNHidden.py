import torch
import torch.nn as nn


class Model(nn.Module):
    """An RNN cell that keeps its hidden state between calls."""
    def __init__(self, input_size: int, hidden_size: int):
        super(Model, self).__init__()
        self.hidden = torch.zeros(8, hidden_size)
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.hidden = self.hidden.to(x.device)
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
        return self.hidden


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return [16, 32]
