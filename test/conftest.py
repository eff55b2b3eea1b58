"""Shared test setup: pytest puts this directory on sys.path, so test modules can import the
helpers beside it (gradcheck.py, recursion_limit.py).

Opt-in markers: tests marked with one of OPT_IN_MARKERS are deselected unless the marker is asked
for with `-m` (.ci/run asks for each): `onnx_cpu`, the ONNX backend node tests on CPU (test/onnx_runner),
`fuzz`, the long random-graph run (test/ops), and `opencl_ops`, the OPENCL cases of the op, nn and jit
tests (PoCL's builds made them three quarters of a cold run).

Fixture `direct_convolutions`: 3x3 convolutions take the direct product even where inference on CPU
would run them as Winograd's (nn/spatial.py), for tests that read the direct product's kernel.
"""
import pytest

OPT_IN_MARKERS = {
    "onnx_cpu": "the ONNX backend node tests on CPU (run with -m onnx_cpu)",
    "fuzz": "the long random-graph run (run with -m fuzz)",
    "opencl_ops": "the op, nn and jit tests on OPENCL (run with -m opencl_ops; see test/ops/ops_helpers.py)",
}


def pytest_configure(config):
    for name, meaning in OPT_IN_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")


def pytest_collection_modifyitems(config, items):
    asked = config.getoption("markexpr", "") or ""
    kept, deselected = [], []
    for item in items:
        # an item with several opt-in markers (the fuzz run's OPENCL case) runs when any is asked for
        markers = [name for name in OPT_IN_MARKERS if item.get_closest_marker(name)]
        (deselected if markers and not any(name in asked for name in markers) else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture
def direct_convolutions(monkeypatch):
    import lazygrad.nn.spatial as spatial
    monkeypatch.setattr(spatial, "WINOGRAD_MIN_CHANNELS", 1 << 62)
