"""Loop programs run by codegen/interpret.py, numpy's reading of them, against the NPY device: a check
of linearize that no compiler takes part in. Each graph is scheduled for CPU; every kernel is
linearized for a dialect (C with AVX-512's and AVX2's vectors, with VNNI's byte dot products, OpenCL
with float16 vectors, CUDA with its reduce lanes, and without opts) and run here, each kernel on the
outputs of the ones before it; the last result must be what NPY computes from the same graph."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lazygrad import Tensor, dtypes
from lazygrad.codegen.axes import merge_dims
from lazygrad.codegen.interpret import run_kernel_programs, run_program
from lazygrad.codegen.linearize import linearize
from lazygrad.codegen.opts import Opt
from lazygrad.nn import functional as F
from lazygrad.ops import Ops
from lazygrad.renderer.c import CRenderer
from lazygrad.renderer.cuda import CUDARenderer
from lazygrad.renderer.loop_program import Const, Fma, Load, Var
from lazygrad.renderer.opencl import OpenCLRenderer
from lazygrad.schedule.fuse import create_schedule
from test_opts import build, opt_graph, random_opts, random_work_group_opts

RENDERERS = {
    "c-avx512": lambda: CRenderer(16, 32),
    "c-avx2": lambda: CRenderer(8, 16),
    "c-vnni": lambda: CRenderer(16, 32, byte_dot_lanes=16),
    "c-standalone": lambda: CRenderer(standalone=True),
    "opencl": lambda: OpenCLRenderer(16),
    "cuda": lambda: CUDARenderer(),
}


def interpreted(results, program_for) -> list[np.ndarray]:
    """The results (Tensors on CPU, unrealized) computed by running each kernel's loop program."""
    results = results if isinstance(results, tuple) else (results,)
    items = create_schedule([result.lazydata for result in results])
    arrays: dict[int, np.ndarray] = {}
    run_kernel_programs(items, program_for, arrays)
    return [arrays[id(result.lazydata)].reshape(result.shape) for result in results]


