"""Finding a model's tensors by name, loading them back, and safetensors checkpoints; front-end layer.

A model is any Python object: its tensors are found by walking attributes, lists, tuples and dicts,
so layers need no registration. Names are dotted paths, as in PyTorch (`layers.0.weight`), so a
PyTorch state dict maps onto the same model 1:1:

    state = get_state_dict(model)            # {"conv1.weight": Tensor, ..., "bn.running_mean": ...}
    safe_save(state, "model.safetensors")
    load_state_dict(fresh_model, safe_load("model.safetensors"))
    load_state_dict(fresh_model, torch_load("model.pth"))   # torch.save's format, torch not needed (torch_checkpoint.py)

The checkpoint format is safetensors, written and read here by hand: an 8-byte little-endian header
length, a JSON header giving each tensor's dtype, shape and byte range (`data_offsets`, relative
to the end of the header), then the raw little-endian data. Files interoperate both ways with the
`safetensors` package. The names (`get_parameters`, `safe_load`, ...) are tinygrad's.
"""
from __future__ import annotations

import functools
import json
import math
import os
import reprlib
import sys
import tempfile
import types
from typing import Any, NamedTuple

import numpy as np

from lazygrad.devices import canonical_device, get_device
from lazygrad.devices.buffer import ALIGNMENT
from lazygrad.dtype import DType, dtypes
from lazygrad.lazy import LazyBuffer
from lazygrad.nn.torch_checkpoint import UnsafeCheckpointError, torch_load  # noqa: F401  (PyTorch checkpoints)
from lazygrad.tensor import Tensor

# ---- walking a model ----------------------------------------------------------------------------


_NO_TENSORS_INSIDE = (str, bytes, int, float, bool, type(None), np.ndarray, type, types.FunctionType,
                      types.MethodType, types.BuiltinFunctionType, types.ModuleType, functools.partial)


def named_children(obj: Any) -> list[tuple[str, Any]]:
    """The named things inside obj that may hold tensors: list/tuple items, dict entries, and the
    public attributes of other objects (names starting with '_' are private and skipped)."""
    if isinstance(obj, (list, tuple)):
        return [(str(index), item) for index, item in enumerate(obj)]
    if isinstance(obj, dict):
        return [(str(key), value) for key, value in obj.items()]
    if isinstance(obj, _NO_TENSORS_INSIDE):
        return []
    attributes = getattr(obj, "__dict__", None)
    if attributes is None:
        return []
    return [(name, value) for name, value in attributes.items() if not name.startswith("_")]


