"""`python -m lazygrad.export` (lazygrad/export/__main__.py): the digits demo's checkpoint and an
ONNX file from the command line, the sizes it prints, and its errors."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import c_harness
import lazygrad
from lazygrad import Tensor
from lazygrad.export.__main__ import main
from lazygrad.nn.state import get_state_dict, safe_save

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "extra"))

import train_digits  # noqa: E402


def test_the_digits_command_exports_a_checkpoint_that_runs_as_the_model(tmp_path):
    lazygrad.manual_seed(11)
    model = train_digits.build_model(8, device="CPU")
    checkpoint = tmp_path / "digits.safetensors"
    safe_save(get_state_dict(model), checkpoint)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "lazygrad.export", "digits", str(checkpoint), str(out), "--batch", "2"]
    completed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert completed.returncode == 0, completed.stderr
    header = (out / "model.h").read_text()
    arena = int(header.split("#define MODEL_ARENA_BYTES ")[1].split()[0])
    weights = int(header.split("#define MODEL_WEIGHT_BYTES ")[1].split()[0])
    assert f"MODEL_ARENA_BYTES {arena}, MODEL_WEIGHT_BYTES {weights}" in completed.stdout
    assert "#define MODEL_INPUT_ELEMENTS 128" in header and "#define MODEL_OUTPUT_ELEMENTS 20" in header

    class Exported:  # what the harness needs from to_c's result
        source_path, header_path = str(out / "model.c"), str(out / "model.h")
        input_arguments = [("input", "float", (2, 1, 8, 8))]
        output_arguments = [("output", "float", (2, 10))]

    images = np.random.default_rng(12).standard_normal((2, 1, 8, 8)).astype(np.float32)
    program = c_harness.build(Exported, "model", tmp_path)
    outputs, _ = c_harness.run(program, Exported, [images], tmp_path)
    model.eval()
    np.testing.assert_allclose(outputs[0], model(Tensor(images)).numpy(), atol=1e-5, rtol=0)


def test_the_onnx_command_takes_input_shapes_and_writes_a_weight_file(tmp_path, capsys):
    onnx = pytest.importorskip("onnx", reason="the ONNX command needs the onnx package (pip install lazygrad[onnx])")
    from test_to_c import onnx_conv_relu_gemm
    path = tmp_path / "conv.onnx"
    onnx.save(onnx_conv_relu_gemm(onnx), str(path))
    assert main(["onnx", str(path), str(tmp_path), "--input-shape", "3,2,5,5", "--name", "conv",
                 "--weights", "file"]) == 0
    header = (tmp_path / "conv.h").read_text()
    assert "#define CONV_INPUT_ELEMENTS 150" in header and "int conv_load_weights(const void *blob, size_t size);" in header
    weights = int(header.split("#define CONV_WEIGHT_BYTES ")[1].split()[0])
    assert (tmp_path / "conv.bin").stat().st_size == weights
    assert f"CONV_WEIGHT_BYTES {weights}" in capsys.readouterr().out


def test_the_onnx_command_asks_for_shapes_the_model_leaves_open(tmp_path, capsys):
    onnx = pytest.importorskip("onnx", reason="the ONNX command needs the onnx package (pip install lazygrad[onnx])")
    from test_to_c import onnx_conv_relu_gemm
    path = tmp_path / "conv.onnx"
    onnx.save(onnx_conv_relu_gemm(onnx), str(path))
    assert main(["onnx", str(path), str(tmp_path)]) == 1
    assert "input 'image' has shape ('batch', 2, 5, 5); give every input's shape with --input-shape" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["onnx", str(path), str(tmp_path), "--input-shape", "1x2x5x5"])
    assert "is not a shape" in capsys.readouterr().err
