"""The OPENCL device's check that its compiler can build for this processor (devices/opencl.py):
PoCL on an LLVM older than the CPU refuses every kernel, and the device then says it is unavailable,
with the reason, instead of failing each test; other build failures are left to the kernels' builds.
Runs with pyopencl's error types and a stand-in program, so it needs no working OpenCL runtime."""
import pytest

cl = pytest.importorskip("pyopencl")

from lazygrad.devices import DeviceUnavailable  # noqa: E402
from lazygrad.devices.opencl import _check_compiler_knows_this_cpu  # noqa: E402


def program_failing_with(message: str):
    class Program:
        def __init__(self, context, source):
            self.source = source

        def build(self):
            raise cl.RuntimeError(message)
    return Program


def test_a_compiler_that_does_not_know_the_cpu_makes_the_device_unavailable(monkeypatch):
    monkeypatch.setattr(cl, "Program", program_failing_with("clBuildProgram: error: unknown target CPU 'generic'"))
    with pytest.raises(DeviceUnavailable, match=r"OPENCL \(a CPU\): its OpenCL compiler cannot build for this"):
        _check_compiler_knows_this_cpu(None, "OPENCL (a CPU)")


def test_other_build_failures_are_left_to_the_kernels(monkeypatch):
    monkeypatch.setattr(cl, "Program", program_failing_with("clBuildProgram failed: out of host memory"))
    _check_compiler_knows_this_cpu(None, "OPENCL (a CPU)")
