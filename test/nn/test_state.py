"""State dicts (names, loading, error messages) and safetensors checkpoints: round trips for every
dtype, interop both ways with the `safetensors` package, and truncated or malformed files."""
from __future__ import annotations

import io
import json
import os
import struct

import numpy as np
import pytest
import safetensors.numpy as safetensors_numpy  # in the test extra, so the interop tests always run

from lazygrad import Tensor, dtypes
import lazygrad.nn as nn
from lazygrad.nn.state import (_read_data, get_parameters, get_state_dict, load_state_dict, safe_load,
                               safe_load_metadata, safe_save)
from lazygrad.ops import Ops

rng = np.random.default_rng(0)


def small_model():
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(8, 3))


# ---- names ---------------------------------------------------------------------------------------

def test_state_dict_walks_attributes_lists_tuples_and_dicts_with_dotted_names():
    class Block:
        def __init__(self):
            self.weight = Tensor([1.0], requires_grad=True)
            self.scale = 2.0                        # not a tensor: ignored
            self._cache = Tensor([0.0])             # private: ignored

    class Net:
        def __init__(self):
            self.first = Block()
            self.layers = [Block(), (Block(),)]
            self.heads = {"cls": Block()}
            self.parent = self                       # a cycle does not loop forever

    assert list(get_state_dict(Net())) == ["first.weight", "layers.0.weight", "layers.1.0.weight", "heads.cls.weight"]


def test_tied_weights_appear_under_both_names_but_train_once():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    model[1].weight = model[0].weight
    assert list(get_state_dict(model)) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert len(get_parameters(model)) == 3


def test_get_parameters_leaves_out_buffers():
    model = small_model()
    parameters = get_parameters(model)
    assert len(parameters) == 6 and all(p.requires_grad for p in parameters)
    assert all(p is not model[1].running_mean for p in parameters)


# ---- loading -------------------------------------------------------------------------------------

def test_load_state_dict_copies_every_tensor_and_keeps_requires_grad():
    source, target = small_model(), small_model()
    source[1].running_mean.lazydata = Tensor([0.5, -0.5]).lazydata
    load_state_dict(target, get_state_dict(source))
    for name, tensor in get_state_dict(target).items():
        np.testing.assert_array_equal(tensor.numpy(), get_state_dict(source)[name].numpy(), err_msg=name)
    assert target[0].weight.requires_grad and not target[1].running_mean.requires_grad


def test_missing_and_unexpected_keys_are_listed():
    model, state = small_model(), get_state_dict(small_model())
    del state["4.bias"]
    state["5.weight"] = Tensor([1.0])
    with pytest.raises(RuntimeError) as error:
        load_state_dict(model, state)
    assert "missing key(s) in state dict: 4.bias" in str(error.value)
    assert "unexpected key(s) in state dict: 5.weight" in str(error.value)
    result = load_state_dict(model, state, strict=False)
    assert result.missing_keys == ["4.bias"] and result.unexpected_keys == ["5.weight"]


def test_shape_and_dtype_mismatches_name_the_key_and_both_sides_and_change_nothing():
    model = small_model()
    before = model[0].weight.numpy()
    state = get_state_dict(small_model())
    state["0.weight"] = Tensor(np.zeros((2, 1, 3, 3)) + 7, dtype=dtypes.float32)
    state["4.weight"] = Tensor(np.zeros((3, 9), dtype=np.float32))
    state["4.bias"] = Tensor(np.zeros(3, dtype=np.float64))
    with pytest.raises(RuntimeError) as error:
        load_state_dict(model, state)
    message = str(error.value)
    assert "size mismatch for 4.weight: the state dict has shape (3, 9), the model has shape (3, 8)" in message
    assert "dtype mismatch for 4.bias: the state dict has float64, the model has float32" in message
    np.testing.assert_array_equal(model[0].weight.numpy(), before)  # the valid 0.weight was not loaded either


