"""A convolution, GroupNorm and the mean of every channel and position (KernelBench level 2's
23_Conv3d_GroupNorm_Mean, smaller): the mean of a group-normalised output is its shift, zero, whatever the input,
so the fp32 output is rounding alone and zeros are more accurate than the reference."""
import torch
import torch.nn as nn

batch_size = 8
in_channels = 3
out_channels = 8
D, H, W = 6, 8, 8
kernel_size = 3
num_groups = 4


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        x = self.conv(x)
        x = self.group_norm(x)
        return x.mean(dim=[1, 2, 3, 4])


def get_inputs():
    return [torch.rand(batch_size, in_channels, D, H, W)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]
