"""The digits demo's CNN exported to C (lazygrad.export) against the same model jitted in lazygrad.

    python extra/bench/bench_export.py                 # batch 1
    python extra/bench/bench_export.py --batch 32

Exports the network of extra/train_digits.py (its checkpoint when extra/train_digits.safetensors
exists, else fresh weights: the time does not depend on them), prints the arena and weight bytes,
compiles the file with `cc -std=c99 -O2` and with `-O2 -march=native` beside the C harness of the
export tests, and prints microseconds per forward: the harness's (clock(), one thread, averaged
over many calls, best of the repeats) and the jitted lazygrad call's (median and minimum of the
repeats). Checks first that the C outputs match lazygrad's (atol 1e-5).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "extra"))
sys.path.insert(0, str(ROOT / "test" / "export"))

import c_harness  # noqa: E402
import train_digits  # noqa: E402
import lazygrad  # noqa: E402
from lazygrad import Tensor  # noqa: E402
from lazygrad.export import to_c  # noqa: E402
from lazygrad.jit import jit  # noqa: E402
from lazygrad.nn.state import load_state_dict, safe_load  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    lazygrad.manual_seed(0)
    model = train_digits.build_model(8, device="CPU")
    checkpoint = ROOT / "extra" / "train_digits.safetensors"
    if checkpoint.is_file():
        load_state_dict(model, safe_load(checkpoint, "CPU"))
    model.eval()
    images = np.random.default_rng(0).standard_normal((args.batch, 1, 8, 8)).astype(np.float32)
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        result = to_c(model, images, str(directory / "model.c"))
        expected = model(Tensor(images)).numpy()
        calls = max(100, 20000 // args.batch)
        for label, flags in (("cc -O2", ()), ("cc -O2 -march=native", ("-march=native",))):
            program = c_harness.build(result, "model", directory, extra=flags)
            outputs, _ = c_harness.run(program, result, [images], directory)
            np.testing.assert_allclose(outputs[0], expected, atol=1e-5, rtol=0)
            seconds = min(c_harness.run(program, result, [images], directory, repeats=calls)[1]
                          for _ in range(args.repeats))
            print(f"C, {label:<22} {seconds * 1e6:9.1f} us per forward (best of {args.repeats} x {calls} calls)")

    forward = jit(lambda x: model(x))
    batch = Tensor(images)
    for _ in range(3):
        forward(batch)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(calls // 10):
            forward(batch)
        times.append((time.perf_counter() - start) / (calls // 10))
    print(f"lazygrad, jitted            {statistics.median(times) * 1e6:9.1f} us per call (median; minimum "
          f"{min(times) * 1e6:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
