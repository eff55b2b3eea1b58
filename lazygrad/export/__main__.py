"""`python -m lazygrad.export`: export the digits demo's checkpoint or an ONNX model as C.

    python -m lazygrad.export digits extra/train_digits.safetensors out/          # out/model.c, out/model.h
    python -m lazygrad.export onnx model.onnx out/ --input-shape 1,3,224,224 --name resnet --weights file

`digits` rebuilds the demo's network (extra/train_digits.py, found beside the lazygrad package in a
checkout) for the checkpoint's image size and exports it in eval mode for --batch images (default
1): input float[batch*1*H*W] of standardized pixels, output float[batch*10] of logits. `onnx` loads
the model with lazygrad.onnx on the CPU device; each input's shape comes from --input-shape (once
per input, in the model's order) or, when every dim is a number, from the model. Prints the sizes
of the arena and the weights (also #defined in the header).
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np

from lazygrad.export import ExportError, ExportResult, to_c

DEMO = Path(__file__).resolve().parents[2] / "extra" / "train_digits.py"


def _load_demo():
    if not DEMO.is_file():
        raise ExportError(f"export digits: {DEMO} not found; the digits command needs a lazygrad checkout with extra/")
    if "train_digits" in sys.modules:
        return sys.modules["train_digits"]
    spec = importlib.util.spec_from_file_location("train_digits", DEMO)
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_digits"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def export_digits(checkpoint: str | Path, out_dir: str | Path, name: str = "model", batch: int = 1,
                  weights: str = "inline") -> ExportResult:
    """The demo's CNN with the checkpoint's weights, in eval mode, as out_dir/<name>.c and .h."""
    from lazygrad.nn.state import load_state_dict, safe_load
    demo = _load_demo()
    state = safe_load(str(checkpoint), "CPU")
    linear_inputs = [tensor.shape[1] for key, tensor in state.items() if key.endswith("weight") and len(tensor.shape) == 2]
    if not linear_inputs:
        raise ExportError(f"export digits: {checkpoint} has no linear layer's weight; is it the digits demo's checkpoint?")
    pooled = math.isqrt(linear_inputs[0] // demo.CHANNELS[-1])  # the first linear layer reads channels x pooled^2
    model = demo.build_model(2 * pooled, device="CPU")
    load_state_dict(model, state)
    model.eval()
    images = np.zeros((batch, 1, 2 * pooled, 2 * pooled), np.float32)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return to_c(model, images, str(Path(out_dir) / f"{name}.c"), name=name, weights=weights)


def export_onnx(model_path, out_dir: str | Path, input_shapes: list[tuple[int, ...]] | None = None,
                name: str = "model", weights: str = "inline") -> ExportResult:
    """An ONNX model (path, bytes or ModelProto) run by lazygrad.onnx, as out_dir/<name>.c and .h."""
    from lazygrad.onnx import OnnxModel
    model = OnnxModel(model_path, device="CPU")
    input_shapes = list(input_shapes or [])
    if input_shapes and len(input_shapes) != len(model.inputs):
        raise ExportError(f"export onnx: the model has {len(model.inputs)} inputs "
                          f"({', '.join(info.name for info in model.inputs)}); got {len(input_shapes)} --input-shape")
    examples = []
    for number, info in enumerate(model.inputs):
        if input_shapes:
            shape = tuple(input_shapes[number])
        elif info.shape is not None and all(isinstance(size, int) for size in info.shape):
            shape = tuple(info.shape)
        else:
            raise ExportError(f"export onnx: input {info.name!r} has shape {info.shape}; give every input's shape "
                              "with --input-shape (e.g. --input-shape 1,3,224,224)")
        if info.dtype is None:
            raise ExportError(f"export onnx: input {info.name!r} is not a tensor; only tensor inputs can be exported")
        examples.append(np.zeros(shape, info.dtype.np))
    input_names = [info.name for info in model.inputs]
    output_names = [info.name for info in model.outputs]

    def forward(*tensors):
        outputs = model.run(dict(zip(input_names, tensors)))
        return tuple(outputs[output_name] for output_name in output_names)

    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return to_c(forward, examples, str(Path(out_dir) / f"{name}.c"), name=name, weights=weights)


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape: give sizes separated by commas, e.g. 1,3,224,224") from None
    if any(size < 0 for size in shape):
        raise argparse.ArgumentTypeError(f"{text!r} has a negative size")
    return shape


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lazygrad.export", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    digits = commands.add_parser("digits", help="the digits demo's checkpoint (extra/train_digits.py)")
    digits.add_argument("checkpoint", help="a safetensors file written by extra/train_digits.py")
    digits.add_argument("out_dir")
    digits.add_argument("--batch", type=int, default=1, help="images per forward (default 1)")
    onnx = commands.add_parser("onnx", help="an ONNX model, run by lazygrad.onnx")
    onnx.add_argument("model", help="an .onnx file")
    onnx.add_argument("out_dir")
    onnx.add_argument("--input-shape", type=parse_shape, action="append", metavar="N,C,H,W",
                      help="an input's shape; once per input, in order (default: the model's, if fixed)")
    for command in (digits, onnx):
        command.add_argument("--name", default="model", help="prefix of the file and its symbols (default model)")
        command.add_argument("--weights", choices=("inline", "file"), default="inline",
                             help="constants as static arrays in the .c file (default) or in <name>.bin")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        if args.command == "digits":
            result = export_digits(args.checkpoint, args.out_dir, args.name, args.batch, args.weights)
        else:
            result = export_onnx(args.model, args.out_dir, args.input_shape, args.name, args.weights)
    except ExportError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"{result.header_path}: {args.name.upper()}_ARENA_BYTES {result.arena_bytes}, "
          f"{args.name.upper()}_WEIGHT_BYTES {result.weight_bytes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
