"""The OPENCL device: OpenCL C -> program binary (disk-cached) -> kernels launched with pyopencl.

Any OpenCL platform works; `pip install lazygrad[opencl]` installs pyopencl and PoCL, a CPU
OpenCL driver, so the device exists even on a machine without a GPU. `OPENCL` is the first device
found (GPUs before other kinds, then in platform order), `OPENCL:1` the second, and so on;
`python -m lazygrad.devices` lists them.

Buffers live in device memory. Moving data to and from numpy is `copyin(array)` and `numpy()`;
`buffer.array` is a host copy too, so the engine's device copies (`.to()`) and `Tensor.numpy()`
work as they do for host buffers.

A kernel's first source line says how to launch it (`// launch: global=<dim0>,<dim1>,...`, written
by renderer/opencl.py), followed by ` local=<dim0>,...` when its work-groups are prescribed (the
LOCAL and GROUP opts: a grouped reduce is only correct in groups of that size). The cached
"binary" is the global size, the local size when there is one, the source and the program
binary, so a kernel loads from the cache alone, and a binary the driver rejects is rebuilt from
its source. Kernels without a reduce are built several to a program (`compile_together`, as the
CPU device compiles them, devices/compile_pool.py); each one's entry then holds the whole program
and the kernel's name in it. An entry without a local size (every entry written before local sizes existed) is a
kernel without one: its source key has no `local=` either. Each call waits for the kernel to
finish, so the engine's timings are honest.

On a CPU device (PoCL) kernels are built with `-DLAZYGRAD_LOCKSTEP_REDUCES`, which turns the
renderer's `lg_lockstep();` at the end of a reduce loop into a work-group barrier, and a kernel
with one is launched in work-groups of 16 along dimension 0 (`lockstep_local_size`): PoCL then
runs the group's work-items one loop step at a time as vector instructions. Measured with PoCL 3.0
on a 2-core AVX-512 Xeon, for matmul and row sums: groups of 8 and 16 are about equally fast, 32
and more several times slower. Other kernels are launched without a local size, which lets PoCL
choose large work-groups (groups of 8 made an elementwise kernel with exp several times slower).
On other devices nothing of this applies. This derived work-group size is not part of the cached
binary: it follows from the source and the device each time a kernel is loaded. A local size
from the launch line always takes precedence over it.

`float_vector_width` is the float32 vector width the OpenCL renderer builds vector code with
(renderer/opencl.py): the device's preferred and native widths, limited to vectors whose size the
base address alignment of every buffer covers (the renderer's aligned vector loads need it).
"""
from __future__ import annotations

import json
import re
import struct
import sys
import warnings
import weakref

import numpy as np

from lazygrad.devices import DeviceUnavailable
from lazygrad.devices.buffer import PooledAllocator
from lazygrad.diskcache import cache_get, cache_key, cache_put
from lazygrad.dtype import DType
from lazygrad.knobs import export_pocl_cache_settings
from lazygrad.stats import stats

INSTALL_HINT = "pip install lazygrad[opencl]  (pyopencl, and PoCL: OpenCL on the CPU)"
LAUNCH_LINE = re.compile(r"^// launch: global=(\d+(?:,\d+)*)(?: local=(\d+(?:,\d+)*))?")
ENVELOPE = struct.Struct("<4sI")        # magic, length of the JSON header that follows
MAGIC = b"LGOC"
POCL_BINARY_MAGIC = b"poclbin\0"
LLVM_BITCODE_MAGIC = b"BC\xc0\xde"
LOCKSTEP_OPTION = "-DLAZYGRAD_LOCKSTEP_REDUCES"
LOCKSTEP_MARKER = "lg_lockstep();"
LOCKSTEP_GROUP_SIZE = 16
VECTOR_WIDTHS = (16, 8, 4, 2)  # the float vector widths renderer/opencl.py builds, widest first


class CompileError(RuntimeError):
    pass


def import_pyopencl():
    """The pyopencl module, or DeviceUnavailable saying how to install it."""
    _share_cache_settings_with_pocl()
    try:
        import pyopencl
    except ImportError as error:
        raise DeviceUnavailable(f"the OPENCL device needs pyopencl, which cannot be imported ({error}); "
                           f"install it with: {INSTALL_HINT}") from None
    return pyopencl


def _share_cache_settings_with_pocl() -> None:
    """PoCL reads its cache settings when it loads: hand them over before pyopencl's first import."""
    if "pyopencl" not in sys.modules:
        export_pocl_cache_settings()


def list_opencl_devices() -> list[tuple[object, object]]:
    """Every (platform, device) pyopencl can see, in the order OPENCL:N numbers them."""
    cl = import_pyopencl()
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # an ICD loader with no platform registered raises instead of returning []
        platforms = []
    found = []
    for platform in platforms:
        try:
            found.extend((platform, device) for device in platform.get_devices())
        except cl.Error:  # a platform with no device
            continue
    is_gpu = [bool(device.type & cl.device_type.GPU) for _, device in found]
    order = sorted(range(len(found)), key=lambda number: not is_gpu[number])
    return [found[number] for number in order]


