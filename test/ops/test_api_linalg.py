"""einsum and outer against numpy, on every device."""
from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor, dtypes
from ops_helpers import check, small_sample, tensor

I32, F32 = dtypes.int32, dtypes.float32

rng = np.random.default_rng(0)
OPERANDS = {
    "A": rng.standard_normal((3, 4)), "B": rng.standard_normal((4, 5)), "S": rng.standard_normal((4, 4)),
    "v": rng.standard_normal(4), "w": rng.standard_normal(3), "C": rng.standard_normal((2, 3, 4)),
    "D": rng.standard_normal((2, 4, 5)), "E": rng.standard_normal((2, 5, 2)), "T": rng.standard_normal((3, 3, 3)),
    "one": rng.standard_normal((1, 4)),
}
EINSUMS = [
    ("ij,jk->ik", "AB"), ("ij,jk", "AB"), ("ij->ji", "A"), ("ji", "A"), ("ij->", "A"), ("ij->j", "A"),
    ("ii->i", "S"), ("ii", "S"), ("iii->i", "T"), ("iij->j", "T"), ("ii,i->i", "Sv"),
    ("i,i->", "vv"), ("i,j->ij", "vw"), ("j,ij->i", "vA"), ("ij,ij->ij", "AA"),
    ("bij,bjk->bik", "CD"), ("bij,jk,bkl->bil", "CBE"), ("...ij,...jk->...ik", "CD"), ("...ij,jk", "CB"),
    ("i...->...", "C"), ("b...,b...->...", "CC"), ("ij,kj->ik", "oneA"),
]


@pytest.mark.parametrize("equation,names", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum(equation, names, device):
    names = ["one", "A"] if names == "oneA" else list(names)
    arrays = [OPERANDS[name].astype(np.float32) for name in names]
    expected = np.einsum(equation, *arrays)
    result = Tensor.einsum(equation, *[tensor(a, device) for a in arrays])
    check(result, np.asarray(expected, np.float32), F32, rtol=1e-5, atol=1e-5)


def test_einsum_list_form_ints_and_non_contiguous(device):
    a, b = small_sample(I32, shape=(3, 4)), small_sample(I32, shape=(4, 2), seed=2)
    check(Tensor.einsum("ij,jk->ik", [tensor(a, device), tensor(b, device)]), a @ b, I32)
    x = small_sample(F32, shape=(4, 6))
    check(Tensor.einsum("ji,jk->ik", tensor(x, device).T, tensor(x, device).T), x @ x.T, F32, rtol=1e-5)
    check(Tensor.einsum(" i j -> j i ", tensor(x, device)), x.T, F32)


EINSUM_ERRORS = [
    ("ij,jk->ik", ["A"], "2 operand"), ("ijk->i", ["A"], "2 dims"), ("ij->k", ["A"], "'k'"), ("ij->ii", ["A"], "'i'"),
    ("ij,jk->ik", ["A", "A"], "'j'"), ("i1->i", ["v"], "'1'"), ("i.j->i", ["A"], "'.'"), ("ij->i->j", ["A"], "->"),
    ("ii->i", ["A"], "'i'"),
]


@pytest.mark.parametrize("equation,names,text", EINSUM_ERRORS, ids=[e for e, _, _ in EINSUM_ERRORS])
def test_einsum_errors_name_the_problem(equation, names, text, device):
    with pytest.raises(ValueError) as excinfo:
        Tensor.einsum(equation, *[tensor(OPERANDS[name].astype(np.float32), device) for name in names])
    assert text in str(excinfo.value), str(excinfo.value)


def test_einsum_rejects_non_tensors():
    with pytest.raises(TypeError, match="list"):
        Tensor.einsum("i,i->", Tensor([1.0]), [1.0])


def test_outer(device):
    v, w = OPERANDS["v"].astype(np.float32), OPERANDS["w"].astype(np.float32)
    check(tensor(v, device).outer(tensor(w, device)), np.outer(v, w), F32)
    i = small_sample(I32, shape=(3,))
    check(tensor(i, device).outer(tensor(v, device)), np.outer(i, v).astype(np.float32), F32)
    with pytest.raises(ValueError, match=r"\(3, 4\)"):
        tensor(OPERANDS["A"].astype(np.float32), device).outer(tensor(v, device))
