"""A jit test that takes `compiled_device` runs once per device with kernels that the op tests run on
(test/ops/ops_helpers.py decides which): NPY has no kernels to capture."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "ops"))

from ops_helpers import available_devices, device_params  # noqa: E402


def pytest_generate_tests(metafunc):
    if "compiled_device" in metafunc.fixturenames:
        metafunc.parametrize("compiled_device", device_params([device for device in available_devices() if device != "NPY"]))
