"""torch_load reads PyTorch checkpoints without torch: every dtype lazygrad has, views of shared
storages, nested checkpoint dicts, on every device; a lazygrad.nn model of PyTorch's layout takes a
torch state dict 1:1; damaged and hostile files raise a clear error and return nothing, and a pickle
that would run a command never does."""
from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import lazygrad.nn as nn
from lazygrad import Tensor, dtypes
from lazygrad.nn.state import UnsafeCheckpointError, get_state_dict, load_state_dict, torch_load

DATA = Path(__file__).resolve().parent / "data"


@pytest.mark.parametrize("name", ["torch_checkpoint.pt", "torch_checkpoint_legacy.pt"])
def test_the_committed_checkpoints_match_torchs_values(device, name):
    """test/nn/data/'s checkpoint in the zip and the legacy format, and torch's values of its tensors,
    all written by make_torch_checkpoints.py."""
    expected = np.load(DATA / "torch_checkpoint_expected.npz")
    loaded = torch_load(DATA / name, device=device)
    assert loaded["epoch"] == 7 and loaded["note"] == "made by make_torch_checkpoints.py"
    assert set(loaded["model"]) == set(expected.files)
    for name, tensor in loaded["model"].items():
        assert tensor.device == device and tensor.numpy().dtype == expected[name].dtype, name
        np.testing.assert_array_equal(tensor.numpy(), expected[name], err_msg=name)


@pytest.mark.parametrize("mmap", [False, True])
def test_a_loaded_tensor_computes_and_leaves_the_file_as_it_was(tmp_path, mmap):
    path = tmp_path / "copy.pt"
    path.write_bytes((DATA / "torch_checkpoint.pt").read_bytes())
    before = path.read_bytes()
    state = torch_load(path, mmap=mmap)["model"]
    doubled = (state["float32"] * 2).numpy()
    np.testing.assert_array_equal(doubled, np.load(DATA / "torch_checkpoint_expected.npz")["float32"] * 2)
    state["float32"].assign(state["float32"] + 1).realize()  # a write into a mapped storage stays in memory
    assert path.read_bytes() == before


def _checkpoint(tmp_path: Path, pickled: bytes, storages: dict[str, bytes] | None = None, name: str = "c.pt") -> Path:
    """A zip archive laid out as torch.save's: archive/data.pkl and archive/data/<key>."""
    path = tmp_path / name
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", pickled)
        archive.writestr("archive/byteorder", "little")
        for key, data in (storages or {}).items():
            archive.writestr(f"archive/data/{key}", data)
    return path


def test_a_pickle_that_would_run_a_command_raises_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"  # the pickle calls os.system("touch <marker>"), as pickle.dumps writes such a call
    evil = b"\x80\x02cos\nsystem\nq\x00X" + len(f"touch {marker}").to_bytes(4, "little") + \
        f"touch {marker}".encode() + b"q\x01\x85q\x02Rq\x03."
    path = _checkpoint(tmp_path, evil)
    with pytest.raises(UnsafeCheckpointError, match=r"os\.system|posix\.system"):
        torch_load(path)
    assert not marker.exists()


def test_a_pickle_naming_a_model_class_says_to_save_the_state_dict(tmp_path):
    path = _checkpoint(tmp_path, b"\x80\x02ctorchvision.models.resnet\nResNet\nq\x00)\x81q\x01.")
    with pytest.raises(UnsafeCheckpointError, match="torchvision.models.resnet.ResNet.*state_dict"):
        torch_load(path)


def _tensor_pickle(dtype_class: str, key: str, count: int, offset: int, size: tuple, stride: tuple) -> bytes:
    """The pickle torch writes for {"t": tensor}: _rebuild_tensor_v2 over a persistent storage id."""
    def global_ref(module: str, name: str) -> bytes:
        return b"c" + module.encode() + b"\n" + name.encode() + b"\n"

    def small_tuple(values: tuple) -> bytes:
        return b"(" + b"".join(b"J" + int(v).to_bytes(4, "little", signed=True) for v in values) + b"t"

    storage_id = (b"(" + b"X" + len(b"storage").to_bytes(4, "little") + b"storage" + global_ref("torch", dtype_class)
                  + b"X" + len(key).to_bytes(4, "little") + key.encode() + b"X\x03\x00\x00\x00cpu"
                  + b"J" + count.to_bytes(4, "little") + b"tQ")
    arguments = (b"(" + storage_id + b"J" + offset.to_bytes(4, "little") + small_tuple(size) + small_tuple(stride)
                 + b"\x89" + global_ref("collections", "OrderedDict") + b")Rt")
    return b"\x80\x02}(X\x01\x00\x00\x00t" + global_ref("torch._utils", "_rebuild_tensor_v2") + arguments + b"Ru."


def test_the_hand_written_tensor_pickle_loads(tmp_path):
    data = np.arange(6, dtype=np.float32)
    path = _checkpoint(tmp_path, _tensor_pickle("FloatStorage", "0", 6, 1, (2, 2), (1, 2)), {"0": data.tobytes()})
    np.testing.assert_array_equal(torch_load(path)["t"].numpy(), [[1.0, 3.0], [2.0, 4.0]])


