"""PyTorch checkpoints (`torch.save`'s zip format) read into lazygrad Tensors without torch; front-end
layer, beside nn/state.py (whose `torch_load` this is).

A `.pt`/`.pth` file from torch 1.6 or later is a zip archive: `<name>/data.pkl`, a pickle of the
saved object (a state dict, or a checkpoint dict holding one), and `<name>/data/<key>`, the raw
bytes of each storage, which the pickle refers to by key (a persistent id). The pickle is read by
`_CheckpointUnpickler`, which builds only what a state dict is made of: Python's own containers and
scalars, `collections.OrderedDict`, and tensors through `torch._utils._rebuild_tensor_v2` (and
`_rebuild_parameter`). Any other global the pickle names, `os.system` as much as a model's class,
raises `UnsafeCheckpointError` naming it, before anything from the file is called: a pickle can run
code only through the globals it names, and none of these run any.

Each tensor is a view of its storage: `storage_offset`, `size` and `stride`, checked against the
storage's length. A contiguous view on a host device wraps the storage's bytes without a copy
(memory-mapped with `mmap=True`, as `safe_load`); others are copied. Storages whose dtype lazygrad
lacks (complex, quantized) raise `TypeError` naming it. The legacy format before torch 1.6
(concatenated pickles, then each storage's bytes) is read too, into memory; the tar archives of
torch before 0.4 are not.
"""
from __future__ import annotations

import collections
import os
import pickle
import sys
import zipfile
from typing import Any

import numpy as np

from lazygrad.devices import canonical_device, get_device
from lazygrad.devices.buffer import ALIGNMENT
from lazygrad.dtype import DType, dtypes
from lazygrad.lazy import LazyBuffer
from lazygrad.tensor import Tensor

# torch's typed storage classes, by the name the pickle gives them
STORAGE_DTYPES: dict[str, DType] = {
    "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16,
    "LongStorage": dtypes.int64, "IntStorage": dtypes.int32, "ShortStorage": dtypes.int16,
    "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
    "BFloat16Storage": dtypes.bfloat16,
}
UNSUPPORTED_STORAGES = {"ComplexFloatStorage": "complex64",
                        "ComplexDoubleStorage": "complex128", "QInt8Storage": "qint8", "QUInt8Storage": "quint8",
                        "QInt32Storage": "qint32"}


class UnsafeCheckpointError(pickle.UnpicklingError):
    """The checkpoint's pickle names a global that a state dict does not need."""


class _Storage:
    """A storage the pickle refers to: its dtype, element count and bytes (read when first used)."""

    def __init__(self, dtype: DType, key: str, count: int, reader):
        self.dtype, self.key, self.count, self._reader = dtype, key, count, reader
        self._array: np.ndarray | None = None

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            self._array = self._reader(self.key, self.dtype, self.count)
        return self._array


def _rebuild_tensor(storage: _Storage, offset: int, size, stride, requires_grad=False, hooks=None, metadata=None) -> Tensor:
    """torch._utils._rebuild_tensor_v2: the view (offset, size, stride) of a storage, checked to lie in it."""
    if not isinstance(storage, _Storage):
        raise ValueError(f"torch_load: a tensor refers to {type(storage).__name__}, not to one of the file's storages")
    size, stride = tuple(int(n) for n in size), tuple(int(s) for s in stride)
    if len(size) != len(stride) or any(n < 0 for n in size) or any(s < 0 for s in stride) or offset < 0:
        raise ValueError(f"torch_load: a tensor of size {size}, stride {stride} and offset {offset} is malformed")
    extent = 0 if 0 in size else offset + 1 + sum((n - 1) * s for n, s in zip(size, stride))
    if extent > storage.count:
        raise ValueError(f"torch_load: a tensor of size {size}, stride {stride} and offset {offset} reaches element "
                         f"{extent} of storage {storage.key!r}, which holds {storage.count}: the file is damaged")
    return _TensorSpec(storage, offset, size, stride)


class _TensorSpec:
    """A tensor the pickle described, made into a Tensor once the whole pickle was read (so a file
    that fails anywhere returns nothing)."""

    def __init__(self, storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...]):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride


def _rebuild_parameter(data, requires_grad=False, hooks=None, state=None):
    return data


