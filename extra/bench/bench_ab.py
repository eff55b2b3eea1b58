"""A/B of one rule on a whole model: an ONNX model jitted twice in one process, once with a function
of lazygrad replaced (side A, the rule switched off) and once as it is (side B), then called in
turn, so the machine's drift falls on both sides alike.

    python extra/bench/bench_ab.py model.onnx lazygrad.codegen.opts:wide_vector_panel
    python extra/bench/bench_ab.py model.onnx lazygrad.nn.spatial:_in_vectors --replacement builtins:bool
    python extra/bench/bench_ab.py model.onnx lazygrad.onnx.ops_indexing:_known_slice --rounds 21

Why: on a shared machine whole runs drift by 1.5x, and a model's ratio to ONNX Runtime between two
runs of the same code moved by up to 0.3 (bench_zoo.py), more than most single changes make. Two
processes run one after the other cannot separate a 5% change from that; two captures of the same
model in one process, called alternately, can (a replacement that changes nothing measured
0.98-1.02).

Side A, captured first, can hold an edge of its own: the function replaced by itself on ResNet-50
measured B/A 1.015-1.017 in three runs of 21 rounds, whichever side was captured or called first,
and once 1.10 on ViT-B/16 while the machine was busy. Below a few percent, measure the change both
ways (the rule switched off on side A, then the rule switched on by the replacement with the
module's default off) and take the geometric mean.

The replacement (side A) is `--replacement module:function`, or by default a function returning
None, which switches off rules written as "an opt, or None". The function is replaced in its module,
so callers that look it up there at call time see it. Between the two captures the loaded programs
and the remembered schedules are cleared, and the disk cache is not used (DISABLE_CACHE=1), so each
side compiles its own kernels. Printed: the kernels whose opts differ between the sides (none means
the rule does not reach this model), the largest difference of the outputs, and the median time of
a jitted call per side over --rounds rounds. Models from bench_zoo.py are cached under its
--onnx-dir.
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from pathlib import Path

os.environ["DISABLE_CACHE"] = "1"  # read once, when lazygrad loads
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

import numpy as np  # noqa: E402

import lazygrad.realize as realize  # noqa: E402
import lazygrad.schedule.fuse as fuse  # noqa: E402
from lazygrad import Tensor, no_grad  # noqa: E402
from lazygrad.jit import jit  # noqa: E402
from lazygrad.onnx import OnnxModel  # noqa: E402


def resolve(name: str):
    """(module, attribute name) of "package.module:attribute"."""
    module_name, _, attribute = name.partition(":")
    if not attribute:
        raise SystemExit(f"bench_ab: {name!r} is not module:function (for example lazygrad.codegen.opts:panel_opt)")
    module = importlib.import_module(module_name)
    if not hasattr(module, attribute):
        raise SystemExit(f"bench_ab: {module_name} has no {attribute!r}")
    return module, attribute


def model_call(path: str):
    """A function running the model on one seeded random input (its first graph input), and that input."""
    model = OnnxModel(path)
    name, shape = _first_input(path)
    x = Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32)).realize()

    def forward(x: Tensor) -> Tensor:
        outputs = model(**{name: x})
        first = next(iter(outputs.values())) if isinstance(outputs, dict) else outputs
        return first.realize()
    return forward, x


def _first_input(path: str) -> tuple[str, list[int]]:
    import onnx
    graph = onnx.load(path).graph
    initializers = {tensor.name for tensor in graph.initializer}
    value = next(value for value in graph.input if value.name not in initializers)
    return value.name, [dim.dim_value or 1 for dim in value.type.tensor_type.shape.dim]


def capture(forward, x: Tensor):
    """The jitted forward, captured and replayed once; its output and the opts of its kernels."""
    realize._PROGRAMS.clear()
    fuse._SCHEDULES.clear()
    jitted = jit(forward)
    with no_grad():
        for _ in range(3):
            output = jitted(x)
    return jitted, output.numpy().copy(), {(program.name, program.opts) for program in realize._PROGRAMS.values()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="an .onnx file")
    parser.add_argument("function", help="module:function to replace on side A")
    parser.add_argument("--replacement", help="module:function to put in its place (default: one returning None)")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    module, attribute = resolve(args.function)
    original = getattr(module, attribute)
    replacement = (lambda *_, **__: None) if args.replacement is None else getattr(*resolve(args.replacement))
    forward, x = model_call(args.model)
    setattr(module, attribute, replacement)
    try:
        side_a = capture(forward, x)
    finally:
        setattr(module, attribute, original)
    side_b = capture(forward, x)
    changed = sorted(f"{name} {[str(opt) for opt in opts]}" for name, opts in side_b[2] - side_a[2])
    print(f"kernels with other opts on side B: {len(changed)}")
    for line in changed[:12]:
        print("  " + line)
    print(f"largest output difference {float(np.abs(side_a[1] - side_b[1]).max()):.3g} "
          f"(largest output {float(np.abs(side_b[1]).max()):.3g})")
    times = {"A": [], "B": []}
    with no_grad():
        for _ in range(args.rounds):
            for side, (jitted, _, _) in (("A", side_a), ("B", side_b)):
                start = time.perf_counter()
                jitted(x)
                times[side].append(time.perf_counter() - start)
    a, b = statistics.median(times["A"]), statistics.median(times["B"])
    print(f"{Path(args.model).name}: A (without {attribute}) {a * 1e3:.2f} ms, B {b * 1e3:.2f} ms, B/A {b / a:.3f} "
          f"(medians of {args.rounds} alternated calls, {os.environ.get('OMP_NUM_THREADS', 'all')} threads)")


if __name__ == "__main__":
    main()
