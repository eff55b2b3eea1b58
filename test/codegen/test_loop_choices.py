"""Loop arrangement: merged dims, inner accumulator loops for strided reduces, and NOOPT's plain nest.
Every arrangement must compute what numpy computes."""
import numpy as np
import pytest

from lazygrad import Context, Tensor
from lazygrad.renderer.c import CRenderer
from lazygrad.codegen.linearize import linearize
from lazygrad.schedule.fuse import create_schedule


def program_for(tensor: Tensor, optimize=True):
    (item,) = create_schedule([tensor.lazydata])
    return linearize(item.kernel, CRenderer(), optimize=optimize)


def test_contiguous_elementwise_kernel_is_one_flat_loop():
    x = Tensor(np.ones((64, 32), dtype=np.float32))
    program = program_for(x * 2 + 1)
    assert [loop.size for loop in program.global_loops] == [64 * 32]


def test_noopt_keeps_one_loop_per_dim_and_no_threads():
    x = Tensor(np.ones((256, 256), dtype=np.float32))
    program = program_for(x * 2 + 1, optimize=False)
    assert [loop.size for loop in program.global_loops] == [256, 256]
    assert not program.parallel
    assert "#pragma" not in CRenderer().render_program(program)


@pytest.mark.parametrize("shape", [(48, 40), (7, 13), (1, 9), (9, 1)])
def test_column_sum_accumulates_along_rows(shape):
    data = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    result = Tensor(data).sum(0)
    if shape[0] > 1 and shape[1] > 1:
        assert [loop.size for loop in program_for(result).inner_loops] == [shape[1]]
    np.testing.assert_allclose(result.numpy(), data.sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows, columns, runs", [(3136, 144, 9), (196, 480, 5), (49, 1152, 4), (64, 40, None)])
def test_a_column_sum_with_no_other_output_axis_leaves_runs_of_columns_to_the_threads(rows, columns, runs):
    """A squeeze-and-excitation block's pool of a channels-last value, silu(x + b) averaged over
    the positions: moved inside whole, the channels left no loop for the threads, and the kernel
    ran on one thread (2 threads, 144 channels by 56x56: 0.45-0.55 -> 0.33-0.39 ms; 480 by 14x14
    0.105 -> 0.06-0.07). Runs of whole 16-lane vectors go inside, as few runs as make 4 or more;
    a kernel too small for the threads, or channels that make no such runs, keeps them whole."""
    rng = np.random.default_rng(1)
    x, b = rng.standard_normal((rows, columns)).astype(np.float32), rng.standard_normal(columns).astype(np.float32)
    result = (Tensor(x) + Tensor(b)).silu().mean(0)
    program = program_for(result)
    if runs is None:
        assert [loop.size for loop in program.inner_loops] == [columns] and not program.parallel
    else:
        assert [loop.size for loop in program.global_loops] == [runs] and program.parallel
        assert [loop.size for loop in program.inner_loops] == [columns // runs]
    z = x.astype(np.float64) + b
    np.testing.assert_allclose(result.numpy(), (z / (1 + np.exp(-z))).mean(0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pool, stride, reference", [
    ("max_pool2d", 2, lambda windows: windows.max((-2, -1))),
    ("max_pool2d", 1, lambda windows: windows.max((-2, -1))),
    ("avg_pool2d", 2, lambda windows: windows.mean((-2, -1)))])
def test_a_pooling_window_runs_its_output_columns_inside_the_window_loops(pool, stride, reference):
    """A 3x3 window is too short a loop to vectorize: the output columns run inside it instead, each
    with its accumulator (a strided read for stride 2), and nothing reduces over the window as SIMD."""
    data = np.random.default_rng(2).standard_normal((2, 3, 14, 14)).astype(np.float32)
    data[0, 1, 4, 4] = np.nan
    padded = Tensor(data).pad(((0, 0), (0, 0), (1, 1), (1, 1)), value=-np.inf if pool == "max_pool2d" else 0.0)
    result = getattr(padded.realize(), pool)(3, stride=stride)
    program = program_for(result)
    assert [loop.size for loop in program.inner_loops] == [result.shape[-1]]
    assert "reduction(" not in CRenderer().render_program(program)
    source = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf if pool == "max_pool2d" else 0.0)
    windows = np.lib.stride_tricks.sliding_window_view(source, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
    np.testing.assert_allclose(result.numpy(), reference(windows), rtol=1e-5, atol=1e-6)


def test_matmul_gets_a_register_tile_of_both_output_axes():
    a = Tensor(np.ones((32, 16), dtype=np.float32))
    b = Tensor(np.ones((16, 40), dtype=np.float32))
    program = program_for(a @ b)
    assert [str(opt) for opt in program.opts] == ["UPCAST(1,8)", "UPCAST(0,8)"]
    assert sum(accumulator.width for accumulator in program.accumulators) == 64 and not program.inner_loops


def test_matmul_whose_columns_do_not_tile_moves_them_inside_the_reduce():
    a = Tensor(np.ones((32, 16), dtype=np.float32))
    b = Tensor(np.ones((16, 7), dtype=np.float32))
    program = program_for(a @ b)
    assert not program.opts
    assert [loop.size for loop in program.inner_loops] == [8, 7]


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 5, 7), (8, 16, 24), (33, 17, 65), (64, 3, 128), (10, 130, 6)])
@pytest.mark.parametrize("optimize", [True, False])
def test_matmul_values_match_numpy_with_and_without_opts(m, k, n, optimize):
    rng = np.random.default_rng(m * 100 + n)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    with Context(NOOPT=not optimize):
        value = (Tensor(a) @ Tensor(b)).numpy()
    np.testing.assert_allclose(value, a @ b, rtol=1e-4, atol=1e-4)


def test_padded_and_transposed_operands_through_the_inner_loops():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((12, 10)).astype(np.float32), rng.standard_normal((14, 16)).astype(np.float32)
    left = Tensor(a).pad(((0, 0), (2, 2)))             # (12, 14)
    right = Tensor(b).T[::-1].T.flip(1)                # (14, 16) through views
    expected = np.pad(a, ((0, 0), (2, 2))) @ b[:, ::-1][:, ::-1]
    np.testing.assert_allclose((left @ right).numpy(), expected, rtol=1e-4, atol=1e-4)