class _CheckpointUnpickler(pickle.Unpickler):
    ALLOWED = {("collections", "OrderedDict"): collections.OrderedDict,
               ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
               ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
               ("torch", "Size"): tuple}

    def __init__(self, file, path: str, reader):
        super().__init__(file)
        self.path, self.reader = path, reader
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str):
        if (module, name) in self.ALLOWED:
            return self.ALLOWED[(module, name)]
        if module == "torch" and name in STORAGE_DTYPES:
            return STORAGE_DTYPES[name]
        if module == "torch" and name in UNSUPPORTED_STORAGES:
            raise TypeError(f"torch_load: {self.path} holds {UNSUPPORTED_STORAGES[name]} tensors, a dtype lazygrad "
                            "does not have; convert them in torch first (for example with .float())")
        raise UnsafeCheckpointError(
            f"torch_load: {self.path}'s pickle names {module}.{name}, which a state dict does not need; lazygrad builds "
            "only tensors, containers and numbers from a checkpoint and never runs code from it. Save the model's "
            "state_dict() rather than the model object")

    def persistent_load(self, pid):
        # ("storage", dtype, key, location, count), and in the legacy format a view of it last (None: none)
        if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage" and isinstance(pid[1], DType)
                and (len(pid) == 5 or pid[5] is None)):
            raise ValueError(f"torch_load: {self.path} refers to an unknown kind of storage: {pid!r}")
        _, dtype, key, _, count = pid[:5]
        key = str(key)
        if key not in self.storages:
            self.storages[key] = _Storage(dtype, key, int(count), self.reader)
        return self.storages[key]


def torch_load(path: str | os.PathLike, device: str | None = None, mmap: bool = False) -> Any:
    """The object a PyTorch checkpoint holds (usually a state dict), its tensors as lazygrad Tensors
    on `device` (default DEV), torch not needed:

        load_state_dict(model, torch_load("resnet18.pth"))

    mmap=True maps the storages instead of reading them (see `safe_load`: copy-on-write, for a file
    nothing truncates while its tensors live). Errors name the problem and return nothing: a
    damaged archive or sizes that do not fit raise ValueError, a pickle naming anything beyond a
    state dict's parts raises UnsafeCheckpointError."""
    path = os.fspath(path)
    if not zipfile.is_zipfile(path):
        return _to_tensors(_load_legacy(path), canonical_device(device))
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise ValueError(f"torch_load: {path} is a damaged zip archive: {error}") from None
    with archive, open(path, "rb") as raw:
        pickles = [name for name in archive.namelist() if name.endswith("/data.pkl") and name.count("/") == 1]
        if len(pickles) != 1:
            raise ValueError(f"torch_load: {path} has no <name>/data.pkl of a torch checkpoint")
        prefix = pickles[0][:-len("data.pkl")]
        byteorder = archive.read(prefix + "byteorder").decode() if prefix + "byteorder" in archive.namelist() else "little"
        reader = _StorageReader(archive, raw, path, prefix, byteorder, mmap)
        try:
            loaded = _CheckpointUnpickler(archive.open(pickles[0]), path, reader.read).load()
        except (UnsafeCheckpointError, TypeError, ValueError):
            raise
        except (pickle.UnpicklingError, EOFError, zipfile.BadZipFile, AttributeError, IndexError, KeyError) as error:
            raise ValueError(f"torch_load: {path}'s pickle is damaged: {type(error).__name__}: {error}") from None
        return _to_tensors(loaded, canonical_device(device))


LEGACY_MAGIC, LEGACY_PROTOCOL = 0x1950a86a20f9469cfc6c, 1001


def _load_legacy(path: str):
    """torch.save's format before torch 1.6 (and with _use_new_zipfile_serialization=False): pickles
    of the magic number, the protocol version and the writer's system, then the object, then the
    list of storage keys, then each storage as its element count (8 bytes) and its bytes."""
    def unpickler(file):
        return _CheckpointUnpickler(file, path, None)
    not_a_checkpoint = (f"torch_load: {path} is not a PyTorch checkpoint: neither a zip archive (torch.save since "
                        "torch 1.6) nor the legacy format before it")
    with open(path, "rb") as file:
        try:
            if unpickler(file).load() != LEGACY_MAGIC:
                raise ValueError(not_a_checkpoint)
            if unpickler(file).load() != LEGACY_PROTOCOL:
                raise ValueError(f"torch_load: {path} is of an unknown legacy protocol; re-save it with a recent torch")
            system = unpickler(file).load()
            main = unpickler(file)
            loaded = main.load()
            keys = unpickler(file).load()
        except (UnsafeCheckpointError, TypeError, ValueError):
            raise
        except (pickle.UnpicklingError, EOFError, AttributeError, IndexError, KeyError) as error:
            raise ValueError(f"{not_a_checkpoint} (or a damaged one: {type(error).__name__}: {error})") from None
        order = "<" if not isinstance(system, dict) or system.get("little_endian", True) else ">"
        for key in keys if isinstance(keys, list) else []:
            storage = main.storages.get(str(key))
            if storage is None:
                raise ValueError(f"torch_load: {path} lists storage {key!r}, which no tensor uses: the file is damaged")
            count = int.from_bytes(file.read(8), "little" if order == "<" else "big", signed=True)
            data = file.read(count * storage.dtype.itemsize)
            if count != storage.count or len(data) != count * storage.dtype.itemsize:
                raise ValueError(f"torch_load: {path}'s storage {key!r} holds {count} elements of the {storage.count} its "
                                 "tensors need, or ends early: the file is damaged")
            storage._array = np.frombuffer(bytearray(data), dtype=storage.dtype.np.newbyteorder(order)) \
                .astype(storage.dtype.np)
        missing = [key for key, storage in main.storages.items() if storage._array is None]
        if missing:
            raise ValueError(f"torch_load: {path} lacks the data of storage(s) {', '.join(missing)}: the file is damaged")
    return loaded


