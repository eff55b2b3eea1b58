"""Device memory for host devices (CPU, NPY): buffers backed by numpy arrays, reused by size.

A Buffer is `size` elements of `dtype` on a device. Freed memory goes back to a bounded pool keyed
by byte size, because touching fresh pages of a large output costs more than the kernel filling it.
"""
from __future__ import annotations

import collections
import os

import numpy as np

from lazygrad.dtype import DType

ALIGNMENT = 64
MIN_HOST_POOL_BYTES = 1 << 30


def host_pool_limit(physical_bytes: int | None = None) -> int:
    """How many bytes of freed host buffers the pool keeps: a quarter of the machine's physical
    memory, at least MIN_HOST_POOL_BYTES. A training step frees more than 1 GiB of buffers (ResNet-18
    at batch 16: its windows packed into panels for the weight gradients alone are 128 and 58 MB), and
    with a 1 GiB pool the next step took fresh pages for the evicted ones, whose first touch cost more
    than the kernels writing them (a 58 MB pack: 5.6 ms into warm memory, 20-30 ms into fresh pages,
    42-73 ms in the step): the step's plain call, 2 threads, 1860 -> 1320 ms with the pool at 4 GiB."""
    if physical_bytes is None:
        try:
            physical_bytes = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # no sysconf (Windows) or no such name
            physical_bytes = 0
    return max(MIN_HOST_POOL_BYTES, physical_bytes // 4)


class PooledAllocator:
    """Memory blocks with an LRU pool of freed ones keyed by byte size, bounded by `pool_limit`
    bytes. A device subclasses it and supplies `new_block(nbytes)` and `block_size(block)`."""

    def __init__(self, pool_limit: int = 1 << 30):
        self.pool: collections.OrderedDict[int, list] = collections.OrderedDict()
        self.pooled_bytes = 0
        self.pool_limit = pool_limit
        self._sweep_at = 1024  # number of sizes in the pool that triggers _sweep_empty_lists

    def new_block(self, nbytes: int):
        raise NotImplementedError(f"{type(self).__name__} must say how to allocate a block")

    def block_size(self, block) -> int:
        raise NotImplementedError(f"{type(self).__name__} must say how big a block is")

    def alloc(self, nbytes: int):
        blocks = self.pool.get(nbytes)
        if blocks:
            # an emptied list stays in the pool: a loop that allocates and frees one size (every eager
            # op) would otherwise delete and re-insert its entry each time; free() sweeps empty lists
            self.pooled_bytes -= nbytes
            return blocks.pop()
        return self.new_block(nbytes)

    def free(self, block, nbytes: int | None = None) -> None:
        """Return a block to the pool; `nbytes` is its size when the caller knows it (one call less
        for every buffer freed), else block_size asks."""
        if nbytes is None:
            nbytes = self.block_size(block)
        if nbytes == 0 or nbytes > self.pool_limit:
            return
        blocks = self.pool.get(nbytes)
        if blocks is None:
            blocks = self.pool[nbytes] = []
        blocks.append(block)
        self.pool.move_to_end(nbytes)
        self.pooled_bytes += nbytes
        if self.pooled_bytes > self.pool_limit:
            self._evict()
        if len(self.pool) > self._sweep_at:
            self._sweep_empty_lists()

    def _evict(self) -> None:
        """Drop the least recently freed blocks until the pool fits its limit."""
        while self.pooled_bytes > self.pool_limit:
            size, blocks = next(iter(self.pool.items()))
            if blocks:
                blocks.pop()
                self.pooled_bytes -= size
            if not blocks:
                del self.pool[size]

    def _sweep_empty_lists(self) -> None:
        """Forget sizes with no pooled block, once the pool has doubled its number of sizes."""
        for size in [size for size, blocks in self.pool.items() if not blocks]:
            del self.pool[size]
        self._sweep_at = max(1024, 2 * len(self.pool))


class HostAllocator(PooledAllocator):
    """Aligned host memory, pooled (up to `host_pool_limit()`). A block is (uint8 array, its address):
    asking numpy for the address costs more than the rest of an allocation, so it is asked once per
    block."""

    def __init__(self, pool_limit: int | None = None):
        super().__init__(host_pool_limit() if pool_limit is None else pool_limit)

    def new_block(self, nbytes: int) -> tuple[np.ndarray, int]:
        raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
        start = (-raw.ctypes.data) % ALIGNMENT
        block = raw[start:start + nbytes]
        return block, block.ctypes.data

    def block_size(self, block: tuple[np.ndarray, int]) -> int:
        return block[0].nbytes


class Buffer:
    """`size` elements of `dtype` on `device`, in host memory."""
    __slots__ = ("device", "dtype", "size", "nbytes", "version", "_array", "pointer", "_block", "_allocator",
                 "__weakref__")

    def __init__(self, device: str, dtype: DType, size: int, allocator: HostAllocator):
        self.device, self.dtype, self.size = device, dtype, size
        self.nbytes = size * dtype.itemsize  # a plain attribute: the engine sums it for every launch
        self.version = 0  # bumped by every in-place write (lazy.py)
        self._block, self._allocator = allocator.alloc(self.nbytes), allocator
        self.pointer = self._block[1]
        self._array = None  # the numpy view, made on first use (see `array`)

    @staticmethod
    def over(device: str, dtype: DType, array: np.ndarray) -> "Buffer":
        """A buffer using `array`'s memory (1-D, contiguous, e.g. a slice of a memory-mapped file):
        nothing is copied or pooled; the array stays alive as long as the buffer."""
        buffer = Buffer.__new__(Buffer)
        buffer.device, buffer.dtype, buffer.size, buffer.version = device, dtype, array.size, 0
        buffer.nbytes = array.size * dtype.itemsize
        buffer._array, buffer.pointer = array, array.ctypes.data
        buffer._block, buffer._allocator = (array, buffer.pointer), None
        return buffer

    def __del__(self):  # cheaper than weakref.finalize, which costs more than a small kernel launch
        if self._allocator is not None:
            self._allocator.free(self._block, self.nbytes)

    @property
    def array(self) -> np.ndarray:
        """The contents as a 1-D numpy array sharing the buffer's memory. Made on first use: most
        buffers are only written and read by kernels, and a numpy view costs as much as the rest of
        an allocation."""
        if self._array is None:
            self._array = self._block[0].view(self.dtype.np_type)
        return self._array

    def copyin(self, data: np.ndarray) -> "Buffer":
        np.copyto(self.array, data.reshape(-1), casting="no")
        return self

    def numpy(self) -> np.ndarray:
        return self.array.copy()

    def __repr__(self) -> str:
        return f"<Buffer {self.device} {self.dtype.name}[{self.size}]>"
