"""`python -m lazygrad.devices`: every device lazygrad can see, and for each one it cannot use, why.

Each line is a device name you can pass as `device=` or `DEV=`, marked `ok` or `--`; an unusable
device says what is missing and what to install. Nothing is compiled or run.
"""
from __future__ import annotations

import sys


def _cpu_lines() -> list[str]:
    from lazygrad.devices.cpu import Compiler
    from lazygrad.knobs import knobs
    try:
        compiler = Compiler(knobs.cc)
    except RuntimeError as error:
        return [f"--  CPU       {error}"]
    return [f"ok  CPU       C compiled by {compiler.path} ({compiler.version}), OpenMP over the cores"]


def _npy_lines() -> list[str]:
    import numpy
    return [f"ok  NPY       numpy {numpy.__version__} runs the graph op by op (the reference device)"]


def _opencl_lines() -> list[str]:
    from lazygrad.devices.opencl import import_pyopencl, list_opencl_devices, no_platform_message
    try:
        cl = import_pyopencl()
    except RuntimeError as error:
        return [f"--  OPENCL    {error}"]
    found = list_opencl_devices()
    if not found:
        return [f"--  OPENCL    {no_platform_message()}"]
    lines = []
    for number, (platform, device) in enumerate(found):
        name = "OPENCL" if number == 0 else f"OPENCL:{number}"
        kind = "GPU" if device.type & cl.device_type.GPU else "CPU" if device.type & cl.device_type.CPU else "other"
        lines.append(f"ok  {name:<9} {device.name.strip()} [{kind}] on {platform.name.strip()} "
                     f"(driver {device.driver_version}, {device.global_mem_size >> 20} MiB)")
    return lines


def _cuda_lines() -> list[str]:
    from lazygrad.devices.cuda import INSTALL_HINT, find_nvcc, import_cupy
    nvcc = find_nvcc()
    compile_note = (f"; nvcc at {nvcc} can still compile CUDA kernels to PTX" if nvcc else "")
    try:
        cupy = import_cupy()
    except RuntimeError:
        return [f"--  CUDA      cupy is not installed: {INSTALL_HINT}{compile_note}"]
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver, or no GPU
        return [f"--  CUDA      no GPU found ({error}){compile_note}"]
    if count == 0:
        return [f"--  CUDA      no GPU found{compile_note}"]
    lines = []
    for number in range(count):
        properties = cupy.cuda.runtime.getDeviceProperties(number)
        name = "CUDA" if number == 0 else f"CUDA:{number}"
        gpu = properties["name"].decode() if isinstance(properties["name"], bytes) else properties["name"]
        lines.append(f"ok  {name:<9} {gpu} (compute {properties['major']}.{properties['minor']}, "
                     f"{properties['totalGlobalMem'] >> 20} MiB)")
    return lines


def describe_devices() -> str:
    lines = []
    for section in (_cpu_lines, _npy_lines, _opencl_lines, _cuda_lines):
        lines.extend(section())
    return "\n".join(lines)


def main() -> int:
    print(describe_devices())
    return 0


if __name__ == "__main__":
    sys.exit(main())
