"""The CPU device: C source -> shared object (system C compiler, disk-cached) -> ctypes call.

The compiler is `$CC` if set, else the first of gcc, clang, cc found on PATH. Flags keep numpy's
results: no -ffast-math; -fno-math-errno only stops libm from setting errno (so sqrt vectorizes),
-fno-trapping-math says no code reads floating-point exception flags (nothing does; without it gcc
keeps scalar every loop whose selects or conversions could raise one: exp2's polynomial, float to
double, one thread: exp/sqrt chain on 2^22 floats 50 -> 11 ms, softmax 2048x2048 82 -> 17 ms, GELU's
float64 erf 5x), -fwrapv makes integer overflow wrap as numpy's does, -ffp-contract=off keeps a*b+c rounded
twice. -fno-tree-loop-distribution skips the -O3 pass that took 41% of gcc 12's time on a register
tile (it splits loops; our loops are already arranged): MobileNetV2's 54 kernels compile in ~30%
less time. -falign-functions=64 starts every function on a cache line, so kernels compiled several to
one run (compile_pool.py) keep the offsets their loops have alone: unaligned, the same code ran
BERT's 1536 x 384 products 5-13% slower or faster in a shared library, which had kept every kernel
with a reduce in a run of its own; aligned and grouped, jitted MobileNetV2, MNASNet and
EfficientNet-B0 ran as fast as with those alone (0.999-1.005x, either side first). Kernels declare
the few libm functions they call (renderer/c.py) rather than include <math.h>;
-Werror=implicit-function-declaration keeps a call to anything undeclared from compiling as a guess
that returns int.
OpenMP spreads big kernels over every core; a compiler without OpenMP still works, single-threaded.
"""
from __future__ import annotations

import ctypes
import _ctypes
import functools
import operator
import os
import platform
import shutil
import subprocess
import tempfile
import weakref

import numpy as np

from lazygrad.devices.buffer import Buffer, HostAllocator
from lazygrad.devices.compile_pool import usable_cores
from lazygrad.diskcache import cache_get, cache_key, cache_put
from lazygrad.dtype import DType
from lazygrad.knobs import knobs, openmp_threads_setting
from lazygrad.stats import stats

BASE_FLAGS = ["-O3", "-march=native", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math", "-fwrapv",
              "-ffp-contract=off", "-fno-strict-aliasing", "-fno-tree-loop-distribution",
              "-falign-functions=64", "-w",
              "-Werror=implicit-function-declaration"]
OPENMP_FLAGS = ["-fopenmp"]
COMPILE_TIMEOUT = 600  # seconds one kernel's compile may take before lazygrad gives up on the compiler
LIBRARY_MAGICS = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"MZ")  # ELF, Mach-O 64/32, PE
NAMED_LIBRARY = b"lazygrad kernel:"  # then the kernel's name in the library, a NUL byte and the library


class CompileError(RuntimeError):
    pass


def work_prefix() -> str:
    """The name prefix of this process's temporary files and folders: `lazygrad-<pid>-`."""
    return f"lazygrad-{os.getpid()}-"


def remove_orphaned_work_files(directory: str | None = None) -> None:
    """A compile killed outright (SIGKILL, out of memory) leaves its temporary folder behind: remove
    this user's `lazygrad-<pid>-*` files and folders whose process is gone. Runs once per process,
    when the first compiler is found."""
    directory = directory or tempfile.gettempdir()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        parts = entry.name.split("-", 2)
        if len(parts) < 3 or parts[0] != "lazygrad" or not parts[1].isdigit() or _process_exists(int(parts[1])):
            continue
        try:
            if hasattr(os, "getuid") and entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):  # another user's process, or no way to tell: leave it
        return True
    return True


