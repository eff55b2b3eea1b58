"""Device memory for host devices (CPU, NPY): buffers backed by numpy arrays, reused by size.

A Buffer is `size` elements of `dtype` on a device. Freed memory goes back to a bounded pool keyed
by byte size, because touching fresh pages of a large output costs more than the kernel filling it.
"""
from __future__ import annotations

import collections

import numpy as np

from lazygrad.dtype import DType

ALIGNMENT = 64


class PooledAllocator:
    """Memory blocks with an LRU pool of freed ones keyed by byte size, bounded by `pool_limit`
    bytes. A device subclasses it and supplies `new_block(nbytes)` and `block_size(block)`."""

    def __init__(self, pool_limit: int = 1 << 30):
        self.pool: collections.OrderedDict[int, list] = collections.OrderedDict()
        self.pooled_bytes = 0
        self.pool_limit = pool_limit

    def new_block(self, nbytes: int):
        raise NotImplementedError(f"{type(self).__name__} must say how to allocate a block")

    def block_size(self, block) -> int:
        raise NotImplementedError(f"{type(self).__name__} must say how big a block is")

    def alloc(self, nbytes: int):
        blocks = self.pool.get(nbytes)
        if blocks:
            self.pooled_bytes -= nbytes
            block = blocks.pop()
            if not blocks:
                del self.pool[nbytes]
            return block
        return self.new_block(nbytes)

    def free(self, block) -> None:
        nbytes = self.block_size(block)
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


class HostAllocator(PooledAllocator):
    """Aligned host memory, pooled. A block is (uint8 array, its address): asking numpy for the
    address costs more than the rest of an allocation, so it is asked once per block."""

    def new_block(self, nbytes: int) -> tuple[np.ndarray, int]:
        raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
        start = (-raw.ctypes.data) % ALIGNMENT
        block = raw[start:start + nbytes]
        return block, block.ctypes.data

    def block_size(self, block: tuple[np.ndarray, int]) -> int:
        return block[0].nbytes


class Buffer:
    """`size` elements of `dtype` on `device`, in host memory."""
    __slots__ = ("device", "dtype", "size", "version", "array", "pointer", "_block", "_allocator", "__weakref__")

    def __init__(self, device: str, dtype: DType, size: int, allocator: HostAllocator):
        self.device, self.dtype, self.size = device, dtype, size
        self.version = 0  # bumped by every in-place write (lazy.py)
        self._block, self._allocator = allocator.alloc(size * dtype.itemsize), allocator
        self.array = self._block[0].view(dtype.np)
        self.pointer = self._block[1]

    @staticmethod
    def over(device: str, dtype: DType, array: np.ndarray) -> "Buffer":
        """A buffer using `array`'s memory (1-D, contiguous, e.g. a slice of a memory-mapped file):
        nothing is copied or pooled; the array stays alive as long as the buffer."""
        buffer = Buffer.__new__(Buffer)
        buffer.device, buffer.dtype, buffer.size, buffer.version = device, dtype, array.size, 0
        buffer.array, buffer.pointer = array, array.ctypes.data
        buffer._block, buffer._allocator = (array, buffer.pointer), None
        return buffer

    def __del__(self):  # cheaper than weakref.finalize, which costs more than a small kernel launch
        if self._allocator is not None:
            self._allocator.free(self._block)

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
