"""Collectives on Tensors across the processes of an `mpiexec` job: all_reduce, broadcast, all_gather.

Front-end layer of lazygrad.distributed. Each collective realizes its tensor, then runs the
communication as a host step (realize.run_host_step): a Python function on the buffers that a jit
capture records between the kernels, so a jitted training step all-reduces on every replay. The
transport is mpi_backend.py; values travel in a dtype MPI has (float16, bfloat16 and the float8s
as float32, rounded once on the way back; int4 as int32; bool as uint8). Before the data, the ranks compare what
each passes (shape, dtype, op) in one small all-reduce, so a mismatch is an error that names the
ranks instead of a truncated message or a hang.

The collectives are not differentiable: they replace a tensor's value, as torch.distributed's do.
"""
from __future__ import annotations

import zlib

import numpy as np

from lazygrad.devices import get_device
from lazygrad.devices.buffer import Buffer
from lazygrad.distributed.mpi_backend import DistributedError, MPIBackend
from lazygrad.dtype import STORAGE_WIDE, DType, dtypes
from lazygrad.lazy import LazyBuffer
from lazygrad.realize import run_host_step
from lazygrad.tensor import Tensor

DEFAULT_TIMEOUT = 300.0  # seconds a collective waits for the other ranks
REDUCE_OPS = ("sum", "mean", "prod", "max", "min")

_backend: MPIBackend | None = None


def init(timeout: float = DEFAULT_TIMEOUT) -> None:
    """Joins the job that `mpiexec -n N` started (a world of one without mpiexec). `timeout` is how
    many seconds a collective waits for the other ranks before raising DistributedTimeout. Calling
    it again only changes the timeout."""
    global _backend
    if not timeout > 0:
        raise ValueError(f"init: timeout must be a positive number of seconds, got {timeout!r}")
    if _backend is None:
        _backend = MPIBackend(float(timeout))
    _backend.timeout = float(timeout)


def is_initialized() -> bool:
    return _backend is not None


def _require(name: str) -> MPIBackend:
    if _backend is None:
        raise DistributedError(f"{name}: lazygrad.distributed is not initialized; call "
                               "lazygrad.distributed.init() first (and launch with mpiexec -n N)")
    return _backend


def rank() -> int:
    """This process's rank, 0 to world_size() - 1."""
    return _require("rank").rank


def world_size() -> int:
    """How many processes the job has."""
    return _require("world_size").size


# ---- what travels --------------------------------------------------------------------------------

def _wire_dtype(dtype: DType) -> DType:
    """The dtype a tensor's values travel in: one MPI reduces natively. A stored-only dtype travels in
    the one its ops compute in (`STORAGE_WIDE`: float32, int32 for the 4-bit integers), float16 in
    float32, bool as uint8."""
    if dtype == dtypes.bool:
        return dtypes.uint8
    return STORAGE_WIDE.get(dtype, dtypes.float32 if dtype == dtypes.float16 else dtype)


def _realized_buffer(tensor: Tensor, dtype: DType):
    """tensor's values in `dtype`, realized into a buffer of their own."""
    source = tensor.detach().cast(dtype).contiguous().realize()
    return source.lazydata.buffer


# A host step gets the buffers its capture saw, or on a jit replay larger ones whose memory the jit
# shares between intermediates: each uses the first `count` elements, the count of its capture.

def _host_view(buffer, count: int) -> np.ndarray:
    """A host buffer's first `count` elements as numpy (its memory), or a device buffer's, copied."""
    return (buffer.array if isinstance(buffer, Buffer) else buffer.numpy())[:count]


def _receiver(buffer, count: int) -> np.ndarray:
    """Where a collective writes its result: a host buffer's own memory, else a host array that
    `_deliver` then copies to the device."""
    if isinstance(buffer, Buffer):
        return buffer.array[:count]
    return np.empty(count, dtype=buffer.dtype.np_type)


def _deliver(buffer, received: np.ndarray) -> None:
    if not isinstance(buffer, Buffer):
        whole = buffer.numpy()
        whole[:received.size] = received
        buffer.copyin(whole)


def _agree(backend: MPIBackend, name: str, signature: tuple) -> None:
    """Raises on every rank unless every rank passed the same `signature` (shapes, dtypes, op)."""
    if backend.size == 1:
        return
    code = zlib.crc32(repr(signature).encode())
    codes = np.array([code, -code], dtype=np.int64)
    extremes = np.empty_like(codes)
    backend.wait(backend.start_all_reduce(codes, extremes, "max"), f"{name} (comparing what each rank passes)")
    if extremes[0] != -extremes[1]:
        described = backend.comm.allgather(repr(signature))
        ranks = "; ".join(f"rank {number}: {text}" for number, text in enumerate(described))
        raise DistributedError(f"{name}: the ranks passed different tensors ({ranks}); every rank must pass the "
                               "same shape and dtype (and op)")


# ---- all_reduce ----------------------------------------------------------------------------------

