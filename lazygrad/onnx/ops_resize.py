"""Resize and Upsample: separable resampling, one axis at a time.

Registered in registry.OPERATORS; model.py calls them. For each resized axis, `axis_weights`
computes on the host an (output, input) matrix from the sizes alone (coordinate transformation,
nearest rounding, linear or cubic coefficients, antialias, edge clamping); the data never leaves the
device: nearest mode selects its sources (`nn.spatial.select_along`: a view where they repeat each
input, as an upsampling by an integer factor does, else a gather), the others multiply by the matrix.
"""
from __future__ import annotations

import math

import numpy as np

from lazygrad.dtype import dtypes
from lazygrad.nn.spatial import select_along
from lazygrad.onnx.registry import onnx_op
from lazygrad.tensor import Tensor


def source_coordinates(mode: str, out_size: int, in_size: int, scale: float, roi_pair):
    """Each output index's position in the input, and which outputs extrapolate (tf_crop_and_resize)."""
    y = np.arange(out_size, dtype=np.float64)
    width = scale * in_size
    if mode == "align_corners":
        return (np.zeros(out_size) if width == 1 else y * (in_size - 1) / (width - 1)), None
    if mode == "asymmetric":
        return y / scale, None
    if mode == "tf_crop_and_resize":
        start, end = roi_pair
        if width == 1:
            x = np.full(out_size, (end - start) * (in_size - 1) / 2)
        else:
            x = y * (end - start) * (in_size - 1) / (width - 1)
        x = x + start * (in_size - 1)
        return x, (x < 0) | (x > in_size - 1)
    if mode == "pytorch_half_pixel":
        return (np.full(out_size, -0.5) if width == 1 else (y + 0.5) / scale - 0.5), None
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / width)
        return offset + (y + 0.5) / scale - 0.5, None
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def nearest_coefficients(ratio: float, rounding: str) -> np.ndarray:
    if float(ratio).is_integer():
        return np.array([0.0, 1.0])
    pick_second = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                   "floor": False, "ceil": True}[rounding]
    return np.array([0.0, 1.0]) if pick_second else np.array([1.0, 0.0])


