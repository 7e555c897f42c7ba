import torch
import torch.nn as nn

WIDTHS = [3, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b),
                                                    nn.ReLU()) for a, b in zip(WIDTHS, WIDTHS[1:])])
        self.run = torch.compile(self._forward)

    def _forward(self, x):
        return self.blocks(x).mean(dim=(2, 3))

    def forward(self, x):
        return self.run(x)