def no_platform_message() -> str:
    return ("pyopencl found no OpenCL platform; install one: `pip install pocl-binary-distribution` "
            "for the CPU, or your GPU vendor's OpenCL driver")


def _check_compiler_knows_this_cpu(context, label: str) -> None:
    """DeviceUnavailable where the OpenCL compiler of a CPU device cannot build for this processor.
    PoCL compiles for the host CPU by the name its LLVM gives it, and an LLVM older than the
    processor names it "generic", which it then refuses for every kernel ("unknown target CPU
    'generic'", pocl issue #1049): PoCL 3.0 of the pocl-binary-distribution wheel is built on
    LLVM 14, which does not know AMD's Zen 5. Any other failure of this build is left for the
    kernels' own builds to report, with their source."""
    cl = import_pyopencl()
    try:
        cl.Program(context, "__kernel void lazygrad_probe(__global float* x) { x[0] = 1.0f; }").build()
    except cl.Error as error:
        if "unknown target CPU" in str(error):
            raise DeviceUnavailable(f"{label}: its OpenCL compiler cannot build for this processor (unknown target "
                                    "CPU: its LLVM is older than the processor); install an OpenCL runtime built "
                                    "on a newer LLVM, or run on CPU") from None


class OpenCLAllocator(PooledAllocator):
    """OpenCL device buffers, pooled."""

    def __init__(self, context, pool_limit: int = 1 << 30):
        super().__init__(pool_limit)
        self.context = context

    def alloc(self, nbytes: int):
        return super().alloc(max(nbytes, 1))  # OpenCL has no empty buffers

    def new_block(self, nbytes: int):
        cl = import_pyopencl()
        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)

    def block_size(self, block) -> int:
        return block.size


class OpenCLBuffer:
    """`size` elements of `dtype` in an OpenCL device's memory."""
    __slots__ = ("device", "dtype", "size", "version", "cl_buffer", "queue", "__weakref__")

    def __init__(self, device: str, dtype: DType, size: int, allocator: OpenCLAllocator, queue):
        self.device, self.dtype, self.size, self.queue = device, dtype, size, queue
        self.version = 0  # bumped by every in-place write (lazy.py)
        self.cl_buffer = allocator.alloc(size * dtype.itemsize)
        weakref.finalize(self, allocator.free, self.cl_buffer)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def copyin(self, data: np.ndarray) -> "OpenCLBuffer":
        if data.dtype != self.dtype.np:
            raise TypeError(f"copyin: {self} holds {self.dtype.name}, got a numpy array of {data.dtype}")
        if data.size != self.size:
            raise ValueError(f"copyin: {self} holds {self.size} elements, got {data.size}")
        if self.size:
            cl = import_pyopencl()
            cl.enqueue_copy(self.queue, self.cl_buffer, np.ascontiguousarray(data.reshape(-1)), is_blocking=True)
        return self

    def numpy(self) -> np.ndarray:
        result = np.empty(self.size, dtype=self.dtype.np)
        if self.size:
            cl = import_pyopencl()
            cl.enqueue_copy(self.queue, result, self.cl_buffer, is_blocking=True)
        return result

    @property
    def array(self) -> np.ndarray:
        """A host copy of the contents (what the engine reads to copy between devices)."""
        return self.numpy()

    def __repr__(self) -> str:
        return f"<OpenCLBuffer {self.device} {self.dtype.name}[{self.size}]>"


def pack_binary(global_size: list[int], source: str, program_binary: bytes,
                local_size: list[int] | None = None, symbol: str | None = None) -> bytes:
    """`symbol`: the kernel's name in a program built from several sources (compile_together)."""
    fields = {"global": global_size, "source": source}
    if local_size is not None:
        fields["local"] = local_size
    if symbol is not None:
        fields["symbol"] = symbol
    header = json.dumps(fields).encode()
    return ENVELOPE.pack(MAGIC, len(header)) + header + program_binary


def _unpack_header(binary: bytes) -> tuple[dict, bytes]:
    magic, length = ENVELOPE.unpack_from(binary)
    if magic != MAGIC:
        raise ValueError("not a lazygrad OpenCL binary")
    header = json.loads(binary[ENVELOPE.size:ENVELOPE.size + length])
    return header, binary[ENVELOPE.size + length:]


def unpack_binary(binary: bytes) -> tuple[list[int], str, bytes]:
    """(global size, source, program binary) of a cached entry."""
    header, program_binary = _unpack_header(binary)
    return header["global"], header["source"], program_binary


