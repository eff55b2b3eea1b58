"""Which devices the op tests run on: a device this machine lacks is skipped with its reason; a
device that is present but fails is a failure, never a silent skip (ops_helpers.unavailable_reason)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from lazygrad import Tensor
from lazygrad.devices import DeviceUnavailable, synchronize
from ops_helpers import EXTRA_DEVICES, unavailable_reason


@pytest.mark.parametrize("name", ["CPU", "NPY", *EXTRA_DEVICES])
def test_every_present_device_runs_a_kernel(name):
    reason = unavailable_reason(name)
    if reason is not None:
        pytest.skip(f"{name} is not on this machine: {reason}")
    assert (Tensor([1.0, 2.0], device=name) + 1).numpy().tolist() == [2.0, 3.0]


@pytest.mark.parametrize("name, package", [("OPENCL", "pyopencl"), ("CUDA", "cupy")])
def test_a_missing_package_makes_the_device_unavailable_and_says_what_to_install(monkeypatch, name, package):
    from lazygrad.devices.cuda import CUDADevice
    from lazygrad.devices.opencl import OpenCLDevice
    monkeypatch.setitem(sys.modules, package, None)  # `import package` now raises ImportError
    if package == "pyopencl":
        monkeypatch.delitem(sys.modules, "pyopencl.cltypes", raising=False)
    with pytest.raises(DeviceUnavailable, match=rf"needs {package}.*install it with"):
        (OpenCLDevice if name == "OPENCL" else CUDADevice)(name)


def test_a_present_device_that_fails_is_not_skipped(monkeypatch):
    import ops_helpers

    def broken(name):
        raise RuntimeError(f"{name}: the driver crashed")
    monkeypatch.setattr(ops_helpers, "get_device", broken)
    with pytest.raises(RuntimeError, match="the driver crashed"):
        ops_helpers.unavailable_reason.__wrapped__("OPENCL")


def test_launches_not_waited_for_run_in_order(device):
    """A CUDA launch returns once its kernel is queued: outputs freed and their memory taken again, a
    buffer written in place while launches that read it may still be queued, then read back, against
    numpy; `synchronize` waits for all of them (on the other devices each kernel is done when its call
    returns, and it returns at once)."""
    rng = np.random.default_rng(0)
    start = rng.standard_normal(1 << 16).astype(np.float32)
    x, total = Tensor(start, device=device).realize(), Tensor(np.zeros(1 << 16, np.float32), device=device).realize()
    expected_x, expected_total = start, np.zeros(1 << 16, np.float32)
    for step in range(12):
        x = (x * 0.5 + step).realize()
        total.assign(total + x).realize()
        expected_x = expected_x * np.float32(0.5) + np.float32(step)
        expected_total = expected_total + expected_x
    synchronize(device)
    np.testing.assert_allclose(total.numpy(), expected_total, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.numpy(), expected_x, rtol=1e-5, atol=1e-5)
