"""The op table is complete: every primitive has a reference, a gradient choice and a rendering."""
from types import SimpleNamespace

import numpy as np
import pytest

from lazygrad.dtype import dtypes
from lazygrad.ops import OPS, ELEMENTWISE, GATHER, REDUCE, Ops, reduce_identity
from lazygrad.ops.table import NOT_DIFFERENTIABLE
from lazygrad.renderer.c import CRenderer
from lazygrad.renderer.cuda import CUDARenderer
from lazygrad.renderer.opencl import OpenCLRenderer

RENDERERS = [CRenderer(), OpenCLRenderer(), CUDARenderer()]
ARCHITECTURE_OPS = ["NEG", "RECIP", "SQRT", "EXP2", "LOG2", "SIN", "CAST", "BITCAST", "ADD", "MUL", "DIV", "MOD",
                    "MAX", "CMPLT", "CMPNE", "AND", "OR", "XOR", "SHL", "SHR", "WHERE", "SUM", "MAX_REDUCE", "PROD", "TAKE",
                    "RESHAPE", "PERMUTE", "EXPAND", "PAD", "SHRINK", "FLIP", "CONST", "BUFFER", "COPY",
                    "CONTIGUOUS", "ASSIGN"]


def test_the_vocabulary_is_exactly_the_documented_one():
    assert sorted(OPS) == sorted(ARCHITECTURE_OPS)


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_has_a_gradient_rule_or_says_it_has_none(name):
    grad = OPS[name].grad
    assert callable(grad) or grad == NOT_DIFFERENTIABLE, f"{name} has no gradient rule"


@pytest.mark.parametrize("name", sorted(ELEMENTWISE) + sorted(n for n, op in OPS.items() if op.kind in (REDUCE, GATHER)))
def test_every_computing_op_has_a_numpy_reference(name):
    assert callable(OPS[name].ref), f"{name} has no numpy reference"


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda r: r.dialects[0])
@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_every_elementwise_op_renders_on_every_renderer(renderer, name):
    opdef = OPS[name]
    dtype = dtypes.int32 if name in ("AND", "OR", "XOR", "SHL", "SHR") else dtypes.float32
    src_dtypes = [dtypes.bool, dtype, dtype] if name == "WHERE" else [dtype] * opdef.arity
    text = renderer.render_op(opdef, src_dtypes, dtype, [f"x{i}" for i in range(opdef.arity)])
    for i in range(opdef.arity):
        assert f"x{i}" in text


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda r: r.dialects[0])
@pytest.mark.parametrize("name", sorted(n for n, op in OPS.items() if op.kind == REDUCE))
def test_every_reduce_renders_its_accumulation(renderer, name):
    for dtype in (dtypes.float32, dtypes.int32, dtypes.bool):
        text = renderer.render_accumulate(OPS[name], dtype, "acc", "value")
        assert "acc" in text and "value" in text


KNOWN_DIALECTS = {"c", "cpu", "gnu", "c99", "opencl", "cuda"}


def test_every_dialect_the_table_names_is_one_a_renderer_reads():
    """A misspelt dialect key would be a rendering no renderer ever uses."""
    read = {dialect for renderer in RENDERERS + [CRenderer(standalone=True)] for dialect in renderer.dialects}
    assert read == KNOWN_DIALECTS
    for name, op in OPS.items():
        assert set(op.render) | set(op.vector) <= KNOWN_DIALECTS, name
        assert not op.render or "c" in op.render, f"{name} has no C-family default"


@pytest.mark.parametrize("renderer", [CRenderer(), OpenCLRenderer(4)], ids=lambda r: r.dialects[0])
def test_the_ops_a_renderer_computes_on_vectors_are_the_tables_and_render_on_vectors(renderer):
    """`vector_ops` comes from the op table's vector entries; each renders on vectors of 4 lanes
    (a vector of masks, too, where C compares)."""
    vector_ops = {op for op in OPS.values() if set(op.vector) & set(renderer.dialects)}
    assert renderer.vector_ops == vector_ops and {Ops.ADD, Ops.MUL, Ops.MAX, Ops.SUM} <= vector_ops
    for op in sorted(vector_ops):
        arity = 2 if op.kind == REDUCE else op.arity
        src_dtypes = [dtypes.bool, dtypes.float32, dtypes.float32] if op is Ops.WHERE else [dtypes.float32] * arity
        dtype = op.out_dtype(src_dtypes, None) if op.out_dtype else dtypes.float32
        text = renderer.render_vector_op(op, src_dtypes, dtype, [f"x{i}" for i in range(arity)], 4)
        assert all(f"x{i}" in text for i in range(arity)), (op, text)


@pytest.mark.parametrize("name", sorted(n for n, op in OPS.items() if op.kind == REDUCE))
def test_reduce_identity_is_neutral(name):
    values = np.array([3, -2, 5], dtype=np.int32)
    identity = reduce_identity(OPS[name], dtypes.int32)
    reference = OPS[name].ref
    with_identity = reference(np.append(values, identity), (0,))
    np.testing.assert_array_equal(with_identity, reference(values, (0,)))


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_the_scheduler_and_opts_read_one_cost_per_op(name):
    """An op the scheduler counts as costly to recompute is one opts keeps out of unrolled bodies,
    and the other way round: both read the op's record (they were two lists that disagreed on
    SHL, SHR and BITCAST: cheap to the scheduler, not to opts)."""
    from lazygrad.codegen.kernel import KernelNode
    from lazygrad.codegen.opts import _cheap
    from lazygrad.schedule.fuse import _op_cost

    source = SimpleNamespace(dtype=dtypes.float32)
    lazy = SimpleNamespace(op=OPS[name], dtype=dtypes.float32, srcs=(source,) * OPS[name].arity)  # what _op_cost reads
    assert _cheap(KernelNode(OPS[name], dtypes.float32, ())) == (_op_cost(lazy) == 1)


def test_a_float16_result_is_rounded_by_the_gpu_dialects_unless_the_op_is_exact_in_half():
    inexact = OpenCLRenderer().render_op(Ops.ADD, [dtypes.float16, dtypes.float16], dtypes.float16, ["a", "b"])
    exact = OpenCLRenderer().render_op(Ops.MAX, [dtypes.float16, dtypes.float16], dtypes.float16, ["a", "b"])
    assert inexact.startswith("lg_half(") and not exact.startswith("lg_half(")
    assert CUDARenderer().render_op(Ops.ADD, [dtypes.float16] * 2, dtypes.float16, ["a", "b"]).startswith("lg_half(")
    assert not CUDARenderer().render_op(Ops.NEG, [dtypes.float16], dtypes.float16, ["a"]).startswith("lg_half(")