def test_module_methods_wrap_the_state_functions():
    source, target = small_model(), small_model()
    target.load_state_dict(source.state_dict())
    np.testing.assert_array_equal(target[4].weight.numpy(), source[4].weight.numpy())
    assert len(target.parameters()) == 6


# ---- safetensors round trips ---------------------------------------------------------------------

ARRAYS = {
    "bool": rng.random((2, 3)) > 0.5,
    "uint8": rng.integers(0, 255, (4,), dtype=np.uint8),
    "int8": rng.integers(-128, 127, (2, 2), dtype=np.int8),
    "int16": rng.integers(-3000, 3000, (3,), dtype=np.int16),
    "int32": rng.integers(-10 ** 9, 10 ** 9, (2, 1, 2), dtype=np.int32),
    "int64": rng.integers(-10 ** 15, 10 ** 15, (3,), dtype=np.int64),
    "float16": rng.standard_normal((5,)).astype(np.float16),
    "float32": rng.standard_normal((2, 3)).astype(np.float32),
    "float64": rng.standard_normal((1, 4)),
    "scalar": np.array(3.5, dtype=np.float32),
    "empty": np.zeros((0, 3), dtype=np.float32),
}


def test_safe_save_and_safe_load_round_trip_every_dtype(tmp_path):
    path = tmp_path / "all.safetensors"
    safe_save({name: Tensor(array) for name, array in ARRAYS.items()}, path, metadata={"format": "pt"})
    loaded = safe_load(path)
    assert list(loaded) == list(ARRAYS)
    for name, array in ARRAYS.items():
        assert loaded[name].dtype == dtypes.from_any(array.dtype) and loaded[name].shape == array.shape, name
        np.testing.assert_array_equal(loaded[name].numpy(), array, err_msg=name)
    assert safe_load_metadata(path) == {"format": "pt"}
    assert os.listdir(tmp_path) == ["all.safetensors"]  # the temporary file was renamed, not left behind


def test_a_model_checkpoint_reloads_into_a_fresh_model(tmp_path):
    model, fresh = small_model(), small_model()
    safe_save(get_state_dict(model), tmp_path / "model.safetensors")
    load_state_dict(fresh, safe_load(tmp_path / "model.safetensors"))
    x = Tensor(rng.standard_normal((2, 1, 4, 4)).astype(np.float32))
    model.eval()
    fresh.eval()
    np.testing.assert_array_equal(fresh(x).numpy(), model(x).numpy())


def test_files_written_by_the_safetensors_package_load(tmp_path):
    path = str(tmp_path / "theirs.safetensors")
    safetensors_numpy.save_file(ARRAYS, path, metadata={"source": "safetensors"})
    loaded = safe_load(path)
    for name, array in ARRAYS.items():
        np.testing.assert_array_equal(loaded[name].numpy(), array, err_msg=name)
    assert safe_load_metadata(path) == {"source": "safetensors"}


def test_files_written_here_load_in_the_safetensors_package(tmp_path):
    from safetensors import safe_open
    path = str(tmp_path / "ours.safetensors")
    safe_save({name: Tensor(array) for name, array in ARRAYS.items()}, path, metadata={"epoch": "3"})
    loaded = safetensors_numpy.load_file(path)
    for name, array in ARRAYS.items():
        assert loaded[name].dtype == array.dtype, name
        np.testing.assert_array_equal(loaded[name], array, err_msg=name)
    with safe_open(path, framework="numpy") as file:
        assert file.metadata() == {"epoch": "3"}


# ---- truncated and malformed files ---------------------------------------------------------------

def write_file(path, header, data: bytes = b"", declared_length: int | None = None) -> str:
    header_bytes = header if isinstance(header, bytes) else json.dumps(header).encode()
    length = len(header_bytes) if declared_length is None else declared_length
    path.write_bytes(struct.pack("<Q", length) + header_bytes + data)
    return str(path)


GOOD_ENTRY = {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}

