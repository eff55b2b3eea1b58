"""lazygrad.export: a function of Tensors as one C file that needs only a C99 compiler and libm.

    from lazygrad.export import to_c
    model.eval()
    to_c(lambda x: model(x), np.zeros((1, 1, 8, 8), np.float32), "out/model.c", name="model")
    # writes out/model.c and out/model.h:  int model_forward(const float *input, float *output);

Where it sits: after the whole data path. The function runs as the jit captures it (capture.py:
every kernel launch with its buffers), the intermediates are planned into one static arena
(arena.py), and each kernel is rendered again by the C dialect without OpenMP, with the constants
and the entry point around them (c_source.py). `python -m lazygrad.export` (__main__.py) exports the
digits demo's checkpoint or an ONNX model from the command line.
"""
from __future__ import annotations

from lazygrad.export.arena import Lifetime, plan_arena
from lazygrad.export.c_source import ExportResult, write_c
from lazygrad.export.capture import ExportError, capture

__all__ = ["to_c", "ExportError", "ExportResult", "Lifetime", "plan_arena"]


def to_c(function, example_inputs, path: str, name: str = "model", weights: str = "inline",
         quiet: bool = False) -> ExportResult:
    """Writes `path` (C source) and the header beside it (same name, `.h`) computing
    `function(*example_inputs)` for inputs of the example inputs' shapes and dtypes.

    example_inputs: a Tensor or numpy array, or a list or tuple of them (CPU device). The entry point
    is `int <name>_forward(const float *input, float *output)` for one input and one output, with
    `input0, input1, ...` and `output0, ...` when there are more, in order; it returns 0 on success.
    weights="inline" writes the constants as `static const` arrays; weights="file" writes them to
    `<stem>.bin` and adds `int <name>_load_weights(const void *blob, size_t size)`. The header
    defines `<NAME>_ARENA_BYTES`, `<NAME>_WEIGHT_BYTES` and each argument's element count; unless
    quiet, a line with the sizes is printed. Raises ExportError for what a C file cannot hold
    (random numbers, state written in place, another device, no kernels at all)."""
    captured = capture(function, example_inputs)
    described = getattr(function, "__qualname__", type(function).__name__)
    result = write_c(captured, str(path), name, weights, described)
    if not quiet:
        print(result.summary())
    return result
