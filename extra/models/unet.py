"""A small U-Net denoiser (Ronneberger et al., "U-Net: Convolutional Networks for Biomedical Image
Segmentation", in the shape diffusion models use) for any PyTorch-style `nn`.

    model = small_unet(lazygrad.nn)             # or small_unet(torch.nn): the same state_dict names

Two resolutions: `inc` (3x3 convolution to 32 channels, GroupNorm of 8 groups, SiLU), `down` (a
stride-2 3x3 convolution to 64 channels, then a 3x3 one, each with GroupNorm and SiLU), `up` (a 4x4
stride-2 transposed convolution back to 32 channels, GroupNorm, SiLU), whose output is added to
`inc`'s (the skip connection), and `out` (3x3 convolution to the input's channels). The layers with
their own gradients in lazygrad (transposed convolution, group norm after a biased convolution,
strided convolution) are the ones a denoiser's training step spends its time in.
"""
from __future__ import annotations

import functools


@functools.cache
def _classes(nn):
    """ConvNormActivation and SmallUNet built on `nn`, once per namespace."""

    class ConvNormActivation(nn.Sequential):
        """A convolution (transposed when `up`), GroupNorm of 8 groups and SiLU, as children 0, 1, 2."""

        def __init__(self, in_channels: int, out_channels: int, stride: int = 1, up: bool = False):
            convolution = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1) if up else \
                nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1)
            super().__init__(convolution, nn.GroupNorm(8, out_channels), nn.SiLU())

    class SmallUNet(nn.Module):
        def __init__(self, channels: int = 3, width: int = 32):
            super().__init__()
            self.inc = ConvNormActivation(channels, width)
            self.down = nn.Sequential(ConvNormActivation(width, 2 * width, stride=2),
                                      ConvNormActivation(2 * width, 2 * width))
            self.up = ConvNormActivation(2 * width, width, up=True)
            self.out = nn.Conv2d(width, channels, 3, padding=1)

        def forward(self, x):
            skip = self.inc(x)
            return self.out(self.up(self.down(skip)) + skip)

    return SmallUNet


def small_unet(nn, channels: int = 3, width: int = 32):
    """The U-Net in the namespace `nn` (lazygrad.nn or torch.nn), in training mode as built; input
    (N, channels, H, W) with even H and W, output of the same shape."""
    return _classes(nn)(channels, width)
