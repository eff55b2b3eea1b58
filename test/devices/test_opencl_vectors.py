"""OpenCL vector types on the OPENCL device: vectorized kernels compute what numpy computes.

Kernels are rendered with an explicit float vector width (and, for elementwise kernels, an
explicit UPCAST), compiled and run on the device, and compared with numpy; end-to-end tensors use
the device's own width. Shapes cover where the vector path applies and where it does not: odd
sizes, padded and transposed views, unaligned offsets, NaN through max, float16, int dtypes,
0-d and empty tensors. The renderer's text is checked in
test/renderer/test_opencl_vector_source.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor
from lazygrad.devices import get_device
from lazygrad.codegen.axes import merge_dims
from lazygrad.codegen.linearize import linearize
from lazygrad.renderer.opencl import OpenCLRenderer
from lazygrad.codegen.opts import Opt
from lazygrad.schedule.fuse import create_schedule
from test_opencl import UNAVAILABLE  # why OPENCL cannot run here, or None

if UNAVAILABLE is not None:
    pytestmark = pytest.mark.skip(reason=f"OPENCL is unavailable: {UNAVAILABLE}")

RNG = np.random.default_rng(7)


def on_opencl(array: np.ndarray) -> Tensor:
    return Tensor(array, device="OPENCL").realize()


def run_kernel(result: Tensor, width: int, opts=None) -> tuple[np.ndarray, int]:
    """Run the one kernel computing `result` (its inputs realized on OPENCL), rendered at `width`
    with `opts` over the dim-merged kernel (None: the default heuristic); (output, the program's
    vector width)."""
    (item,) = [item for item in create_schedule([result.lazydata]) if item.kernel is not None]
    device, renderer = get_device("OPENCL"), OpenCLRenderer(width)
    program = linearize(merge_dims(item.kernel), renderer, opts=opts)
    binary = device.compile_cached(renderer.render_program(program))
    runnable = device.load(program.name, binary, len(program.params))
    output = device.alloc(item.outputs[0].dtype, item.outputs[0].numel())
    runnable(output, *[node.buffer for node in item.inputs])
    return output.numpy().reshape(result.shape), program.vector_width


def floats(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# ---- matmul tiles, default opts ----------------------------------------------------------------

@pytest.mark.parametrize("width", [1, 4, 16])
def test_matmul_tile_at_each_width_matches_numpy(width):
    a, b = floats(64, 128), floats(128, 64)
    out, used = run_kernel(on_opencl(a) @ on_opencl(b), width)
    assert used == width
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-4)


def test_matmul_with_bias_and_relu_epilogue_on_vectors():
    a, b, bias = floats(32, 256), floats(256, 48), floats(48)
    out, used = run_kernel((on_opencl(a) @ on_opencl(b) + on_opencl(bias)).relu(), 16)
    assert used == 16
    np.testing.assert_allclose(out, np.maximum(a @ b + bias, 0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shapes", [((33, 70), (70, 45)), ((8, 96), (96, 24)), ((1, 128), (128, 16)),
                                    ((64, 8), (8, 64))], ids=str)
def test_matmul_end_to_end_on_the_device_width(shapes):
    a, b = floats(*shapes[0]), floats(*shapes[1])
    out = (on_opencl(a) @ on_opencl(b)).numpy()
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.float64])
def test_matmul_of_other_dtypes_is_scalar_and_exact(dtype):
    if dtype == np.float64 and "cl_khr_fp64" not in get_device("OPENCL").cl_device.extensions:
        pytest.skip("no float64 on this device")
    a = RNG.integers(-3, 4, (64, 128)).astype(dtype)
    b = RNG.integers(-3, 4, (128, 64)).astype(dtype)
    out, used = run_kernel(on_opencl(a) @ on_opencl(b), 16)
    assert used == 1
    np.testing.assert_array_equal(out, a @ b)


# ---- elementwise kernels with an UPCAST --------------------------------------------------------

def test_contiguous_elementwise_matches_numpy():
    x, y = floats(64, 64), floats(64, 64)
    out, used = run_kernel(on_opencl(x) * on_opencl(y) + 1.0, 16, [Opt("UPCAST", 0, 16)])
    assert used == 16
    np.testing.assert_array_equal(out, x * y + np.float32(1))


def test_division_reciprocal_negation_and_max_with_nan():
    x, y = floats(32, 32), floats(32, 32)
    x[3, 5], y[7, 1], x[0, 0] = np.nan, np.nan, np.inf
    build = lambda a, b: (-a / b).maximum(b.reciprocal()).maximum(a)  # noqa: E731
    out, used = run_kernel(build(on_opencl(x), on_opencl(y)), 16, [Opt("UPCAST", 0, 16)])
    assert used == 16
    with np.errstate(all="ignore"):
        expected = np.maximum(np.maximum(-x / y, np.float32(1) / y), x)
    np.testing.assert_array_equal(out, expected)


def test_padded_transposed_and_unaligned_inputs_are_gathered():
    x, y = floats(60, 64), floats(64, 64)
    padded = on_opencl(x).pad(((2, 2), (0, 0)))
    out, used = run_kernel(padded * 3 + on_opencl(y).T, 16, [Opt("UPCAST", 1, 16)])
    assert used == 16
    np.testing.assert_array_equal(out, np.pad(x, ((2, 2), (0, 0))) * np.float32(3) + y.T)
    flat = floats(4097)
    out, used = run_kernel(on_opencl(flat)[1:] * 2, 16, [Opt("UPCAST", 0, 16)])
    assert used == 16
    np.testing.assert_array_equal(out, flat[1:] * np.float32(2))


def test_strided_output_axis_falls_back_to_scalar():
    x = floats(64, 32)
    (item,) = create_schedule([(on_opencl(x).T * 2).lazydata])
    out, used = run_kernel(on_opencl(x).T * 2, 16, [Opt("UPCAST", 0, 16)])
    assert item.kernel is not None and used == 1
    np.testing.assert_array_equal(out, x.T * np.float32(2))


def test_vector_column_sums_and_maxima():
    x = floats(48, 64)
    x[5, 17] = np.nan
    total, used = run_kernel(on_opencl(x).sum(0), 16, [Opt("UPCAST", 1, 16)])
    assert used == 16
    np.testing.assert_allclose(total, x.sum(0), rtol=1e-5, atol=1e-5)
    maximum, used = run_kernel(on_opencl(x).amax(0), 16, [Opt("UPCAST", 1, 16)])
    assert used == 16
    np.testing.assert_array_equal(maximum, x.max(0))


def test_sums_strided_along_the_lanes_are_stored_lane_by_lane():
    # the lanes walk the input's contiguous last axis; the sums they make are 64 apart in the output
    x = floats(64, 64, 16)
    total, used = run_kernel(on_opencl(x).permute(2, 0, 1).sum(2), 16, [Opt("UPCAST", 0, 16)])
    assert used == 16
    np.testing.assert_allclose(total, x.sum(1).T, rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.int8])
def test_elementwise_of_other_dtypes_stays_scalar(dtype):
    x = RNG.integers(-20, 20, (64, 64)).astype(dtype)
    out, used = run_kernel(on_opencl(x) * 3 + 1, 16, [Opt("UPCAST", 0, 16)])
    assert used == 1
    np.testing.assert_array_equal(out, x * dtype(3) + dtype(1))


def test_zero_dimensional_and_empty_tensors():
    scalar = np.float32(2.5)
    assert (Tensor(scalar, device="OPENCL") * 2 + 1).numpy() == np.float32(6.0)
    empty = np.zeros((0, 16), np.float32)
    assert (on_opencl(empty) * 2).numpy().shape == (0, 16)
    assert (on_opencl(np.zeros((0, 32), np.float32)) @ on_opencl(floats(32, 16))).numpy().shape == (0, 16)


def test_each_opencl_device_renders_with_its_own_vector_width():
    from lazygrad import realize
    renderer = realize.renderer_for("OPENCL")
    assert renderer.float_vector_width == get_device("OPENCL").float_vector_width
    assert realize.renderer_for("OPENCL") is renderer  # built once per device
    assert realize.renderer_for("CPU") is not renderer
