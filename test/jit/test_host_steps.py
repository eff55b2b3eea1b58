"""Host steps (realize.run_host_step, what lazygrad.distributed's collectives run on): a jit replay
runs them again in their place, never skips them as it skips launches computed from parameters
alone, and lazygrad.export refuses them."""
import numpy as np
import pytest

from lazygrad import Tensor, stats
from lazygrad.devices import get_device
from lazygrad.export import ExportError, to_c
from lazygrad.jit import jit
from lazygrad.lazy import LazyBuffer
from lazygrad.realize import run_host_step


def doubled_on_host(tensor: Tensor, log: list) -> Tensor:
    """tensor * 2 computed by numpy in a host step, as a collective computes its result."""
    source = tensor.contiguous().realize().lazydata.buffer
    output = get_device(tensor.device).alloc(tensor.dtype, source.size)
    count = source.size

    def step(output, source):
        log.append("ran")
        output.copyin(np.concatenate([source.numpy()[:count] * 2, output.numpy()[count:]]))
    run_host_step("double", step, [output], [source])
    return Tensor(LazyBuffer.from_buffer(output, tensor.shape))


def test_replays_run_host_steps_between_kernels(compiled_device):
    weight = Tensor(np.arange(4, dtype=np.float32), device=compiled_device)
    log = []

    @jit
    def f(x):
        # the host step reads only a parameter: a kernel doing so would be skipped on replays
        return doubled_on_host(weight + 1, log) * x
    for call in range(4):
        x = np.full(4, call + 1.0, np.float32)
        stats.reset()
        np.testing.assert_allclose(f(Tensor(x, device=compiled_device)).numpy(), (np.arange(4) + 1) * 2 * x)
        assert len(log) == call + 1
        assert stats.host_steps == 1


def test_export_refuses_host_steps(tmp_path):
    with pytest.raises(ExportError, match="host step double"):
        to_c(lambda x: doubled_on_host(x, []), [Tensor.ones((3,))], tmp_path / "model.c")
