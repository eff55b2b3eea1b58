"""Checks of lazygrad.distributed that run inside an MPI job: `mpiexec -n N python mpi_cases.py CASE DEVICE`.

test_mpi.py launches this file and reads its output. Every rank computes what every other rank
passes (inputs are drawn from seeds made of the rank), so each one checks the collectives' results
against numpy on its own. A failed check raises, which (lazygrad.distributed.init's hook) aborts the
job; a passed case prints `ok CASE rank R` on every rank.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import lazygrad  # noqa: E402
import lazygrad.distributed as dist  # noqa: E402
import lazygrad.nn.functional as F  # noqa: E402
from lazygrad import Tensor, dtypes  # noqa: E402
from lazygrad.jit import jit  # noqa: E402
from lazygrad.nn import Linear, ReLU, Sequential  # noqa: E402
from lazygrad.nn.optim import Adam  # noqa: E402
from lazygrad.nn.state import get_parameters  # noqa: E402

DTYPES = (dtypes.bool, dtypes.int4, dtypes.uint4, dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
          dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
SHAPES = ((), (0,), (5,), (3, 4))


def drawn(rank: int, dtype, shape) -> np.ndarray:
    """What `rank` passes: small values, so sums and products of a few ranks fit every dtype."""
    rng = np.random.default_rng(1000 + rank)
    if dtype == dtypes.bool:
        return rng.random(shape) < 0.5
    if dtype.is_int:
        low = 0 if dtype.is_unsigned else -3
        return rng.integers(low, 4, size=shape).astype(dtype.np_type)
    return rng.standard_normal(shape).astype(dtype.np_type)


def reduced(arrays: list[np.ndarray], op: str, dtype) -> np.ndarray:
    """numpy's reduction over the ranks: bools as any/all, narrow floats in float32 rounded once."""
    stack = np.stack(arrays)
    if dtype == dtypes.bool:
        return {"sum": np.any, "max": np.any, "prod": np.all, "min": np.all}[op](stack, axis=0)
    if dtype.is_float and dtype not in (dtypes.float32, dtypes.float64):
        stack = stack.astype(np.float32)
    result = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[op if op != "mean" else "sum"](
        stack, axis=0).astype(stack.dtype)
    if op == "mean":
        result = (result / len(arrays)).astype(stack.dtype)
    return result.astype(dtype.np_type)


def check_equal(what: str, actual: np.ndarray, expected: np.ndarray, dtype) -> None:
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {actual.shape}, expected {expected.shape}")
    if dtype.is_float:
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=1e-6, atol=0,
                                   err_msg=what)
    elif not np.array_equal(actual, expected):
        raise AssertionError(f"{what}: {actual} != {expected}")


def case_collectives(device: str) -> None:
    rank, size = dist.rank(), dist.world_size()
    for dtype in DTYPES:
        ops = ("sum", "prod", "max", "min") + (("mean",) if dtype.is_float else ())
        for shape in SHAPES:
            arrays = [drawn(r, dtype, shape) for r in range(size)]
            for op in ops:
                tensor = Tensor(arrays[rank], device=device)
                returned = dist.all_reduce(tensor, op)
                if returned is not tensor or tensor.dtype != dtype or tensor.device != device:
                    raise AssertionError(f"all_reduce {op}: must return the tensor it was given, of the same dtype")
                check_equal(f"all_reduce {op} {dtype.name} {shape}", tensor.numpy(), reduced(arrays, op, dtype), dtype)
            source = size - 1
            tensor = dist.broadcast(Tensor(arrays[rank], device=device), source)
            check_equal(f"broadcast {dtype.name} {shape}", tensor.numpy(), arrays[source], dtype)
            gathered = dist.all_gather(Tensor(arrays[rank], device=device))
            check_equal(f"all_gather {dtype.name} {shape}", gathered.numpy(), np.stack(arrays), dtype)
    # a view that is not contiguous (a transpose) travels in its own order
    arrays = [drawn(r, dtypes.float32, (3, 4)) for r in range(size)]
    tensor = dist.all_reduce(Tensor(arrays[rank], device=device).T, "sum")
    check_equal("all_reduce of a transposed view", tensor.numpy(), reduced(arrays, "sum", dtypes.float32).T,
                dtypes.float32)
    # a collective's result feeds later lazy ops, and a leaf that required grad keeps its flag
    leaf = Tensor(arrays[rank], device=device).requires_grad_()
    dist.all_reduce(leaf, "max")
    check_equal("ops after all_reduce", (leaf * 2).numpy(), 2 * reduced(arrays, "max", dtypes.float32), dtypes.float32)
    dist.barrier()


