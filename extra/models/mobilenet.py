"""MobileNetV2 (Sandler et al., "MobileNetV2: Inverted Residuals and Linear Bottlenecks") for any
PyTorch-style `nn`.

    model = mobilenet_v2(lazygrad.nn).eval()    # or mobilenet_v2(torch.nn): the same state_dict names

The layout and parameter names are torchvision's `mobilenet_v2` at width 1.0: `features` is a stem
convolution (3 -> 32, stride 2), 17 InvertedResidual blocks and a 1x1 convolution to 1280 channels,
each convolution followed by BatchNorm and ReLU6 except a block's last (linear) one; `classifier`
is Dropout(0.2) and Linear(1280, num_classes). An InvertedResidual expands its input with a 1x1
convolution (skipped when the expansion is 1), filters it with a depthwise 3x3 convolution
(groups = channels) and projects it back with a 1x1 convolution, adding the input when the shapes
allow. lazygrad.nn has no ReLU6 module, so one is defined here around `nn.functional.relu6`.
"""
from __future__ import annotations

import functools

# (expansion, output channels, blocks, stride of the first block), as in the paper's Table 2
INVERTED_RESIDUAL_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                             (6, 160, 3, 2), (6, 320, 1, 1))
STEM_CHANNELS = 32
LAST_CHANNELS = 1280


@functools.cache
def _classes(nn):
    """ReLU6, ConvNormActivation, InvertedResidual and MobileNetV2 built on `nn`, once per namespace."""

    class ReLU6(nn.Module):
        """min(max(x, 0), 6)."""

        def forward(self, x):
            return nn.functional.relu6(x)

    class ConvNormActivation(nn.Sequential):
        """Conv2d without bias, BatchNorm2d and ReLU6, as children 0, 1 and 2 (torchvision's
        Conv2dNormActivation); padding keeps the size at stride 1."""

        def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, stride: int = 1,
                     groups: int = 1):
            super().__init__(nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                                       padding=(kernel_size - 1) // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(out_channels), ReLU6())

    class InvertedResidual(nn.Module):
        """1x1 expansion, depthwise 3x3, linear 1x1 projection, in `conv`; a residual add when the
        stride is 1 and the width is kept."""

        def __init__(self, in_channels: int, out_channels: int, stride: int, expansion: int):
            super().__init__()
            hidden = int(round(in_channels * expansion))
            self.use_res_connect = stride == 1 and in_channels == out_channels
            layers = []
            if expansion != 1:
                layers.append(ConvNormActivation(in_channels, hidden, kernel_size=1))
            layers += [ConvNormActivation(hidden, hidden, stride=stride, groups=hidden),
                       nn.Conv2d(hidden, out_channels, 1, bias=False),
                       nn.BatchNorm2d(out_channels)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self, num_classes: int, dropout: float):
            super().__init__()
            features = [ConvNormActivation(3, STEM_CHANNELS, stride=2)]
            in_channels = STEM_CHANNELS
            for expansion, channels, blocks, first_stride in INVERTED_RESIDUAL_SETTING:
                for number in range(blocks):
                    stride = first_stride if number == 0 else 1
                    features.append(InvertedResidual(in_channels, channels, stride, expansion))
                    in_channels = channels
            features.append(ConvNormActivation(in_channels, LAST_CHANNELS, kernel_size=1))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(LAST_CHANNELS, num_classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
            return self.classifier(x)

    return MobileNetV2


def mobilenet_v2(nn, num_classes: int = 1000, dropout: float = 0.2):
    """MobileNetV2 (width 1.0) in the namespace `nn` (lazygrad.nn or torch.nn), in training mode as built."""
    return _classes(nn)(num_classes, dropout)
