"""Bad input raises at once (while the graph is built), with the exception type PyTorch users
expect and a message that names what was wrong."""
from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor, dtypes


def ones(*shape, device, dtype=None):
    return Tensor.ones(*shape, dtype=dtype or dtypes.float32, device=device)


def message(excinfo) -> str:
    return str(excinfo.value)


# ---- broadcasting ----------------------------------------------------------------------------------

BROADCAST_OPS = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "div": lambda x, y: x / y,
    "maximum": lambda x, y: x.maximum(y), "minimum": lambda x, y: x.minimum(y), "lt": lambda x, y: x < y,
    "eq": lambda x, y: x == y, "floordiv": lambda x, y: x // y, "remainder": lambda x, y: x % y,
    "pow": lambda x, y: x ** y, "where": lambda x, y: (x > 0).where(x, y),
}


@pytest.mark.parametrize("name", list(BROADCAST_OPS))
def test_broadcast_mismatch_names_op_and_shapes(name, device):
    with pytest.raises(ValueError) as excinfo:
        BROADCAST_OPS[name](ones(2, 3, device=device), ones(4, device=device))
    text = message(excinfo)
    assert name in text, text
    assert "(2, 3)" in text and "(4,)" in text, text


def test_broadcast_mismatch_in_bitwise_ops(device):
    x, y = ones(2, 3, device=device, dtype=dtypes.int32), ones(2, 2, device=device, dtype=dtypes.int32)
    for op in (lambda a, b: a & b, lambda a, b: a | b, lambda a, b: a ^ b, lambda a, b: a << b):
        with pytest.raises(ValueError) as excinfo:
            op(x, y)
        assert "(2, 3)" in message(excinfo) and "(2, 2)" in message(excinfo)


def test_broadcast_mismatch_where_condition(device):
    cond = Tensor(np.array([True, False, True]), device=device)
    with pytest.raises(ValueError) as excinfo:
        cond.where(ones(2, 2, device=device), 0.0)
    assert "(3,)" in message(excinfo) and "(2, 2)" in message(excinfo)


# ---- matmul ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("left,right", [((2, 3), (4, 5)), ((3,), (4,)), ((2, 3), (2,)), ((5,), (4, 2)),
                                        ((2, 2, 3), (4, 3, 1))])
def test_matmul_mismatch_names_both_shapes(left, right, device):
    with pytest.raises(ValueError) as excinfo:
        ones(*left, device=device) @ ones(*right, device=device)
    text = message(excinfo)
    assert str(left) in text and str(right) in text, text


def test_matmul_of_0d_raises(device):
    with pytest.raises(ValueError) as excinfo:
        Tensor(2.0, device=device) @ ones(3, device=device)
    assert "()" in message(excinfo)


# ---- movement ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", [(4, 2), (5, -1), (-1, -1), (7,), (-2, 3), (0, -1)])
def test_reshape_mismatch(target, device):
    with pytest.raises(ValueError) as excinfo:
        ones(2, 3, device=device).reshape(target)
    assert "(2, 3)" in message(excinfo) or "-1" in message(excinfo), message(excinfo)


def test_expand_pad_shrink_mismatch(device):
    x = ones(2, 3, device=device)
    with pytest.raises(ValueError):
        x.expand(2, 4)
    with pytest.raises(ValueError):
        x.expand(3)
    with pytest.raises(ValueError):
        x.pad(((1, 1),))
    with pytest.raises(ValueError):
        x.pad((1, 1, 1))
    with pytest.raises(ValueError):
        x.shrink(((0, 3), (0, 3)))
    with pytest.raises(ValueError):
        x.shrink(((1, 0), None))
    for bounds in (((0, 1),), ((0, 1), (0, 1), (0, 1))):  # one pair per dim, neither fewer nor more
        with pytest.raises(ValueError, match="shrink: got .* bounds for a tensor of shape"):
            x.shrink(bounds)


AXIS_ERRORS = {
    "sum": lambda x: x.sum(2), "sum-negative": lambda x: x.sum(-3), "sum-tuple": lambda x: x.sum((0, 5)),
    "max": lambda x: x.max(2), "min": lambda x: x.min(-3), "mean": lambda x: x.mean(3), "prod": lambda x: x.prod(2),
    "permute": lambda x: x.permute(0, 2), "transpose": lambda x: x.transpose(0, 2), "flip": lambda x: x.flip(2),
    "squeeze": lambda x: x.squeeze(2), "unsqueeze": lambda x: x.unsqueeze(4), "unsqueeze-negative": lambda x: x.unsqueeze(-4),
    "flatten": lambda x: x.flatten(0, 2), "size": lambda x: x.size(2),
}


@pytest.mark.parametrize("name", list(AXIS_ERRORS))
def test_bad_axis_raises_index_error(name, device):
    with pytest.raises(IndexError) as excinfo:
        AXIS_ERRORS[name](ones(2, 3, device=device))
    assert "range" in message(excinfo), message(excinfo)


