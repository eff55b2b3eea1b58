"""Rendered programs come back from the disk cache by their kernel: a new process renders nothing
it rendered before, and a damaged or foreign entry is rendered anew."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lazygrad import Context, Tensor
from lazygrad import program_cache, realize
from lazygrad.diskcache import cache_put
from lazygrad.schedule.fuse import create_schedule

REPO = Path(__file__).resolve().parents[2]

# Kernels no other test builds (the odd constants keep them unique), realized one after another so
# that the later ones are keyed after the renderer cached what it derives on first use; prints how
# many were rendered.
PROGRAM = """
import numpy as np
from lazygrad import Tensor, realize
rendered = []
original = realize.kernel_source
realize.kernel_source = lambda *args, **kwargs: rendered.append(1) or original(*args, **kwargs)
x = np.arange(24, dtype=np.float32).reshape(4, 6)
value = ((Tensor(x) * 0.7071067 + 0.25).relu().sum(1) * 1.4142135).numpy()
np.testing.assert_allclose(value, np.maximum(x * np.float32(0.7071067) + 0.25, 0).sum(1) * np.float32(1.4142135), rtol=1e-6)
np.testing.assert_allclose((Tensor(x) * 0.3183099).exp2().numpy(), np.exp2(x * np.float32(0.3183099)), rtol=1e-6)
expected = np.abs(x - np.float32(0.1591549)).sum(0)
np.testing.assert_allclose((Tensor(x) - 0.1591549).abs().sum(0).numpy(), expected, rtol=1e-6)
print(len(rendered))
"""


def rendered_in_a_new_process(cache_dir: Path, hash_seed: int = 0) -> int:
    """Kernels PROGRAM rendered in a new process; `hash_seed` its string hashing (sets of names
    print in another order under another seed, as in two processes without PYTHONHASHSEED)."""
    env = {key: value for key, value in os.environ.items() if key not in ("DISABLE_CACHE", "DEBUG")}
    env.update({"LAZYGRAD_CACHE": str(cache_dir), "PYTHONPATH": str(REPO), "PYTHONHASHSEED": str(hash_seed)})
    result = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def test_a_second_process_renders_none_of_the_kernels_the_first_rendered(tmp_path):
    first = rendered_in_a_new_process(tmp_path, hash_seed=1)
    assert first >= 3
    assert rendered_in_a_new_process(tmp_path, hash_seed=2) == 0


def kernel_of(tensor: Tensor):
    (item,) = create_schedule([tensor.lazydata])
    return item.kernel


def test_kernels_that_differ_anywhere_have_different_descriptions():
    x = Tensor(np.ones((4, 6), np.float32))
    plain = kernel_of(x * 2.0 + 1.0)
    assert program_cache.describe_kernel(plain) == program_cache.describe_kernel(kernel_of(x * 2.0 + 1.0))
    variants = [x * 2.0 - 1.0, x * -0.0 + 1.0, x.permute(1, 0) * 2.0 + 1.0, (x * 2.0 + 1.0).cast("float64"),
                x.flip(0) * 2.0 + 1.0, x.pad(((1, 0), (0, 0))) * 2.0 + 1.0]
    described = {program_cache.describe_kernel(kernel_of(variant)) for variant in variants}
    assert len(described) == len(variants) and program_cache.describe_kernel(plain) not in described


@pytest.mark.parametrize("payload", [b"not json", b'{"name": 1}', b"[]"])
def test_a_damaged_entry_is_rendered_anew(tmp_path, monkeypatch, payload):
    monkeypatch.setattr(realize, "_PROGRAMS", {})
    x = np.linspace(-1, 1, 12, dtype=np.float32)
    result = (Tensor(x) * 3.3333 - 0.125).exp()
    kernel = kernel_of(result)
    with Context(LAZYGRAD_CACHE=tmp_path):
        key = program_cache.program_key("CPU", realize.renderer_for("CPU"), kernel, False)
        cache_put(program_cache.TABLE, key, payload)
        assert program_cache.load_rendered(key) is None
        np.testing.assert_allclose(result.numpy(), np.exp(x * np.float32(3.3333) - 0.125), rtol=1e-6)
        assert program_cache.load_rendered(key) is not None  # and the good one replaced it
