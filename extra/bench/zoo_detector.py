"""A one-stage object detector in the style of YOLOv8-n, for bench_zoo.py (torch; written from its
published structure, not taken from a package): 640x640 input, a backbone of strided convolutions and
split-and-concatenate stages, a pyramid of three 5x5 max pools, a feature pyramid with nearest
upsampling, and a head that decodes at 8400 anchors a box (a softmax over 16 distances per side)
and 80 class scores. 3.2 M parameters, about 8.7 GFLOP: the models engineers ship to small devices
are often this one. Output (1, 84, 8400), as such detectors' ONNX exports give before box
suppression."""
from __future__ import annotations

import torch
from torch import nn

class ConvUnit(nn.Module):
    """Convolution without bias, batch norm, SiLU: the detector's building block."""
    def __init__(self, c_in, c_out, kernel=1, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, bias=False)
        self.norm = nn.BatchNorm2d(c_out)

    def forward(self, x):
        return nn.functional.silu(self.norm(self.conv(x)))


class Residual(nn.Module):
    def __init__(self, channels, shortcut):
        super().__init__()
        self.first, self.second, self.shortcut = ConvUnit(channels, channels, 3), ConvUnit(channels, channels, 3), shortcut

    def forward(self, x):
        y = self.second(self.first(x))
        return x + y if self.shortcut else y


class SplitStage(nn.Module):
    """A 1x1 convolution split in two halves; blocks applied to the last piece in turn, every piece
    concatenated and mixed by a second 1x1 convolution (YOLOv8's C2f)."""
    def __init__(self, c_in, c_out, blocks, shortcut):
        super().__init__()
        self.half = c_out // 2
        self.entry = ConvUnit(c_in, 2 * self.half)
        self.blocks = nn.ModuleList(Residual(self.half, shortcut) for _ in range(blocks))
        self.exit = ConvUnit((2 + blocks) * self.half, c_out)

    def forward(self, x):
        pieces = list(self.entry(x).split((self.half, self.half), 1))
        for block in self.blocks:
            pieces.append(block(pieces[-1]))
        return self.exit(torch.cat(pieces, 1))


class PoolPyramid(nn.Module):
    """Three 5x5 max pools in a row, concatenated with their input (SPPF)."""
    def __init__(self, c_in, c_out):
        super().__init__()
        self.entry, self.exit = ConvUnit(c_in, c_in // 2), ConvUnit(c_in // 2 * 4, c_out)

    def forward(self, x):
        x = self.entry(x)
        pooled = [x]
        for _ in range(3):
            pooled.append(nn.functional.max_pool2d(pooled[-1], 5, 1, 2))
        return self.exit(torch.cat(pooled, 1))


def head(c_in, width, c_out):
    return nn.Sequential(ConvUnit(c_in, width, 3), ConvUnit(width, width, 3), nn.Conv2d(width, c_out, 1))


class Detector(nn.Module):
    """A YOLOv8-n style detector at 640x640: backbone, feature pyramid, and a head that decodes
    boxes (a distribution over 16 distances per side) and 80 class scores at 8400 anchors."""
    def __init__(self, classes=80, bins=16):
        super().__init__()
        self.classes, self.bins = classes, bins
        self.stem = nn.Sequential(ConvUnit(3, 16, 3, 2), ConvUnit(16, 32, 3, 2), SplitStage(32, 32, 1, True),
                                  ConvUnit(32, 64, 3, 2), SplitStage(64, 64, 2, True))
        self.stage4 = nn.Sequential(ConvUnit(64, 128, 3, 2), SplitStage(128, 128, 2, True))
        self.stage5 = nn.Sequential(ConvUnit(128, 256, 3, 2), SplitStage(256, 256, 1, True), PoolPyramid(256, 256))
        self.up4, self.up3 = SplitStage(384, 128, 1, False), SplitStage(192, 64, 1, False)
        self.down4, self.out4 = ConvUnit(64, 64, 3, 2), SplitStage(192, 128, 1, False)
        self.down5, self.out5 = ConvUnit(128, 128, 3, 2), SplitStage(384, 256, 1, False)
        self.box_heads = nn.ModuleList(head(channels, 64, 4 * bins) for channels in (64, 128, 256))
        self.score_heads = nn.ModuleList(head(channels, max(64, classes), classes) for channels in (64, 128, 256))
        anchors, strides = [], []
        for size, stride in ((80, 8), (40, 16), (20, 32)):
            centers = torch.arange(size, dtype=torch.float32) + 0.5
            y, x = torch.meshgrid(centers, centers, indexing="ij")
            anchors.append(torch.stack((x, y), -1).reshape(-1, 2))
            strides.append(torch.full((size * size, 1), float(stride)))
        self.register_buffer("anchors", torch.cat(anchors).T.unsqueeze(0))
        self.register_buffer("strides", torch.cat(strides).T.unsqueeze(0))
        self.register_buffer("positions", torch.arange(bins, dtype=torch.float32).reshape(1, 1, bins, 1))

    def forward(self, image):
        p3 = self.stem(image)
        p4 = self.stage4(p3)
        p5 = self.stage5(p4)
        up = nn.functional.interpolate
        t4 = self.up4(torch.cat((up(p5, scale_factor=2.0, mode="nearest"), p4), 1))
        n3 = self.up3(torch.cat((up(t4, scale_factor=2.0, mode="nearest"), p3), 1))
        n4 = self.out4(torch.cat((self.down4(n3), t4), 1))
        n5 = self.out5(torch.cat((self.down5(n4), p5), 1))
        levels = [torch.cat((box(x), score(x)), 1).flatten(2) for x, box, score in
                  zip((n3, n4, n5), self.box_heads, self.score_heads)]
        everything = torch.cat(levels, 2)
        distribution, scores = everything.split((4 * self.bins, self.classes), 1)
        distribution = distribution.reshape(1, 4, self.bins, -1).softmax(2)
        distances = (distribution * self.positions).sum(2)
        left_top, right_bottom = distances.chunk(2, 1)
        corner1, corner2 = self.anchors - left_top, self.anchors + right_bottom
        boxes = torch.cat(((corner1 + corner2) / 2, corner2 - corner1), 1) * self.strides
        return torch.cat((boxes, scores.sigmoid()), 1)
