"""BEAM search on tiny kernels: it finds correct opts, stores them in the disk cache, reuses them,
searches again with IGNORE_BEAM_CACHE=1, and survives candidates that fail to compile."""
import json
import os
import sys

import numpy as np
import pytest

import lazygrad.beam as beam
import lazygrad.realize as realize
from lazygrad import Context, Tensor
from lazygrad.diskcache import cache_put
from lazygrad.codegen.axes import merge_dims
from lazygrad.schedule.fuse import create_schedule

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "ops"))

from ops_helpers import available_devices, device_params  # noqa: E402


def tiny_matmul():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 12)).astype(np.float32), rng.standard_normal((12, 16)).astype(np.float32)
    return a, b, (Tensor(a) @ Tensor(b)).relu()


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(realize, "_PROGRAMS", {})
    monkeypatch.setattr(beam, "MAX_ROUNDS", 2)
    monkeypatch.setattr(beam, "MAX_CANDIDATES_PER_ROUND", 6)
    with Context(LAZYGRAD_CACHE=tmp_path, BEAM=2, DEBUG=1, BEAM_TIMEOUT=20):
        yield


def test_beam_searches_then_uses_the_cache(fresh, capfd):
    a, b, result = tiny_matmul()
    np.testing.assert_allclose(result.numpy(), np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
    assert "searched in" in capfd.readouterr().err
    realize._PROGRAMS.clear()
    _, _, again = tiny_matmul()
    np.testing.assert_allclose(again.numpy(), np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
    assert "from the BEAM cache" in capfd.readouterr().err
    realize._PROGRAMS.clear()
    with Context(IGNORE_BEAM_CACHE=1):
        tiny_matmul()[2].numpy()
    assert "searched in" in capfd.readouterr().err


@pytest.mark.parametrize("device", device_params([device for device in available_devices() if device != "NPY"]))
def test_beam_searches_and_stays_right_on_every_compiled_device(fresh, device, capfd):
    """A matmul with its epilogue and a softmax's reduces, searched on each device with kernels
    (CUDA where a GPU is present, OPENCL in its opt-in tier), against numpy."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((24, 40)).astype(np.float32), rng.standard_normal((40, 33)).astype(np.float32)
    product = (Tensor(a, device=device) @ Tensor(b, device=device)).relu()
    np.testing.assert_allclose(product.numpy(), np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
    softmax = Tensor(a, device=device).softmax(-1).numpy()
    exponentials = np.exp(a - a.max(-1, keepdims=True))
    np.testing.assert_allclose(softmax, exponentials / exponentials.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert "searched in" in capfd.readouterr().err


def test_beam_keeps_a_guarded_store_that_writes_one_row(fresh, capfd):
    """A row written into a cache at a position held in a tensor stores only that row: the search
    checks its candidates against a reference run on the same zeroed outputs."""
    rng = np.random.default_rng(2)
    start, row = rng.standard_normal((4, 32, 16)).astype(np.float32), rng.standard_normal((4, 1, 16)).astype(np.float32)
    cache = Tensor(start).realize()
    cache.assign((Tensor.arange(32).reshape(1, 32, 1) == Tensor([9])).where(Tensor(row), cache)).realize()
    assert "searched in" in capfd.readouterr().err
    expected = start.copy()
    expected[:, 9] = row[:, 0]
    np.testing.assert_array_equal(cache.numpy(), expected)


def test_failing_candidates_are_discarded(fresh, monkeypatch, capfd):
    real_source = beam.KernelBench.source

    def broken_when_unrolled(self, opts):
        name, source = real_source(self, opts)
        if opts and any(opt.op == "UNROLL" for opt in opts):
            source += "\nthis is not C;\n"
        return name, source
    monkeypatch.setattr(beam.KernelBench, "source", broken_when_unrolled)
    with Context(DEBUG=3):
        a, b, result = tiny_matmul()
        np.testing.assert_allclose(result.numpy(), np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
    err = capfd.readouterr().err
    assert "BEAM discarded" in err


def test_wrong_results_are_discarded(fresh, monkeypatch):
    real_matches = beam.KernelBench.matches
    timed = []

    def upcasts_are_wrong(self):
        return real_matches(self) and not any(opt.op == "UPCAST" for opt in timed[-1])
    real_evaluate = beam._evaluate

    def remember(bench, opts, compiled, best):
        timed.append(opts)
        return real_evaluate(bench, opts, compiled, best)
    monkeypatch.setattr(beam.KernelBench, "matches", upcasts_are_wrong)
    monkeypatch.setattr(beam, "_evaluate", remember)
    _, _, result = tiny_matmul()
    (item,) = create_schedule([result.lazydata])
    compiled = realize.get_program("CPU", item.kernel)
    assert not any(opt.op == "UPCAST" for opt in compiled.opts)


def test_cached_opts_that_no_longer_apply_are_searched_again(fresh, capfd):
    _, _, result = tiny_matmul()
    (item,) = create_schedule([result.lazydata])
    key = beam.beam_cache_key("CPU", merge_dims(item.kernel), 2)
    cache_put("beam", key, json.dumps({"opts": [["UPCAST", 0, 7]]}).encode())
    result.numpy()
    assert "searched in" in capfd.readouterr().err


def test_a_zero_timeout_keeps_the_better_of_no_opts_and_the_default(fresh, monkeypatch):
    proposals = []
    real_compile_all = beam._compile_all

    def record(bench, chosen):
        proposals.extend(chosen)
        return real_compile_all(bench, chosen)
    monkeypatch.setattr(beam, "_compile_all", record)
    a, b, result = tiny_matmul()
    with Context(BEAM_TIMEOUT=0):
        np.testing.assert_allclose(result.numpy(), np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
    assert len(proposals) <= 2


def test_small_kernels_are_timed_on_rotated_copies_of_their_buffers(monkeypatch):
    """Each timed run uses the next copy, so its inputs are not left in the cache by the run before;
    the check reads the outputs of the copy that ran last."""
    monkeypatch.setattr(beam, "last_level_cache_bytes", lambda: 64 << 10)
    a, b, result = tiny_matmul()
    (item,) = create_schedule([result.lazydata])
    bench = beam.KernelBench("CPU", merge_dims(item.kernel), realize.renderer_for("CPU"))
    set_bytes = sum(buffer.nbytes for buffer in bench.buffers)
    assert len(bench.sets) == beam.rotated_set_count(set_bytes, 64 << 10) > 1
    program = bench.build([])
    bench.clear_outputs()
    used = set()
    for _ in range(len(bench.sets)):
        bench.run(program)
        used.add(bench.last_run)
        assert bench.matches()
    assert used == set(range(len(bench.sets)))
    bench.clear_outputs()
    assert not bench.matches()  # zeroed outputs of the latest copy fail the check


def test_rotation_stops_at_the_cache_size_and_the_memory_limit():
    assert beam.rotated_set_count(64 << 20, 32 << 20) == 1
    assert beam.rotated_set_count(1 << 20, 8 << 20) == 16
    assert beam.rotated_set_count(1 << 10, 1 << 30) == beam.MAX_ROTATED_SETS
    assert beam.rotated_set_count(100 << 20, 1 << 30) == beam.ROTATION_BYTES // (100 << 20)


def test_an_indexed_load_is_searched_over_thread_counts_only_and_stays_right(fresh):
    """TAKE kernels take no tile (their source has a dim more than the loops); BEAM may only
    change how many threads run them, on random indices, many outside the table."""
    from lazygrad.nn import functional as F
    table = np.arange(400, dtype=np.float32).reshape(100, 4)
    indices = np.array([[1, 5, 99], [0, 200, -3]])
    result = F.embedding(Tensor(indices), Tensor(table)).numpy()
    inside = (indices >= 0) & (indices < 100)
    np.testing.assert_array_equal(result, np.where(inside[..., None], table[np.clip(indices, 0, 99)], 0))
    (item,) = [item for item in create_schedule([F.embedding(Tensor(indices), Tensor(table)).lazydata])]
    assert all(opt.op == "THREADS" for opt in realize.get_program("CPU", item.kernel).opts)
