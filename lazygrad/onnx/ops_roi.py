"""Region operators: RoiAlign (bilinear pooling of regions, a matrix product per region) and NonMaxSuppression.

Registered in registry.OPERATORS; model.py calls them. The regions and their batch indices are small
inputs that decide where to sample, so they are read as numbers; from them, `sampling_matrix` builds
on the host each region's (samples, height * width) bilinear weights. The feature map stays on the
device: a region's output is its image's features times that matrix, averaged or maxed per bin.
"""
from __future__ import annotations

import math

import numpy as np

from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor


def bilinear_taps(y: float, x: float, height: int, width: int) -> list[tuple[int, float]]:
    """The four (flat position, weight) taps of a sample point, all weight 0 outside the map."""
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return [(0, 0.0)] * 4
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_low = y_high = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_low = x_high = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1.0 - ly, 1.0 - lx
    return [(y_low * width + x_low, hy * hx), (y_low * width + x_high, hy * lx),
            (y_high * width + x_low, ly * hx), (y_high * width + x_high, ly * lx)]


def sampling_matrix(roi, options: dict, height: int, width: int) -> tuple[np.ndarray, int]:
    """(bins * samples * 4, height * width) tap weights of one region, and the samples per bin."""
    offset = 0.5 if options["half_pixel"] else 0.0
    scale = options["spatial_scale"]
    x1, y1, x2, y2 = (float(value) * scale - offset for value in roi)
    roi_width, roi_height = x2 - x1, y2 - y1
    if not options["half_pixel"]:
        roi_width, roi_height = max(roi_width, 1.0), max(roi_height, 1.0)
    out_h, out_w, ratio = options["output_height"], options["output_width"], options["sampling_ratio"]
    bin_h, bin_w = roi_height / out_h, roi_width / out_w
    grid_h = ratio if ratio > 0 else int(math.ceil(roi_height / out_h))
    grid_w = ratio if ratio > 0 else int(math.ceil(roi_width / out_w))
    samples = max(grid_h * grid_w, 1)
    matrix = np.zeros((out_h * out_w * samples * 4, height * width))
    row = 0
    for ph in range(out_h):
        for pw in range(out_w):
            points = [(y1 + ph * bin_h + (iy + 0.5) * bin_h / grid_h, x1 + pw * bin_w + (ix + 0.5) * bin_w / grid_w)
                      for iy in range(grid_h) for ix in range(grid_w)]
            points += [(-2.0, -2.0)] * (samples - len(points))
            for y, x in points:
                for position, weight in bilinear_taps(y, x, height, width):
                    matrix[row, position] += weight
                    row += 1
    return matrix, samples


@onnx_op("RoiAlign")
def roi_align(ctx, x, rois, batch_indices, coordinate_transformation_mode="half_pixel", mode="avg",
              output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0):
    batch, channels, height, width = x.shape
    options = {"half_pixel": coordinate_transformation_mode == "half_pixel", "spatial_scale": spatial_scale,
               "output_height": output_height, "output_width": output_width, "sampling_ratio": sampling_ratio}
    regions, images = ctx.numpy(rois), ctx.ints(batch_indices)
    outputs = []
    for roi, image in zip(regions, images):
        matrix, samples = sampling_matrix(roi, options, height, width)
        features = x[image].reshape(channels, height * width)
        taps = features @ Tensor(matrix.T.astype(x.dtype.np), device=ctx.device)
        taps = taps.reshape(channels, output_height, output_width, samples, 4)
        pooled = taps.sum((3, 4)) / samples if mode == "avg" else taps.amax((3, 4))
        outputs.append(pooled)
    return Tensor.stack(*outputs, dim=0).cast(x.dtype)


def box_edges(boxes: Tensor, center_point_box: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(x_min, x_max, y_min, y_max) of boxes (..., 4) in either ONNX box format."""
    if center_point_box:
        x, y, half_w, half_h = boxes[..., 0], boxes[..., 1], boxes[..., 2] / 2, boxes[..., 3] / 2
        return x - half_w, x + half_w, y - half_h, y + half_h
    y1, x1, y2, x2 = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
    return x1.minimum(x2), x1.maximum(x2), y1.minimum(y2), y1.maximum(y2)


def overlaps(boxes: Tensor, center_point_box: int, iou_threshold: float) -> Tensor:
    """(batch, boxes, boxes): whether each pair's intersection over union exceeds the threshold."""
    x_min, x_max, y_min, y_max = box_edges(boxes, center_point_box)
    x_min_a, x_min_b = x_min.unsqueeze(2), x_min.unsqueeze(1)   # box a along dim 1, box b along dim 2
    x_max_a, x_max_b = x_max.unsqueeze(2), x_max.unsqueeze(1)
    y_min_a, y_min_b = y_min.unsqueeze(2), y_min.unsqueeze(1)
    y_max_a, y_max_b = y_max.unsqueeze(2), y_max.unsqueeze(1)
    width = x_max_a.minimum(x_max_b) - x_min_a.maximum(x_min_b)
    height = y_max_a.minimum(y_max_b) - y_min_a.maximum(y_min_b)
    intersection = width * height
    area_a, area_b = (x_max_a - x_min_a) * (y_max_a - y_min_a), (x_max_b - x_min_b) * (y_max_b - y_min_b)
    union = area_a + area_b - intersection
    valid = (width > 0).logical_and(height > 0).logical_and(area_a > 0).logical_and(area_b > 0)
    valid = valid.logical_and(union > 0)
    return valid.logical_and(intersection / union > iou_threshold)


@onnx_op("NonMaxSuppression")
def non_max_suppression(ctx, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, center_point_box=0):
    """Greedy per batch and class: the best-scoring boxes that overlap no better one. The overlaps are
    computed with Tensor ops; the selection, whose size depends on the data, reads them and the scores
    as numbers."""
    limit = max(int(ctx.scalar(max_output_boxes_per_class, 0)), 0)
    suppressed = ctx.numpy(overlaps(boxes, center_point_box, float(ctx.scalar(iou_threshold, 0.0))))
    score_values = ctx.numpy(scores)
    threshold = ctx.scalar(score_threshold)
    selected = []
    for batch in range(scores.shape[0]):
        for label in range(scores.shape[1]):
            class_scores = score_values[batch, label]
            order = sorted(range(len(class_scores)), key=lambda index: (-class_scores[index], index))
            kept: list[int] = []
            for index in order:
                if len(kept) >= limit:
                    break
                if threshold is not None and not class_scores[index] > threshold:
                    continue
                if not any(suppressed[batch, index, other] for other in kept):
                    kept.append(index)
            selected += [(batch, label, index) for index in kept]
    return ctx.const(np.array(selected, dtype=np.int64).reshape(-1, 3))
