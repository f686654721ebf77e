"""The cubepy side of ``benchmarks.sass``: each kernel here has a CUDA C++ twin in ``benchmarks/cuda/``.

The twins use the same tiles, element types, 32-bit index math and guards; ``CASES`` says how each is
compiled (cube dim, arguments, checked or unchecked) and which ``.cu`` file and entry it is compared to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import cubepy as cp
from cubepy import (
    ABSOLUTE_POS,
    CUBE_POS,
    CUBE_POS_X,
    CUBE_POS_Y,
    UNIT_POS,
    UNIT_POS_X,
    UNIT_POS_Y,
    Array,
    Comptime,
    Line,
    SharedMemory,
    Tensor,
    cube,
    f16,
    f32,
)

PLANE = 32


@cube(launch=True, launch_unchecked=True)
def vector_add_lines(lhs: Array[Line[f32]], rhs: Array[Line[f32]], out: Array[Line[f32]]):
    """out[i] = lhs[i] + rhs[i], four f32 per unit."""
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = lhs[ABSOLUTE_POS] + rhs[ABSOLUTE_POS]


@cube(launch=True, launch_unchecked=True)
def saxpy(a: f32, x: Array[f32], y: Array[f32], out: Array[f32]):
    """out[i] = a * x[i] + y[i]."""
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = a * x[ABSOLUTE_POS] + y[ABSOLUTE_POS]


@cube(launch=True, launch_unchecked=True)
def sgemm(a: Tensor[f32], b: Tensor[f32], c: Tensor[f32], tile: Comptime[int]):
    """c = a @ b through tile x tile shared-memory tiles; k a multiple of the tile."""
    a_tile = SharedMemory[f32](tile * tile)
    b_tile = SharedMemory[f32](tile * tile)
    row = CUBE_POS_Y * tile + UNIT_POS_Y
    col = CUBE_POS_X * tile + UNIT_POS_X
    m = a.shape(0)
    k = a.shape(1)
    n = b.shape(1)
    acc = f32(0.0)
    for k0 in cp.range(0, k, tile, unroll=1):
        a_tile[UNIT_POS_Y * tile + UNIT_POS_X] = a[row * k + k0 + UNIT_POS_X]
        b_tile[UNIT_POS_Y * tile + UNIT_POS_X] = b[(k0 + UNIT_POS_Y) * n + col]
        cp.sync_cube()
        for kk in cp.unroll(range(tile)):
            acc += a_tile[UNIT_POS_Y * tile + kk] * b_tile[kk * tile + UNIT_POS_X]
        cp.sync_cube()
    if row < m and col < n:
        c[row * n + col] = acc


@cube(launch=True, launch_unchecked=True)
def row_sum(x: Tensor[f32], out: Array[f32], block: Comptime[int]):
    """out[r] = sum of row r: each unit a strided partial, plane_sum, then the planes' sums via shared memory."""
    partials = SharedMemory[f32](block // PLANE)
    cols = x.shape(1)
    base = CUBE_POS * cols
    acc = f32(0.0)
    for c in cp.range(UNIT_POS, cols, block, unroll=1):
        acc += x[base + c]
    total = cp.plane_sum(acc)
    if cp.UNIT_POS_PLANE == 0:
        partials[cp.PLANE_POS] = total
    cp.sync_cube()
    if cp.PLANE_POS == 0:
        value = f32(0.0)
        if cp.UNIT_POS_PLANE < block // PLANE:
            value = partials[cp.UNIT_POS_PLANE]
        row_total = cp.plane_sum(value)
        if UNIT_POS == 0:
            out[CUBE_POS] = row_total


@cube(launch=True, launch_unchecked=True)
def softmax(x: Tensor[f32], out: Tensor[f32]):
    """out[r, :] = softmax(x[r, :]); one plane per row."""
    cols = x.shape(1)
    base = CUBE_POS * x.stride(0)
    local_max = f32(-3.0e38)
    for c in cp.range(UNIT_POS, cols, PLANE, unroll=1):
        local_max = cp.max(local_max, x[base + c])
    row_max = cp.plane_max(local_max)
    local_sum = f32(0.0)
    for c in cp.range(UNIT_POS, cols, PLANE, unroll=1):
        local_sum += cp.exp(x[base + c] - row_max)
    row_sum_ = cp.plane_sum(local_sum)
    for c in cp.range(UNIT_POS, cols, PLANE, unroll=1):
        out[base + c] = cp.exp(x[base + c] - row_max) / row_sum_


@cube(launch=True, launch_unchecked=True)
def layer_norm(x: Tensor[f32], gamma: Array[f32], beta: Array[f32], out: Tensor[f32], eps: f32):
    """out[r, :] = (x[r, :] - mean) / sqrt(var + eps) * gamma + beta; one plane per row."""
    cols = x.shape(1)
    base = CUBE_POS * x.stride(0)
    total = f32(0.0)
    for c in cp.range(UNIT_POS, cols, PLANE, unroll=1):
        total += x[base + c]
    mean = cp.plane_sum(total) / f32(cols)
    sq = f32(0.0)
    for c in cp.range(UNIT_POS, cols, PLANE, unroll=1):
        d = x[base + c] - mean
        sq += d * d
    rstd = cp.rsqrt(cp.plane_sum(sq) / f32(cols) + eps)
    for c in cp.range(UNIT_POS, cols, PLANE, unroll=1):
        out[base + c] = (x[base + c] - mean) * rstd * gamma[c] + beta[c]


@cube(launch=True, launch_unchecked=True)
def transpose(x: Tensor[f32], out: Tensor[f32], tile: Comptime[int], rows_per_pass: Comptime[int]):
    """out = x.T through a (tile x tile+1) shared tile; cube (tile, rows_per_pass)."""
    buf = SharedMemory[f32](tile * (tile + 1))
    rows = x.shape(0)
    cols = x.shape(1)
    col = CUBE_POS_X * tile + UNIT_POS_X
    for j in cp.unroll(range(0, tile, rows_per_pass)):
        row = CUBE_POS_Y * tile + UNIT_POS_Y + j
        if row < rows and col < cols:
            buf[(UNIT_POS_Y + j) * (tile + 1) + UNIT_POS_X] = x[row * cols + col]
    cp.sync_cube()
    out_col = CUBE_POS_Y * tile + UNIT_POS_X
    for j in cp.unroll(range(0, tile, rows_per_pass)):
        out_row = CUBE_POS_X * tile + UNIT_POS_Y + j
        if out_row < cols and out_col < rows:
            out[out_row * rows + out_col] = buf[UNIT_POS_X * (tile + 1) + UNIT_POS_Y + j]


@cube(launch=True)
def wmma_tile(a: Array[f16], b: Array[f16], c: Array[f32], out: Array[f32]):
    """out = a @ b + c for one 16x16x16 f16 tile on one plane (a row-major, b column-major)."""
    a_tile = SharedMemory[f16](256)
    b_tile = SharedMemory[f16](256)
    for i in cp.range(UNIT_POS, 256, 32, unroll=1):
        a_tile[i] = a[i]
        b_tile[i] = b[i]
    cp.sync_cube()
    ident, layout = cp.cmma.MatrixIdent, cp.cmma.MatrixLayout
    lhs = cp.cmma.Matrix[f16].from_slice(ident.A, 16, 16, 16, "row", a_tile, 16)
    rhs = cp.cmma.Matrix[f16].uninitialized(ident.B, 16, 16, 16, "col")
    cp.cmma.load(rhs, b_tile.slice(0, 256), 16)
    acc = cp.cmma.Matrix[f32].uninitialized(ident.ACCUMULATOR, 16, 16, 16)
    cp.cmma.load_with_layout(acc, c, 16, layout.ROW_MAJOR)
    cp.cmma.execute(lhs, rhs, acc, acc)
    cp.cmma.store(out, acc, 16, layout.ROW_MAJOR)


@dataclass(frozen=True)
class Case:
    """One comparison: how to compile the cubepy kernel, and the CUDA file and entry it is set against."""

    name: str
    compile: Callable[..., object]  # (contract, unchecked) -> CompiledKernel
    cuda_file: str
    cuda_entry: str
    checked: bool = False


def _compile(kernel, cube_dim, args, unchecked: bool):
    def build(**options):
        options.setdefault("unchecked", unchecked)  # ``--modes`` compiles both
        return kernel.compile(cp.CubeDim(*cube_dim), *args(), **options)

    return build


def _client():
    return cp.client("interp")


def _arr(shape, dtype=np.float32, line=None):
    handle = _client().zeros(shape, dtype)
    return cp.ArrayArg(handle, line_size=line) if line else cp.ArrayArg(handle)


def _ten(shape, dtype=np.float32):
    return cp.TensorArg(_client().zeros(shape, dtype))


def _vector_add_args():
    return (_arr((4096,), line=4), _arr((4096,), line=4), _arr((4096,), line=4))


def _saxpy_args():
    return (cp.ScalarArg(2.0, f32), _arr((4096,)), _arr((4096,)), _arr((4096,)))


def _sgemm_args():
    return (_ten((64, 64)), _ten((64, 64)), _ten((64, 64)), 16)


def _tma_roundtrip():
    from examples import tma_roundtrip as example

    def build(**options):
        client = _client()
        src, dst = client.zeros((40, 72), np.float32), client.zeros((40, 72), np.float32)
        maps = [cp.TensorMapArg.tiled(cp.TensorArg(h), (example.ROWS, example.COLS)) for h in (src, dst)]
        return example.tma_roundtrip.compile(
            cp.CubeDim(128), *maps, cp.ScalarArg(2.0, f32), example.ROWS, example.COLS, **options
        )

    return build


def _wgrad():
    def build(**options):
        from cubepy_layouts.conv import ConvolutionProblem
        from cubepy_layouts.conv.tma_gemm import tma_gemm_kernel
        from cubepy_layouts.conv.tma_wgrad import wgrad_tma_launch

        client = _client()
        problem = ConvolutionProblem.conv2d(
            (3, 9, 11, 16), (16, 3, 3, 16), stride=(2, 1), padding=(1, 2), dilation=(1, 2)
        )
        x, dy = client.zeros(problem.x_shape, np.float16), client.zeros(problem.out_shape, np.float16)
        launch = wgrad_tma_launch(x, dy, client.zeros(problem.w_shape, np.float32), problem)
        return tma_gemm_kernel(launch.elem).compile(launch.cube_dim, *launch.args, **options)

    return build


def _rows(cols=1000):
    return lambda: (_ten((64, cols)), _ten((64, cols)))


CASES: tuple[Case, ...] = (
    Case(
        "vector add Line[f32]x4",
        _compile(vector_add_lines, (256,), _vector_add_args, True),
        "vector_add.cu",
        "vector_add_lines",
    ),
    Case("saxpy f32", _compile(saxpy, (256,), _saxpy_args, True), "saxpy.cu", "saxpy"),
    Case("SGEMM 16x16 unchecked", _compile(sgemm, (16, 16), _sgemm_args, True), "sgemm.cu", "sgemm16"),
    Case(
        "SGEMM 16x16 checked",
        _compile(sgemm, (16, 16), _sgemm_args, False),
        "sgemm.cu",
        "sgemm16_checked",
        checked=True,
    ),
    Case(
        "row sum (plane_sum)",
        _compile(row_sum, (256,), lambda: (_ten((64, 1000)), _arr((64,)), 256), True),
        "row_sum.cu",
        "row_sum",
    ),
    Case("softmax (plane per row)", _compile(softmax, (32,), _rows(), True), "softmax.cu", "softmax"),
    Case(
        "layer norm (plane per row)",
        _compile(
            layer_norm,
            (32,),
            lambda: (_ten((64, 1000)), _arr((1000,)), _arr((1000,)), _ten((64, 1000)), cp.ScalarArg(1e-5, f32)),
            True,
        ),
        "layer_norm.cu",
        "layer_norm",
    ),
    Case(
        "transpose 32x32 smem",
        _compile(transpose, (32, 8), lambda: (_ten((100, 70)), _ten((70, 100)), 32, 8), True),
        "transpose.cu",
        "transpose32",
    ),
    Case("TMA 2-D round trip", _tma_roundtrip(), "tma_roundtrip.cu", "tma_roundtrip", checked=True),
    Case(
        "wmma 16x16x16 f16",
        _compile(
            wmma_tile,
            (32,),
            lambda: (_arr((256,), np.float16), _arr((256,), np.float16), _arr((256,)), _arr((256,))),
            False,
        ),
        "wmma_tile.cu",
        "wmma_tile_checked",
        checked=True,
    ),
    Case("TMA conv wgrad (f16)", _wgrad(), "conv_wgrad_tma.cu", "conv_wgrad_tma", checked=True),
)
