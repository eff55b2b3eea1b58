"""TAKE, the indexed load: every gather (x[idx], gather, embedding, ONNX Gather) reads only the
elements it returns, on every device, with out-of-range indices reading 0 and never outside the
source. Values against numpy; the cost by the shape of the kernel's loops.
"""
from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor, dtypes, stats
from lazygrad.nn import functional as F
from lazygrad.schedule.fuse import create_schedule
from ops_helpers import check, tensor


def kernels_of(result: Tensor):
    return [item.kernel for item in create_schedule([result.lazydata]) if item.kernel is not None]


def numpy_embedding(indices: np.ndarray, table: np.ndarray) -> np.ndarray:
    inside = (indices >= 0) & (indices < table.shape[0])
    return np.where(inside[..., None], table[np.where(inside, indices, 0)], 0).astype(table.dtype)


@pytest.mark.parametrize("vocabulary", [50, 30522])
def test_an_embedding_lookup_is_one_kernel_without_a_loop_over_the_vocabulary(vocabulary):
    rng = np.random.default_rng(0)
    table = rng.standard_normal((vocabulary, 16)).astype(np.float32)
    indices = rng.integers(0, vocabulary, (4, 7))
    result = F.embedding(Tensor(indices), Tensor(table))
    kernels = kernels_of(result)
    assert len(kernels) == 1
    assert kernels[0].full_shape == (4, 7, 16) and kernels[0].reduce_axes == ()
    stats.reset()
    np.testing.assert_array_equal(result.numpy(), table[indices])
    assert stats.kernels == 1


def test_embedding_on_every_device_reads_zero_outside_the_table(device):
    table = np.arange(40, dtype=np.float32).reshape(10, 4) - 7
    indices = np.array([[0, 9, 10], [-1, 3, 2 ** 40]])
    check(F.embedding(tensor(indices, device), tensor(table, device)), numpy_embedding(indices, table), dtypes.float32)


@pytest.mark.parametrize("index_dtype", [np.int8, np.uint8, np.int32, np.int64])
def test_index_of_every_integer_dtype(index_dtype, device):
    table = np.arange(300, dtype=np.float32).reshape(100, 3)
    indices = np.array([0, 99, 5, 100, 127], dtype=index_dtype)
    check(F.embedding(tensor(indices, device), tensor(table, device)),
          numpy_embedding(indices.astype(np.int64), table), dtypes.float32)


def test_computed_source_and_computed_index(device):
    """The source and the index may be expressions: the source is evaluated at the taken position
    only, in the same kernel."""
    a = np.arange(24, dtype=np.float32).reshape(6, 4)
    b = np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4)
    raw = np.array([7, 2, -3, 11])
    result = (tensor(a, device) * 2 + tensor(b, device).exp())[(tensor(raw, device) % 6)]
    check(result, (a * 2 + np.exp(b))[np.mod(raw, 6)], dtypes.float32, rtol=1e-5)


def test_a_padded_source_reads_its_zeros_and_a_transposed_one_its_columns(device):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    rows = np.array([0, 4, 1])
    padded = np.pad(a, ((1, 1), (0, 0)))
    check(tensor(a, device).pad(((1, 1), (0, 0)))[tensor(rows, device)], padded[rows], dtypes.float32)
    check(tensor(a, device).T[tensor(np.array([3, 0]), device)], a.T[[3, 0]], dtypes.float32)


def test_gather_of_every_element_dtype(device):
    for dtype in (np.bool_, np.int16, np.float16, np.float64):
        x = (np.arange(20).reshape(4, 5) % 3).astype(dtype)
        index = np.array([[4, 0], [1, 1], [0, 3], [2, 2]])
        expected = np.take_along_axis(x, index, axis=1)
        check(tensor(x, device).gather(1, tensor(index, device)), expected, dtypes.from_any(dtype))


def test_empty_and_zero_dim_lookups(device):
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    check(F.embedding(tensor(np.zeros((0, 2), np.int64), device), tensor(table, device)),
          np.zeros((0, 2, 3), np.float32), dtypes.float32)
    check(F.embedding(tensor(np.array(2), device), tensor(table, device)), table[2], dtypes.float32)
    empty_table = np.zeros((0, 3), np.float32)
    check(F.embedding(tensor(np.array([0, 1]), device), tensor(empty_table, device)),
          np.zeros((2, 3), np.float32), dtypes.float32)


def test_embedding_gradient_adds_each_rows_gradient_back_once_per_use():
    rng = np.random.default_rng(3)
    table = rng.standard_normal((6, 3))
    indices = np.array([[1, 4, 1], [5, 0, 9]])  # 1 twice, 9 out of range
    upstream = rng.standard_normal((2, 3, 3))
    weight = Tensor(table, dtype=dtypes.float64, requires_grad=True)
    (F.embedding(Tensor(indices), weight) * Tensor(upstream, dtype=dtypes.float64)).sum().backward()
    expected = np.zeros_like(table)
    for position, row in np.ndenumerate(indices):
        if 0 <= row < 6:
            expected[row] += upstream[position]
    np.testing.assert_allclose(weight.grad.numpy(), expected, rtol=1e-12)


def test_padding_idx_row_gets_no_gradient():
    weight = Tensor(np.ones((5, 2)), dtype=dtypes.float64, requires_grad=True)
    F.embedding(Tensor(np.array([0, 2, 2, 4])), weight, padding_idx=2).sum().backward()
    np.testing.assert_array_equal(weight.grad.numpy(), [[1, 1], [0, 0], [0, 0], [0, 0], [1, 1]])
