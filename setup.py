"""Packaging for lazygrad; extras: test, opencl (PoCL on machines without a GPU), cuda, examples, onnx,
mpi (lazygrad.distributed: mpi4py with MPICH as a wheel, mpiexec included), bench (what the model
benchmark compares with).

The test extra includes the examples' packages, so the checkpoint interop tests and the digits
demo's tests (test/models) always run."""

from setuptools import find_packages, setup

setup(
    name="lazygrad",
    version="0.1.0",
    description="A lazy tensor library that fuses ops into kernels, renders C, compiles and caches them",
    packages=find_packages(exclude=["test", "test.*", "tests", "tests.*"]),
    python_requires=">=3.10",
    install_requires=["numpy", "ml_dtypes"],  # ml_dtypes: numpy's bfloat16
    extras_require={
        # array-api-compat: how scikit-learn finds the namespace of lazygrad arrays (test/ops/test_array_api.py)
        "test": ["pytest", "hypothesis", "pytest-xdist", "safetensors", "scikit-learn", "array-api-compat", "matplotlib",
                 "tqdm"],
        "opencl": ["pyopencl", "pocl-binary-distribution"],
        "cuda": ["cupy-cuda12x"],
        "examples": ["scikit-learn", "matplotlib", "tqdm", "safetensors"],
        "onnx": ["onnx==1.23.2"],
        "mpi": ["mpi4py", "mpich"],
        # extra/bench/bench_models.py's other columns: torch builds the models and exports them to
        # ONNX (its exporter needs onnxscript), ONNX Runtime runs them; bench_zoo.py takes thirteen
        # more architectures from torchvision's definitions rather than writing them again
        "bench": ["torch", "torchvision", "onnxruntime", "onnxscript", "onnx==1.23.2"],
    },
)