def cubic_kernel(distance: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def interpolation_coefficients(ratio: float, scale: float, mode: str, antialias: bool, a: float) -> np.ndarray:
    """Weights of the neighbours around the source position (ratio in (0, 1] past the left one)."""
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        weights = np.clip(1 - np.abs((np.arange(start, 2 - start) - ratio) * scale), 0, 1)
        return weights / weights.sum()
    if not antialias:
        return cubic_kernel(np.array([ratio + 1, ratio, 1 - ratio, 2 - ratio]), a)
    scale = min(scale, 1.0)
    start = int(np.floor(-2 / scale) + 1)
    weights = cubic_kernel(scale * (np.arange(start, 2 - start) - ratio), a)
    return weights / weights.sum()


def axis_weights(in_size: int, out_size: int, scale: float, options: dict,
                 roi_pair) -> tuple[np.ndarray, np.ndarray | None]:
    """The (out_size, in_size) resampling matrix of one axis and the extrapolated outputs' mask."""
    x, extrapolated = source_coordinates(options["coordinate_transformation_mode"], out_size, in_size, scale, roi_pair)
    base = np.floor(x)
    integer = x == base
    base = np.where(integer, base - 1, base)
    ratios = x - base
    weights = np.zeros((out_size, in_size))
    for row in range(out_size):
        if options["mode"] == "nearest":
            coefficients = nearest_coefficients(ratios[row], options["nearest_mode"])
        else:
            coefficients = interpolation_coefficients(ratios[row], scale, options["mode"], options["antialias"],
                                                      options["cubic_coeff_a"])
        count = len(coefficients)
        indices = base[row] - count // 2 + 1 + np.arange(count)
        if options["exclude_outside"]:
            coefficients = np.where((indices >= 0) & (indices < in_size), coefficients, 0.0)
            coefficients = coefficients / coefficients.sum()
        np.add.at(weights[row], np.clip(indices, 0, in_size - 1).astype(np.int64), coefficients)
    return weights, extrapolated


def resample_axis(x: Tensor, axis: int, weights: np.ndarray, nearest: bool) -> Tensor:
    if nearest:
        return select_along(x, axis, weights.argmax(1))
    compute = x.dtype if x.dtype in (dtypes.float32, dtypes.float64) else dtypes.float32
    matrix = Tensor(weights.T.astype(compute.np), device=x.device)
    moved = x.cast(compute).transpose(axis, -1)
    return (moved @ matrix).transpose(axis, -1)


def output_geometry(shape, axes, scales, sizes, policy: str):
    """Per-axis scale factors and output sizes from either scales or sizes."""
    ndim = len(shape)
    if sizes is not None:
        full_sizes = list(shape)
        for axis, size in zip(axes, sizes):
            full_sizes[axis] = size
        factors = [full_sizes[i] / shape[i] for i in range(ndim)]
        if policy != "stretch":
            chosen = [factors[axis] for axis in axes]
            scale = min(chosen) if policy == "not_larger" else max(chosen)
            factors = [scale if i in axes else 1.0 for i in range(ndim)]
            full_sizes = [int(math.floor(scale * shape[i] + 0.5)) if i in axes else shape[i] for i in range(ndim)]
        return factors, full_sizes
    factors = [1.0] * ndim
    for axis, scale in zip(axes, scales):
        factors[axis] = scale
    return factors, [int(factor * size) for factor, size in zip(factors, shape)]


def resize_tensor(x: Tensor, factors, sizes, options: dict, roi) -> Tensor:
    result = x
    for axis in range(x.ndim):
        roi_pair = None if roi is None else (roi[axis], roi[axis + x.ndim])
        identity_roi = roi_pair is None or (math.isclose(roi_pair[0], 0) and math.isclose(roi_pair[1], 1))
        if math.isclose(factors[axis], 1.0) and sizes[axis] == x.shape[axis] and identity_roi:
            continue
        weights, extrapolated = axis_weights(x.shape[axis], sizes[axis], factors[axis], options, roi_pair)
        result = resample_axis(result, axis, weights, options["mode"] == "nearest")
        if extrapolated is not None and extrapolated.any():
            mask = Tensor(extrapolated.reshape([-1 if d == axis else 1 for d in range(x.ndim)]), device=x.device)
            result = mask.where(options["extrapolation_value"], result)
    if result.dtype != x.dtype:
        result = (result.round() if not x.dtype.is_float else result).cast(x.dtype)
    return result


@onnx_op("Resize")
def resize(ctx, x, roi=None, scales=None, sizes=None, antialias=0, axes=None, coordinate_transformation_mode=None,
           cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy="stretch",
           mode="nearest", nearest_mode="round_prefer_floor"):
    if ctx.opset < 11:
        scales, roi = roi, None
        coordinate_transformation_mode = coordinate_transformation_mode or "asymmetric"
        nearest_mode = "floor"
    axes = list(range(x.ndim)) if axes is None else [a + x.ndim if a < 0 else a for a in axes]
    scale_values = ctx.numpy(scales).astype(np.float64).tolist() if scales is not None and scales.numel() else None
    size_values = ctx.ints(sizes) if sizes is not None and sizes.numel() else None
    roi_values = ctx.numpy(roi).astype(np.float64).tolist() if roi is not None and roi.numel() else None
    if roi_values is not None and len(roi_values) == 2 * len(axes) and len(axes) != x.ndim:
        full = [0.0] * x.ndim + [1.0] * x.ndim
        for i, axis in enumerate(axes):
            full[axis], full[axis + x.ndim] = roi_values[i], roi_values[i + len(axes)]
        roi_values = full
    factors, out_sizes = output_geometry(x.shape, axes, scale_values, size_values, keep_aspect_ratio_policy)
    options = {"mode": mode, "coordinate_transformation_mode": coordinate_transformation_mode or "half_pixel",
               "nearest_mode": nearest_mode, "antialias": bool(antialias), "cubic_coeff_a": cubic_coeff_a,
               "exclude_outside": bool(exclude_outside), "extrapolation_value": extrapolation_value}
    return resize_tensor(x, factors, out_sizes, options, roi_values)


@onnx_op("Upsample")
def upsample(ctx, x, scales_input=None, mode="nearest", scales=None):
    scale_values = ctx.numpy(scales_input).tolist() if scales_input is not None else list(scales)
    factors, out_sizes = output_geometry(x.shape, list(range(x.ndim)), scale_values, None, "stretch")
    options = {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor",
               "antialias": False, "cubic_coeff_a": -0.75, "exclude_outside": False, "extrapolation_value": 0.0}
    return resize_tensor(x, factors, out_sizes, options, None)