class Compiler:
    """The system C compiler, found once per process (or per distinct CC setting)."""

    def __init__(self, requested: str):
        candidates = [requested] if requested else ["gcc", "clang", "cc"]
        path = next((found for name in candidates if (found := shutil.which(name))), None)
        if path is None:
            tried = f"CC={requested!r}" if requested else "gcc, clang, cc"
            raise RuntimeError(f"no C compiler found (tried {tried}); install one (e.g. apt-get install gcc) "
                               "or set CC=/path/to/compiler")
        self.path = path
        try:
            version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise CompileError(f"{path} did not answer --version in {COMPILE_TIMEOUT} s; it was stopped "
                               "(a hung compiler? try another with CC=...)") from None
        self.version = version.stdout.splitlines()[0] if version.stdout else path
        self.openmp = True

    @functools.cached_property
    def native_target(self) -> str:
        """What -march=native selects here, as the compiler expands it (gcc's -m flags and tuning
        params, clang's target cpu and features). It is part of every binary's cache key: a cache
        shared between machines (a network home, a CI cache) must not hand one CPU code built for
        another's instructions."""
        command = [self.path, "-march=native", "-###", "-x", "c", "-c", os.devnull, "-o", os.devnull]
        try:
            listing = subprocess.run(command, capture_output=True, text=True, timeout=60).stderr
        except (OSError, subprocess.TimeoutExpired):
            listing = ""
        tokens = [token.strip("\"'") for token in listing.split()]
        kept = [token for previous, token in zip([""] + tokens, tokens)
                if token.startswith(("-m", "--param")) or previous in ("-target-cpu", "-target-feature")]
        return " ".join(kept) or platform.processor() or platform.machine()

    def flags(self) -> list[str]:
        return BASE_FLAGS + (OPENMP_FLAGS if self.openmp else [])

    def compile(self, source: str, extra: list[str] | None = None) -> bytes:
        with tempfile.TemporaryDirectory(prefix=work_prefix()) as workdir:
            output = os.path.join(workdir, "kernel.so")
            result = self._run(source, output, extra)
            if result.returncode != 0 and self.openmp and any(word in result.stderr.lower() for word in ("omp", "openmp")):
                # clang without libomp ("omp.h", "-lomp"), Apple clang ("unsupported option '-fopenmp'"):
                # fall back to one thread
                self.openmp = False
                result = self._run(source, output, extra)
            if result.returncode != 0:
                raise CompileError(f"{self.path} failed to compile a kernel:\n{result.stderr}\n--- source ---\n{source}")
            try:
                with open(output, "rb") as handle:
                    binary = handle.read()
            except OSError:
                binary = b""
            if not binary.startswith(LIBRARY_MAGICS):  # never cache what cannot be a library
                raise CompileError(f"{self.path} reported success but wrote no shared library ({len(binary)} bytes "
                                   "of something else); check that CC names a C compiler")
            return binary

    def _run(self, source: str, output: str, extra: list[str] | None):
        command = [self.path, *self.flags(), *(extra or []), "-x", "c", "-", "-o", output]
        try:
            return subprocess.run(command, input=source, capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise CompileError(f"{self.path} did not finish compiling a kernel in {COMPILE_TIMEOUT} s; "
                               "it was stopped (a hung compiler? try another with CC=...)") from None

    def assembly(self, source: str) -> str:
        command = [self.path, *[flag for flag in self.flags() if flag != "-shared"], "-S", "-x", "c", "-", "-o", "-"]
        return subprocess.run(command, input=source, capture_output=True, text=True).stdout


_pointer_of = operator.attrgetter("pointer")
# The OpenMP runtimes a kernel library may depend on (gcc's, LLVM's, Intel's), by the names it lists.
OPENMP_RUNTIMES = ("libgomp.so.1", "libomp.so", "libomp.so.5", "libiomp5.so", "libomp.dylib")
_openmp_pinned = False


def _pin_openmp_runtime() -> None:
    """Keeps a loaded OpenMP runtime mapped until the process ends. Its worker threads outlive the
    parallel regions; when the last kernel that used it was unloaded (_unload), the runtime went too
    and a sleeping worker woke in unmapped code: a segfault at a random later point (4 runs in 6 of
    test/renderer/test_beam.py). RTLD_NOLOAD only marks a runtime that a kernel already loaded."""
    global _openmp_pinned
    keep = getattr(os, "RTLD_NODELETE", None)
    if _openmp_pinned or keep is None:
        return
    for name in OPENMP_RUNTIMES:
        try:
            ctypes.CDLL(name, mode=keep | os.RTLD_NOLOAD)
        except OSError:  # not loaded (yet): kernels without a parallel loop do not link it
            continue
        _openmp_pinned = True
        return


def _unload(handle: int) -> None:
    """Unmaps a kernel's library (each keeps a few memory maps; a process has ~65,000)."""
    unload = getattr(_ctypes, "dlclose", None) or getattr(_ctypes, "FreeLibrary", None)
    if unload is not None:
        unload(handle)


class _Library:
    """A loaded shared library, one per distinct binary: the kernels of one compiler run share it
    (`compile_together`), so a process taking them from the disk cache loads it once, not once per
    kernel (MobileNetV2's training step: 427 kernels in 76 libraries; writing each to a file to
    load it cost 0.17-0.22 s of its first call with a filled cache)."""

    def __init__(self, binary: bytes):
        with tempfile.NamedTemporaryFile(prefix=work_prefix(), suffix=".so", delete=False) as handle:
            handle.write(binary)
            path = handle.name
        try:
            self.library = ctypes.CDLL(path)
        finally:
            os.unlink(path)  # the mapping stays valid after the file is gone
        _pin_openmp_runtime()
        # unloaded once no function of it can be called any more: the engine forgets programs it has
        # not used for long (realize.LOADED_PROGRAMS), but a jit replay may still hold a function
        weakref.finalize(self, _unload, self.library._handle).atexit = False  # exit unmaps all at once


# binary -> its loaded library, while a function of it lives
_LIBRARIES: weakref.WeakValueDictionary[bytes, _Library] = weakref.WeakValueDictionary()


class CPUProgram:
    """A loaded kernel: call it with buffers (outputs first)."""

    def __init__(self, name: str, binary: bytes, argument_count: int):
        library = _LIBRARIES.get(binary)
        if library is None:
            library = _LIBRARIES[binary] = _Library(binary)
        self.function = library.library[name]
        self.function.library = library  # keeps it loaded while the function lives
        self.function.argtypes = [ctypes.c_void_p] * argument_count
        self.function.restype = None
        # the same function taking each buffer's `pointer` in place of the buffer: a jit replay calls
        # it with argument lists it prepared once, skipping the pointer lookups of __call__
        self.call_with_pointers = self.function

    def __call__(self, *buffers: Buffer) -> None:
        self.function(*map(_pointer_of, buffers))  # map with attrgetter: no Python frame per launch


def simd_registers(cpu_flags: set[str], machine: str) -> tuple[int, int]:
    """(float32 lanes per vector register, vector registers) of a CPU that -march=native compiles
    for, from its feature flags: AVX-512 16 and 32, AVX 8 and 16, Arm's NEON 4 and 32, else SSE's
    4 and 16. The register tiles of codegen/opts.py keep their accumulators within them."""
    if "avx512f" in cpu_flags:
        return 16, 32
    if "avx" in cpu_flags:
        return 8, 16
    if machine in ("aarch64", "arm64"):
        return 4, 32
    return 4, 16


def cpu_flags() -> set[str]:
    """The feature flags of this machine's first CPU in /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


class CPUDevice:
    def __init__(self, name: str = "CPU"):
        self.name = name  # "CPU:1" is a second instance on the same host (a shard's device, multi.py)
        self.allocator = HostAllocator()
        self._compilers: dict[str, Compiler] = {}
        remove_orphaned_work_files()

    @functools.cached_property
    def simd(self) -> tuple[int, int]:
        """(float32 lanes per vector register, vector registers): see simd_registers."""
        return simd_registers(cpu_flags(), platform.machine())

    @functools.cached_property
    def byte_dot_lanes(self) -> int:
        """int32 lanes of one uint8-by-int8 dot-product instruction: 16 with AVX-512 VNNI, else 0."""
        return 16 if "avx512_vnni" in cpu_flags() and self.simd[0] == 16 else 0

    @functools.cached_property
    def threads(self) -> int:
        """How many threads OpenMP runs a kernel's parallel loop on: OMP_NUM_THREADS's first count,
        else every core this process may use (OpenMP reads both when the first kernel loads)."""
        return openmp_threads_setting() or usable_cores()

    @property
    def compiler(self) -> Compiler:
        requested = knobs.cc
        if requested not in self._compilers:
            self._compilers[requested] = Compiler(requested)
        return self._compilers[requested]

    def alloc(self, dtype: DType, size: int) -> Buffer:
        return Buffer(self.name, dtype, size, self.allocator)

    def wrap(self, dtype: DType, array: np.ndarray) -> Buffer:
        """A buffer over host memory that exists already (a memory-mapped file), without copying."""
        return Buffer.over(self.name, dtype, array)

    def _cache_key(self, source: str) -> str:
        compiler = self.compiler
        return cache_key("CPU", platform.machine(), compiler.path, compiler.version, compiler.native_target,
                         tuple(compiler.flags()), source)

    def compile_cached(self, source: str) -> bytes:
        binary = self.cached(source)
        return self.recompile(source) if binary is None else binary

    def cached(self, source: str) -> bytes | None:
        """The binary the disk cache holds for source, or None."""
        binary = cache_get("compile_cpu", self._cache_key(source))
        if binary is not None:
            stats.cache_hits += 1
        return binary

    def compile_together(self, kernels: list[tuple[str, str]]) -> list[bytes]:
        """Compiles several kernels, given as (name, source), in one compiler run, and caches each.
        A run costs about 45 ms besides its kernels (compiler start, assembler, link: a small
        kernel's compile is half that); renderer/c.py guards its helpers, so sources concatenate
        into one file. Two kernels of a run may share a name: each is renamed for the run, and its
        binary is the run's library with the name its kernel has there (`load` reads both)."""
        if len(kernels) == 1:
            return [self.recompile(kernels[0][1])]
        symbols = [f"{name}_{index}" for index, (name, _) in enumerate(kernels)]
        unit = "\n".join(f"#define {name} {symbol}\n{source}\n#undef {name}\n"
                         for (name, source), symbol in zip(kernels, symbols))
        library = self.compiler.compile(unit)
        binaries = []
        for (_, source), symbol in zip(kernels, symbols):
            binary = NAMED_LIBRARY + symbol.encode() + b"\0" + library
            stats.compiles += 1
            cache_put("compile_cpu", self._cache_key(source), binary)
            binaries.append(binary)
        return binaries

    def recompile(self, source: str) -> bytes:
        """Compiles source afresh and replaces its cache entry: the engine calls this when a cached
        binary does not load (an entry whose checksum holds but whose library is broken)."""
        binary = self.compiler.compile(source)
        stats.compiles += 1
        cache_put("compile_cpu", self._cache_key(source), binary)
        return binary

    def load(self, name: str, binary: bytes, argument_count: int) -> CPUProgram:
        if binary.startswith(NAMED_LIBRARY):  # compiled with others: the kernel's name in their library
            symbol, _, binary = binary[len(NAMED_LIBRARY):].partition(b"\0")
            name = symbol.decode()
        return CPUProgram(name, binary, argument_count)
