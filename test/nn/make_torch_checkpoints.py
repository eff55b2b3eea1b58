"""Writes the PyTorch checkpoint that test_torch_load.py reads without torch (in the zip format and
in the legacy one before torch 1.6), and torch's own values of its tensors beside it (as numpy arrays), so the test compares lazygrad with torch, not with itself.
Run once with torch installed; the three files are committed:

    python test/nn/make_torch_checkpoints.py
"""
from pathlib import Path

import numpy as np
import torch

DATA = Path(__file__).resolve().parent / "data"


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=generator)
    state = {
        "float32": base,
        "transposed": base.t(),                          # a view: strides (1, 6) of the same storage
        "window": base[1:3, 2:5],                        # a view with an offset
        "float64": torch.randn(3, generator=generator, dtype=torch.float64),
        "float16": torch.randn(5, generator=generator).half(),
        "int64": torch.arange(-3, 3),
        "int32": torch.tensor([2**31 - 1, -2**31, 0], dtype=torch.int32),
        "int16": torch.tensor([-7, 300], dtype=torch.int16),
        "int8": torch.tensor([-128, 127], dtype=torch.int8),
        "uint8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
    }
    DATA.mkdir(exist_ok=True)
    checkpoint = {"model": state, "epoch": 7, "note": "made by make_torch_checkpoints.py"}
    torch.save(checkpoint, DATA / "torch_checkpoint.pt")
    torch.save(checkpoint, DATA / "torch_checkpoint_legacy.pt", _use_new_zipfile_serialization=False)  # before torch 1.6
    np.savez(DATA / "torch_checkpoint_expected.npz", **{name: tensor.numpy() for name, tensor in state.items()})


if __name__ == "__main__":
    main()
