"""The OPENCL device (PoCL on a machine without a GPU) computes what NPY computes, end to end.

Each test builds the same graph on NPY and on OPENCL from the same numpy inputs and compares the
results. Where OpenCL cannot be used (pyopencl or a platform missing) every test here skips and
says why; `pip install lazygrad[opencl]` installs both.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from lazygrad import Context, Tensor, dtypes, stats
from lazygrad.devices import DeviceUnavailable, get_device
from lazygrad.dtype import DType


def _why_opencl_is_unavailable() -> str | None:
    try:
        get_device("OPENCL")
    except DeviceUnavailable as error:
        return str(error)
    return None


REPO = Path(__file__).resolve().parents[2]
UNAVAILABLE = _why_opencl_is_unavailable()
if UNAVAILABLE is not None:
    warnings.warn(f"the OPENCL tests are skipped: {UNAVAILABLE}")
    pytestmark = pytest.mark.skip(reason=f"OPENCL is unavailable: {UNAVAILABLE}")

SHAPE = (4, 6)
FLOATS = np.array([-100.0, -10.0, -3.75, -2.5, -1.0, -0.5, -1e-3, -0.0, 0.0, 1e-3, 0.1, 0.5,
                   1.0, 2.0, 2.5, 3.14159, 7.25, 10.0, 100.0, 42.0, np.nan, np.inf, -np.inf, 1e-40],
                  dtype=np.float32).reshape(SHAPE)
OTHER_FLOATS = np.array([3.0, -7.0, 0.5, 0.0, -0.0, 2.0, 1e-3, -4.0, 9.0, np.nan, 0.25, -0.5,
                         1.0, -1.0, 6.5, 3.14159, np.inf, 10.0, -100.0, 42.0, 1.0, 2.0, -np.inf, 5.0],
                        dtype=np.float32).reshape(SHAPE)
INTS = np.array([0, 1, -1, 2, -2, 3, -3, 5, -7, 9, -13, 300, -300, 70000, -70000, 2**31 - 1, -2**31,
                 123456789, -123456789, 127, -128, 4, -6, 8], dtype=np.int32).reshape(SHAPE)
OTHER_INTS = np.array([3, -7, 2, 0, -1, 5, 1, 4, -2, 9, 0, 7, -3, 6, -5, 2, -1, 1000, -1000, 3, 3, 0, 11, -8],
                      dtype=np.int32).reshape(SHAPE)
CONDITION = (np.arange(24) % 3 == 0).reshape(SHAPE)


def compute(device: str, build, arrays) -> np.ndarray:
    return build(*[Tensor(array, device=device) for array in arrays]).numpy()


def assert_matches_npy(build, *arrays, rtol: float = 0.0, atol: float = 0.0) -> None:
    expected = compute("NPY", build, arrays)
    actual = compute("OPENCL", build, arrays)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if expected.dtype.kind == "f":
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(actual, expected)


# The op table's elementwise ops on every device, OPENCL included: test/ops/test_primitives.py.


def test_bool_buffers_load_and_store():
    left, right = FLOATS > 0, OTHER_FLOATS > 0
    assert_matches_npy(lambda a, b: (a & b) | (a ^ b), left, right)
    assert_matches_npy(lambda a, b: a.where(b, a.logical_not()), left, right)
    assert_matches_npy(lambda a, b: (a < b).cast(dtypes.int32) + (a != b).cast(dtypes.int32), FLOATS, OTHER_FLOATS)


# ---- casts and bitcasts --------------------------------------------------------------------------

FINITE = np.array([-300.7, -128.5, -2.5, -1.5, -0.5, -0.0, 0.0, 0.4, 0.5, 0.6, 1.5, 2.5,
                   3.7, 100.2, 127.9, 200.5, 255.0, 1e-5, 65504.0, 65520.0, 70000.0, 6e-8, 1e-8, 12345.678],
                  dtype=np.float32).reshape(SHAPE)
with np.errstate(over="ignore"):
    HALVES = FINITE.astype(np.float16)        # 70000 becomes inf, on purpose
FINITE_HALVES = FINITE.clip(-30000, 30000).astype(np.float16)
CAST_CASES = [
    (FINITE, dtypes.int32), (np.abs(FINITE) % 256, dtypes.uint8), (FLOATS, dtypes.bool),
    (FINITE, dtypes.float16), (FLOATS, dtypes.float16), (FINITE, dtypes.float64),
    (INTS, dtypes.float32), (INTS, dtypes.int8), (INTS, dtypes.int64), (INTS, dtypes.float16),
    (INTS, dtypes.bool), (CONDITION, dtypes.float32), (CONDITION, dtypes.int32),
    (INTS.astype(np.int64) * 100003, dtypes.int32), (HALVES, dtypes.float32),
    (FINITE_HALVES, dtypes.int16), (FINITE.astype(np.float64) * 1.1, dtypes.float16),
    (FINITE.astype(np.float64) / 3, dtypes.float32),
]


@pytest.mark.parametrize("array,dtype", CAST_CASES,
                         ids=[f"{array.dtype}-to-{dtype.name}" for array, dtype in CAST_CASES])
def test_casts_match_npy(array: np.ndarray, dtype: DType):
    assert_matches_npy(lambda tensor: tensor.cast(dtype), array)


BITCAST_CASES = [(FINITE, dtypes.int32), (INTS, dtypes.float32), (HALVES, dtypes.int16),
                 (np.arange(-12, 12, dtype=np.int16).reshape(SHAPE) * 1000, dtypes.float16)]


@pytest.mark.parametrize("array,dtype", BITCAST_CASES,
                         ids=[f"{array.dtype}-as-{dtype.name}" for array, dtype in BITCAST_CASES])
def test_bitcasts_match_npy(array: np.ndarray, dtype: DType):
    assert_matches_npy(lambda tensor: (tensor + 1).bitcast(dtype), array)


def test_float16_arithmetic_rounds_after_every_op():
    values = np.linspace(-3, 3, 24, dtype=np.float16).reshape(SHAPE)
    assert_matches_npy(lambda a: a * 3 + 0.1, values)
    assert_matches_npy(lambda a: (a * a).sum(1, keepdim=True) / 7, values)  # summed in float, like numpy


# ---- reductions --------------------------------------------------------------------------------

REDUCE_CASES = [
    ("sum", FLOATS.clip(-50, 50), 1, True), ("sum", OTHER_FLOATS, 0, False), ("sum", INTS, None, False),
    ("max", FLOATS, 1, True), ("max", INTS, 0, True), ("max", CONDITION, 1, False),
    ("prod", FINITE / 100, 1, True), ("prod", OTHER_INTS, 0, False), ("sum", FINITE_HALVES, 1, True),
]


@pytest.mark.parametrize("method,array,axis,keepdim", REDUCE_CASES,
                         ids=[f"{method}-{array.dtype}-axis{axis}-keepdim{keepdim}"
                              for method, array, axis, keepdim in REDUCE_CASES])
def test_reductions_match_npy(method: str, array: np.ndarray, axis, keepdim: bool):
    tolerance = {"rtol": 1e-5} if array.dtype.kind == "f" else {}
    assert_matches_npy(lambda tensor: getattr(tensor, method)(axis=axis, keepdim=keepdim), array, **tolerance)


# ---- views, matmul, softmax --------------------------------------------------------------------

def test_movement_chains_match_npy():
    values = np.arange(24, dtype=np.float32).reshape(SHAPE) - 7.5
    assert_matches_npy(lambda a: a.pad(((1, 2), (0, 3))).flip(0).permute(1, 0).shrink(((1, 8), (0, 5))) + 1, values)
    assert_matches_npy(lambda a: a.pad(((2, 0), (1, 1))).exp2().flip(1) * 2, values)  # exp2 of padding stays 0
    assert_matches_npy(lambda a: a.reshape(2, 2, 6).permute(2, 0, 1).flip(0).shrink(((1, 5), (0, 2), (1, 2))), values)


def test_more_than_three_global_loops_share_a_dimension():
    values = np.arange(2 * 3 * 4 * 5 * 2, dtype=np.int32).reshape(2, 3, 4, 5, 2)
    assert_matches_npy(lambda a: a.permute(4, 2, 0, 3, 1) * 3 - 1, values)


def test_matmul_matches_npy():
    rng = np.random.default_rng(0)
    left, right = rng.standard_normal((8, 16), dtype=np.float32), rng.standard_normal((16, 5), dtype=np.float32)
    assert_matches_npy(lambda a, b: a @ b, left, right, rtol=1e-5, atol=1e-6)


def softmax(tensor: Tensor, axis: int = -1) -> Tensor:
    shifted = tensor - tensor.amax(axis, keepdim=True)
    exponentials = shifted.exp()
    return exponentials / exponentials.sum(axis, keepdim=True)


def test_softmax_matches_npy():
    values = np.random.default_rng(1).standard_normal((6, 10), dtype=np.float32) * 4
    assert_matches_npy(softmax, values, rtol=1e-5, atol=1e-7)


# ---- code PoCL can vectorize ------------------------------------------------------------------

def test_exp2_matches_numpy_over_its_whole_range():
    """float32 exp2 is a polynomial (renderer/opencl.py), not the driver's library call; it must
    still agree with numpy from underflow to overflow, and on NaN and inf. Below the normal range
    numpy's own exp2 flushes some results that round to the smallest subnormal to 0, so there
    the results may differ by less than the smallest normal float."""
    values = np.concatenate([np.linspace(-160, 130, 4001, dtype=np.float32),
                             np.array([-149.5, -126.0, -0.0, 1e-40, 127.99, np.nan, np.inf, -np.inf],
                                      dtype=np.float32)])
    smallest_normal = float(np.finfo(np.float32).tiny)
    assert_matches_npy(lambda tensor: tensor.exp2(), values, rtol=2e-6, atol=smallest_normal)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_sqrt_is_correctly_rounded(dtype):
    values = np.array([0.0, -0.0, 1e-30, 2.0, 3.0, 10.0, 12345.678, np.inf, -1.0, np.nan], dtype=dtype)
    assert_matches_npy(lambda tensor: tensor.sqrt(), values)


def test_reduce_kernels_step_in_lockstep_on_a_cpu_device():
    """On a CPU device a reduce loop ends in a work-group barrier and the kernel is launched in
    groups of 16, which lets PoCL vectorize across work-items (devices/opencl.py)."""
    from lazygrad.devices.opencl import LOCKSTEP_OPTION
    from lazygrad.realize import get_program
    from lazygrad.schedule.fuse import create_schedule
    device = get_device("OPENCL")
    left = Tensor(np.ones((32, 8), np.float32), device="OPENCL").realize()
    right = Tensor(np.ones((8, 48), np.float32), device="OPENCL").realize()
    (item,) = [item for item in create_schedule([(left @ right).lazydata]) if item.kernel is not None]
    compiled = get_program("OPENCL", item.kernel)
    loop = compiled.source.split("for (", 1)[1]
    assert "lg_lockstep();\n  }" in loop, "the barrier must be the last statement of the reduce loop"
    if device.lockstep_reduces:
        assert LOCKSTEP_OPTION in device.build_options
        assert compiled.program.local_size == [16, 1]
    else:
        assert compiled.program.local_size is None


def test_lockstep_changes_no_bit_of_a_result(monkeypatch):
    """Each work-item still reduces its own values in the same order; only the schedule changes."""
    from lazygrad.devices.opencl import LOCKSTEP_OPTION
    from lazygrad.realize import get_program
    from lazygrad.schedule.fuse import create_schedule
    device = get_device("OPENCL")
    if not device.lockstep_reduces:
        pytest.skip("the OpenCL device is not a CPU: its reduces do not run in lockstep")
    values = np.random.default_rng(4).standard_normal((48, 300), dtype=np.float32)
    matrix = Tensor(values, device="OPENCL").realize()
    (item,) = [item for item in create_schedule([(matrix.exp() * 0.5).sum(1).lazydata]) if item.kernel is not None]
    compiled = get_program("OPENCL", item.kernel)
    results = []
    for lockstep in (True, False):
        if not lockstep:
            monkeypatch.setattr(device, "lockstep_reduces", False)
            options = [option for option in device.build_options if option != LOCKSTEP_OPTION]
            monkeypatch.setattr(device, "build_options", options)
        with Context(DISABLE_CACHE=True):
            program = device.load(compiled.name, device.compile_cached(compiled.source), 2)
        assert (program.local_size is not None) == lockstep
        output = device.alloc(dtypes.float32, 48)
        program(output, matrix.lazydata.buffer)
        results.append(output.numpy())
    np.testing.assert_array_equal(results[0], results[1])


def test_every_innermost_reduce_loop_ends_in_lockstep():
    """A kernel with several reduces runs its reduce loops once per reduce; each run steps in lockstep."""
    from types import SimpleNamespace
    from lazygrad.renderer.opencl import OpenCLRenderer
    one_reduce = ["for (long r0 = 0; r0 < 4; r0++) {", "  for (long r1 = 0; r1 < 3; r1++) {",
                  "    acc0 = (acc0+data1[r0*3+r1]);", "  }", "}"]
    body = ["float acc0 = 0.0f;"] + one_reduce + [line.replace("acc0", "acc1") for line in one_reduce]
    program = SimpleNamespace(reduce_loops=[SimpleNamespace(var="r0"), SimpleNamespace(var="r1")])
    stepped = OpenCLRenderer.add_lockstep(body, program)
    assert stepped == (["float acc0 = 0.0f;"] + one_reduce[:3] + ["    lg_lockstep();"] + one_reduce[3:]
                       + [line.replace("acc0", "acc1") for line in one_reduce[:3]] + ["    lg_lockstep();"]
                       + one_reduce[3:])


def test_work_groups_divide_the_global_size():
    from lazygrad.devices.opencl import lockstep_local_size
    assert lockstep_local_size([4096]) == [16]
    assert lockstep_local_size([12, 9]) == [12, 1]
    assert lockstep_local_size([17, 4, 3]) == [1, 1, 1]


REDUCE_SHAPES = [((17, 33), 1), ((24, 5), 0), ((3, 7, 11), 2), ((4, 5, 6), (0, 2)), ((2, 3, 4, 5, 6), 4)]


@pytest.mark.parametrize("shape,axis", REDUCE_SHAPES, ids=[f"{shape}-axis{axis}" for shape, axis in REDUCE_SHAPES])
def test_reduces_of_sizes_16_does_not_divide_match_npy(shape, axis):
    values = np.random.default_rng(2).standard_normal(shape, dtype=np.float32)
    assert_matches_npy(lambda tensor: tensor.sum(axis) + tensor.amax(axis), values, rtol=1e-5, atol=1e-6)
    assert_matches_npy(lambda tensor: (tensor * 0.5).exp().sum(axis), values, rtol=1e-5, atol=1e-6)


def test_odd_sized_matmul_matches_npy():
    rng = np.random.default_rng(3)
    left, right = rng.standard_normal((9, 20), dtype=np.float32), rng.standard_normal((20, 12), dtype=np.float32)
    assert_matches_npy(lambda a, b: a @ b, left, right, rtol=1e-5, atol=1e-6)


# ---- moving data -------------------------------------------------------------------------------

@pytest.mark.parametrize("array", [FLOATS, INTS, CONDITION, HALVES, np.zeros((0, 3), np.float32)],
                         ids=["float32", "int32", "bool", "float16", "empty"])
def test_to_round_trips_keep_every_value(array: np.ndarray):
    on_opencl = Tensor(array, device="CPU").to("OPENCL")
    assert on_opencl.device == "OPENCL"
    np.testing.assert_array_equal(on_opencl.numpy(), array)
    np.testing.assert_array_equal(on_opencl.to("CPU").numpy(), array)
    np.testing.assert_array_equal(on_opencl.to("NPY").to("OPENCL").numpy(), array)


def test_an_unrealized_graph_is_computed_before_it_is_copied():
    on_cpu = Tensor(FINITE, device="CPU") * 2
    np.testing.assert_array_equal((on_cpu.to("OPENCL") + 1).to("CPU").numpy(), FINITE * 2 + 1)


def test_mixing_devices_in_one_op_names_both_devices():
    with pytest.raises(ValueError) as raised:
        Tensor(FLOATS, device="CPU") + Tensor(FLOATS, device="OPENCL")
    assert "CPU" in str(raised.value) and "OPENCL" in str(raised.value)


def test_a_device_number_past_the_last_device_says_which_exist():
    from lazygrad.devices.opencl import list_opencl_devices
    missing = f"OPENCL:{len(list_opencl_devices())}"
    with pytest.raises(RuntimeError, match="there are only"):
        get_device(missing)


# ---- the disk cache ----------------------------------------------------------------------------

def test_program_binaries_come_back_from_the_disk_cache(tmp_path):
    device = get_device("OPENCL")
    source = ("// launch: global=3\n\n__kernel void add_one(__global int* restrict data0, "
              "__global const int* restrict data1) {\n  long i0 = get_global_id(0);\n"
              "  data0[i0] = data1[i0] + 1;\n}\n")
    with Context(LAZYGRAD_CACHE=tmp_path, DISABLE_CACHE=False):
        compiles, hits = stats.compiles, stats.cache_hits
        first = device.compile_cached(source)
        second = device.compile_cached(source)
        assert (stats.compiles - compiles, stats.cache_hits - hits) == (1, 1)
    assert first == second
    output, source_buffer = device.alloc(dtypes.int32, 3), device.alloc(dtypes.int32, 3)
    source_buffer.copyin(np.array([1, 2, 3], dtype=np.int32))
    device.load("add_one", second, 2)(output, source_buffer)
    np.testing.assert_array_equal(output.numpy(), [2, 3, 4])


SCALE_SOURCE = ("// launch: global=3\n\n__kernel void scale(__global float* restrict data0, "
                "__global const float* restrict data1) {{\n  long i0 = get_global_id(0);\n"
                "  data0[i0] = data1[i0] * {factor}.0f;\n}}\n")


def test_kernels_built_as_one_program_keep_their_own_names_code_and_cache_entries(tmp_path):
    """Two kernels named alike, built together: each entry runs its own kernel, and each is cached."""
    device = get_device("OPENCL")
    sources = [SCALE_SOURCE.format(factor=2), SCALE_SOURCE.format(factor=3)]
    with Context(LAZYGRAD_CACHE=tmp_path, DISABLE_CACHE=False):
        binaries = device.compile_together([("scale", source) for source in sources])
        assert [device.cached(source) for source in sources] == binaries
    values = device.alloc(dtypes.float32, 3).copyin(np.array([1, 2, 3], dtype=np.float32))
    for factor, binary in zip((2, 3), binaries):
        output = device.alloc(dtypes.float32, 3)
        device.load("scale", binary, 2)(output, values)
        np.testing.assert_array_equal(output.numpy(), [factor, 2 * factor, 3 * factor])


def test_the_small_kernels_of_one_realize_build_as_fewer_programs(tmp_path, monkeypatch):
    """Kernels without a reduce share a program build, their helpers (float16 rounding, floor
    division) defined once; each still computes its own result."""
    from lazygrad.devices import compile_pool
    device = get_device("OPENCL")
    builds = []
    original = device.compiler.build
    monkeypatch.setattr(device.compiler, "build", lambda source: builds.append(source) or original(source))
    monkeypatch.setattr(compile_pool, "compile_workers", lambda device: 1)
    floats = np.linspace(-2, 2, 12, dtype=np.float32)
    ints = np.arange(-6, 6, dtype=np.int32)
    cases = [(floats.astype(np.float16), lambda t: t * 1.0471975, lambda a: a * np.float16(1.0471975)),
             (floats.astype(np.float16), lambda t: (t + 2.4142135).sqrt(), lambda a: np.sqrt(a + np.float16(2.4142135))),
             (ints, lambda t: t // 4, lambda a: a // 4),
             (ints, lambda t: t % 5, lambda a: a % 5)]
    with Context(LAZYGRAD_CACHE=tmp_path, DISABLE_CACHE=False):
        results = [function(Tensor(array.copy(), device="OPENCL")) for array, function, _ in cases]
        Tensor.realize(*results)
    assert len(builds) < len(cases)
    for result, (array, _, reference) in zip(results, cases):
        np.testing.assert_allclose(result.numpy(), reference(array), rtol=1e-3)


DAMAGE_PROGRAM = """
import pathlib, shutil, sys
import numpy as np
from lazygrad import Context, dtypes
from lazygrad.devices import get_device
SOURCE = ("// launch: global=4\\n\\n__kernel void twice(__global double* restrict data0, "
          "__global const double* restrict data1) {\\n  long i0 = get_global_id(0);\\n"
          "  data0[i0] = data1[i0] * 2;\\n}\\n")