def test_permute_not_a_permutation(device):
    with pytest.raises(ValueError):
        ones(2, 3, device=device).permute(0, 0)
    with pytest.raises(ValueError):
        ones(2, 3, device=device).permute(0)


def test_reduce_repeated_axis(device):
    with pytest.raises(ValueError):
        ones(2, 3, device=device).sum((0, -2))


# ---- dtypes and devices ---------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["float8", "float6_e3m2fn", "complex32", object, "int2"])
def test_unknown_dtype_names_valid_dtypes(bad, device):
    with pytest.raises(TypeError) as excinfo:
        Tensor([1, 2], dtype=bad, device=device)
    text = message(excinfo)
    assert "float32" in text and "int64" in text and "bool" in text, text
    with pytest.raises(TypeError):
        ones(2, device=device).cast(bad)


def test_unknown_device_names_valid_devices():
    for bad in ("TPU", "gpu", "CPU:x"):
        with pytest.raises(ValueError) as excinfo:
            Tensor([1.0], device=bad)
        text = message(excinfo)
        assert "CPU" in text and "NPY" in text, text
    with pytest.raises(ValueError):
        Tensor.ones(2, device="METAL")
    with pytest.raises(ValueError):
        Tensor([1.0]).to("TPU")


def test_mixing_devices_names_both(device):
    other = "NPY" if device != "NPY" else "CPU"
    with pytest.raises(ValueError) as excinfo:
        ones(2, device=device) + ones(2, device=other)
    assert device in message(excinfo) and other in message(excinfo)


# ---- ops a dtype does not support ------------------------------------------------------------------

def test_bool_neg_and_sub_raise_type_error(device):
    b = Tensor(np.array([True, False]), device=device)
    with pytest.raises(TypeError):
        -b
    with pytest.raises(TypeError):
        b.neg()
    with pytest.raises(TypeError):
        b - b
    with pytest.raises(TypeError):
        b - True
    with pytest.raises(TypeError):
        True - b


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64])
def test_bitwise_on_floats_raises_type_error(dtype, device):
    x = ones(3, device=device, dtype=dtype)
    i = ones(3, device=device, dtype=dtypes.int32)
    for op in (lambda: x & x, lambda: x | x, lambda: x ^ x, lambda: ~x, lambda: x << 1, lambda: x >> 1,
               lambda: i & x, lambda: x ^ 1, lambda: i | 1.5):
        with pytest.raises(TypeError) as excinfo:
            op()
        assert dtype.name in message(excinfo) or "float32" in message(excinfo), message(excinfo)


def test_floordiv_and_remainder_of_bool_raise(device):
    b = Tensor(np.array([True, False]), device=device)
    with pytest.raises(TypeError):
        b // b
    with pytest.raises(TypeError):
        b % b


def test_mean_of_integers_raises_type_error(device):
    with pytest.raises(TypeError) as excinfo:
        ones(2, device=device, dtype=dtypes.int32).mean()
    assert "int32" in message(excinfo)


def test_max_of_empty_raises_value_error(device):
    with pytest.raises(ValueError) as excinfo:
        Tensor(np.zeros((0, 3), dtype=np.float32), device=device).max(0)
    assert "(0, 3)" in message(excinfo)


# ---- indexing --------------------------------------------------------------------------------------

@pytest.mark.parametrize("index", [4, -5, (0, 3), (slice(None), -4), (0, 0, 0), (Ellipsis, Ellipsis), (None, 0, 0, 0)],
                         ids=["4", "-5", "0,3", ":,-4", "0,0,0", "...,...", "None,0,0,0"])
def test_getitem_out_of_range_raises_index_error(index, device):
    with pytest.raises(IndexError):
        ones(4, 3, device=device)[index]


def test_getitem_unsupported_index_types(device):
    x = ones(4, 3, device=device)
    for index in ("a", 1.5, [0.5, 1.0], (True, [0])):
        with pytest.raises((TypeError, IndexError)):
            x[index]


def test_getitem_of_0d_raises(device):
    with pytest.raises(IndexError):
        Tensor(1.0, device=device)[0]


# ---- conversions ------------------------------------------------------------------------------------

def test_item_of_many_elements_raises(device):
    with pytest.raises(ValueError) as excinfo:
        ones(2, 2, device=device).item()
    assert "(2, 2)" in message(excinfo)


def test_ragged_or_bad_data_raises_type_error(device):
    with pytest.raises((TypeError, ValueError)):
        Tensor([[1, 2], [3]], device=device)
    with pytest.raises(TypeError):
        Tensor(["a", "b"], device=device)
    with pytest.raises(TypeError):
        Tensor([1 + 2j], dtype="float32", device=device)  # complex values need a complex dtype


def test_negative_shape_raises(device):
    with pytest.raises(ValueError):
        Tensor.ones(2, -1, device=device)
