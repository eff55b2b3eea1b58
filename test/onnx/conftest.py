"""Setup for the ONNX tests: the `onnx_cpu` marker.

The backend node tests on CPU compile a few thousand kernels when the disk cache is cold (about four
minutes on two cores), so they are deselected unless asked for with `-m onnx_cpu`:

    python -m pytest -q -m onnx_cpu test/onnx -n 2

The NPY variant (no compiler) and the API tests always run.
"""


def pytest_configure(config):
    config.addinivalue_line("markers", "onnx_cpu: the ONNX backend node tests on CPU (run with -m onnx_cpu)")


def pytest_collection_modifyitems(config, items):
    if "onnx_cpu" in (config.getoption("markexpr", "") or ""):
        return
    deselected = [item for item in items if item.get_closest_marker("onnx_cpu") is not None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.get_closest_marker("onnx_cpu") is None]
