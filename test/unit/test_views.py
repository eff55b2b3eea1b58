"""Views and index math: a ShapeTracker's index expression must read what numpy's view reads."""
import itertools
import math

import numpy as np
from hypothesis import given, settings, strategies as st

from lazygrad.ops import OPS
from lazygrad.shape.symbolic import Lin, condition, render_condition, var
from lazygrad.shape.view import ShapeTracker, View, merge_views, split_along


def read_through(tracker: ShapeTracker, data: np.ndarray) -> np.ndarray:
    """Evaluate the tracker's index and mask at every position, reading a flat array."""
    names = [f"i{axis}" for axis in range(len(tracker.shape))]
    indices = [var(name, 0, max(size - 1, 0)) for name, size in zip(names, tracker.shape)]
    offset, conditions = tracker.index_and_valid(indices)
    out = np.zeros(tracker.shape, dtype=data.dtype)
    for position in itertools.product(*[range(size) for size in tracker.shape]):
        values = dict(zip(names, position))
        if all(lo <= expr.evaluate(values) < hi for expr, lo, hi in conditions):
            out[position] = data[offset.evaluate(values)]
    return out


def numpy_movement(array: np.ndarray, op: str, arg) -> np.ndarray:
    if op == "reshape":
        return array.reshape(arg)
    if op == "permute":
        return array.transpose(arg)
    if op == "expand":
        return np.broadcast_to(array, arg)
    if op == "pad":
        return np.pad(array, arg)
    if op == "shrink":
        return array[tuple(slice(a, b) for a, b in arg)]
    return np.flip(array, arg)


@st.composite
def movement_chains(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    ops = []
    current = shape
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["reshape", "permute", "expand", "pad", "shrink", "flip"]))
        if op == "reshape":
            size = int(np.prod(current))
            factors = [d for d in range(1, size + 1) if size % d == 0]
            first = draw(st.sampled_from(factors))
            arg = (first, size // first) if draw(st.booleans()) else (size,)
        elif op == "permute":
            arg = tuple(draw(st.permutations(range(len(current)))))
        elif op == "expand":
            if 1 not in current:
                arg = (2,) + current
                ops.append(("reshape", (1,) + current))
                current = (1,) + current
            arg = tuple(3 if size == 1 else size for size in current)
        elif op == "pad":
            arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in current)
        elif op == "shrink":
            arg = []
            for size in current:
                start = draw(st.integers(0, size - 1))
                arg.append((start, draw(st.integers(start + 1, size))))
            arg = tuple(arg)
        else:
            arg = tuple(sorted(draw(st.sets(st.integers(0, len(current) - 1), min_size=1))))
        ops.append((op, arg))
        current = numpy_movement(np.zeros(current), op, arg).shape
    return shape, ops


def followed(chain) -> tuple[np.ndarray, np.ndarray, ShapeTracker]:
    """A chain's flat source data, numpy's view of it, and the tracker of the same movement ops."""
    shape, ops = chain
    data = np.arange(1, int(np.prod(shape)) + 1, dtype=np.int64)
    expected = data.reshape(shape)
    tracker = ShapeTracker.from_shape(shape)
    for op, arg in ops:
        expected = numpy_movement(expected, op, arg)
        tracker = tracker.apply(OPS[op.upper()], arg)
    return data, expected, tracker


@settings(max_examples=300, deadline=None)
@given(movement_chains())
def test_tracker_reads_what_numpy_views_read(chain):
    data, expected, tracker = followed(chain)
    np.testing.assert_array_equal(read_through(tracker, data), expected)


@settings(max_examples=300, deadline=None)
@given(movement_chains())
def test_a_stack_of_views_split_along_the_view_below_reads_the_same(chain):
    # view.split_along splits the top view's dims where they carry into the next dim below; the
    # tracker reshaped so (merge_views makes the two views one where it can) reads the same elements
    data, expected, tracker = followed(chain)
    if len(tracker.views) > 1:
        finer = split_along(tracker.views[-1], tracker.views[-2].shape)
        assert math.prod(finer) == math.prod(tracker.shape)
        np.testing.assert_array_equal(read_through(tracker.reshape(finer), data), expected.reshape(finer))


