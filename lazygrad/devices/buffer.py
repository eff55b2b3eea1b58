"""Device memory for host devices (CPU, NPY): buffers backed by numpy arrays, reused by size.

A Buffer is `size` elements of `dtype` on a device. Freed memory goes back to a bounded pool keyed
by byte size, because touching fresh pages of a large output costs more than the kernel filling it.
"""
from __future__ import annotations

import collections
import weakref

import numpy as np

from lazygrad.dtype import DType

ALIGNMENT = 64


class HostAllocator:
    """Aligned host memory with an LRU pool of freed blocks, bounded by `pool_limit` bytes."""

    def __init__(self, pool_limit: int = 1 << 30):
        self.pool: collections.OrderedDict[int, list[np.ndarray]] = collections.OrderedDict()
        self.pooled_bytes = 0
        self.pool_limit = pool_limit

    def alloc(self, nbytes: int) -> np.ndarray:
        blocks = self.pool.get(nbytes)
        if blocks:
            self.pooled_bytes -= nbytes
            block = blocks.pop()
            if not blocks:
                del self.pool[nbytes]
            return block
        raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
        start = (-raw.ctypes.data) % ALIGNMENT
        return raw[start:start + nbytes]

    def free(self, block: np.ndarray) -> None:
        nbytes = block.nbytes
        if nbytes == 0 or nbytes > self.pool_limit:
            return
        self.pool.setdefault(nbytes, []).append(block)
        self.pool.move_to_end(nbytes)
        self.pooled_bytes += nbytes
        while self.pooled_bytes > self.pool_limit:
            size, blocks = next(iter(self.pool.items()))
            blocks.pop()
            self.pooled_bytes -= size
            if not blocks:
                del self.pool[size]


class Buffer:
    """`size` elements of `dtype` on `device`, in host memory."""
    __slots__ = ("device", "dtype", "size", "array", "pointer", "__weakref__")

    def __init__(self, device: str, dtype: DType, size: int, allocator: HostAllocator):
        self.device, self.dtype, self.size = device, dtype, size
        block = allocator.alloc(size * dtype.itemsize)
        self.array = block.view(dtype.np)
        self.pointer = block.ctypes.data
        weakref.finalize(self, allocator.free, block)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def copyin(self, data: np.ndarray) -> "Buffer":
        np.copyto(self.array, data.reshape(-1), casting="no")
        return self

    def numpy(self) -> np.ndarray:
        return self.array.copy()

    def __repr__(self) -> str:
        return f"<Buffer {self.device} {self.dtype.name}[{self.size}]>"
