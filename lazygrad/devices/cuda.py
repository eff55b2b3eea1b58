"""The CUDA device: CUDA C++ -> PTX (NVRTC through cupy, disk-cached) -> kernels launched with cupy.

`pip install lazygrad[cuda]` installs cupy; the device needs an NVIDIA GPU and its driver.
`CUDA` is the first GPU, `CUDA:1` the second. Buffers are cupy arrays (cupy's memory pool reuses
freed memory); `copyin(array)`, `numpy()` and `array` (a host copy) move data as for host buffers.

Without a GPU the generated source can still be checked: `compile_to_ptx(source)` compiles it with
`nvcc --ptx` when nvcc is installed, else with NVRTC through cupy. The tests use it.

A launch returns once the kernel is queued on the GPU's stream, as PyTorch's do: later launches,
copies in and reads back (`numpy()`) are ordered after it there, and a read waits for it. Timing
waits for the kernels (`CUDADevice.synchronize`, `lazygrad.devices.synchronize("CUDA")`): a wait
after every launch had left the GPU idle while Python prepared the next one.

A kernel's first source line says how to launch it (`// launch: grid=<blocks> block=<threads>`,
written by renderer/cuda.py); the cached "binary" is that launch size followed by the PTX. A kernel
with work-groups (LOCAL, GROUP) has one block per group there, so `block` is its group size.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import tempfile

import numpy as np

from lazygrad.devices import DeviceUnavailable
from lazygrad.diskcache import cache_get, cache_key, cache_put
from lazygrad.dtype import STORAGE_WIDE, DType
from lazygrad.stats import stats

INSTALL_HINT = "pip install lazygrad[cuda]  (cupy; needs an NVIDIA GPU and its driver)"
LAUNCH_LINE = re.compile(r"^// launch: grid=(\d+) block=(\d+)")
ENVELOPE = struct.Struct("<4sI")        # magic, length of the JSON header that follows
MAGIC = b"LGCU"
NVCC_LOCATIONS = ("/usr/local/cuda/bin/nvcc",)


class CompileError(RuntimeError):
    pass


def import_cupy():
    """The cupy module, or DeviceUnavailable saying how to install it."""
    try:
        import cupy
    except ImportError as error:
        raise DeviceUnavailable(f"the CUDA device needs cupy, which cannot be imported ({error}); "
                           f"install it with: {INSTALL_HINT}") from None
    return cupy


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    return next((path for path in NVCC_LOCATIONS if os.access(path, os.X_OK)), None)


def launch_size(source: str) -> tuple[int, int]:
    match = LAUNCH_LINE.match(source)
    if match is None:
        raise ValueError("CUDA source must start with '// launch: grid=... block=...' (see renderer/cuda.py)")
    return int(match.group(1)), int(match.group(2))


# ---- compiling ------------------------------------------------------------------------------

def _nvcc_version(nvcc: str) -> str:
    result = subprocess.run([nvcc, "--version"], capture_output=True, text=True)
    return result.stdout.strip().splitlines()[-1] if result.stdout else nvcc


def _compile_with_nvcc(nvcc: str, source: str, options: list[str]) -> str:
    with tempfile.TemporaryDirectory(prefix=f"lazygrad-{os.getpid()}-") as workdir:
        source_path = os.path.join(workdir, "kernel.cu")
        output_path = os.path.join(workdir, "kernel.ptx")
        with open(source_path, "w") as handle:
            handle.write(source)
        result = subprocess.run([nvcc, "--ptx", *options, source_path, "-o", output_path],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise CompileError(f"nvcc failed to compile a kernel:\n{result.stderr}{result.stdout}"
                               f"\n--- source ---\n{source}")
        with open(output_path) as handle:
            return handle.read()


def _nvrtc_include_options(cupy) -> list[str]:
    try:
        cuda_path = cupy.cuda.get_cuda_path()
    except Exception:
        return []
    include = os.path.join(cuda_path, "include") if cuda_path else None
    return [f"--include-path={include}"] if include and os.path.isdir(include) else []


def _compile_with_nvrtc(source: str, options: list[str]) -> str:
    cupy = import_cupy()
    from cupy.cuda import nvrtc
    program = nvrtc.createProgram(source, "kernel.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(program, [*options, *_nvrtc_include_options(cupy)])
        except nvrtc.NVRTCError:
            raise CompileError(f"NVRTC failed to compile a kernel:\n{nvrtc.getProgramLog(program)}"
                               f"\n--- source ---\n{source}") from None
        ptx = nvrtc.getPTX(program)
    finally:
        nvrtc.destroyProgram(program)
    return ptx.decode() if isinstance(ptx, bytes) else ptx


def compile_to_ptx(source: str, arch: str | None = None, prefer_nvcc: bool = True) -> str:
    """PTX for CUDA source, without needing a GPU; cached on disk.

    Uses `nvcc --ptx` when nvcc is found (and prefer_nvcc), else NVRTC through cupy. `arch` is a
    virtual architecture such as "compute_75" (default: the compiler's own default)."""
    nvcc = find_nvcc() if prefer_nvcc else None
    if nvcc is not None:
        options = [f"--gpu-architecture={arch}"] if arch else []
        key = cache_key("CUDA", "nvcc", nvcc, _nvcc_version(nvcc), tuple(options), source)
    else:
        try:
            cupy = import_cupy()
        except DeviceUnavailable:
            raise DeviceUnavailable("compiling CUDA needs nvcc (the CUDA toolkit) or cupy; install one: "
                               f"{INSTALL_HINT}") from None
        from cupy.cuda import nvrtc
        options = [f"--gpu-architecture={arch}"] if arch else []
        key = cache_key("CUDA", "nvrtc", str(nvrtc.getVersion()), cupy.__version__, tuple(options), source)
    cached = cache_get("compile_cuda_ptx", key)
    if cached is not None:
        stats.cache_hits += 1
        return cached.decode()
    ptx = _compile_with_nvcc(nvcc, source, options) if nvcc is not None else _compile_with_nvrtc(source, options)
    stats.compiles += 1
    cache_put("compile_cuda_ptx", key, ptx.encode())
    return ptx


class CUDACompiler:
    """What DEBUG=6 prints: the PTX of a kernel."""

    def __init__(self, arch: str):
        self.arch = arch

    def assembly(self, source: str) -> str:
        return compile_to_ptx(source, self.arch, prefer_nvcc=False)


# ---- running --------------------------------------------------------------------------------

class CUDABuffer:
    """`size` elements of `dtype` in a GPU's memory (a cupy array)."""
    __slots__ = ("device", "dtype", "size", "version", "data", "__weakref__")

    def __init__(self, device: str, dtype: DType, size: int, cupy_device):
        cupy = import_cupy()
        self.device, self.dtype, self.size = device, dtype, size
        self.version = 0  # bumped by every in-place write (lazy.py)
        with cupy_device:  # cupy has no bfloat16 or float8: their bits, as kernels read them
            self.data = cupy.empty(size, dtype=f"uint{8 * dtype.itemsize}" if dtype in STORAGE_WIDE else dtype.np)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def copyin(self, data: np.ndarray) -> "CUDABuffer":
        if data.dtype != self.dtype.np:
            raise TypeError(f"copyin: {self} holds {self.dtype.name}, got a numpy array of {data.dtype}")
        if data.size != self.size:
            raise ValueError(f"copyin: {self} holds {self.size} elements, got {data.size}")
        self.data.set(np.ascontiguousarray(data.reshape(-1)).view(self.data.dtype))
        return self

    def numpy(self) -> np.ndarray:
        return self.data.get().view(self.dtype.np)

    @property
    def array(self) -> np.ndarray:
        """A host copy of the contents (what the engine reads to copy between devices)."""
        return self.numpy()

    def __repr__(self) -> str:
        return f"<CUDABuffer {self.device} {self.dtype.name}[{self.size}]>"


class CUDAProgram:
    """A loaded kernel: call it with buffers (outputs first); returns once the launch is queued."""

    def __init__(self, device: "CUDADevice", name: str, binary: bytes, argument_count: int):
        cupy = import_cupy()
        magic, length = ENVELOPE.unpack_from(binary)
        if magic != MAGIC:
            raise ValueError("not a lazygrad CUDA binary")
        header = json.loads(binary[ENVELOPE.size:ENVELOPE.size + length])
        self.grid, self.block = header["grid"], header["block"]
        self.argument_count = argument_count
        self.cupy_device = device.cupy_device
        with self.cupy_device:
            self.module = cupy.cuda.function.Module()
            self.module.load(binary[ENVELOPE.size + length:])
            self.function = self.module.get_function(name)

    def __call__(self, *buffers: CUDABuffer) -> None:
        assert len(buffers) == self.argument_count
        with self.cupy_device:
            self.function((self.grid,), (self.block,), tuple(buffer.data for buffer in buffers))


class CUDADevice:
    """`CUDA` or `CUDA:N`: one NVIDIA GPU, through cupy."""

    def __init__(self, name: str = "CUDA"):
        cupy = import_cupy()
        self.name = name
        index = int(name.split(":")[1]) if ":" in name else 0
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as error:  # no driver, or a driver without a GPU
            raise DeviceUnavailable(f"no GPU found for CUDA ({error})") from None
        if count == 0:
            raise DeviceUnavailable("no GPU found for CUDA")
        if index >= count:
            raise RuntimeError(f"{name}: there are only {count} CUDA GPUs")
        self.cupy_device = cupy.cuda.Device(index)
        self.arch = f"compute_{self.cupy_device.compute_capability}"
        self.compiler = CUDACompiler(self.arch)

    def alloc(self, dtype: DType, size: int) -> CUDABuffer:
        return CUDABuffer(self.name, dtype, size, self.cupy_device)

    def synchronize(self) -> None:
        """Returns once every kernel launched on this GPU has finished."""
        self.cupy_device.synchronize()

    def compile_cached(self, source: str) -> bytes:
        grid, block = launch_size(source)
        ptx = compile_to_ptx(source, self.arch, prefer_nvcc=False)
        header = json.dumps({"grid": grid, "block": block}).encode()
        return ENVELOPE.pack(MAGIC, len(header)) + header + ptx.encode() + b"\0"

    def load(self, name: str, binary: bytes, argument_count: int) -> CUDAProgram:
        return CUDAProgram(self, name, binary, argument_count)
