"""Concatenations split into pieces (codegen/pieces.py): one loop nest per source, each reading only
its own source, and the values numpy's concatenate gives."""
import numpy as np
import pytest

from lazygrad import Tensor
from lazygrad.codegen.kernel import Kernel
from lazygrad.codegen.linearize import kernel_source
from lazygrad.codegen.pieces import MAX_PIECES, concatenated_pieces
from lazygrad.ops import Ops
from lazygrad.renderer.c import CRenderer
from lazygrad.schedule.fuse import create_schedule


def only_kernel(tensor: Tensor) -> Kernel:
    (item,) = [item for item in create_schedule([tensor.lazydata]) if item.kernel is not None]
    return item.kernel


def leaves(kernel: Kernel, op) -> list:
    return [node for node in kernel.ast.walk() if node.op is op]


def test_each_piece_of_a_concatenation_reads_only_its_own_source():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((2, size, 5, 5)).astype(np.float32) for size in (3, 8, 5)]
    result = Tensor.cat([Tensor(array).realize() for array in arrays], dim=1).relu()
    kernel = only_kernel(result)
    pieces = concatenated_pieces(kernel)
    assert [piece.full_shape for piece in pieces] == [(2, 3, 5, 5), (2, 8, 5, 5), (2, 5, 5, 5)]
    for piece in pieces:
        assert len(leaves(piece, Ops.LOAD)) == 1
        assert not leaves(piece, Ops.VALID) and not leaves(piece, Ops.WHERE)
    _, source = kernel_source(kernel, CRenderer())
    assert source.count(f"static void {kernel.name}_piece") == 3
    np.testing.assert_array_equal(result.numpy(), np.maximum(np.concatenate(arrays, axis=1), 0))


def test_a_single_padding_is_not_split():
    x = Tensor(np.ones((4, 6), np.float32)).realize()
    assert concatenated_pieces(only_kernel(x.pad(((1, 1), (0, 0))) * 2)) is None


def test_a_reduce_along_the_concatenated_axis_is_not_split():
    x, y = Tensor(np.ones((4, 6), np.float32)).realize(), Tensor(np.ones((4, 2), np.float32)).realize()
    assert concatenated_pieces(only_kernel(x.cat(y, dim=1).sum(axis=1))) is None


def test_a_reduce_over_other_axes_is_split_along_the_concatenated_one():
    # a global average pool of a concatenation (DenseNet's last one joins 17 sources): each piece
    # pools its own channels; the bias after the mean is read at the outputs' shape
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((2, size, 5, 5)).astype(np.float32) for size in (3, 8, 5)]
    bias = rng.standard_normal((1, 16)).astype(np.float32)
    result = Tensor.cat([Tensor(array).realize() for array in arrays], dim=1).relu().mean(axis=(2, 3)) + Tensor(bias).realize()
    kernel = only_kernel(result)
    pieces = concatenated_pieces(kernel)
    assert [piece.full_shape for piece in pieces] == [(2, 3, 5, 5), (2, 8, 5, 5), (2, 5, 5, 5)]
    for piece in pieces:
        assert len(leaves(piece, Ops.LOAD)) == 2 and not leaves(piece, Ops.WHERE)
    _, source = kernel_source(kernel, CRenderer())
    assert source.count(f"static void {kernel.name}_piece") == 3
    expected = np.maximum(np.concatenate(arrays, axis=1), 0).mean(axis=(2, 3)) + bias
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int8, np.bool_, np.float16])
def test_concatenations_of_every_kind_match_numpy(dtype):
    """Along a middle axis, with a transposed source, a broadcast one, an empty one, spatial padding
    of the result and an op fused after it."""
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((3, 4, 6)) * 4).astype(dtype)
    b = (rng.standard_normal((6, 2, 3)) * 4).astype(dtype).transpose(2, 1, 0)  # (3, 2, 6), not contiguous
    c = (rng.standard_normal((3, 1, 1)) * 4).astype(dtype)
    empty = np.zeros((3, 0, 6), dtype)
    sources = [Tensor(a).realize(), Tensor(np.ascontiguousarray(b.transpose(2, 1, 0))).realize().permute(2, 1, 0),
               Tensor(empty), Tensor(c).realize().expand(3, 5, 6)]
    joined = Tensor.cat(sources, dim=1).pad(((0, 0), (0, 0), (1, 2)))
    result = joined if dtype == np.bool_ else joined * 2
    expected = np.pad(np.concatenate([a, b, empty, np.broadcast_to(c, (3, 5, 6))], axis=1), ((0, 0), (0, 0), (1, 2)))
    expected = expected if dtype == np.bool_ else expected * 2
    assert concatenated_pieces(only_kernel(result)) is not None
    np.testing.assert_array_equal(result.numpy(), expected)


def test_a_stack_of_more_sources_than_pieces_runs_whole_and_right():
    arrays = [np.full((2, 3), number, np.float32) for number in range(MAX_PIECES + 6)]
    result = Tensor.stack([Tensor(array).realize() for array in arrays], dim=1) + 1
    assert concatenated_pieces(only_kernel(result)) is None
    np.testing.assert_array_equal(result.numpy(), np.stack(arrays, axis=1) + 1)


def test_a_concatenation_with_a_shuffled_source_is_split_and_each_piece_reads_one_view():
    # ShuffleNetV2: the first half of a channel shuffle concatenated with a branch's output. The
    # shuffled half is a stack of views whose top view carries the concatenation's mask; each
    # piece reads one source, and the shuffled one, unmasked, runs over channel pairs (one view)
    rng = np.random.default_rng(2)
    before, branch = rng.standard_normal((1, 8, 3, 3)).astype(np.float32), rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    shuffled = Tensor(before).realize().reshape(1, 2, 4, 3, 3).permute(0, 2, 1, 3, 4).reshape(1, 8, 3, 3)
    result = Tensor.cat([shuffled[:, :4], Tensor(branch).realize()], dim=1)
    kernel = only_kernel(result)
    assert any(len(node.arg[1].views) > 1 for node in leaves(kernel, Ops.LOAD))
    pieces = concatenated_pieces(kernel)
    assert [piece.full_shape for piece in pieces] == [(1, 4, 3, 3), (1, 4, 3, 3)]
    for piece in pieces:
        assert len(leaves(piece, Ops.LOAD)) == 1 and not leaves(piece, Ops.WHERE)
    _, source = kernel_source(kernel, CRenderer())
    assert "/" not in source.split("_piece0(")[1].split("}")[0]  # no division in the shuffled piece's index
    expected = np.concatenate([before.reshape(1, 2, 4, 3, 3).transpose(0, 2, 1, 3, 4).reshape(1, 8, 3, 3)[:, :4], branch], 1)
    np.testing.assert_array_equal(result.numpy(), expected)
