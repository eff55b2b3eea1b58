"""Writes an exported function as C: the last step of lazygrad.export (capture.py -> arena.py ->
here). Produces `<name>.c`, `<name>.h` and, with weights="file", `<name>.bin`.

The .c file holds, in order: math.h and the helpers its kernels call, the constants (`static const`
arrays, or pointers into a blob that `<name>_load_weights` checks and keeps), the arena of the
intermediates, one `static` function per distinct kernel (rendered again by the C dialect in its
standalone mode: one thread, ISO C99, the CPU device's loops and opts, so its arithmetic), and the
entry point `int <name>_forward(inputs..., outputs...)`, which passes the caller's pointers to the
kernels as they are and returns 0, or nonzero for a NULL pointer (or weights not loaded).
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

import numpy as np

from lazygrad.codegen.linearize import linearize
from lazygrad.devices import get_device
from lazygrad.dtype import DType, dtypes
from lazygrad.export.arena import ALIGNMENT, aligned, lifetimes_of, plan_arena
from lazygrad.export.capture import Capture, ExportError
from lazygrad.knobs import knobs
from lazygrad.renderer.c import CRenderer

VALUES_PER_LINE = 8
# Text that ISO C99 with math.h does not have; a standalone kernel must contain none of it.
NOT_C99 = ("__builtin", "#pragma", "__attribute__", "__typeof__", "_Float16", "({")


@dataclass
class ExportResult:
    """What to_c wrote, and the sizes it planned."""
    source_path: str
    header_path: str
    weights_path: str | None     # the blob, with weights="file"
    arena_bytes: int             # the static arena of the intermediates
    weight_bytes: int            # the constants (the blob's size with weights="file")
    intermediate_bytes: int      # the intermediates' bytes before sharing (what the arena saves)
    launches: int                # kernel calls per forward
    functions: int               # distinct kernels among them
    folded: int                  # launches computed at export time (capture.py)
    input_arguments: list[tuple[str, str, tuple[int, ...]]]   # (C name, C type, shape)
    output_arguments: list[tuple[str, str, tuple[int, ...]]]

    def summary(self) -> str:
        return (f"exported {self.launches} kernel calls ({self.functions} functions, {self.folded} launches "
                f"computed at export time) to {self.source_path}: weights {self.weight_bytes} bytes, arena "
                f"{self.arena_bytes} bytes (intermediates {self.intermediate_bytes} bytes unshared)")


def c_type(dtype: DType) -> str:
    return dtype.c_name


def c_literals(values: np.ndarray, dtype: DType) -> list[str]:
    """Each value as a C literal that reads back exactly: 9 significant digits for float32, 17 for
    float64; infinities and NaN by math.h's macros."""
    if dtype.is_float:
        digits, suffix = (9, "f") if dtype == dtypes.float32 else (17, "")
        literals = []
        for value in values.astype(np.float64).tolist():
            if math.isnan(value):
                literals.append("NAN")
            elif math.isinf(value):
                literals.append("INFINITY" if value > 0 else "-INFINITY")
            else:
                text = format(value, f".{digits}g")
                literals.append((text if "." in text or "e" in text else text + ".0") + suffix)
        return literals
    if dtype.is_bool:
        return ["1" if value else "0" for value in values.tolist()]
    literals = []
    smallest = int(np.iinfo(dtype.np).min)
    for value in values.tolist():
        text = f"({value + 1}-1)" if value == smallest and dtype.itemsize >= 4 else str(value)
        literals.append(text + ("LL" if dtype == dtypes.int64 and value != smallest else ""))
    return literals


def render_kernels(capture: Capture, name: str) -> tuple[list[str], dict, list[str]]:
    """(what the kernels need before them, kernel -> the name the forward calls it by, the
    functions), each distinct kernel once, named `<name>_kernel<N>_<kernel name>`.

    The forward calls each kernel through a `const volatile` pointer, `<name>_call<N>`, which the
    compiler must read at run time: compiled inlined into the forward, or specialized for its one
    call site, gcc 12 ran the digits model's second convolution 4-6x slower than the same function
    compiled on its own (as the lazygrad device compiles it), however its pointers were passed."""
    lanes, registers = get_device("CPU").simd
    renderer = CRenderer(lanes, registers, standalone=True)
    prelude, names, functions = [], {}, []
    for step in capture.steps:
        if step.kernel in names:
            continue
        number = len(names)
        program = linearize(step.kernel, renderer, optimize=not knobs.noopt)
        program.name = f"{name}_kernel{number}_{program.name}"
        function = renderer.render_function(program)
        for token in NOT_C99:
            if token in function:
                raise ExportError(f"export: kernel {step.kernel.name} was rendered with {token!r}, which is not ISO "
                                  "C99; this is a bug in the C renderer's standalone mode (renderer/c.py)")
        for text in renderer.prelude(function):
            if text not in prelude:
                prelude.append(text)
        parameter_types = ", ".join(f"{'' if is_output else 'const '}{renderer.type_name(dtype)} *"
                                    for _, dtype, is_output in program.params)
        names[step.kernel] = f"{name}_call{number}"
        functions.append(f"{function}\nstatic void (*const volatile {name}_call{number})({parameter_types}) = "
                         f"{program.name};")
    return prelude, names, functions