def unpack_launch(binary: bytes) -> tuple[list[int], list[int] | None]:
    """(global size, local size or None) of a cached entry; entries from before local sizes have none."""
    header, _ = _unpack_header(binary)
    return header["global"], header.get("local")


def unpack_symbol(binary: bytes, name: str) -> str:
    """The kernel's name in the entry's program: its own, unless it was built with others."""
    header, _ = _unpack_header(binary)
    return header.get("symbol", name)


def _launch_match(source: str) -> re.Match:
    match = LAUNCH_LINE.match(source)
    if match is None:
        raise ValueError("OpenCL source must start with '// launch: global=...' (see renderer/opencl.py)")
    return match


def launch_size(source: str) -> list[int]:
    """The global size on the launch line."""
    return [int(size) for size in _launch_match(source).group(1).split(",")]


def launch_local_size(source: str) -> list[int] | None:
    """The local size on the launch line, or None when the line leaves it to the device."""
    local = _launch_match(source).group(2)
    return None if local is None else [int(size) for size in local.split(",")]


def lockstep_local_size(global_size: list[int]) -> list[int]:
    """Work-groups for a kernel whose reduce loop ends in a barrier: the largest divisor of the
    dimension 0 size up to LOCKSTEP_GROUP_SIZE (OpenCL 1.2 needs the group to divide the global
    size), 1 along the other dimensions."""
    group = max(size for size in range(1, LOCKSTEP_GROUP_SIZE + 1) if global_size[0] % size == 0)
    return [group] + [1] * (len(global_size) - 1)


def float_vector_width(preferred: int, native: int, base_alignment_bits: int) -> int:
    """Lanes of the float32 vectors kernels should use: the widest of VECTOR_WIDTHS within both the
    preferred and the native width the device reports, whose vectors every buffer's base address
    is aligned to (the renderer's vector loads need that alignment); 1 for none."""
    aligned_floats = base_alignment_bits // 8 // 4
    limit = min(preferred, native, aligned_floats)
    return next((width for width in VECTOR_WIDTHS if width <= limit), 1)


def binary_is_complete(program_binary: bytes) -> bool:
    """False for a PoCL program binary that lacks the LLVM bitcode PoCL compiles work-groups from."""
    return not program_binary.startswith(POCL_BINARY_MAGIC) or LLVM_BITCODE_MAGIC in program_binary


class OpenCLCompiler:
    """Builds programs for one device; `assembly` is what DEBUG=6 prints."""

    def __init__(self, device: "OpenCLDevice"):
        self.device = device

    def build(self, source: str):
        """The built program. A PoCL binary without its LLVM bitcode comes from a damaged entry
        of PoCL's own kernel cache (PoCL 3.0 damages it when processes build the same kernel at
        once, pocl issue #1480) and crashes a later process; the source is then built once more
        under another entry of PoCL's cache (the build options are part of its key)."""
        program = self._build(source)
        if not binary_is_complete(program.binaries[0]):
            program = self._build(source, ["-DLAZYGRAD_REBUILD=1"])
        if not binary_is_complete(program.binaries[0]):
            raise CompileError(f"the OpenCL driver of {self.device.description} returns programs without "
                               "their code: its kernel cache is damaged; delete it (PoCL: ~/.cache/pocl)")
        return program

    def _build(self, source: str, extra_options: list[str] | None = None):
        cl = import_pyopencl()
        device = self.device
        if "double" in source and "cl_khr_fp64" not in device.cl_device.extensions:
            raise CompileError(f"{device.description} has no float64 support (cl_khr_fp64); use float32")
        program = cl.Program(device.context, source)
        try:
            with warnings.catch_warnings():  # generated code draws harmless warnings (unsigned x < 0)
                warnings.simplefilter("ignore", cl.CompilerWarning)
                return program.build(options=device.build_options + (extra_options or []))
        except cl.Error as error:
            raise CompileError(f"the OpenCL compiler of {device.description} failed:\n{error}\n"
                               f"--- source ---\n{source}") from None

    def assembly(self, source: str) -> str:
        binary = self.build(source).binaries[0]
        try:
            text = binary.decode("ascii")  # NVIDIA's drivers return PTX
        except UnicodeDecodeError:
            text = "\x00"
        if "\x00" in text:
            return f"({len(binary)} bytes of {self.device.description} binary: not printable)"
        return text


