"""ResNet-18 (He et al., "Deep Residual Learning for Image Recognition") for any PyTorch-style `nn`.

    import lazygrad.nn, torch.nn
    model = resnet18(lazygrad.nn).eval()        # lazygrad
    reference = resnet18(torch.nn).eval()       # PyTorch; the same state_dict names
    model.load_state_dict({name: Tensor(value.numpy()) for name, value in reference.state_dict().items()})

The layout and parameter names are torchvision's `resnet18`: conv1 (7x7, stride 2, padding 3), bn1,
maxpool (3x3, stride 2, padding 1), layer1..layer4 of two BasicBlocks each (a block that changes the
stride or the width has a `downsample` of a 1x1 convolution and a BatchNorm), a global average
pool and fc. Initialization is each namespace's default for its layers (torchvision draws the
convolutions from kaiming_normal instead); load a state dict for real weights.
"""
from __future__ import annotations

import functools

STAGE_WIDTHS = (64, 128, 256, 512)


@functools.cache
def _classes(nn):
    """BasicBlock and ResNet built on `nn` (lazygrad.nn or torch.nn), once per namespace."""

    class BasicBlock(nn.Module):
        """Two 3x3 convolutions with BatchNorm, added to the input (or its 1x1 projection)."""

        def __init__(self, in_channels: int, channels: int, stride: int = 1):
            super().__init__()
            self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(channels)
            self.conv2 = nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(channels)
            self.downsample = None
            if stride != 1 or in_channels != channels:
                self.downsample = nn.Sequential(nn.Conv2d(in_channels, channels, 1, stride=stride, bias=False),
                                                nn.BatchNorm2d(channels))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.bn1(self.conv1(x)).relu()
            out = self.bn2(self.conv2(out))
            return (out + identity).relu()

    class ResNet(nn.Module):
        """The stem, four stages of BasicBlocks (the first block of stages 2-4 halves the resolution),
        global average pooling and the classifier."""

        def __init__(self, blocks_per_stage: tuple[int, ...], num_classes: int):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            in_channels = 64
            for number, (channels, blocks) in enumerate(zip(STAGE_WIDTHS, blocks_per_stage)):
                stride = 1 if number == 0 else 2
                stage = [BasicBlock(in_channels, channels, stride)]
                stage += [BasicBlock(channels, channels) for _ in range(blocks - 1)]
                setattr(self, f"layer{number + 1}", nn.Sequential(*stage))
                in_channels = channels
            self.fc = nn.Linear(in_channels, num_classes)

        def forward(self, x):
            x = self.maxpool(self.bn1(self.conv1(x)).relu())
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
            return self.fc(x)

    return BasicBlock, ResNet


def resnet18(nn, num_classes: int = 1000):
    """ResNet-18 in the namespace `nn` (lazygrad.nn or torch.nn), in training mode as built."""
    _, ResNet = _classes(nn)
    return ResNet((2, 2, 2, 2), num_classes)