@pytest.mark.parametrize("pickled, storages, message", [
    (_tensor_pickle("FloatStorage", "0", 6, 0, (2, 3), (3, 1)), {"0": b"\x00" * 20}, "holds 20 bytes"),
    (_tensor_pickle("FloatStorage", "0", 6, 4, (2, 3), (3, 1)), {"0": b"\x00" * 24}, "reaches element 10"),
    (_tensor_pickle("FloatStorage", "7", 6, 0, (6,), (1,)), {"0": b"\x00" * 24}, "lacks archive/data/7"),
    (_tensor_pickle("FloatStorage", "0", 6, 0, (2, -3), (3, 1)), {"0": b"\x00" * 24}, "malformed"),
    (b"\x80\x02}(X\x01\x00\x00\x00t", {}, "pickle is damaged"),
])
def test_a_damaged_checkpoint_raises_a_clear_error(tmp_path, pickled, storages, message):
    with pytest.raises(ValueError, match=message):
        torch_load(_checkpoint(tmp_path, pickled, storages))


def test_a_dtype_lazygrad_lacks_is_named(tmp_path):
    path = _checkpoint(tmp_path, _tensor_pickle("ComplexFloatStorage", "0", 2, 0, (2,), (1,)), {"0": b"\x00" * 16})
    with pytest.raises(TypeError, match="complex64"):
        torch_load(path)


def test_a_bfloat16_storage_loads_as_bfloat16(tmp_path):
    values = np.array([1.0, -2.5, 3.140625], ml_dtypes.bfloat16)
    path = _checkpoint(tmp_path, _tensor_pickle("BFloat16Storage", "0", 3, 0, (3,), (1,)), {"0": values.tobytes()})
    loaded = torch_load(path)["t"]
    assert loaded.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(loaded.numpy(), values)


@pytest.mark.parametrize("name", ["torch_checkpoint.pt", "torch_checkpoint_legacy.pt"])
@pytest.mark.parametrize("kept", [0.3, 0.6, 0.95])
def test_a_truncated_checkpoint_raises(tmp_path, name, kept):
    whole = (DATA / name).read_bytes()
    (tmp_path / "cut.pt").write_bytes(whole[:int(len(whole) * kept)])
    with pytest.raises(ValueError, match="torch_load"):
        torch_load(tmp_path / "cut.pt")


def test_a_file_of_another_kind_raises(tmp_path):
    (tmp_path / "other.pt").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(ValueError, match="not a PyTorch checkpoint"):
        torch_load(tmp_path / "other.pt")
    (tmp_path / "text.pt").write_text("weights\n")
    with pytest.raises(ValueError, match="not a PyTorch checkpoint"):
        torch_load(tmp_path / "text.pt")


def test_a_legacy_checkpoint_naming_a_command_raises_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    command = f"touch {marker}".encode()
    evil = b"\x80\x02cos\nsystem\nq\x00X" + len(command).to_bytes(4, "little") + command + b"q\x01\x85q\x02Rq\x03."
    header = b"".join(pickle.dumps(value, protocol=2) for value in (0x1950a86a20f9469cfc6c, 1001, {"little_endian": True}))
    (tmp_path / "legacy.pt").write_bytes(header + evil + pickle.dumps([], protocol=2))
    with pytest.raises(UnsafeCheckpointError, match=r"os\.system"):
        torch_load(tmp_path / "legacy.pt")
    assert not marker.exists()


# ---- with torch installed: checkpoints torch writes now -------------------------------------------

class SmallNet:
    """A CNN in lazygrad.nn laid out as TinyTorchNet below, so a state dict maps 1:1."""

    def __init__(self):
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)

    def __call__(self, x: Tensor) -> Tensor:
        return self.head(self.norm(self.conv(x)).relu().mean((2, 3)))


def test_a_torch_state_dict_loads_into_a_model_of_the_same_layout(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed: the committed checkpoint stands in")

    class TinyTorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.norm = torch.nn.BatchNorm2d(8)
            self.head = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.head(torch.relu(self.norm(self.conv(x))).mean((2, 3)))

    reference = TinyTorchNet()
    with torch.no_grad():  # statistics away from their defaults, so loading them matters
        reference.norm.running_mean.uniform_(-1, 1)
        reference.norm.running_var.uniform_(0.5, 2)
    reference.eval()
    torch.save(reference.state_dict(), tmp_path / "tiny.pth")
    model = SmallNet()
    model.norm.training = False
    load_state_dict(model, torch_load(tmp_path / "tiny.pth"))
    assert set(get_state_dict(model)) == set(reference.state_dict())
    images = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    with torch.no_grad():
        expected = reference(torch.from_numpy(images)).numpy()
    np.testing.assert_allclose(model(Tensor(images)).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_what_torch_saves_now_reads_back_exactly(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed: the committed checkpoint stands in")
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    state = {"permuted": base.permute(2, 0, 1), "sliced": base[:, 1:, ::2], "float64": base.double(),
             "parameter": torch.nn.Parameter(torch.ones(3)), "nested": [base[0], {"deeper": base[1, 1]}]}
    torch.save(state, tmp_path / "views.pt")
    loaded = torch_load(tmp_path / "views.pt")
    for name in ("permuted", "sliced", "float64", "parameter"):
        np.testing.assert_array_equal(loaded[name].numpy(), state[name].detach().numpy(), err_msg=name)
    np.testing.assert_array_equal(loaded["nested"][1]["deeper"].numpy(), state["nested"][1]["deeper"].numpy())