MALFORMED = {
    "empty file": (lambda p: p.write_bytes(b"") or str(p), "too short for the 8-byte header length"),
    "header length past the end": (lambda p: write_file(p, {"w": GOOD_ENTRY}, bytes(16), declared_length=500),
                                   "declares a 500-byte header but holds only"),
    "huge header length": (lambda p: write_file(p, {}, declared_length=2 ** 40), "not a safetensors file"),
    "header is not JSON": (lambda p: write_file(p, b"{not json"), "is not valid JSON"),
    "header is a list": (lambda p: write_file(p, [1, 2]), "must be a JSON object"),
    "entry without offsets": (lambda p: write_file(p, {"w": {"dtype": "F32", "shape": [1]}}, bytes(4)),
                              "entry 'w' needs 'dtype', 'shape' and 'data_offsets'"),
    "unsupported dtype": (lambda p: write_file(p, {"w": {**GOOD_ENTRY, "dtype": "F6_E3M2", "data_offsets": [0, 8]}},
                                               bytes(8)), "tensor 'w' has dtype 'F6_E3M2'"),
    "negative size": (lambda p: write_file(p, {"w": {**GOOD_ENTRY, "shape": [-1, 2]}}, bytes(16)),
                      "expected a list of sizes >= 0"),
    "offsets disagree with the shape": (lambda p: write_file(p, {"w": {**GOOD_ENTRY, "data_offsets": [0, 12]}},
                                                             bytes(16)), "needs 16 bytes, but its data_offsets"),
    "truncated data": (lambda p: write_file(p, {"w": GOOD_ENTRY}, bytes(10)), "the file is truncated"),
    "overlapping tensors": (lambda p: write_file(p, {"a": GOOD_ENTRY, "b": {**GOOD_ENTRY, "data_offsets": [8, 24]}},
                                                 bytes(24)), "overlap"),
    "metadata not strings": (lambda p: write_file(p, {"__metadata__": {"a": 1}}), "'__metadata__' must map"),
    "dtype is a list": (lambda p: write_file(p, {"w": {**GOOD_ENTRY, "dtype": ["F32"]}}, bytes(16)),
                        r"tensor 'w' has dtype \['F32'\]"),
    "header nested too deeply": (lambda p: write_file(p, b'{"w": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
                                 "nests JSON too deeply"),
    "an integer of 5000 digits": (lambda p: write_file(p, b'{"w": {"dtype": "F32", "shape": [' + b"9" * 5000 + b"]}}"),
                                  "is not valid JSON"),
    "a size numpy cannot hold": (lambda p: write_file(p, {"w": {**GOOD_ENTRY, "shape": [2 ** 70, 0],
                                                                "data_offsets": [0, 0]}}), "expected a list of sizes"),
}

ODD_JSON = [None, True, 1.5, -1, 2 ** 70, "F32", [], [1], [[1]], {}, {"F32": 1}, [None, 4], [[[[[[[[[[1]]]]]]]]]]]


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_files_raise_a_value_error_naming_the_problem(tmp_path, case):
    make, message = MALFORMED[case]
    path = make(tmp_path / "bad.safetensors")
    with pytest.raises(ValueError, match=message):
        safe_load(path)


@pytest.mark.parametrize("field", ["dtype", "shape", "data_offsets", "entry", "__metadata__"])
def test_any_json_value_in_any_field_loads_or_raises_a_value_error(tmp_path, field):
    """Never a TypeError or RecursionError from a header's odd structure."""
    for value in ODD_JSON:
        if field == "__metadata__":
            header = {"__metadata__": value}
        else:
            header = {"w": value if field == "entry" else {**GOOD_ENTRY, field: value}}
        path = write_file(tmp_path / "odd.safetensors", header, bytes(16))
        for load in (safe_load, safe_load_metadata):
            try:
                load(path)
            except ValueError as error:
                assert str(error).startswith("safe_load: ")


def test_a_checkpoint_cut_short_anywhere_never_loads(tmp_path):
    whole = tmp_path / "whole.safetensors"
    safe_save({"a": Tensor(np.arange(6, dtype=np.float32)), "b": Tensor(np.arange(3, dtype=np.int64))}, whole)
    content = whole.read_bytes()
    cut = tmp_path / "cut.safetensors"
    for length in range(0, len(content), 7):
        cut.write_bytes(content[:length])
        with pytest.raises(ValueError):
            safe_load(cut)


def test_safe_save_rejects_what_it_cannot_write(tmp_path):
    with pytest.raises(TypeError, match="'w' is a ndarray, not a Tensor"):
        safe_save({"w": np.zeros(2)}, tmp_path / "x.safetensors")
    with pytest.raises(ValueError, match="metadata must map strings to strings"):
        safe_save({}, tmp_path / "x.safetensors", metadata={"epoch": 3})


def test_a_loaded_checkpoint_keeps_its_values_when_the_file_is_rewritten_or_truncated(tmp_path):
    """By default the data is read when the file loads: a job overwriting its checkpoint in place, or
    truncating it, changes nothing loaded (a mapped file showed the new values, or died of SIGBUS)."""
    path = tmp_path / "weights.safetensors"
    values = np.arange(4096, dtype=np.float32)
    safe_save({"w": Tensor(values)}, path)
    data_start = len(path.read_bytes()) - values.nbytes
    for device in ("CPU", "NPY"):
        weight = safe_load(path, device=device)["w"]
        with open(path, "r+b") as file:
            file.seek(data_start)
            file.write((values + 1).tobytes())
        np.testing.assert_array_equal(weight.numpy(), values)
        weight = safe_load(path, device=device)["w"]
        os.truncate(path, 0)
        np.testing.assert_array_equal(weight.numpy(), values + 1)
        safe_save({"w": Tensor(values)}, path)


def test_data_cut_short_while_it_is_read_raises_a_value_error():
    """The file shrank between its size being taken and its data being read."""
    with pytest.raises(ValueError, match="x.safetensors ended after 3 of its 8 bytes of data while it was read"):
        _read_data(io.BytesIO(b"abc"), "x.safetensors", 8)


def test_safe_load_with_mmap_maps_the_file_and_never_writes_it(tmp_path):
    """On CPU a loaded tensor's buffer is the memory-mapped file (nothing copied); writing the tensor
    in place changes the tensor, not the file."""
    path = tmp_path / "weights.safetensors"
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    safe_save({"w": Tensor(values)}, path)
    before = path.read_bytes()
    weight = safe_load(path, device="CPU", mmap=True)["w"]
    assert isinstance(weight.lazydata.buffer.array.base, np.memmap) or isinstance(weight.lazydata.buffer.array, np.memmap)
    np.testing.assert_array_equal(weight.numpy(), values)
    weight.assign(weight * 2).realize()
    np.testing.assert_array_equal(weight.numpy(), values * 2)
    np.testing.assert_array_equal(safe_load(path)["w"].numpy(), values)
    assert path.read_bytes() == before


def test_safe_load_with_mmap_reads_no_tensor_before_it_is_used_on_every_device(tmp_path, device):
    """Host devices use the mapped file as the buffer; others get a pending copy of the mapped bytes."""
    path = tmp_path / "weights.safetensors"
    values = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(4, dtype=np.int64)}
    safe_save({name: Tensor(array) for name, array in values.items()}, path)
    loaded = safe_load(path, device=device, mmap=True)
    for name, array in values.items():
        tensor = loaded[name]
        assert tensor.device == device
        if device in ("CPU", "NPY"):
            assert isinstance(tensor.lazydata.buffer.array.base, np.memmap)
        else:
            assert tensor.lazydata.op is Ops.COPY and not tensor.lazydata.realized
        np.testing.assert_array_equal(tensor.numpy(), array)


@pytest.mark.skipif(not hasattr(os, "umask"), reason="POSIX file modes only")
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_safe_save_gives_the_file_the_mode_the_umask_asks_for(tmp_path, umask):
    path = tmp_path / "weights.safetensors"
    previous = os.umask(umask)
    try:
        safe_save({"w": Tensor([1.0, 2.0])}, path)
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