def case_errors(device: str) -> None:
    rank = dist.rank()
    expect_error(lambda: dist.all_reduce(Tensor([1, 2], device=device), "mean"), TypeError, "'mean' needs a float")
    expect_error(lambda: dist.all_reduce(Tensor([1.0], device=device), "avg"), ValueError, "op must be one of")
    expect_error(lambda: dist.broadcast(Tensor([1.0], device=device), 7), ValueError, "src must be a rank")
    # ranks that pass different shapes or dtypes: an error on every rank that names both, not a hang
    shape = (2,) if rank == 0 else (3,)
    expect_error(lambda: dist.all_reduce(Tensor(np.ones(shape, np.float32), device=device)),
                 dist.DistributedError, "rank 1: ((3,)")
    dtype = dtypes.float32 if rank == 0 else dtypes.int32
    expect_error(lambda: dist.all_gather(Tensor.ones((2,), dtype=dtype, device=device)), dist.DistributedError,
                 "same shape and dtype")
    # a model whose parameters get no gradient in a backward: the next call says which
    partial = dist.DistributedDataParallel(Sequential(Linear(3, 2, device=device), Linear(3, 2, device=device)))
    partial.module[0](Tensor.ones((1, 3), device=device)).sum().backward()
    expect_error(lambda: partial(Tensor.ones((1, 3), device=device)), RuntimeError, "gave no gradient to 1.weight")
    dist.barrier()


def expect_error(call, kind, text: str) -> None:
    try:
        call()
    except kind as error:
        if text not in str(error):
            raise AssertionError(f"expected {kind.__name__} saying {text!r}, got: {error}") from error
        return
    raise AssertionError(f"expected {kind.__name__} saying {text!r}, nothing was raised")


def case_data_parallel(device: str) -> None:
    """Two ranks each on half of every batch, jitted (steps 3 on replay), against one model on the
    whole batch: the same parameters after every step, within float32 rounding."""
    rank, size = dist.rank(), dist.world_size()

    def build(seed: int):
        lazygrad.manual_seed(seed)
        return Sequential(Linear(8, 16, device=device), ReLU(), Linear(16, 4, device=device))
    model = build(100 + rank)  # each rank starts elsewhere: DistributedDataParallel takes rank 0's
    parallel = dist.DistributedDataParallel(model, bucket_bytes=256)  # several buckets
    if len(parallel.buckets) < 2:
        raise AssertionError(f"expected several buckets, got {len(parallel.buckets)}")
    alone = build(100)
    optimizer, alone_optimizer = Adam(get_parameters(model), lr=1e-2), Adam(get_parameters(alone), lr=1e-2)

    @jit
    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(parallel(x), y)
        loss.backward()
        optimizer.step()
        return loss
    rng = np.random.default_rng(0)
    for number in range(5):
        x, y = rng.standard_normal((8, 8)).astype(np.float32), rng.integers(0, 4, 8)
        lazygrad.stats.reset()
        step(Tensor(x[rank::size], device=device), Tensor(y[rank::size], device=device))
        if number >= 2 and device != "NPY" and lazygrad.stats.host_steps != 2 * len(parallel.buckets):
            raise AssertionError(f"a replay ran {lazygrad.stats.host_steps} host steps, expected a start and a wait "
                                 f"for each of {len(parallel.buckets)} buckets")
        alone_optimizer.zero_grad()
        F.cross_entropy(alone(Tensor(x, device=device)), Tensor(y, device=device)).backward()
        alone_optimizer.step()
        for ours, reference in zip(get_parameters(model), get_parameters(alone)):
            np.testing.assert_allclose(ours.numpy(), reference.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=f"step {number}")
    gathered = dist.all_gather(get_parameters(model)[0]).numpy()
    if not (gathered == gathered[0]).all():
        raise AssertionError("the ranks' parameters differ")


def case_timeout(device: str) -> None:
    """Rank 1 never joins: rank 0's all_reduce raises DistributedTimeout, which aborts the job."""
    if dist.rank() == 1:
        time.sleep(120)
    dist.all_reduce(Tensor([1.0], device=device))


def case_dies(device: str) -> None:
    """Rank 1 is killed: mpiexec ends the job while rank 0 waits."""
    if dist.rank() == 1:
        os.kill(os.getpid(), 9)
    dist.all_reduce(Tensor([1.0], device=device))


def case_raises(device: str) -> None:
    """Rank 1's program fails with an exception: the whole job stops at once, not at the timeout."""
    if dist.rank() == 1:
        raise ValueError("rank 1 failed on purpose")
    dist.all_reduce(Tensor([1.0], device=device))


CASES = {"collectives": case_collectives, "errors": case_errors, "data_parallel": case_data_parallel,
         "timeout": case_timeout, "dies": case_dies, "raises": case_raises}

if __name__ == "__main__":
    name, device = sys.argv[1], sys.argv[2]
    dist.init(timeout=float(os.environ.get("CASE_TIMEOUT", "60")))
    CASES[name](device)
    print(f"ok {name} rank {dist.rank()}", flush=True)