def values(shape, dtype=np.float32, seed=0, low=-2.0, high=2.0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(low, high, shape).astype(dtype)
    return rng.uniform(low, high, shape).astype(dtype)


def _graphs():
    """(label, make(device) -> one Tensor or a tuple of them); inputs are realized before scheduling."""
    yield "broadcast-chain", lambda d: ((t(d, (4, 6)) * t(d, (6,), seed=1) + 1).exp())
    yield "views", lambda d: t(d, (4, 6)).pad(((1, 2), (0, 3))).flip(0).permute(1, 0).shrink(((1, 8), (0, 5))) + 1
    yield "row-sum", lambda d: t(d, (6, 40)).sum(1)
    yield "column-sum", lambda d: t(d, (40, 24)).sum(0)
    yield "long-sum", lambda d: t(d, (4097,)).sum()
    yield "long-rows", lambda d: t(d, (4, 4096)).sum(1)
    yield "max-with-nan", lambda d: Tensor(np.where(values((5, 9)) > 1.5, np.nan, values((5, 9))), device=d).amax(1)
    yield "matmul-bias-relu", lambda d: (t(d, (16, 32)) @ t(d, (32, 24), seed=1) + t(d, (24,), seed=2)).relu()
    yield "convolution", lambda d: t(d, (1, 8, 10, 10)).conv2d(t(d, (4, 8, 3, 3), seed=1), padding=1)
    yield "max-pool", lambda d: F.max_pool2d(t(d, (1, 4, 9, 9)), 3, 2, 1)
    yield "softmax", lambda d: t(d, (6, 10)).softmax(-1)
    yield "layer-norm", lambda d: F.layer_norm(t(d, (4, 48)), (48,))
    yield "float16-sum", lambda d: t(d, (8, 64), np.float16).sum(1)
    yield "integer-ops", lambda d: _integer_ops(t(d, (5, 7), np.int32, low=-50, high=50))
    yield "indexed-load", lambda d: t(d, (10, 6))[Tensor(np.array([[3, -1], [12, 0]]), device=d)] * 2
    yield "several-outputs", lambda d: _several(t(d, (4, 6)))
    yield "sibling-sums", lambda d: _sibling_sums(t(d, (3, 8, 20)), t(d, (3, 8, 20), seed=1))
    yield "byte-dot", _byte_dots


def t(device, shape, dtype=np.float32, seed=0, low=-2.0, high=2.0) -> Tensor:
    return Tensor(values(shape, dtype, seed, low, high), device=device).realize()


def _integer_ops(a: Tensor) -> Tensor:
    return ((a % 3) == 0).where(a * 4, -a) + (a // 5)


def _several(source: Tensor):
    return source + 1, (source * 2).cast(dtypes.float16), source > 0


def _sibling_sums(x: Tensor, grad: Tensor):
    """Two sums over the same axes, neither reading the other (a normalization's gradient): one pass."""
    g = grad * x.sigmoid()
    return g.sum((0, 2)), (g * x).sum((0, 2))


def _byte_dots(device):
    """A sum of uint8 by int8 products laid out as VNNI's byte dot products take them (test_opts.py)."""
    x = Tensor(values((2, 6, 8, 4), np.uint8, 3, 0, 256), device=device)
    w = Tensor(values((2, 8, 16, 4), np.int8, 4, -127, 128), device=device)
    rows = x.reshape(2, 6, 1, 1, 8, 4).cast(dtypes.int32)
    weights = w.permute(0, 2, 1, 3).cast(dtypes.int32)
    return (rows * weights)._reduce(Ops.SUM, (-2, -1), False, "dot")


GRAPHS = dict(_graphs())


def check(label, make, program_for):
    expected = make("NPY")
    expected = [result.numpy() for result in (expected if isinstance(expected, tuple) else (expected,))]
    actual = interpreted(make("CPU"), program_for)
    for got, want in zip(actual, expected):
        tolerance = 2e-3 if want.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tolerance, atol=tolerance,
                                   err_msg=label)


@pytest.mark.parametrize("dialect", sorted(RENDERERS))
@pytest.mark.parametrize("label", sorted(GRAPHS))
def test_each_dialects_loop_programs_compute_what_npy_computes(label, dialect):
    renderer = RENDERERS[dialect]()
    check(label, GRAPHS[label], lambda kernel: linearize(kernel, renderer))


@pytest.mark.parametrize("label", sorted(GRAPHS))
def test_loop_programs_without_opts_compute_what_npy_computes(label):
    renderer = CRenderer()
    check(label, GRAPHS[label], lambda kernel: linearize(kernel, renderer, optimize=False))


def test_the_tiles_and_vectors_the_checks_rely_on_are_there():
    """The graphs above reach what the interpreter is meant to check: a register tile with fused
    multiply-adds, vector values, accumulator arrays, a GROUP's lanes and byte dot products."""
    seen = set()

    def note(renderer):
        def program_for(kernel):
            program = linearize(kernel, renderer)
            statements = [s for stage in program.stages for s in stage.inner] + program.outer
            seen.update(type(s.expr).__name__ for s in statements)
            seen.update({"vectors"} if program.vector_width > 1 else set())
            seen.update({"accumulator arrays"} if program.inner_loops else set())
            seen.update({"group"} if program.group_lane is not None else set())
            return program
        return program_for
    for dialect in ("c-avx512", "cuda", "c-vnni"):
        for label, make in GRAPHS.items():
            if label != "byte-dot" or dialect == "c-vnni":
                interpreted(make("CPU"), note(RENDERERS[dialect]()))
    assert {"Fma", "ByteDot", "vectors", "accumulator arrays", "group"} <= seen, seen


def test_blocked_reduce_starts_each_block_from_the_last_ones_partial_results():
    a, b, bias = values((16, 256), seed=1), values((256, 32), seed=2), values((32,), seed=3)

    def make(device):
        product = Tensor(a, device=device).reshape(16, 256, 1) * Tensor(b, device=device).reshape(1, 256, 32)
        return (product.sum(1) + Tensor(bias, device=device)).relu()
    opts = [Opt("UPCAST", 2, 8), Opt("UPCAST", 0, 4), Opt("BLOCK", 2, 64), Opt("UNROLL", 3, 2)]
    renderer = CRenderer()
    programs = []

    def program_for(kernel):
        programs.append(linearize(kernel, renderer, opts=opts))
        return programs[-1]
    check("blocked", make, program_for)
    assert programs[0].block_loop is not None and programs[0].partial_stores


@pytest.mark.parametrize("opts", [[Opt("GROUP", 1, 16)], [Opt("GROUP", 1, 8), Opt("UNROLL", 1, 4)],
                                  [Opt("UPCAST", 0, 2), Opt("GROUP", 2, 4), Opt("LOCAL", 0, 2)]],
                         ids=["group", "group-unroll", "upcast-group-local"])
def test_work_groups_fold_their_lanes_in_order(opts):
    data = values((8, 64), seed=7)
    data[1, 5], data[2, 63], data[3, 0] = np.nan, np.inf, -np.inf
    renderer = OpenCLRenderer()
    for reduce in ("max", "sum"):
        check(f"{reduce} {opts}", lambda device: getattr(Tensor(data, device=device), reduce)(axis=1),
              lambda kernel: linearize(merge_dims(kernel), renderer, opts=opts))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=opt_graph(), opt_seed=st.integers(0, 2 ** 16), dialect=st.sampled_from(["c-avx512", "opencl", "cuda"]))