class _StorageReader:
    """Reads a storage's bytes from the archive: a view of the mapped file where the entry is stored
    uncompressed (torch's own writer stores them so), else its decompressed bytes."""

    def __init__(self, archive: zipfile.ZipFile, raw, path: str, prefix: str, byteorder: str, mmap: bool):
        self.archive, self.raw, self.path, self.prefix, self.mmap = archive, raw, path, prefix, mmap
        self.byteorder = byteorder

    def read(self, key: str, dtype: DType, count: int) -> np.ndarray:
        name = f"{self.prefix}data/{key}"
        try:
            info = self.archive.getinfo(name)
        except KeyError:
            raise ValueError(f"torch_load: {self.path} lacks {name}, the data of one of its tensors") from None
        if info.file_size != count * dtype.itemsize:
            raise ValueError(f"torch_load: {self.path}'s {name} holds {info.file_size} bytes, but its {count} "
                             f"{dtype.name} elements need {count * dtype.itemsize}: the file is damaged")
        order = "<" if self.byteorder == "little" else ">"
        start = _data_offset(self.raw, info)
        if self.mmap and info.compress_type == zipfile.ZIP_STORED and start is not None and count:
            data = np.memmap(self.raw, dtype=np.uint8, mode="c", offset=start, shape=(info.file_size,))
        else:
            content = self.archive.read(name)
            if len(content) != info.file_size:
                raise ValueError(f"torch_load: {self.path}'s {name} is truncated")
            raw = np.empty(len(content) + ALIGNMENT, dtype=np.uint8)  # writable, and aligned as the device's own
            start = (-raw.ctypes.data) % ALIGNMENT
            data = raw[start:start + len(content)]
            data[:] = np.frombuffer(content, dtype=np.uint8)
        array = data.view(dtype.np.newbyteorder(order))
        return array if order == ("<" if sys.byteorder == "little" else ">") else array.astype(dtype.np)


def _data_offset(raw, info: zipfile.ZipInfo) -> int | None:
    """Where an entry's bytes begin in the archive: after its local header (30 bytes, the name and
    an extra field whose lengths that header gives)."""
    raw.seek(info.header_offset)
    header = raw.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        return None
    return info.header_offset + 30 + int.from_bytes(header[26:28], "little") + int.from_bytes(header[28:30], "little")


def _to_tensors(value: Any, device: str) -> Any:
    """The unpickled object with each tensor description made a Tensor (containers rebuilt alike)."""
    if isinstance(value, _TensorSpec):
        return _tensor(value, device)
    if isinstance(value, dict):
        return type(value)((key, _to_tensors(item, device)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_to_tensors(item, device) for item in value)
    return value


def _tensor(spec: _TensorSpec, device: str) -> Tensor:
    storage, dtype = spec.storage.array, spec.storage.dtype
    count = int(np.prod(spec.size))
    contiguous = all(s == expected for s, expected, n in zip(spec.stride, _contiguous_strides(spec.size), spec.size) if n > 1)
    host = device if hasattr(get_device(device), "wrap") else "CPU"
    if contiguous and count:
        flat = storage[spec.offset:spec.offset + count]
        on_host = Tensor(LazyBuffer.from_buffer(get_device(host).wrap(dtype, flat.view(dtype.np)), spec.size))
        return on_host if host == device else on_host.to(device)
    itemsize = storage.itemsize
    view = np.lib.stride_tricks.as_strided(storage[spec.offset:], shape=spec.size,
                                           strides=[s * itemsize for s in spec.stride], writeable=False)
    return Tensor(np.ascontiguousarray(view), dtype=dtype, device=device)


def _contiguous_strides(size: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(size):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))
