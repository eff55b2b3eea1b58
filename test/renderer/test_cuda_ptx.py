"""The CUDA renderer's source compiles to PTX, checked without a GPU (nvcc, or NVRTC through cupy).

Representative kernels (every elementwise op at several dtypes, every cast and bitcast, reduces,
view chains, matmul, softmax, an indexed load) come from the scheduler. nvcc takes about a second per file, so the
kernels are compiled together in one file (their helpers are identical text, kept once); if that
fails, each kernel is compiled alone to name the ones at fault.
"""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from lazygrad import Context, Tensor, dtypes
from lazygrad.devices import DeviceUnavailable
from lazygrad.devices.cuda import compile_to_ptx, find_nvcc, import_cupy
from lazygrad.dtype import ALL_DTYPES
from lazygrad.ops import ELEMENTWISE, OPS
from lazygrad.renderer.cuda import CUDARenderer
from lazygrad.codegen.linearize import linearize
from lazygrad.schedule.fuse import create_schedule


def _why_cuda_cannot_compile() -> str | None:
    if find_nvcc() is not None:
        return None
    try:
        import_cupy()
    except DeviceUnavailable:
        return "neither nvcc (the CUDA toolkit) nor cupy (pip install lazygrad[cuda]) is installed"
    return None


UNAVAILABLE = _why_cuda_cannot_compile()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"cannot compile CUDA: {UNAVAILABLE}")



def tensor(shape, dtype=np.float32) -> Tensor:
    return Tensor(np.ones(shape, dtype=dtype), device="CPU")


def softmax(x: Tensor) -> Tensor:
    exponentials = (x - x.amax(-1, keepdim=True)).exp()
    return exponentials / exponentials.sum(-1, keepdim=True)


def _elementwise_graphs():
    for name in sorted(ELEMENTWISE - {"CAST", "BITCAST"}):
        for dtype in (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64,
                      dtypes.float16, dtypes.float32, dtypes.float64):
            if dtype.is_float and OPS[name].integer_only:
                continue
            if not dtype.is_float and OPS[name].float_only:
                continue
            if dtype.is_bool and name not in ("AND", "OR", "XOR", "MAX", "CMPLT", "CMPNE", "WHERE"):
                continue
            operands = [tensor((4, 6), dtype.np).lazydata for _ in range(OPS[name].arity)]
            if name == "WHERE":
                operands[0] = tensor((4, 6), np.bool_).lazydata
            yield f"{name}-{dtype.name}", Tensor(operands[0].alu(OPS[name], *operands[1:]))


def _cast_graphs():
    for source, target in itertools.permutations(ALL_DTYPES, 2):
        yield f"cast-{source.name}-{target.name}", tensor((8,), source.np).cast(target)
        if source.itemsize == target.itemsize and not (source.is_bool or target.is_bool):
            yield f"bitcast-{source.name}-{target.name}", tensor((8,), source.np).bitcast(target)


def _other_graphs():
    for dtype in (np.float16, np.float32, np.float64, np.int32):
        yield f"sum-{np.dtype(dtype).name}", tensor((4, 6), dtype).sum(1, keepdim=True)
        yield f"max-{np.dtype(dtype).name}", tensor((4, 6), dtype).amax(0)
        yield f"prod-{np.dtype(dtype).name}", tensor((4, 6), dtype).prod()
    yield "any", tensor((4, 6), np.bool_).amax(1)
    yield "column-sum", tensor((64, 32)).sum(0)
    yield "views", tensor((4, 6)).pad(((1, 2), (0, 3))).flip(0).permute(1, 0).shrink(((1, 8), (0, 5))) + 1
    yield "padded-exp", tensor((4, 6)).pad(((2, 0), (1, 1))).exp()
    yield "five-dims", tensor((2, 3, 4, 5, 2), np.int32).permute(4, 2, 0, 3, 1) * 3
    yield "matmul", tensor((8, 16)) @ tensor((16, 5))
    yield "spread-matmul", tensor((1024, 384)) @ tensor((384, 1536))  # a register tile (opts.py spread_tile)
    yield "grouped-convolution", tensor((1, 512, 7, 7)).conv2d(tensor((512, 512, 3, 3)), padding=1)  # tile and lanes
    yield "softmax", softmax(tensor((6, 10)))
    yield "big", tensor((1000,)) * 2
    yield "indexed-load", tensor((10, 6))[Tensor(np.array([[3, -1], [12, 0]]), device="CPU")] * 2
    source = tensor((4, 6))
    yield "several-outputs", (source + 1, (source * 2).cast(dtypes.float16), source > 0)


