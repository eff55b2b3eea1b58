"""Random graphs of ops and shapes, built identically on a compiled device and on NPY, must agree.

Hypothesis draws 1-3 float32 inputs (up to 4 dims, sizes 1..5) and a sequence of up to 8 ops:
elementwise unary and binary (with broadcasting, reusing earlier results so graphs branch and
join), reductions over random axes, movement ops (reshape, permute, expand, pad, shrink, flip,
slicing and integer indexing), and realizing an intermediate result. NPY interprets the graph
with numpy, so any difference points at fusion, views/index math or rendering. The same graphs
also run as loop programs (codegen/interpret.py, each kernel linearized for a dialect and run with
numpy), which leaves the compilers and the dialects' syntax out of the comparison. NaN and inf may
appear (log, sqrt, exp); their positions must agree. A second kind of graph has one long axis
(4097 to 2^18) of positive values, summed or averaged over it: staged sums must stay within 1e-5
of numpy's. `-m fuzz` (in .ci/run) draws many more of both.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lazygrad import Tensor, dtypes
from lazygrad.codegen.interpret import run_kernel_programs
from lazygrad.codegen.linearize import linearize
from lazygrad.renderer.c import CRenderer
from lazygrad.renderer.cuda import CUDARenderer
from lazygrad.renderer.opencl import OpenCLRenderer
from lazygrad.schedule.fuse import create_schedule
from ops_helpers import tensor

MAX_NUMEL = 1500  # keeps kernels small and fast


class Pair:
    """The same tensor built on the compiled device and on NPY."""

    def __init__(self, compiled: Tensor, reference: Tensor, label: str):
        self.compiled, self.reference, self.label = compiled, reference, label

    @property
    def shape(self) -> tuple[int, ...]:
        assert self.compiled.shape == self.reference.shape, (self.compiled.shape, self.reference.shape)
        return self.compiled.shape

    def apply(self, fn, label: str, *others: "Pair") -> "Pair":
        return Pair(fn(self.compiled, *[o.compiled for o in others]),
                    fn(self.reference, *[o.reference for o in others]), label)


# sin and cos take arguments clamped to [-8, 8]: of a large one (exp of a sum, 5e8) they amplify the
# few ulps by which exp(x) = exp2(x * log2 e) may differ from numpy's into any value in [-1, 1].
UNARY = {
    "neg": lambda t: -t, "relu": lambda t: t.relu(), "abs": lambda t: t.abs(),
    "sin": lambda t: t.clamp(-8.0, 8.0).sin(), "cos": lambda t: t.clamp(-8.0, 8.0).cos(), "tanh": lambda t: t.tanh(), "sigmoid": lambda t: t.sigmoid(),
    "exp": lambda t: t.exp(), "log": lambda t: t.log(), "sqrt": lambda t: t.sqrt(), "square": lambda t: t * t,
    "reciprocal_safe": lambda t: (t.abs() + 0.5).reciprocal(), "scale": lambda t: t * 0.5 - 1.25,
    "clamp": lambda t: t.clamp(-1.0, 1.5),
}
BINARY = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
    "maximum": lambda x, y: x.maximum(y), "minimum": lambda x, y: x.minimum(y),
    "div_safe": lambda x, y: x / (y.abs() + 0.5),
}
REDUCES = ("sum", "max", "min", "mean")


def broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    for x, y in zip(reversed(a), reversed(b)):
        if x != y and x != 1 and y != 1:
            return False
    return True


def broadcast_shape(a, b):
    return tuple(np.broadcast_shapes(a, b))


@st.composite
def new_input(draw, device: str, shape: tuple[int, ...] | None = None, label: str = "input"):
    if shape is None:
        ndim = draw(st.integers(0, 4))
        shape = tuple(draw(st.integers(1, 5)) for _ in range(ndim))
    seed = draw(st.integers(0, 2**32 - 1))
    values = np.random.default_rng(seed).uniform(-2, 2, size=shape).astype(np.float32)
    return Pair(tensor(values, device), tensor(values, "NPY"), f"{label}{list(shape)}")


def factorize(n: int) -> list[int]:
    factors, p = [], 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return factors


@st.composite
def reshape_target(draw, shape):
    numel = math.prod(shape)
    ndim = draw(st.integers(1, 4))
    dims = [1] * ndim
    for factor in factorize(numel):
        dims[draw(st.integers(0, ndim - 1))] *= factor
    if draw(st.booleans()):
        dims[draw(st.integers(0, ndim - 1))] = -1
    return tuple(dims)


@st.composite
def movement(draw, pair: Pair):
    shape, ndim = pair.shape, len(pair.shape)
    kinds = ["reshape", "expand"] + (["permute", "pad", "shrink", "flip", "slice", "index"] if ndim else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "reshape":
        target = draw(reshape_target(shape))
        return pair.apply(lambda t: t.reshape(target), f"reshape{target}")
    if kind == "expand":
        lead = draw(st.integers(0, 1)) if ndim < 4 else 0
        target = tuple(draw(st.integers(1, 4)) for _ in range(lead)) + tuple(
            draw(st.integers(1, 4)) if size == 1 else size for size in shape)
        if math.prod(target) > MAX_NUMEL:
            return pair
        return pair.apply(lambda t: t.expand(target), f"expand{target}")
    if kind == "permute":
        order = tuple(draw(st.permutations(range(ndim))))
        return pair.apply(lambda t: t.permute(order), f"permute{order}")
    if kind == "pad":
        pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(ndim))
        value = draw(st.sampled_from([0.0, 0.0, 1.5, -2.0]))
        if math.prod(size + lo + hi for size, (lo, hi) in zip(shape, pads)) > MAX_NUMEL:
            return pair
        return pair.apply(lambda t: t.pad(pads, value=value), f"pad{pads},value={value}")
    if kind == "shrink":
        bounds = []
        for size in shape:
            start = draw(st.integers(0, size - 1))
            bounds.append((start, draw(st.integers(start + 1, size))))
        bounds = tuple(bounds)
        return pair.apply(lambda t: t.shrink(bounds), f"shrink{bounds}")
    if kind == "flip":
        axes = tuple(draw(st.lists(st.integers(-ndim, ndim - 1), min_size=1, max_size=ndim, unique_by=lambda a: a % ndim)))
        return pair.apply(lambda t: t.flip(axes), f"flip{axes}")
    if kind == "slice":
        index = []
        for size in shape:
            step = draw(st.sampled_from([1, 2, 3, -1, -2]))
            start = draw(st.integers(0, size - 1))
            index.append(slice(start, None, step))
        index = tuple(index)
        return pair.apply(lambda t: t[index], f"getitem{index}")
    position = draw(st.integers(-shape[0], shape[0] - 1))
    return pair.apply(lambda t: t[position], f"getitem[{position}]")


@st.composite
def reduction(draw, pair: Pair):
    ndim = len(pair.shape)
    name = draw(st.sampled_from(REDUCES))
    keepdim = draw(st.booleans())
    if ndim == 0 or draw(st.integers(0, 3)) == 0:
        axis = None
    elif draw(st.booleans()):
        axis = draw(st.integers(-ndim, ndim - 1))
    else:
        axis = tuple(draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True)))
    return pair.apply(lambda t: getattr(t, name)(axis=axis, keepdim=keepdim), f"{name}(axis={axis}, keepdim={keepdim})")


@st.composite
def random_graph(draw, device: str):
    pool = [draw(new_input(device)) for _ in range(draw(st.integers(1, 3)))]
    steps = [p.label for p in pool]
    current = pool[-1]
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "movement", "movement", "realize"]))
        if kind == "unary":
            name = draw(st.sampled_from(sorted(UNARY)))
            current = current.apply(UNARY[name], name)
        elif kind == "binary":
            name = draw(st.sampled_from(sorted(BINARY)))
            partners = [p for p in pool if broadcastable(p.shape, current.shape)
                        and math.prod(broadcast_shape(p.shape, current.shape)) <= MAX_NUMEL]
            if partners and draw(st.booleans()):
                other = draw(st.sampled_from(partners))
            else:  # a fresh input that broadcasts: some dims set to 1, maybe fewer leading dims
                shape = current.shape[draw(st.integers(0, len(current.shape))):]
                shape = tuple(1 if draw(st.booleans()) else size for size in shape)
                other = draw(new_input(device, shape, "input"))
                steps.append(other.label)
            if draw(st.booleans()):
                current, other = other, current
            current = current.apply(BINARY[name], f"{name}({current.label}, {other.label})", other)
        elif kind == "reduce":
            current = draw(reduction(current))
        elif kind == "movement":
            current = draw(movement(current))
        else:
            current.compiled.realize()
            current.reference.realize()
            current = Pair(current.compiled, current.reference, "realize")
        steps.append(current.label)
        pool.append(current)
    return current, steps


def compare(pair: Pair, steps: list[str]) -> None:
    compiled, reference = pair.compiled, pair.reference
    assert compiled.dtype == reference.dtype == dtypes.float32
    actual, expected = compiled.numpy(), reference.numpy()
    assert actual.shape == expected.shape == pair.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5, equal_nan=True,
                               err_msg="graph:\n  " + "\n  ".join(steps))


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_graph(compiled_device, data):
    result, steps = data.draw(random_graph(compiled_device))
    compare(result, steps)


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_graph_many_outputs_realized_together(compiled_device, data):
    """Several results of one random graph realized in one call (shared work, several kernels)."""
    first, steps = data.draw(random_graph(compiled_device))
    second = first.apply(lambda t: t * 2 + 1, "x*2+1")
    third = first.apply(lambda t: t.sum(), "sum")
    Tensor.realize(first.compiled, second.compiled, third.compiled)
    for pair in (first, second, third):
        compare(pair, steps + [pair.label])


LOOP_PROGRAM_RENDERERS = {"c-avx512": lambda: CRenderer(16, 32), "c-avx2": lambda: CRenderer(8, 16),
                          "opencl": lambda: OpenCLRenderer(16), "cuda": lambda: CUDARenderer()}


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), dialect=st.sampled_from(sorted(LOOP_PROGRAM_RENDERERS)), optimize=st.booleans())
def test_random_graph_as_loop_programs(data, dialect, optimize):
    """A random graph scheduled for CPU, each kernel's loop program for `dialect` run by
    codegen/interpret.py, against NPY."""
    result, steps = data.draw(random_graph("CPU"))
    renderer, arrays = LOOP_PROGRAM_RENDERERS[dialect](), {}
    node = result.compiled.lazydata
    run_kernel_programs(create_schedule([node]), lambda kernel: linearize(kernel, renderer, optimize=optimize), arrays)
    actual = arrays[id(node)].reshape(result.shape) if id(node) in arrays else result.compiled.numpy()  # (realized)
    np.testing.assert_allclose(actual, result.reference.numpy(), rtol=1e-4, atol=1e-5, equal_nan=True,
                               err_msg=f"{dialect}, graph:\n  " + "\n  ".join(steps))


# Long axes: sums long enough to run in stages (lazy.ACCUMULATION_LIMIT), of positive values so the
# relative error means something (a sum that cancels to near 0 has no relative accuracy to check).
# One running sum per SIMD lane was 1e-3 to 1e-2 off at these lengths; staged sums are within 1e-5.
LONG_SIZES = (4097, 6000, 8192, 12289, 65536, 1 << 18)
POSITIVE_UNARY = {"exp_scaled": lambda t: (t * 0.25).exp(), "sqrt": lambda t: t.sqrt(), "square": lambda t: t * t,
                  "sigmoid": lambda t: t.sigmoid(), "scale": lambda t: t * 1.5 + 0.25}


@st.composite
def long_sum_graph(draw, device: str):
    long = draw(st.sampled_from(LONG_SIZES))
    small = tuple(draw(st.integers(1, 4)) for _ in range(draw(st.integers(0, 2))))
    position = draw(st.integers(0, len(small)))
    shape = small[:position] + (long,) + small[position:]
    seed = draw(st.integers(0, 2**32 - 1))
    values = np.random.default_rng(seed).uniform(0.5, 2.0, size=shape).astype(np.float32)
    pair = Pair(tensor(values, device), tensor(values, "NPY"), f"input{list(shape)}")
    steps = [pair.label]
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(sorted(POSITIVE_UNARY)))
        pair = pair.apply(POSITIVE_UNARY[name], name)
        steps.append(name)
    others = [axis for axis in range(len(shape)) if axis != position]
    axes = (position,) + tuple(draw(st.lists(st.sampled_from(others), unique=True))) if others else (position,)
    name = draw(st.sampled_from(["sum", "mean"]))
    pair = pair.apply(lambda t: getattr(t, name)(axes), f"{name}(axis={axes})")
    steps.append(pair.label)
    return pair, steps


def check_long_sum(pair: Pair, steps: list[str]) -> None:
    np.testing.assert_allclose(pair.compiled.numpy(), pair.reference.numpy(), rtol=1e-5,
                               err_msg="graph:\n  " + "\n  ".join(steps))


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_long_sums_are_accurate(compiled_device, data):
    check_long_sum(*data.draw(long_sum_graph(compiled_device)))


@st.composite
def padded_view_graph(draw, device: str):
    """An input of 2-4 dims with sizes among 1, 2, 3, 5, 6, 17, then 1-3 of a pad, another movement
    op, x * 2 + 1 and a sum over one axis: the padded reads of short axes, and of two values of an
    axis inside padding, that gcc 12 vectorized wrongly (renderer/c.py)."""
    shape = tuple(draw(st.sampled_from([1, 2, 2, 3, 5, 6, 17])) for _ in range(draw(st.integers(2, 4))))
    if math.prod(shape) > MAX_NUMEL:
        shape = shape[:2]
    current = draw(new_input(device, shape))
    steps = [current.label]
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["pad", "pad", "movement", "scale", "sum"]))
        ndim = len(current.shape)
        if kind == "pad":
            pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(ndim))
            if math.prod(size + lo + hi for size, (lo, hi) in zip(current.shape, pads)) <= MAX_NUMEL:
                current = current.apply(lambda t: t.pad(pads), f"pad{pads}")
        elif kind == "movement":
            current = draw(movement(current))
        elif kind == "scale":
            current = current.apply(lambda t: t * 2 + 1, "x*2+1")
        elif ndim > 1:
            axis = draw(st.integers(0, ndim - 1))
            current = current.apply(lambda t: t.sum(axis), f"sum({axis})")
        steps.append(current.label)
    return current, steps


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_padded_views_of_short_axes(compiled_device, data):
    compare(*data.draw(padded_view_graph(compiled_device)))


@pytest.mark.fuzz
@settings(max_examples=600, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_fuzz_padded_views_of_short_axes(compiled_device, data):
    """The long run of padded views (`-m fuzz`, in .ci/run): with the guard of renderer/c.py off,
    about one draw in 400 of this kind read zeros where values belong on an AVX-512 CPU."""
    compare(*data.draw(padded_view_graph(compiled_device)))


@pytest.mark.fuzz
@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_fuzz_random_graphs_and_long_sums(compiled_device, data):
    """The long run (`-m fuzz`, in .ci/run): many more draws of both kinds of graph."""
    if data.draw(st.booleans()):
        check_long_sum(*data.draw(long_sum_graph(compiled_device)))
    else:
        result, steps = data.draw(random_graph(compiled_device))
        compare(result, steps)