def get_state_dict(model: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable from model, by dotted name, in the order the attributes were set.

    This includes buffers that do not train (BatchNorm's `running_mean`, `num_batches_tracked`), as
    PyTorch's `state_dict()` does. A tensor reachable under two names (tied weights) appears under both.
    """
    state: dict[str, Tensor] = {}
    visiting: set[int] = set()

    def visit(obj: Any, name: str) -> None:
        if isinstance(obj, Tensor):
            state[name] = obj
            return
        if id(obj) in visiting:  # a cycle (a child that points back at its parent)
            return
        visiting.add(id(obj))
        for child_name, child in named_children(obj):
            visit(child, f"{name}.{child_name}" if name else child_name)
        visiting.discard(id(obj))

    visit(model, prefix)
    return state


def get_parameters(model: Any) -> list[Tensor]:
    """The tensors of model that require grad, each once (tied weights are not repeated): what an
    optimizer trains. Unlike tinygrad's function of the same name, buffers such as BatchNorm's
    running statistics are left out, as in PyTorch's `model.parameters()`."""
    parameters, seen = [], set()
    for tensor in get_state_dict(model).values():
        if tensor.requires_grad and id(tensor) not in seen:
            seen.add(id(tensor))
            parameters.append(tensor)
    return parameters


class LoadResult(NamedTuple):
    """What load_state_dict(strict=False) skipped, as PyTorch returns it."""
    missing_keys: list[str]
    unexpected_keys: list[str]


def load_state_dict(model: Any, state: dict[str, Tensor], strict: bool = True) -> LoadResult:
    """Copy the tensors of `state` into the model's tensors of the same name.

    strict=True (the default) requires the names to match exactly. A shape or dtype that differs is
    always an error. Everything is checked before anything is changed, so a failed load leaves the
    model as it was. Each model tensor keeps its device and requires_grad; the new value is moved to
    its device when needed.
    """
    model_state = get_state_dict(model)
    missing = [name for name in model_state if name not in state]
    unexpected = [name for name in state if name not in model_state]
    problems = []
    if strict and missing:
        problems.append(f"missing key(s) in state dict: {', '.join(missing)}")
    if strict and unexpected:
        problems.append(f"unexpected key(s) in state dict: {', '.join(unexpected)}")
    for name, target in model_state.items():
        if name not in state:
            continue
        source = state[name]
        if not isinstance(source, Tensor):
            problems.append(f"{name}: expected a Tensor, got {type(source).__name__}")
        elif source.shape != target.shape:
            problems.append(f"size mismatch for {name}: the state dict has shape {source.shape}, "
                            f"the model has shape {target.shape}")
        elif source.dtype != target.dtype:
            problems.append(f"dtype mismatch for {name}: the state dict has {source.dtype.name}, the model has "
                            f"{target.dtype.name}; cast it first (for example with .cast(dtypes.{target.dtype.name}))")
    if problems:
        raise RuntimeError(f"load_state_dict into {type(model).__name__} failed:\n  " + "\n  ".join(problems))
    loaded = []
    for name, target in model_state.items():
        if name in state:
            source = state[name]
            new_value = source if source.device == target.device else source.to(target.device)
            target.lazydata = new_value.lazydata
            loaded.append(target)
    if loaded:
        Tensor.realize(*loaded)
    return LoadResult(missing, unexpected)


# ---- safetensors ---------------------------------------------------------------------------------

SAFETENSORS_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "I16": dtypes.int16, "I32": dtypes.int32,
    "U16": dtypes.uint16, "U32": dtypes.uint32, "U64": dtypes.uint64,
    "I64": dtypes.int64, "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
    "F8_E4M3": dtypes.float8_e4m3fn, "F8_E5M2": dtypes.float8_e5m2, "F8_E8M0": dtypes.float8_e8m0fnu,
    "F8_E4M3FNUZ": dtypes.float8_e4m3fnuz, "F8_E5M2FNUZ": dtypes.float8_e5m2fnuz,
    "F4": dtypes.float4_e2m1fn,  # two to a byte in the file, the first in the low 4 bits (as torchao and ONNX pack)
}
SAFETENSORS_NAMES = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors package's own limit


def safe_save(state: dict[str, Tensor], path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """Write tensors to a safetensors file (atomically: a crash never leaves half a file at `path`).

    metadata, a dict of strings, goes into the header's `__metadata__` entry."""
    for name, tensor in state.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"safe_save: tensor names must be strings other than '__metadata__', got {name!r}")
        if not isinstance(tensor, Tensor):
            raise TypeError(f"safe_save: {name!r} is a {type(tensor).__name__}, not a Tensor")
        if tensor.dtype not in SAFETENSORS_NAMES:
            raise TypeError(f"safe_save: {name!r} is {tensor.dtype.name}, which the safetensors format has no code "
                            f"for (it stores {', '.join(dtype.name for dtype in SAFETENSORS_NAMES)}); cast it first")
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise ValueError("safe_save: metadata must map strings to strings")
    tensors = list(state.values())
    if tensors:
        Tensor.realize(*tensors)
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    arrays, offset = [], 0
    for name, tensor in state.items():
        array = np.ascontiguousarray(tensor.numpy()).astype(tensor.dtype.np.newbyteorder("<"), copy=False)
        if tensor.dtype == dtypes.float4_e2m1fn:
            array = _packed_nibbles(array.view(np.uint8).reshape(-1))
        header[name] = {"dtype": SAFETENSORS_NAMES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        arrays.append(array)
        offset += array.nbytes
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)  # data starts 8-byte aligned, as the package writes it
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".safetensors")
    try:
        os.chmod(temporary, _new_file_mode())  # mkstemp's 0600, not what open() would have made
        with os.fdopen(handle, "wb") as file:
            file.write(len(header_bytes).to_bytes(8, "little"))
            file.write(header_bytes)
            for array in arrays:
                file.write(array.tobytes())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _new_file_mode() -> int:
    """The mode open() gives a new file: 0o666 less the process's umask (read by setting it back)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def _read_header(file, path: str, file_size: int) -> tuple[dict[str, Any], int]:
    """The parsed JSON header of an open file, its `__metadata__` checked, and the byte position where
    the data starts; ValueError if malformed."""
    if file_size < 8:
        raise ValueError(f"safe_load: {path} is {file_size} bytes long, too short for the 8-byte header length: "
                         "the file is truncated or not a safetensors file")
    header_length = int.from_bytes(file.read(8), "little")
    if header_length > MAX_HEADER_BYTES:
        raise ValueError(f"safe_load: {path} declares a header of {header_length} bytes (more than the "
                         f"{MAX_HEADER_BYTES} allowed): not a safetensors file")
    if 8 + header_length > file_size:
        raise ValueError(f"safe_load: {path} declares a {header_length}-byte header but holds only "
                         f"{file_size - 8} bytes after the length: the file is truncated")
    raw = file.read(header_length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"safe_load: the header of {path} nests JSON too deeply for a safetensors header") from None
    except ValueError as error:  # not UTF-8, not JSON, or an integer of thousands of digits
        raise ValueError(f"safe_load: the header of {path} is not valid JSON ({error})") from None
    if not isinstance(header, dict):
        raise ValueError(f"safe_load: the header of {path} must be a JSON object, got {type(header).__name__}")
    metadata = header.get("__metadata__")
    if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise ValueError(f"safe_load: {path}: '__metadata__' must map strings to strings, got {reprlib.repr(metadata)}")
    return header, 8 + header_length


def _check_entry(path: str, name: str, entry: Any, data_size: int) -> tuple[DType, tuple[int, ...], int, int]:
    """dtype, shape and byte range of one header entry, checked against the data the file holds."""
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        raise ValueError(f"safe_load: {path}: entry {name!r} needs 'dtype', 'shape' and 'data_offsets', "
                         f"got {reprlib.repr(entry)}")
    dtype_name, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype_name, str) or dtype_name not in SAFETENSORS_DTYPES:
        raise ValueError(f"safe_load: {path}: tensor {name!r} has dtype {reprlib.repr(dtype_name)}; supported dtypes "
                         f"are {', '.join(SAFETENSORS_DTYPES)}")
    if not isinstance(shape, list) or not all(isinstance(size, int) and not isinstance(size, bool)
                                              and 0 <= size <= sys.maxsize for size in shape):
        raise ValueError(f"safe_load: {path}: tensor {name!r} has shape {reprlib.repr(shape)}; expected a list of "
                         f"sizes >= 0 (and <= {sys.maxsize})")
    integers = isinstance(offsets, list) and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    if not (integers and len(offsets) == 2 and 0 <= offsets[0] <= offsets[1]):
        raise ValueError(f"safe_load: {path}: tensor {name!r} has data_offsets {reprlib.repr(offsets)}; expected "
                         "[begin, end] with 0 <= begin <= end")
    dtype = SAFETENSORS_DTYPES[dtype_name]
    begin, end = offsets
    expected = (math.prod(shape) + 1) // 2 if dtype == dtypes.float4_e2m1fn else math.prod(shape) * dtype.itemsize
    if end - begin != expected:
        raise ValueError(f"safe_load: {path}: tensor {name!r} of dtype {dtype_name} and shape {tuple(shape)} needs "
                         f"{expected} bytes, but its data_offsets [{begin}, {end}] span {end - begin}")
    if end > data_size:
        raise ValueError(f"safe_load: {path}: tensor {name!r} needs bytes [{begin}, {end}) of the data, but the file "
                         f"holds only {data_size} bytes of data: the file is truncated")
    return dtype, tuple(shape), begin, end


def safe_load(path: str | os.PathLike, device: str | None = None, mmap: bool = False) -> dict[str, Tensor]:
    """Read a safetensors file into {name: Tensor} (on `device`, default DEV).

    The whole header is checked first: a truncated or malformed file raises ValueError naming the
    problem, and no tensor is returned. Then the data is read into memory, in one pass into one
    buffer, so what later happens to the file (a job overwriting its checkpoint, `cp` over it) does
    not reach the tensors.

    mmap=True maps the file instead, for files too large to read up front: nothing is read until a
    kernel touches it. On the host devices (CPU, NPY) each tensor's buffer is the mapped file itself
    (copy-on-write: writing a loaded tensor, an optimizer step, never changes the file); on other
    devices each tensor is a lazy copy of the mapped bytes, read when the tensor is first realized.
    Only for a file nothing truncates or rewrites while its tensors live: a read after the file was
    truncated kills the process (SIGBUS), and a part not read yet shows the file's new contents.
    """
    path = os.fspath(path)
    with open(path, "rb", buffering=0) as file:
        file_size = os.fstat(file.fileno()).st_size
        header, data_start = _read_header(file, path, file_size)
        header.pop("__metadata__", None)
        data_size = file_size - data_start
        entries = {name: _check_entry(path, name, entry, data_size) for name, entry in header.items()}
        ranges = sorted((begin, end, name) for name, (_, _, begin, end) in entries.items() if end > begin)
        for (_, previous_end, previous), (begin, _, name) in zip(ranges, ranges[1:]):
            if begin < previous_end:
                raise ValueError(f"safe_load: {path}: the data of tensors {previous!r} and {name!r} overlap")
        if data_size == 0:
            data = np.zeros(0, dtype=np.uint8)
        elif mmap:
            data = np.memmap(file, dtype=np.uint8, mode="c", offset=data_start, shape=(data_size,))
        else:
            data = _read_data(file, path, data_size)
    device = canonical_device(device)
    host = device if hasattr(get_device(device), "wrap") else "CPU"
    tensors = {}
    for name, (dtype, shape, begin, end) in entries.items():
        if dtype == dtypes.float4_e2m1fn:  # unpacked, one code per byte as lazygrad holds it: a copy, even mapped
            codes = _unpacked_nibbles(data[begin:end], math.prod(shape))
            tensors[name] = Tensor(codes.view(dtype.np).reshape(shape), device=device)
            continue
        array = data[begin:end].view(dtype.np.newbyteorder("<"))
        if sys.byteorder != "little":
            tensors[name] = Tensor(array.reshape(shape), dtype=dtype, device=device)  # a byte-swapped copy
            continue
        on_host = Tensor(LazyBuffer.from_buffer(get_device(host).wrap(dtype, array.view(dtype.np)), shape))
        tensors[name] = on_host if host == device else on_host.to(device)
    return tensors


def _packed_nibbles(codes: np.ndarray) -> np.ndarray:
    """4-bit codes (one per byte) two to a byte, the first in the low nibble; an odd last one alone."""
    padded = np.append(codes, np.uint8(0)) if codes.size % 2 else codes
    return (padded[0::2] & 15) | ((padded[1::2] & 15) << 4)


def _unpacked_nibbles(packed: np.ndarray, count: int) -> np.ndarray:
    codes = np.empty(packed.size * 2, dtype=np.uint8)
    codes[0::2], codes[1::2] = packed & 15, packed >> 4
    return codes[:count]


def _read_data(file, path: str, size: int) -> np.ndarray:
    """The next `size` bytes of an unbuffered file, read straight into one 64-byte aligned buffer."""
    raw = np.empty(size + ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    data = raw[start:start + size]
    view, done = memoryview(data), 0
    while done < size:  # a single read returns at most about 2 GiB on Linux
        count = file.readinto(view[done:])
        if not count:
            raise ValueError(f"safe_load: {path} ended after {done} of its {size} bytes of data while it was read: "
                             "the file was truncated")
        done += count
    return data


def safe_load_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The `__metadata__` strings of a safetensors file ({} when it has none); ValueError when its header
    or metadata is malformed."""
    path = os.fspath(path)
    with open(path, "rb") as file:
        header, _ = _read_header(file, path, os.fstat(file.fileno()).st_size)
    return dict(header.get("__metadata__") or {})