def test_half_of_a_channel_shuffle_split_into_channel_pairs_is_one_view():
    # ShuffleNetV2: (1, 2, 116, 14, 14) transposed to (1, 116, 2, 14, 14), flattened to 232 channels
    # and split in halves. The second half read over its own shape needs both views (a division and
    # a remainder per element); over channel pairs it is one view, a sum of steps
    tracker = ShapeTracker.from_shape((1, 2, 116, 14, 14)).permute((0, 2, 1, 3, 4)).reshape((1, 232, 14, 14))
    half = tracker.shrink(((0, 1), (116, 232), (0, 14), (0, 14)))
    assert len(half.views) == 2
    finer = split_along(half.views[-1], half.views[-2].shape)
    assert finer == (1, 58, 2, 14, 14)
    paired = half.reshape(finer)
    assert paired.views == (View((1, 58, 2, 14, 14), (0, 196, 22736, 14, 1), 11368),)
    data = np.arange(2 * 116 * 196)
    expected = data.reshape(1, 2, 116, 14, 14).transpose(0, 2, 1, 3, 4).reshape(1, 232, 14, 14)[:, 116:]
    np.testing.assert_array_equal(read_through(paired, data), expected.reshape(finer))


def test_a_masked_dim_splits_where_its_bounds_fall_between_whole_blocks():
    # the first half of a 232-channel concatenation, split into channel pairs: the pair axis keeps
    # the bound (58 pairs), the axis inside a pair is whole; a bound inside a pair cannot split
    padded = View.contiguous((116, 196)).pad(((0, 116), (0, 0)))
    assert padded.reshape((116, 2, 196)) == View((116, 2, 196), (392, 196, 1), 0, ((0, 58), (0, 2), (0, 196)))
    assert View.contiguous((115, 196)).pad(((0, 117), (0, 0))).reshape((116, 2, 196)) is None


def test_views_that_carry_stay_two():
    # 232 channels one plane apart over (116, 2) planes: every second channel carries
    tracker = ShapeTracker.from_shape((1, 2, 116, 14, 14)).permute((0, 2, 1, 3, 4)).reshape((1, 232, 14, 14))
    assert merge_views(tracker.views[-1], tracker.views[-2]) is None and len(tracker.views) == 2


def test_a_condition_that_confines_a_variable_folds_the_views_below():
    # a (3, 4) gradient spread to stride 2 and shifted one column right in a (3, 8) grid, as a
    # pooling gradient places each window's share: under `i1 >= 1` the flat index never wraps a row
    tracker = ShapeTracker.from_shape((3, 4)).reshape((3, 4, 1)).pad(((0, 0), (0, 0), (0, 1)))
    tracker = tracker.reshape((3, 8)).pad(((0, 0), (1, -1))).reshape((24,)).reshape((3, 8))
    offset, conditions = tracker.index_and_valid([var("i0", 0, 2), var("i1", 0, 7)])
    assert offset.render() == "i0*4+((i1+1)/2)-1"  # no division by the row length, no remainder
    assert render_condition(conditions) == "(i1>=1)&&(((i1+1)%2)<1)"
    data = np.arange(1, 13, dtype=np.int64)
    expected = np.zeros((3, 8), dtype=np.int64)
    expected[:, 1::2] = data.reshape(3, 4)
    np.testing.assert_array_equal(read_through(tracker, data), expected)


