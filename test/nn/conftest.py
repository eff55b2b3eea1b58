"""Shared setup of the nn tests: a test that takes a `device` argument runs once per device the op
tests run on (test/ops/ops_helpers.py decides which), unless it lists its devices itself."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "ops"))

from ops_helpers import available_devices, device_params  # noqa: E402


def pytest_generate_tests(metafunc):
    listed = any("device" in marker.args[0] for marker in metafunc.definition.iter_markers("parametrize"))
    if "device" in metafunc.fixturenames and not listed:
        metafunc.parametrize("device", device_params(available_devices()))
