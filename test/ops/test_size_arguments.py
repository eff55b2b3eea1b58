"""Sizes, dims and counts are ints: a float, string or bool raises TypeError and a negative size
ValueError, naming the function and the argument, instead of being truncated or reaching the
compiler (`expand(-2, 3)` once rendered `void E_-2_3`). -1 is accepted where it means something."""
import numpy as np
import pytest

from lazygrad import Tensor


class Size(tuple):
    """Stands in for torch.Size, a tuple subclass."""


def vector():
    return Tensor.zeros(6)


def matrix():
    return Tensor.zeros(2, 3)


# name: a call taking the bad value, and the argument the message must name
TAKES_AN_INT = {
    "zeros": (lambda v: Tensor.zeros(v), "size[0]"),
    "zeros_tuple": (lambda v: Tensor.zeros((2, v)), "size[1]"),
    "ones": (lambda v: Tensor.ones(v, 2), "size[0]"),
    "empty": (lambda v: Tensor.empty([v]), "size[0]"),
    "full": (lambda v: Tensor.full((v,), 1.0), "size[0]"),
    "rand": (lambda v: Tensor.rand(v), "size[0]"),
    "randn": (lambda v: Tensor.randn(2, v), "size[1]"),
    "randint": (lambda v: Tensor.randint(0, 5, (v,)), "size[0]"),
    "uniform": (lambda v: Tensor.uniform(v, 2), "size[0]"),
    "eye": (lambda v: Tensor.eye(v), "n"),
    "linspace": (lambda v: Tensor.linspace(0, 1, v), "steps"),
    "reshape": (lambda v: vector().reshape(v), "shape[0]"),
    "view": (lambda v: vector().view(2, v), "shape[1]"),
    "expand": (lambda v: vector().expand(v, 6), "shape[0]"),
    "repeat": (lambda v: vector().repeat(v), "repeats[0]"),
    "tile": (lambda v: vector().tile(v), "dims[0]"),
    "unflatten": (lambda v: vector().unflatten(0, (v, 3)), "sizes[0]"),
    "pad": (lambda v: vector().pad((v, 1)), "padding[0]"),
    "shrink": (lambda v: vector().shrink(((0, v),)), "bounds[0][1]"),
    "narrow": (lambda v: vector().narrow(0, v, 2), "start"),
    "roll": (lambda v: vector().roll(v), "shifts[0]"),
    "split": (lambda v: vector().split(v), "split_size"),
    "chunk": (lambda v: vector().chunk(v), "chunks"),
    "repeat_interleave": (lambda v: vector().repeat_interleave(v), "repeats"),
    "permute": (lambda v: matrix().permute(v, 0), "dim"),
    "transpose": (lambda v: matrix().transpose(v, 1), "dim"),
    "flatten": (lambda v: matrix().flatten(v), "dim"),
    "sum": (lambda v: matrix().sum(v), "dim"),
    "flip": (lambda v: matrix().flip(v), "dim"),
    "unsqueeze": (lambda v: matrix().unsqueeze(v), "dim"),
}


@pytest.mark.parametrize("bad", [2.0, 6.5, np.float32(2.0), "6", True, np.bool_(True)],
                         ids=["float", "fraction", "numpy-float", "str", "bool", "numpy-bool"])
@pytest.mark.parametrize("name", list(TAKES_AN_INT))
def test_a_size_or_dim_that_is_not_an_int_raises_type_error(name, bad):
    call, argument = TAKES_AN_INT[name]
    with pytest.raises(TypeError) as excinfo:
        call(bad)
    text = str(excinfo.value)
    function = name.split("_tuple")[0]
    assert text.startswith(f"{function}: {argument} must be an int, got {bad!r}"), text


def test_a_float_size_is_told_how_to_make_an_int():
    with pytest.raises(TypeError, match=r"reshape: shape\[0\] must be an int, got 6.5 \(float\); convert it with int\(\)"):
        vector().reshape(6.5)


def test_sizes_mixing_the_two_forms_are_told_to_pick_one():
    with pytest.raises(TypeError, match=r"zeros: size\[0\] must be an int, got \(2,\) \(tuple\); pass the ints one by one"):
        Tensor.zeros((2,), 3)


NEGATIVE = {
    "zeros": lambda: Tensor.zeros(2, -3),
    "ones": lambda: Tensor.ones((-1,)),
    "empty": lambda: Tensor.empty(-2),
    "full": lambda: Tensor.full((2, -1), 0.0),
    "rand": lambda: Tensor.rand(-1),
    "randn": lambda: Tensor.randn(-1, 2),
    "randint": lambda: Tensor.randint(0, 5, (-1,)),
    "reshape": lambda: vector().reshape(-2, -3),
    "view": lambda: vector().view(-2, 3),
    "expand": lambda: Tensor.zeros(3).expand(-2, 3),
    "repeat": lambda: vector().repeat(-1),
    "tile": lambda: vector().tile(-2),
    "unflatten": lambda: vector().unflatten(0, (-2, -3)),
}


@pytest.mark.parametrize("name", list(NEGATIVE))
def test_a_negative_size_raises_value_error_naming_the_function(name):
    with pytest.raises(ValueError) as excinfo:
        NEGATIVE[name]()
    text = str(excinfo.value)
    assert text.startswith(f"{name}: ") and "negative size" in text and "0 or more" in text, text


def test_the_negative_size_message_says_what_minus_one_means():
    with pytest.raises(ValueError, match=r"-1 \(once\) for the size the others leave"):
        vector().reshape(-2, 3)
    with pytest.raises(ValueError, match="-1 to keep a dim's size"):
        Tensor.zeros(3).expand(-2, 3)


def test_minus_one_is_accepted_where_it_means_something():
    assert vector().reshape(-1, 2).shape == (3, 2)
    assert vector().view(3, -1).shape == (3, 2)
    assert vector().unflatten(0, (-1, 3)).shape == (2, 3)
    assert Tensor.zeros(1, 3).expand(4, -1).shape == (4, 3)
    assert Tensor.zeros(3).expand(2, -1).shape == (2, 3)
    with pytest.raises(ValueError, match="only one dimension can be -1"):
        vector().reshape(-1, -1)


def test_expand_minus_one_cannot_keep_a_dim_the_tensor_lacks():
    with pytest.raises(ValueError, match=r"expand: shape \(-1, 3\) has -1 \(keep the size\) at index 0, a dim the "
                                         r"tensor of shape \(3,\) does not have"):
        Tensor.zeros(3).expand(-1, 3)


def test_sizes_come_as_varargs_a_tuple_a_list_a_size_or_numpy_ints():
    for shape in [(2, 3), ((2, 3),), ([2, 3],), (Size((2, 3)),), (np.int64(2), np.int32(3)), ((np.int64(2), 3),)]:
        assert Tensor.zeros(*shape).shape == (2, 3), shape
        assert Tensor.rand(*shape).shape == (2, 3), shape
        assert vector().reshape(*shape).shape == (2, 3), shape
        assert Tensor.zeros(1, 3).expand(*shape).shape == (2, 3), shape
    assert Tensor.full(2, 1.0).shape == (2,)
    assert Tensor.zeros(np.array(3)).shape == (3,)
    assert type(vector().reshape(np.int64(6)).shape[0]) is int


def test_dims_may_be_numpy_ints():
    x = Tensor(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(x.sum(np.int64(0)).numpy(), [3.0, 5.0, 7.0])
    assert x.permute(np.int64(1), 0).shape == (3, 2)
    assert x.pad((np.int64(1), 0)).shape == (2, 4)
    assert len(x.split(np.int64(1), dim=np.int64(1))) == 3