@settings(max_examples=300, deadline=None)
@given(movement_chains(), st.data())
def test_an_access_linear_in_one_axis_moves_by_its_step_along_it(chain, data):
    # codegen/linearize.py computes the lanes of a vector once, their axis a variable: where the
    # offset is step * that variable plus the rest, and no division, remainder or condition reads
    # it, each lane's access is the rest shifted by step * lane. It must read what the access
    # computed with the axis at each value reads.
    _, _, tracker = followed(chain)
    names = [f"i{axis}" for axis in range(len(tracker.shape))]
    indices = [var(name, 0, max(size - 1, 0)) for name, size in zip(names, tracker.shape)]
    axis = data.draw(st.integers(0, len(tracker.shape) - 1))
    lane = {names[axis]}
    offset, conditions = tracker.index_and_valid(indices)
    linear = not any(expr.mentions(lane) for expr, _, _ in conditions) and \
        not any(atom.kind != "var" and atom.inner.mentions(lane) for atom in offset.terms)
    if not linear:
        return
    step = sum(coeff for atom, coeff in offset.terms.items() if atom.kind == "var" and atom.name in lane)
    rest = Lin({atom: coeff for atom, coeff in offset.terms.items() if atom.kind != "var" or atom.name not in lane},
               offset.const)
    for value in range(tracker.shape[axis]):
        at_value = indices[:axis] + [Lin.of(value)] + indices[axis + 1:]
        fixed_offset, fixed_conditions = tracker.index_and_valid(at_value)
        shifted = rest.shifted(step * value)
        assert (shifted.min, shifted.max) == ((rest + step * value).min, (rest + step * value).max)
        for position in itertools.product(*[range(size) for size in tracker.shape]):
            values = dict(zip(names, position))
            values[names[axis]] = value
            valid = all(lo <= expr.evaluate(values) < hi for expr, lo, hi in conditions)
            assert valid == all(lo <= expr.evaluate(values) < hi for expr, lo, hi in fixed_conditions)
            if valid:
                assert shifted.evaluate(values) == fixed_offset.evaluate(values)


