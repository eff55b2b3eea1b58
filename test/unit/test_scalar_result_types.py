"""tensor._scalar_result_type remembers the dtype of `tensor op scalar` by (tensor dtype, whether the
tensor has dims, the scalar's type): every one of them must change the answer where PyTorch's does."""
import numpy as np
import pytest

from lazygrad import Tensor, dtypes
from lazygrad import tensor as tensor_module


@pytest.fixture(autouse=True)
def empty_memo(monkeypatch):
    monkeypatch.setattr(tensor_module, "_SCALAR_RESULT_TYPES", {})


def test_the_scalars_type_is_part_of_the_key():
    x = Tensor(np.arange(3, dtype=np.int32))
    assert (x + 1).dtype == dtypes.int32
    assert (x + 1.5).dtype == dtypes.float32
    assert (x + True).dtype == dtypes.int32
    assert (x + np.float64(1.5)).dtype == dtypes.float32
    flags = Tensor(np.array([True, False]))
    assert (flags + True).dtype == dtypes.bool
    assert (flags + 1).dtype == dtypes.int64
    assert (flags + 1.0).dtype == dtypes.float32


def test_the_tensors_dtype_is_part_of_the_key():
    assert (Tensor(np.ones(2, np.float16)) + 1.0).dtype == dtypes.float16
    assert (Tensor(np.ones(2, np.float64)) + 1.0).dtype == dtypes.float64
    assert (Tensor(np.ones(2, np.int8)) + 1).dtype == dtypes.int8
    assert (Tensor(np.ones(2, np.int8)) + 1.0).dtype == dtypes.float32
    assert len(tensor_module._SCALAR_RESULT_TYPES) == 4


def test_zero_dim_tensors_and_repeated_ops_use_the_memo():
    assert (Tensor(np.int8(3)) + 100).dtype == dtypes.int8
    assert (Tensor(np.int8(3)) + 1.0).dtype == dtypes.float32
    x = Tensor(np.ones(4, np.float32))
    for _ in range(5):
        x + 1
    assert len(tensor_module._SCALAR_RESULT_TYPES) == 3
