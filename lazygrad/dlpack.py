"""DLPack: tensors shared with other array libraries (numpy, PyTorch, JAX, ...) without a copy.

Front-end layer, beside tensor.py. `Tensor.__dlpack__` realizes the tensor and hands out its host
buffer; `from_dlpack` wraps another library's host memory as a CPU tensor's buffer. Both sides then
share one memory: a write through either is seen by the other (values lazygrad computed before the
write keep theirs; lazy ones computed after it see the new contents), as with PyTorch's
`torch.from_numpy`. Only host memory is shared (the CPU and NPY devices): a tensor on OPENCL or
CUDA is moved with `.to("CPU")` first, which copies it.
"""
from __future__ import annotations

import numpy as np

from lazygrad.devices import get_device
from lazygrad.dtype import COMPLEX_PARTS, DTYPES_BY_NUMPY
from lazygrad.lazy import LazyBuffer
from lazygrad.realize import record_host_buffer

HOST_DEVICES = ("CPU", "NPY")
DLPACK_CPU = 1  # DLDeviceType kDLCPU


class _SharedBuffer:
    """A buffer's memory as a numpy array (through `__array_interface__`) whose base is this object,
    which holds the buffer: the buffer stays out of its device's pool for as long as any array or
    DLPack capsule made from it lives, so its memory is never handed to another tensor meanwhile."""

    def __init__(self, buffer, shape: tuple[int, ...]):
        self.buffer = buffer
        self.__array_interface__ = {"shape": tuple(shape), "typestr": buffer.dtype.np.str,
                                    "data": (buffer.pointer, False), "version": 3}


def shared_array(tensor, method: str) -> np.ndarray:
    """The realized tensor's buffer as a numpy array of its shape, sharing its memory."""
    if isinstance(tensor.device, tuple) or tensor.device.split(":")[0] not in HOST_DEVICES:
        raise BufferError(f"{method}: the tensor is on {tensor.device}, and lazygrad shares host memory only "
                          f"(the CPU and NPY devices); move it first with .to('CPU') (a copy)")
    tensor.realize()
    node = tensor.lazydata
    node.check_current()
    array = np.asarray(_SharedBuffer(node.buffer, node.shape))
    if tensor.dtype.is_complex:  # its (real, imag) pairs are numpy's complex layout
        return array.view(tensor.dtype.np).reshape(tensor.shape)
    return array


def to_dlpack(tensor, stream=None, max_version=None, dl_device=None, copy=None):
    """The DLPack capsule of `Tensor.__dlpack__`: numpy's, of the shared array (so the producer's
    version and options are numpy's own)."""
    if stream is not None:
        raise BufferError("__dlpack__: stream must be None for host memory (it names a GPU stream)")
    if dl_device is not None and tuple(dl_device) != (DLPACK_CPU, 0):
        raise BufferError(f"__dlpack__: lazygrad shares host memory only, asked for device {tuple(dl_device)}")
    array = shared_array(tensor, "__dlpack__")
    options = {name: value for name, value in (("max_version", max_version), ("copy", copy)) if value is not None}
    return array.__dlpack__(**options)


def from_dlpack(source):
    """A CPU tensor over the memory of `source`, any object with `__dlpack__` (a numpy array, a
    PyTorch CPU tensor, ...): no copy, unless `source` is strided (not C-contiguous) or read-only
    (lazygrad may write a tensor's buffer in place: `assign`), which is copied first. Device memory (a CUDA tensor) raises: copy it to the host
    with its own library first."""
    from lazygrad.tensor import Tensor
    try:
        array = np.from_dlpack(source)
    except (BufferError, RuntimeError, TypeError) as error:
        raise BufferError(f"from_dlpack: {type(source).__name__} cannot be shared as host memory ({error}); "
                          "copy it to the host with its own library first (a CUDA tensor: .cpu())") from error
    dtype = DTYPES_BY_NUMPY.get(array.dtype)
    if dtype is None:
        raise TypeError(f"from_dlpack: lazygrad has no dtype for {array.dtype} "
                        f"(supported: {', '.join(sorted(str(key) for key in DTYPES_BY_NUMPY))})")
    if not array.flags.c_contiguous or not array.flags.writeable:
        array = np.array(array, order="C")  # a tensor's buffer may be written in place (assign)
    if dtype.is_complex:  # shared as (real, imag) pairs
        from lazygrad.complex_tensor import ComplexTensor
        pairs = array.reshape(-1).view(COMPLEX_PARTS[dtype].np)
        buffer = get_device("CPU").wrap(COMPLEX_PARTS[dtype], pairs)
        record_host_buffer(buffer)
        return ComplexTensor._of_pairs(Tensor(LazyBuffer.from_buffer(buffer, array.shape + (2,))))
    buffer = get_device("CPU").wrap(dtype, array.reshape(-1))
    record_host_buffer(buffer)
    return Tensor(LazyBuffer.from_buffer(buffer, array.shape))