def _argument_names(count: int, word: str) -> list[str]:
    return [word] if count == 1 else [f"{word}{number}" for number in range(count)]


def _constant_block(variable: str, dtype: DType, values: np.ndarray, aligned_macro: str) -> str:
    literals = c_literals(values, dtype)
    lines = [f"static const {c_type(dtype)} {variable}[{len(literals)}] {aligned_macro} = {{"]
    for start in range(0, len(literals), VALUES_PER_LINE):
        lines.append("  " + ", ".join(literals[start:start + VALUES_PER_LINE]) + ",")
    lines.append("};")
    return "\n".join(lines)


def write_c(capture: Capture, path: str, name: str, weights: str = "inline",
            described: str = "a function") -> ExportResult:
    """Writes path (the .c file), the header beside it and, for weights="file", the blob."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"export: name {name!r} is not a C identifier (letters, digits and _, not starting with a digit)")
    if weights not in ("inline", "file"):
        raise ValueError(f"export: weights must be 'inline' or 'file', got {weights!r}")
    upper = name.upper()
    stem = os.path.splitext(path)[0]
    header_path, weights_path = stem + ".h", (stem + ".bin" if weights == "file" else None)
    prelude, function_names, functions = render_kernels(capture, name)

    steps_buffers = [step.buffers for step in capture.steps]
    offsets, arena_bytes = plan_arena(lifetimes_of(steps_buffers, capture.intermediates))
    intermediate_bytes = sum(buffer.nbytes for buffer in capture.intermediates)

    input_names = _argument_names(len(capture.inputs), "input")
    output_names = _argument_names(len(capture.outputs), "output")
    variables = {id(buffer): variable for buffer, variable in zip(capture.inputs, input_names)}
    variables.update({id(buffer): variable for buffer, variable in zip(capture.outputs, output_names)})
    for number, buffer in enumerate(capture.constants):
        variables[id(buffer)] = f"{name}_weight{number}"
    for number, buffer in enumerate(capture.intermediates):
        variables[id(buffer)] = f"intermediate{number}"

    # constants: arrays in the file, or places in the blob
    weight_offsets, blob_size = [], 0
    for buffer in capture.constants:
        weight_offsets.append(blob_size)
        blob_size = aligned(blob_size + buffer.nbytes) if weights == "file" else blob_size + buffer.nbytes
    if weights == "file":
        blob = bytearray(blob_size)
        for buffer, offset in zip(capture.constants, weight_offsets):
            data = capture.constant_values[id(buffer)].tobytes()
            blob[offset:offset + len(data)] = data
        with open(weights_path, "wb") as file:
            file.write(bytes(blob))

    input_arguments = [(variable, c_type(buffer.dtype), shape)
                       for variable, buffer, shape in zip(input_names, capture.inputs, capture.input_shapes)]
    output_arguments = [(variable, c_type(buffer.dtype), shape)
                        for variable, buffer, shape in zip(output_names, capture.outputs, capture.output_shapes)]
    parameters = [f"const {ctype} *{variable}" for variable, ctype, _ in input_arguments]
    parameters += [f"{ctype} *{variable}" for variable, ctype, _ in output_arguments]
    signature = f"int {name}_forward({', '.join(parameters)})"
    load_signature = f"int {name}_load_weights(const void *blob, size_t size)"

    header = _header(name, upper, arena_bytes, blob_size, input_arguments, output_arguments, signature,
                     load_signature if weights == "file" else None)
    with open(header_path, "w") as file:
        file.write(header)

    aligned_macro = f"{upper}_ALIGNED"
    lines = [f"/* {os.path.basename(path)}: {described}, exported by lazygrad.export.",
             f"   {signature}: {len(capture.steps)} kernel calls on one thread, {arena_bytes} bytes of arena,",
             f"   {blob_size} bytes of weights{' in ' + os.path.basename(weights_path) if weights_path else ''}. "
             "Needs a C99 compiler and libm (-lm); not reentrant (one static arena). */",
             *[text for text in prelude if text.startswith("#include")],
             "#include <stddef.h>",
             *(["#include <stdint.h>"] if weights == "file" else []),
             f'#include "{os.path.basename(header_path)}"',
             "",
             *[text for text in prelude if not text.startswith("#include")],
             "",
             "#if defined(__GNUC__)",
             f"#define {aligned_macro} __attribute__((aligned({ALIGNMENT})))",
             "#else",
             f"#define {aligned_macro}",
             "#endif",
             ""]
    for number, buffer in enumerate(capture.constants):
        variable = variables[id(buffer)]
        if weights == "inline":
            lines.append(_constant_block(variable, buffer.dtype, capture.constant_values[id(buffer)], aligned_macro))
        else:
            lines.append(f"static const {c_type(buffer.dtype)} *{variable};  "
                         f"/* {buffer.dtype.name}[{buffer.size}] at byte {weight_offsets[number]} of the blob */")
    if weights == "file":
        lines.append(f"static int {name}_weights_loaded;")
    if arena_bytes:
        lines.append(f"static double {name}_arena[{arena_bytes // 8}] {aligned_macro};  /* {arena_bytes} bytes */")
    lines.append("")
    lines += [function + "\n" for function in functions]

    if weights == "file":
        lines += _load_weights_function(capture, name, load_signature, variables, weight_offsets)
    lines += _forward_function(capture, name, signature, input_names + output_names, variables, offsets,
                               function_names, weights == "file")
    with open(path, "w") as file:
        file.write("\n".join(lines))
    return ExportResult(path, header_path, weights_path, arena_bytes, blob_size, intermediate_bytes,
                        len(capture.steps), len(functions), capture.folded, input_arguments, output_arguments)


def _load_weights_function(capture: Capture, name: str, signature: str, variables: dict[int, str],
                           weight_offsets: list[int]) -> list[str]:
    """`<name>_load_weights`: checks the blob (not NULL, the size the header defines, aligned for its
    widest element) and points each constant into it."""
    widest = max((buffer.dtype.itemsize for buffer in capture.constants), default=1)
    lines = [f"{signature} {{"]
    if capture.constants:
        lines.append("  const unsigned char *bytes = (const unsigned char *)blob;")
    lines += ["  if (blob == NULL) return 1;",
              f"  if (size != {name.upper()}_WEIGHT_BYTES) return 2;",
              f"  if ((uintptr_t)blob % {widest} != 0) return 3;"]
    for buffer, offset in zip(capture.constants, weight_offsets):
        lines.append(f"  {variables[id(buffer)]} = (const {c_type(buffer.dtype)} *)(bytes + {offset});")
    lines += [f"  {name}_weights_loaded = 1;", "  return 0;", "}", ""]
    return lines


def _forward_function(capture: Capture, name: str, signature: str, pointers: list[str], variables: dict[int, str],
                      offsets: list[int], function_names: dict, weights_file: bool) -> list[str]:
    """`<name>_forward`: checks its pointers, places the intermediates in the arena and calls the
    kernels in order on the caller's pointers, the constants and the intermediates."""
    lines = [f"{signature} {{",
             f"  if ({' || '.join(f'{variable} == NULL' for variable in pointers)}) return 1;"]
    if weights_file:
        lines.append(f"  if (!{name}_weights_loaded) return 2;")
    if capture.intermediates:
        lines.append(f"  unsigned char *arena = (unsigned char *){name}_arena;")
    for buffer, offset in zip(capture.intermediates, offsets):
        ctype = c_type(buffer.dtype)
        lines.append(f"  {ctype} *{variables[id(buffer)]} = ({ctype} *)(arena + {offset});  "
                     f"/* {buffer.dtype.name}[{buffer.size}] */")
    for step in capture.steps:
        lines.append(f"  {function_names[step.kernel]}({', '.join(variables[id(buffer)] for buffer in step.buffers)});")
    lines += ["  return 0;", "}", ""]
    return lines