def representative_kernels() -> list[tuple[str, object]]:
    """(label, program) for every kernel of every representative graph."""
    renderer = CUDARenderer()
    kernels = []
    for label, results in itertools.chain(_elementwise_graphs(), _cast_graphs(), _other_graphs()):
        results = results if isinstance(results, tuple) else (results,)
        for number, item in enumerate(create_schedule([result.lazydata for result in results])):
            kernels.append((f"{label}-{number}", linearize(item.kernel, renderer)))
    return kernels


def one_file(programs) -> tuple[str, list[str]]:
    """All kernels in one CUDA file: each helper once, each kernel renamed k<n>_<name>."""
    renderer = CUDARenderer()
    helpers, bodies, names = [], [], []
    for number, program in enumerate(programs):
        _, kernel_helpers, body = renderer.render_parts(program)
        helpers += [helper for helper in kernel_helpers if helper not in helpers]
        name = f"k{number}_{program.name}"
        bodies.append(body.replace(f" {program.name}(", f" {name}(", 1))
        names.append(name)
    return "\n".join(helpers) + "\n\n" + "\n\n".join(bodies) + "\n", names


def test_every_representative_kernel_compiles_to_ptx(tmp_path):
    kernels = representative_kernels()
    assert len(kernels) > 150
    source, names = one_file([program for _, program in kernels])
    with Context(LAZYGRAD_CACHE=tmp_path):
        try:
            ptx = compile_to_ptx(source)
        except RuntimeError:
            failing = []
            for label, program in kernels:
                try:
                    compile_to_ptx(CUDARenderer().render_program(program))
                except RuntimeError as error:
                    failing.append(f"{label}:\n{error}")
            pytest.fail(f"{len(failing)} kernel(s) do not compile:\n\n" + "\n\n".join(failing[:5]))
    entries = set(re.findall(r"\.entry\s+(\w+)\(", ptx))
    assert entries == set(names)


@pytest.mark.parametrize("label", ["softmax-0", "softmax-1", "WHERE-float16-0", "several-outputs-0"])
def test_a_whole_rendered_source_compiles_alone(label, tmp_path):
    program = dict(representative_kernels())[label]
    source = CUDARenderer().render_program(program)
    with Context(LAZYGRAD_CACHE=tmp_path):
        ptx = compile_to_ptx(source)
    assert re.search(rf"\.entry\s+{program.name}\(", ptx)


def _work_group_programs():
    """Kernels under LOCAL and GROUP: grouped sums, max (with NaN handling), a float16 sum, a bool
    any, an upcast tile in a group, a max and a sum in one grouped kernel, and softmax's kernels
    with local rows."""
    from lazygrad.codegen.axes import merge_dims
    from lazygrad.codegen.opts import Opt
    renderer = CUDARenderer()
    graphs = [
        ("group-sum", tensor((4, 64)).sum(1), [Opt("GROUP", 1, 16)]),
        ("group-max", tensor((4, 64)).amax(1), [Opt("GROUP", 1, 8), Opt("UNROLL", 1, 4)]),
        ("group-half", tensor((4, 64), np.float16).sum(1), [Opt("GROUP", 1, 32)]),
        ("group-any", tensor((4, 64), np.bool_).amax(1), [Opt("GROUP", 1, 16)]),
        ("group-all", tensor((256,)).sum(), [Opt("GROUP", 0, 64)]),
        ("local-group-upcast", tensor((8, 64)).sum(1), [Opt("UPCAST", 0, 2), Opt("LOCAL", 0, 4), Opt("GROUP", 3, 8)]),
        ("local-matmul", tensor((8, 16)) @ tensor((16, 32)), [Opt("LOCAL", 1, 32), Opt("LOCAL", 0, 4)]),
        ("group-chained", (tensor((4, 64)) - tensor((4, 64)).amax(1, keepdim=True)).sum(1), [Opt("GROUP", 1, 16)]),
    ]
    for label, result, opts in graphs:
        for number, item in enumerate(create_schedule([result.lazydata])):
            yield f"{label}-{number}", linearize(merge_dims(item.kernel), renderer, opts=opts)
    for number, item in enumerate(create_schedule([softmax(tensor((8, 16))).lazydata])):
        yield f"local-softmax-{number}", linearize(merge_dims(item.kernel), renderer, opts=[Opt("LOCAL", 0, 4)])


def test_work_group_kernels_compile_to_ptx(tmp_path):
    programs = list(_work_group_programs())
    source, names = one_file([program for _, program in programs])
    assert "__syncthreads();" in source and "__shared__" in source
    with Context(LAZYGRAD_CACHE=tmp_path):
        ptx = compile_to_ptx(source)
    assert set(re.findall(r"\.entry\s+(\w+)\(", ptx)) == set(names)
    assert "bar.sync" in ptx
