"""Test helper: compiles an exported C file with the strict flags the export promises, links it with
a small C program that reads the inputs from a binary file, runs the forward and writes the
outputs, and returns them as numpy arrays (with the seconds per forward, measured in C)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np

STRICT_FLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror"]


def compiler() -> str:
    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if found is None:
        raise RuntimeError("no C compiler (cc, gcc, clang) on PATH")
    return found


def compile_strictly(source: str | Path, output: str | Path, extra: tuple[str, ...] = ()) -> None:
    """cc -std=c99 -O2 -Wall -Wextra -Werror -c source; a warning fails with the compiler's message."""
    command = [compiler(), *STRICT_FLAGS, *extra, "-c", str(source), "-o", str(output)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stderr}"


def harness_source(result, name: str, weights_file: bool) -> str:
    """A C program: harness INPUTS.bin OUTPUTS.bin [REPEATS [WEIGHTS.bin]] (the inputs' bytes one
    after another; the outputs' likewise); prints the seconds per forward (clock(), one thread)."""
    upper = name.upper()
    arguments = result.input_arguments + result.output_arguments
    call = f"{name}_forward({', '.join(variable for variable, _, _ in arguments)})"
    null_call = f"{name}_forward({', '.join('NULL' for _ in arguments)})"
    lines = ["#include <stdio.h>", "#include <stdlib.h>", "#include <stdbool.h>", "#include <time.h>",
             f'#include "{Path(result.header_path).name}"', ""]
    for variable, ctype, _ in arguments:
        lines.append(f"static {ctype} {variable}[{upper}_{variable.upper()}_ELEMENTS];")
    lines += ["", "int main(int argc, char **argv) {",
              "  if (argc < 3) { fprintf(stderr, \"usage: harness INPUTS OUTPUTS [REPEATS [WEIGHTS]]\\n\"); return 2; }",
              "  FILE *file = fopen(argv[1], \"rb\");",
              "  if (file == NULL) return 2;"]
    for variable, _, _ in result.input_arguments:
        lines.append(f"  if (fread({variable}, 1, sizeof {variable}, file) != sizeof {variable}) return 2;")
    lines += ["  fclose(file);",
              "  int repeats = argc > 3 ? atoi(argv[3]) : 1;"]
    if weights_file:
        lines += ["  if (argc < 5) return 2;",
                  "  file = fopen(argv[4], \"rb\");",
                  "  if (file == NULL) return 2;",
                  f"  if ({call} != 2) {{ fprintf(stderr, \"forward without weights did not return 2\\n\"); return 5; }}",
                  f"  void *blob = malloc({upper}_WEIGHT_BYTES + 1);",
                  f"  size_t size = fread(blob, 1, {upper}_WEIGHT_BYTES + 1, file);",
                  "  fclose(file);",
                  f"  if ({name}_load_weights(blob, size + 1) != 2) {{ fprintf(stderr, \"a wrong size was not refused\\n\"); return 5; }}",
                  f"  int loaded = {name}_load_weights(blob, size);",
                  "  if (loaded != 0) { fprintf(stderr, \"load_weights returned %d\\n\", loaded); return 4; }"]
    lines += [f"  if ({null_call} != 1) {{ fprintf(stderr, \"forward on NULL pointers did not return 1\\n\"); return 5; }}",
              "  clock_t start = clock();",
              "  for (int repeat = 0; repeat < repeats; repeat++) {",
              f"    int status = {call};",
              "    if (status != 0) { fprintf(stderr, \"forward returned %d\\n\", status); return 3; }",
              "  }",
              "  printf(\"%.9f\\n\", (double)(clock() - start) / CLOCKS_PER_SEC / repeats);",
              "  file = fopen(argv[2], \"wb\");",
              "  if (file == NULL) return 2;"]
    for variable, _, _ in result.output_arguments:
        lines.append(f"  if (fwrite({variable}, 1, sizeof {variable}, file) != sizeof {variable}) return 2;")
    lines += ["  fclose(file);", "  return 0;", "}", ""]
    return "\n".join(lines)


def build(result, name: str, directory: Path, weights_file: bool = False, extra: tuple[str, ...] = ()) -> Path:
    """Compiles the export strictly and links it with the harness; returns the program's path."""
    model_object = directory / f"{name}.o"
    compile_strictly(result.source_path, model_object, extra)
    harness = directory / "harness.c"
    harness.write_text(harness_source(result, name, weights_file))
    program = directory / "harness"
    command = [compiler(), *STRICT_FLAGS, *extra, "-I", str(Path(result.header_path).parent), str(harness),
               str(model_object), "-o", str(program), "-lm"]
    built = subprocess.run(command, capture_output=True, text=True)
    assert built.returncode == 0, f"{' '.join(command)} failed:\n{built.stderr}"
    return program


def run(program: Path, result, inputs: list[np.ndarray], directory: Path, repeats: int = 1,
        weights: str | None = None) -> tuple[list[np.ndarray], float]:
    """The outputs of one run of the harness on inputs, and its seconds per forward."""
    input_path, output_path = directory / "inputs.bin", directory / "outputs.bin"
    input_path.write_bytes(b"".join(np.ascontiguousarray(array).tobytes() for array in inputs))
    command = [str(program), str(input_path), str(output_path), str(repeats)] + ([weights] if weights else [])
    completed = subprocess.run(command, capture_output=True, text=True)
    assert completed.returncode == 0, f"{' '.join(command)} exited with {completed.returncode}: {completed.stderr}"
    raw = output_path.read_bytes()
    outputs, offset = [], 0
    for (_, ctype, shape), dtype in zip(result.output_arguments, output_dtypes(result)):
        count = int(np.prod(shape))
        outputs.append(np.frombuffer(raw, dtype=dtype, count=count, offset=offset).reshape(shape))
        offset += count * np.dtype(dtype).itemsize
    assert offset == len(raw)
    return outputs, float(completed.stdout.strip())


C_TYPES = {"float": np.float32, "double": np.float64, "int": np.int32, "long long": np.int64, "bool": np.bool_,
           "unsigned char": np.uint8, "signed char": np.int8, "short": np.int16}


def output_dtypes(result) -> list:
    return [C_TYPES[ctype] for _, ctype, _ in result.output_arguments]