def _header(name: str, upper: str, arena_bytes: int, weight_bytes: int, input_arguments, output_arguments,
            signature: str, load_signature: str | None) -> str:
    guard = f"{upper}_H"
    weight_meaning = (f"the size of the blob {name}_load_weights takes" if load_signature
                      else "the constants in the .c file")
    lines = [f"/* {name}.h: the interface of {name}.c, exported by lazygrad.export. */",
             f"#ifndef {guard}", f"#define {guard}", "", "#include <stdbool.h>", "#include <stddef.h>", "",
             "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
             f"#define {upper}_ARENA_BYTES {arena_bytes}  /* the static arena of the intermediates */",
             f"#define {upper}_WEIGHT_BYTES {weight_bytes}  /* {weight_meaning} */"]
    for variable, ctype, shape in input_arguments + output_arguments:
        lines.append(f"#define {upper}_{variable.upper()}_ELEMENTS {math.prod(shape)}  "
                     f"/* {ctype}, shape {tuple(shape)} */")
    lines.append("")
    if load_signature:
        lines += ["/* Keeps pointers into blob (the .bin file's bytes, which must outlive every forward): returns 0,",
                  f"   1 when blob is NULL, 2 when size is not {upper}_WEIGHT_BYTES, 3 when blob is misaligned. */",
                  f"{load_signature};", ""]
    lines += ["/* Computes the outputs from the inputs (arrays of the sizes above): returns 0, 1 when a pointer is NULL"
              + (", 2 when the weights are not loaded. */" if load_signature else ". */"),
              f"{signature};", "",
              "#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {guard} */", ""]
    return "\n".join(lines)