class PendingReduce:
    """A started all-reduce of one flat buffer: `finish()` waits for it and returns the result as a
    tensor. Both halves are host steps, so a jit capture records them where they ran; what runs
    between them (the next bucket's gradient kernels, in DistributedDataParallel) overlaps the
    communication as far as the MPI library progresses it on its own."""

    def __init__(self, backend: MPIBackend, inputs: list, wire: DType, op: str, name: str):
        self.backend, self.name = backend, name
        counts = [buffer.size for buffer in inputs]
        total = sum(counts)
        self.output = get_device(inputs[0].device).alloc(wire, total)
        self.inputs = inputs
        state: dict = {}

        def start(output, *sources):
            if len(sources) == 1:
                send = _host_view(sources[0], total)
            else:  # several buffers (a bucket of gradients) gathered on the host, not by a kernel
                send = state.get("send")
                if send is None:
                    send = state["send"] = np.empty(total, dtype=wire.np_type)
                np.concatenate([_host_view(source, count) for source, count in zip(sources, counts)], out=send)
            state["received"] = _receiver(output, total)
            state["request"] = backend.start_all_reduce(send, state["received"], op)

        def finish(output, *sources):
            backend.wait(state.pop("request"), name)
            _deliver(output, state.pop("received"))

        self._finish = finish
        run_host_step(f"{name} start", start, [self.output], inputs)

    def finish(self) -> Tensor:
        """Waits for the all-reduce; its result, flat, in the wire dtype."""
        # the sources stay listed so that a jit replay keeps their memory until the message is sent
        run_host_step(f"{self.name} wait", self._finish, [], [self.output, *self.inputs])
        return Tensor(LazyBuffer.from_buffer(self.output, (self.output.size,)))


def start_all_reduce(tensors: list[Tensor], op: str = "sum", name: str = "all_reduce") -> PendingReduce:
    """Starts one all-reduce of `tensors` laid end to end (their values as float32 where MPI has no
    such float); `finish()` returns the flat result. No check that ranks agree: the caller knows."""
    backend = _require(name)
    wire = _wire_dtype(tensors[0].dtype)
    if op in ("sum", "prod") and tensors[0].dtype == dtypes.bool:
        op = "max" if op == "sum" else "min"  # `or` and `and`, as a bool sum and product give
    return PendingReduce(backend, [_realized_buffer(tensor, wire) for tensor in tensors], wire, op, name)


def all_reduce(tensor: Tensor, op: str = "sum") -> Tensor:
    """Replaces `tensor`'s value with its reduction over every rank (op: sum, mean, prod, max, min;
    mean only for floats) and returns it. Every rank must pass the same shape and dtype."""
    backend = _require("all_reduce")
    if op not in REDUCE_OPS:
        raise ValueError(f"all_reduce: op must be one of {', '.join(REDUCE_OPS)}, got {op!r}")
    if op == "mean" and not tensor.dtype.is_float:
        raise TypeError(f"all_reduce: op 'mean' needs a float tensor, got {tensor.dtype.name}; reduce with 'sum' "
                        "and divide, or cast to a float first")
    _agree(backend, "all_reduce", (tensor.shape, tensor.dtype.name, op))
    if tensor.numel() == 0:
        return tensor
    total = start_all_reduce([tensor], "sum" if op == "mean" else op).finish()
    if op == "mean":
        total = total / backend.size
    tensor.lazydata = total.reshape(tensor.shape).cast(tensor.dtype).lazydata
    return tensor


# ---- broadcast and all_gather --------------------------------------------------------------------

def broadcast(tensor: Tensor, src: int = 0) -> Tensor:
    """Replaces `tensor`'s value with rank `src`'s on every rank and returns it."""
    backend = _require("broadcast")
    if not isinstance(src, int) or not 0 <= src < backend.size:
        raise ValueError(f"broadcast: src must be a rank from 0 to {backend.size - 1}, got {src!r}")
    _agree(backend, "broadcast", (tensor.shape, tensor.dtype.name, src))
    if tensor.numel() == 0:
        return tensor
    wire = _wire_dtype(tensor.dtype)
    source = _realized_buffer(tensor, wire)
    output = get_device(tensor.device).alloc(wire, source.size)

    count = source.size

    def step(output, source):
        received = _receiver(output, count)
        if backend.rank == src:
            np.copyto(received, _host_view(source, count))
        backend.wait(backend.start_broadcast(received, src), "broadcast")
        _deliver(output, received)
    run_host_step("broadcast", step, [output], [source])
    tensor.lazydata = Tensor(LazyBuffer.from_buffer(output, tensor.shape)).cast(tensor.dtype).lazydata
    return tensor


def all_gather(tensor: Tensor) -> Tensor:
    """Every rank's `tensor`, stacked: a new tensor of shape (world_size, *tensor.shape), rank r's
    value at [r]. Every rank must pass the same shape and dtype."""
    backend = _require("all_gather")
    _agree(backend, "all_gather", (tensor.shape, tensor.dtype.name))
    shape = (backend.size,) + tensor.shape
    if tensor.numel() == 0:
        return Tensor.zeros(shape, dtype=tensor.dtype, device=tensor.device)
    wire = _wire_dtype(tensor.dtype)
    source = _realized_buffer(tensor, wire)
    output = get_device(tensor.device).alloc(wire, source.size * backend.size)

    count = source.size

    def step(output, source):
        received = _receiver(output, count * backend.size)
        backend.wait(backend.start_all_gather(_host_view(source, count), received), "all_gather")
        _deliver(output, received)
    run_host_step("all_gather", step, [output], [source])
    return Tensor(LazyBuffer.from_buffer(output, shape)).cast(tensor.dtype)


def barrier() -> None:
    """Returns once every rank has called it."""
    backend = _require("barrier")
    run_host_step("barrier", lambda: backend.wait(backend.comm.Ibarrier(), "barrier"), [], [])
