"""Shared setup of the op tests: which devices they run on.

Every test that takes a `device` argument runs once per available device; a test that takes
`compiled_device` runs once per device other than the numpy reference NPY (the random-graph tests
compare those with NPY).

The `fuzz` marker holds the long random-graph run; test/conftest.py deselects it unless asked for
with `-m fuzz` (.ci/run does).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # so the test files can import ops_helpers

from ops_helpers import EXTRA_DEVICES, OPT_IN_DEVICE_MARKERS, available_devices, device_params, unavailable_reason  # noqa: E402


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", device_params(available_devices()))
    if "compiled_device" in metafunc.fixturenames:
        metafunc.parametrize("compiled_device", device_params([d for d in available_devices() if d != "NPY"]))


def pytest_report_header(config):
    lines = [f"op tests run on: {', '.join(available_devices())}"]
    asked = config.getoption("markexpr", "") or ""
    for name, marker in OPT_IN_DEVICE_MARKERS.items():
        if name in available_devices() and marker not in asked:
            lines.append(f"op, nn and jit tests on {name} are left out: run them with -m {marker} (.ci/run does)")
    for name in EXTRA_DEVICES:
        reason = unavailable_reason(name)
        if reason is not None:
            lines.append(f"op tests skip {name}: {reason}")
    return lines