def test_random_graphs_under_random_opts_compute_what_npy_computes(graph, opt_seed, dialect):
    """test_opts.py's random graphs and opts (GROUP and LOCAL among them where the dialect has
    work-groups), run as loop programs."""
    renderer, rng = RENDERERS[dialect](), np.random.default_rng(opt_seed)
    choose = random_opts if dialect.startswith("c") else random_work_group_opts
    chosen = []

    def program_for(kernel):
        kernel = merge_dims(kernel)
        chosen.append(choose(kernel, renderer, rng))
        return linearize(kernel, renderer, opts=chosen[-1])
    try:
        check(f"{graph} {dialect}", lambda device: build(device, *graph), program_for)
    except AssertionError as error:
        raise AssertionError(f"opts {chosen}") from error


def test_a_program_runs_on_the_buffers_it_names():
    """run_program checks the buffers it is given against the program's parameters."""
    program = linearize(create_schedule([(t("CPU", (3,)) + 1).lazydata])[0].kernel, CRenderer())
    with pytest.raises(ValueError, match="takes 2 buffers, got 1"):
        run_program(program, [np.zeros(3, np.float32)])


def test_statements_hold_typed_values_not_text():
    """A loop program holds no source text: a tile's update is an Fma of loads' variables, a store's
    value a variable, an index a Lin."""
    program = linearize(create_schedule([(t("CPU", (16, 32)) @ t("CPU", (32, 24))).lazydata])[0].kernel, CRenderer(16, 32))
    updates = [statement.expr for statement in program.inner if not statement.declare]
    assert updates and all(isinstance(update, Fma) for update in updates)
    assert any(isinstance(statement.expr, Load) for statement in program.inner)
    assert program.stores and all(isinstance(store.value, Var) for store in program.stores)
    assert not any(isinstance(value, str) for statement in program.inner for value in vars(statement).values())


def test_constants_are_equal_when_their_bits_in_their_dtype_are():
    """How linearize tells one constant from another (it names equal values once): 0.0 and -0.0 differ,
    0 and False agree, as do a float and the float32 it rounds to, and NaN equals NaN."""
    assert Const(0.0, dtypes.float32) != Const(-0.0, dtypes.float32)
    assert Const(0, dtypes.bool) == Const(False, dtypes.bool) and Const(1, dtypes.int32) != Const(1, dtypes.int64)
    assert Const(0.1, dtypes.float32) == Const(np.float32(0.1), dtypes.float32) != Const(0.1, dtypes.float64)
    assert Const(float("nan"), dtypes.float32) == Const(np.nan, dtypes.float32)


@pytest.mark.parametrize("renderer", RENDERERS)
def test_a_guarded_store_writes_only_where_its_guard_holds(renderer):
    # a row put into a cache at a position held in a tensor, written in place: the loop program
    # stores the row where the position matches and leaves every other element as it was
    start = values((3, 16, 8), seed=1)
    row, position = Tensor(values((3, 1, 8), seed=2)).realize(), Tensor([5]).realize()
    cache = Tensor(start).realize()
    cache.assign((Tensor.arange(16).reshape(1, 16, 1) == position).where(row, cache))
    items = create_schedule([cache.lazydata])
    item = next(item for item in items if any(item.in_place))
    assert len(item.kernel.stores[0].srcs) == 2, "the select over the cache itself becomes a guarded store"
    arrays = {id(node): node.buffer.numpy().reshape(-1) for item in items for node in item.inputs if node.realized}
    before = [item_before for item_before in items if item_before is not item]
    run_kernel_programs(before, lambda kernel: linearize(kernel, RENDERERS[renderer]()), arrays)
    output = start.reshape(-1).copy()
    inputs = [arrays[id(node)] for node in item.inputs]
    run_program(linearize(item.kernel, RENDERERS[renderer]()), [output] + inputs)
    expected = start.copy()
    expected[:, 5] = row.numpy()[:, 0]
    np.testing.assert_array_equal(output.reshape(start.shape), expected)
