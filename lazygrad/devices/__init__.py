"""Devices: where buffers live and kernels run. `get_device("CPU")` returns the one instance.

A compiled device has `alloc`, `compile_cached(source) -> binary` and `load(name, binary, n)`
(the CPU also `cached(source)` and `compile_together([(name, source), ...])`: compile_pool.py);
the NPY device instead has `run_graph(outputs)` and interprets the lazy graph with numpy. CUDA's
launches return before their kernels finish; `synchronize(name)` waits for them.
"""
from __future__ import annotations

from lazygrad.knobs import DEVICE_NAMES, knobs

_INSTANCES: dict[str, object] = {}


class DeviceUnavailable(RuntimeError):
    """This machine lacks what the device needs: its Python package, a runtime or driver, or the
    hardware. Its message says what is missing and what to install. Any other error from a device is
    a fault of a device that is present: the tests fail on it rather than skip it."""


def canonical_device(name):
    """'cpu' -> 'CPU'; None -> the default device (DEV); an unknown name says which exist. A tuple
    or list of names (a sharded tensor's devices) becomes a tuple of canonical names."""
    if isinstance(name, (tuple, list)):
        devices = tuple(canonical_device(each) for each in name)
        if not devices or len(set(devices)) != len(devices):
            raise ValueError(f"devices {tuple(name)!r}: name at least one device, each once")
        return devices
    text = (name or knobs.dev).upper()
    base, _, index = text.partition(":")
    if base not in DEVICE_NAMES or (text.count(":") and not index.isdigit()):
        raise ValueError(f"unknown device {name!r}; valid devices are: {', '.join(DEVICE_NAMES)}")
    return text[:-2] if text.endswith(":0") else text


def lead_device(device) -> str:
    """The device whose kind front-end choices follow: the device itself, or the first of a sharded
    tensor's devices."""
    return device[0] if isinstance(device, tuple) else device


def device_kind(device) -> str:
    """'CPU' for 'CPU' and 'CPU:1' (and for a sharded tensor whose first device is one)."""
    return lead_device(device).split(":")[0]


def synchronize(name=None) -> None:
    """Returns once every kernel launched on the device (default: DEV) has finished: what to call
    before reading a clock after GPU work. A CUDA launch returns as soon as the kernel is queued; the
    other devices finish each kernel before its call returns."""
    device = get_device(canonical_device(name))
    if hasattr(device, "synchronize"):  # CUDA's
        device.synchronize()


def get_device(name: str):
    if name not in _INSTANCES:
        base = name.split(":")[0]
        if base == "CPU":
            from lazygrad.devices.cpu import CPUDevice
            _INSTANCES[name] = CPUDevice(name)
        elif base == "NPY":
            from lazygrad.devices.npy import NPYDevice
            _INSTANCES[name] = NPYDevice(name)
        elif base == "OPENCL":
            from lazygrad.devices.opencl import OpenCLDevice
            _INSTANCES[name] = OpenCLDevice(name)
        elif base == "CUDA":
            from lazygrad.devices.cuda import CUDADevice
            _INSTANCES[name] = CUDADevice(name)
        else:
            raise RuntimeError(f"device {name} is not available in this build of lazygrad; "
                               "`python -m lazygrad.devices` lists the devices it can use")
    return _INSTANCES[name]
