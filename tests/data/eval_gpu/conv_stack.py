"""A MobileNet-like stack of convolution, batch-norm and ReLU blocks, each of its own width: torch.compile of it
makes dozens of Triton kernels, a compile long enough for Inductor's compile worker pool to come up during it, as
it did for KernelBench's MobileNetV1 and EfficientNetB0 (whether this stack's compile outlasts the pool's start was
not measured)."""
import torch
import torch.nn as nn

WIDTHS = [3, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b),
                                                    nn.ReLU()) for a, b in zip(WIDTHS, WIDTHS[1:])])

    def forward(self, x):
        return self.blocks(x).mean(dim=(2, 3))


def get_inputs():
    return [torch.randn(8, 3, 32, 32)]


def get_init_inputs():
    return []