device = get_device("OPENCL")

def build_and_run():
    with Context(DISABLE_CACHE=True):
        binary = device.compile_cached(SOURCE)
    output, source = device.alloc(dtypes.float64, 4), device.alloc(dtypes.float64, 4)
    source.copyin(np.arange(4.0))
    device.load("twice", binary, 2)(output, source)
    assert output.numpy().tolist() == [0.0, 2.0, 4.0, 6.0]

build_and_run()
entries = list(pathlib.Path(sys.argv[1]).rglob("program.bc"))
assert entries
for path in entries:  # as PoCL leaves it: the bitcode empty, no work-group function built yet
    path.write_bytes(b"")
    for kernel_directory in path.parent.iterdir():
        if kernel_directory.is_dir():
            shutil.rmtree(kernel_directory)
build_and_run()
"""


def test_a_damaged_pocl_kernel_cache_entry_is_built_again(tmp_path):
    """PoCL 3.0 damages its kernel cache when processes build the same kernel at once; a later
    build then got a binary without bitcode, and launching it crashed the process."""
    from lazygrad.devices.opencl import list_opencl_devices
    if not any("Portable Computing Language" in platform.name for platform, _ in list_opencl_devices()):
        pytest.skip("PoCL is not the OpenCL platform here")
    pocl_cache = tmp_path / "pocl"
    environment = {**os.environ, "PYTHONPATH": str(REPO), "POCL_CACHE_DIR": str(pocl_cache)}
    result = subprocess.run([sys.executable, "-c", DAMAGE_PROGRAM, str(pocl_cache)], capture_output=True,
                            text=True, env=environment, timeout=120)
    assert result.returncode == 0, f"exit code {result.returncode}\n{result.stderr[-3000:]}"


# ---- work-groups from the launch line ----------------------------------------------------------

def test_the_launch_line_may_carry_a_local_size():
    from lazygrad.devices.opencl import launch_local_size, launch_size
    assert launch_size("// launch: global=16,4 local=16,1\n") == [16, 4]
    assert launch_local_size("// launch: global=16,4 local=16,1\n") == [16, 1]
    assert launch_local_size("// launch: global=16,4\n") is None


def test_an_explicit_local_size_takes_precedence_over_lockstep(tmp_path):
    """A kernel with lg_lockstep() and a local size from its launch line runs in those groups."""
    device = get_device("OPENCL")
    source = ("// launch: global=8 local=8\n#define lg_lockstep()\n\n"
              "__kernel void lane_sum(__global int* restrict data0, __global const int* restrict data1) {\n"
              "  long lid = get_local_id(0);\n"
              "  __local int lanes[8];\n"
              "  lanes[lid] = data1[lid];\n"
              "  barrier(CLK_LOCAL_MEM_FENCE);\n"
              "  int total = 0;\n"
              "  for (long lane = 0; lane < 8; lane++) { total += lanes[lane]; lg_lockstep(); }\n"
              "  data0[lid] = total + (int)get_local_size(0) * 100;\n"
              "}\n")
    with Context(LAZYGRAD_CACHE=tmp_path, DISABLE_CACHE=False):
        binary = device.compile_cached(source)
        assert device.compile_cached(source) == binary  # the local size comes back from the cache
    program = device.load("lane_sum", binary, 2)
    assert program.local_size == [8]
    output, values = device.alloc(dtypes.int32, 8), device.alloc(dtypes.int32, 8)
    values.copyin(np.arange(8, dtype=np.int32))
    program(output, values)
    np.testing.assert_array_equal(output.numpy(), [28 + 800] * 8)


def test_a_cache_entry_without_a_local_size_reads_as_none():
    """Entries written before launch lines carried local sizes have no "local" in their header."""
    import json
    from lazygrad.devices.opencl import ENVELOPE, MAGIC, unpack_binary, unpack_launch
    header = json.dumps({"global": [12], "source": "// launch: global=12\n"}).encode()
    old = ENVELOPE.pack(MAGIC, len(header)) + header + b"binary"
    assert unpack_binary(old) == ([12], "// launch: global=12\n", b"binary")
    assert unpack_launch(old) == ([12], None)


def test_pocl_keeps_its_kernel_cache_under_lazygrad_cache(tmp_path):
    """PoCL's own cache follows LAZYGRAD_CACHE (and DISABLE_CACHE) unless its variables are set."""
    from pathlib import Path
    program = ("import os; from lazygrad import Tensor; (Tensor([1.0, 2.0], device='OPENCL') * 4.0625).numpy(); "
               "print(os.environ['POCL_CACHE_DIR'], os.environ.get('POCL_KERNEL_CACHE'))")
    env = {key: value for key, value in os.environ.items() if not key.startswith("POCL_") and key != "DISABLE_CACHE"}
    env.update({"LAZYGRAD_CACHE": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    shown = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == [str(tmp_path / "pocl"), "None"]
    shown = subprocess.run([sys.executable, "-c", program], env={**env, "DISABLE_CACHE": "1"}, capture_output=True,
                           text=True, timeout=120)
    assert shown.stdout.split() == [str(tmp_path / "pocl"), "0"]