def test_an_expression_mentions_a_variable_inside_its_divisions_too():
    i, j = var("i", 0, 7), var("j", 0, 3)
    assert (i * 2 + 1).mentions({"i"}) and not (i * 2 + 1).mentions({"j"})
    assert ((i + j * 8) // 3).mentions({"j"}) and ((i * 4 + j) % 5).mentions({"j"})
    assert not Lin.of(3).mentions({"i"})


def test_contradicting_conditions_are_never_valid():
    # the top view admits i0 < 2, the view below i0 >= 2
    tracker = ShapeTracker((View((4,), (1,), 0, ((2, 4),)), View((4,), (1,), 0, ((0, 2),))))
    _, conditions = tracker.index_and_valid([var("i0", 0, 3)])
    assert render_condition(conditions) is False
    np.testing.assert_array_equal(read_through(tracker, np.arange(1, 5)), np.zeros(4))


def test_reshape_of_a_contiguous_view_needs_no_second_view():
    tracker = ShapeTracker.from_shape((4, 6)).reshape((2, 2, 3, 2)).reshape((24,))
    assert len(tracker.views) == 1 and tracker.is_contiguous


def test_reshape_of_a_transposed_view_stacks_a_view():
    tracker = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((24,))
    assert len(tracker.views) == 2


def test_splitting_a_transposed_dim_keeps_one_view():
    view = View.contiguous((4, 6)).permute((1, 0)).reshape((2, 3, 4))
    assert view is not None and view.strides == (3, 1, 6)


def test_floor_division_and_modulo_fold_with_bounds():
    i, j = var("i", 0, 9), var("j", 0, 3)
    assert ((i * 4 + j) // 4).identity() == i.identity()
    assert ((i * 4 + j) % 4).identity() == j.identity()
    assert (j // 4).identity() == Lin.of(0).identity()
    assert ((i * 4 + j) * 2 // 8).identity() == i.identity()


def test_possibly_negative_division_renders_with_floor_semantics():
    i = var("i", 0, 9)
    shifted = (i - 3) // 4           # the constant is moved out, so C's / is safe here
    assert "lg_floordiv" not in shifted.render()
    negated = (i * -1 + 1) // 4      # a negative coefficient can make the operand negative
    assert "lg_floordiv" in negated.render()
    for value in range(10):
        assert shifted.evaluate({"i": value}) == (value - 3) // 4
        assert negated.evaluate({"i": value}) == (1 - value) // 4


def test_conditions_decided_by_bounds_render_as_constants():
    i = var("i", 0, 9)
    assert render_condition([(i, 0, 10)]) is True
    assert render_condition([(i, 10, 12)]) is False
    assert render_condition([(i, 2, 10)]) == "(i>=2)"


def test_index_expressions_and_conditions_are_equal_when_they_compute_the_same():
    """A loop program's statements compare by value (codegen/linearize.py names equal ones once): a Lin
    by its terms, whatever their order, a Condition by its undecided checks, which evaluate on arrays."""
    i, j = var("i", 0, 9), var("j", 0, 3)
    assert i * 4 + j + 1 == (j + 1) + i * 4 and hash(i * 4 + j + 1) == hash((j + 1) + i * 4)
    assert i * 4 + j != i * 4 + j * 2 and i != j
    assert condition([(i, 0, 10)]) is True and condition([(i, 10, 12)]) is False
    checks = condition([(i - 2, 0, 10), (j, 0, 2)])
    assert checks == condition([(i - 2, 0, 10), (j, 0, 2)]) and checks != condition([(i - 2, 0, 10)])
    assert checks.render() == render_condition([(i - 2, 0, 10), (j, 0, 2)]) == "(i-2>=0)&&(j<2)"
    values = {"i": np.arange(10).reshape(10, 1), "j": np.arange(4).reshape(1, 4)}
    np.testing.assert_array_equal(checks.evaluate(values), (values["i"] >= 2) & (values["j"] < 2))


def test_a_common_factor_with_the_divisor_folds_away():
    i, j, k = var("i", 0, 511), var("j", 0, 3), var("k", 0, 399)
    index = i * 1600 + j * 400 + k
    assert (index // 25600).identity() == (i // 16).identity()
    assert (index % 25600).identity() == ((i % 16) * 1600 + j * 400 + k).identity()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-40, 40), st.integers(0, 12)), min_size=1, max_size=3),
       st.integers(-30, 30), st.integers(1, 48))
def test_division_and_modulo_agree_with_python_everywhere(terms, const, divisor):
    """Every simplification rule against brute force over all variable values."""
    variables = [var(f"v{n}", 0, hi) for n, (_, hi) in enumerate(terms)]
    expr = Lin.of(const)
    for (coeff, _), variable in zip(terms, variables):
        expr = expr + variable * coeff
    quotient, remainder = expr // divisor, expr % divisor
    for values in itertools.product(*[range(hi + 1) for _, hi in terms]):
        env = {f"v{n}": value for n, value in enumerate(values)}
        plain = expr.evaluate(env)
        assert quotient.evaluate(env) == plain // divisor
        assert remainder.evaluate(env) == plain % divisor


def test_a_split_axis_merged_again_is_the_axis():
    """k*c*(x // c) + k*(x % c) is k*x, whatever x: a view that splits an axis and one that merges it
    back index the element directly (so the compiler sees two reads of it as one)."""
    i, j = var("i", 0, 1023), var("j", 0, 7)
    assert ((i // 64) * 802816 + (i % 64) * 12544).render() == "i*12544"
    assert (((i * 8 + j) // 64) * 64 + (i * 8 + j) % 64 + 3).render() == "i*8+j+3"
    assert ((i // 64) * 3 + i % 64).render() == "(i/64)*3+(i%64)"      # not a whole quotient: kept
    shifted = i - 5                                                       # negative values: floor semantics
    combined = (shifted // 4) * 8 + (shifted % 4) * 2
    for value in (0, 3, 4, 7, 1023):
        assert combined.evaluate({"i": value}) == 2 * (value - 5)
