"""The ONNX tests' `onnx_cpu` marker (deselected by test/conftest.py unless asked for).

The backend node tests on CPU compile a few thousand kernels when the disk cache is cold (about four
minutes on two cores), so they are deselected unless asked for with `-m onnx_cpu`:

    python -m pytest -q -m onnx_cpu test/onnx_runner -n 2

The NPY variant (no compiler) and the API tests always run.
"""