class OpenCLProgram:
    """A loaded kernel: call it with buffers (outputs first); returns when the kernel has finished."""

    def __init__(self, device: "OpenCLDevice", name: str, binary: bytes, argument_count: int):
        cl = import_pyopencl()
        self.global_size, source, program_binary = unpack_binary(binary)
        _, prescribed_local_size = unpack_launch(binary)
        self.queue = device.queue
        try:
            program = cl.Program(device.context, [device.cl_device], [program_binary]).build(
                options=device.build_options)
            symbol = unpack_symbol(binary, name)
        except cl.Error:  # a binary this driver no longer accepts: rebuild it from its source
            program, symbol = device.compiler.build(source), name
        self.kernel = cl.Kernel(program, symbol)
        if self.kernel.num_args != argument_count:
            raise ValueError(f"kernel {name} takes {self.kernel.num_args} buffers, not {argument_count}")
        self.local_size = None  # the driver chooses
        if prescribed_local_size is not None:  # LOCAL/GROUP: the kernel needs these groups
            self.local_size = prescribed_local_size
        elif device.lockstep_reduces and LOCKSTEP_MARKER in source:
            self.local_size = lockstep_local_size(self.global_size)

    def __call__(self, *buffers: OpenCLBuffer) -> None:
        cl = import_pyopencl()
        self.kernel.set_args(*[buffer.cl_buffer for buffer in buffers])
        cl.enqueue_nd_range_kernel(self.queue, self.kernel, self.global_size, self.local_size).wait()


class OpenCLDevice:
    """`OPENCL` or `OPENCL:N`: one OpenCL device with its own context and in-order queue."""

    def __init__(self, name: str = "OPENCL"):
        cl = import_pyopencl()
        self.name = name
        index = int(name.split(":")[1]) if ":" in name else 0
        found = list_opencl_devices()
        if not found:
            raise DeviceUnavailable(no_platform_message())
        if index >= len(found):
            listed = "; ".join(f"OPENCL:{number} {device.name.strip()}" for number, (_, device) in enumerate(found))
            raise RuntimeError(f"{name}: there are only {len(found)} OpenCL devices ({listed})")
        self.platform, self.cl_device = found[index]
        self.description = f"{self.cl_device.name.strip()} ({self.platform.name.strip()})"
        self.context = cl.Context([self.cl_device])
        if self.cl_device.type & cl.device_type.CPU:
            _check_compiler_knows_this_cpu(self.context, f"{name} ({self.description})")
        self.queue = cl.CommandQueue(self.context)
        self.allocator = OpenCLAllocator(self.context)
        self.compiler = OpenCLCompiler(self)
        options = []
        if self.cl_device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
            options.append("-cl-fp32-correctly-rounded-divide-sqrt")  # a / b and sqrt as in numpy
        self.lockstep_reduces = bool(self.cl_device.type & cl.device_type.CPU)
        self.float_vector_width = float_vector_width(self.cl_device.preferred_vector_width_float,
                                                     self.cl_device.native_vector_width_float,
                                                     self.cl_device.mem_base_addr_align)
        if self.lockstep_reduces:
            options.append(LOCKSTEP_OPTION)
        self.build_options = options

    def alloc(self, dtype: DType, size: int) -> OpenCLBuffer:
        return OpenCLBuffer(self.name, dtype, size, self.allocator, self.queue)

    def _cache_key(self, source: str) -> str:
        platform, device = self.platform, self.cl_device
        return cache_key("OPENCL", platform.name, platform.version, device.name, device.version,
                         device.driver_version, tuple(self.build_options), source)

    def compile_cached(self, source: str) -> bytes:
        binary = self.cached(source)
        return self.compile_together([("", source)])[0] if binary is None else binary

    def cached(self, source: str) -> bytes | None:
        """The entry the disk cache holds for source, or None (also for one whose program lacks its code)."""
        binary = cache_get("compile_opencl", self._cache_key(source))
        if binary is None or not binary_is_complete(unpack_binary(binary)[2]):
            return None
        stats.cache_hits += 1
        return binary

    def compile_together(self, kernels: list[tuple[str, str]]) -> list[bytes]:
        """Builds several kernels, given as (name, source), as one program, and caches each: the
        program's build has a cost of its own besides its kernels' code (PoCL 3.0: about 0.1 s of a
        small kernel's 0.2-0.4 s). Renamed as on the CPU (devices/cpu.py), so two kernels may share
        a name; each entry holds the whole program and its kernel's name there."""
        if len(kernels) == 1:
            symbols, unit = [None], kernels[0][1]
        else:
            symbols = [f"{name}_{index}" for index, (name, _) in enumerate(kernels)]
            unit = "\n".join(f"#define {name} {symbol}\n{source}\n#undef {name}\n"
                             for (name, source), symbol in zip(kernels, symbols))
        program_binary = self.compiler.build(unit).binaries[0]
        binaries = []
        for (_, source), symbol in zip(kernels, symbols):
            binary = pack_binary(launch_size(source), source, program_binary, launch_local_size(source), symbol)
            stats.compiles += 1
            cache_put("compile_opencl", self._cache_key(source), binary)
            binaries.append(binary)
        return binaries

    def load(self, name: str, binary: bytes, argument_count: int) -> OpenCLProgram:
        return OpenCLProgram(self, name, binary, argument_count)
