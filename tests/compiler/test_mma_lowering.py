"""``mma.sync``, ``ldmatrix``, ``stmatrix`` lowered to PTX and assembled by ptxas for sm_80 and sm_90a."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS_PLANE, Array, SharedMemory, bf16, cube, f16, f32, i8, i32
from cubepy.compiler import ptxas

from .conftest import needs_ptxas

CASES = [
    ("m16n8k16", f16, f32, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
    ("m16n8k16", bf16, f32, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
    ("m16n8k8", f32, f32, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
    ("m16n8k32", i8, i32, "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"),
]


LENGTHS = {"m16n8k16": (8, 4), "m16n8k8": (4, 2), "m16n8k32": (16, 8)}


def mma_kernel(shape: str, elem, acc):
    la, lb = LENGTHS[shape]

    @cube(launch=True)
    def mma_in_registers(a: Array[elem], b: Array[elem], d: Array[acc]):
        fa = cp.mma_fragment(shape, "a", elem)
        fb = cp.mma_fragment(shape, "b", elem)
        fc = cp.mma_fragment(shape, "c", acc)
        for i in cp.unroll(range(la)):
            fa[i] = a[UNIT_POS_PLANE * la + i]
        for i in cp.unroll(range(lb)):
            fb[i] = b[UNIT_POS_PLANE * lb + i]
        for i in cp.unroll(range(4)):
            fc[i] = acc(0)
        cp.mma_sync(shape, fa, fb, fc, out=fc)
        for i in cp.unroll(range(4)):
            row, col = cp.mma_fragment_index(shape, "d", i)
            d[row * 8 + col] = fc[i]

    return mma_in_registers


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize(("shape", "elem", "acc", "instruction"), CASES, ids=[f"{c[0]}-{c[1]!r}" for c in CASES])
def test_mma_sync_assembles_with_fragments_in_registers(shape, elem, acc, instruction, target):
    client = cp.client("interp")
    args = [cp.ArrayArg(client.zeros((512,), t.numpy)) for t in (elem, elem, acc)]
    compiled = mma_kernel(shape, elem, acc).compile(cp.CubeDim(32), *args, target=target)
    assert instruction in compiled.ptx
    assert compiled.cubin
    assert compiled.resources.stack_bytes == 0  # the fragments live in registers


@cube(launch=True)
def matrices_through_shared(src: Array[f16], out: Array[f16]):
    tile = SharedMemory.aligned(f16, 256, 16)
    for i in range(UNIT_POS_PLANE, 256, 32):
        tile[i] = src[i]
    cp.sync_cube()
    x4 = cp.ldmatrix(tile, UNIT_POS_PLANE * 8, 4)
    x2t = cp.ldmatrix(tile, UNIT_POS_PLANE * 8, 2, True)
    x1 = cp.ldmatrix(tile, UNIT_POS_PLANE * 8, 1)
    cp.sync_cube()
    cp.stmatrix(tile, UNIT_POS_PLANE * 8, x4, 4, True)
    cp.stmatrix(tile, UNIT_POS_PLANE * 8, x2t, 2)
    cp.stmatrix(tile, UNIT_POS_PLANE * 8, x1, 1)
    cp.sync_cube()
    for i in range(UNIT_POS_PLANE, 256, 32):
        out[i] = tile[i]


@cube(launch=True)
def ldmatrix_only(src: Array[f16], out: Array[f16]):
    tile = SharedMemory.aligned(f16, 256, 16)
    for i in range(UNIT_POS_PLANE, 256, 32):
        tile[i] = src[i]
    cp.sync_cube()
    x4 = cp.ldmatrix(tile.slice(8, 256), UNIT_POS_PLANE * 8, 4, True)
    for e in cp.unroll(range(8)):
        out[UNIT_POS_PLANE * 8 + e] = x4[e]


def _f16_args():
    client = cp.client("interp")
    return [cp.ArrayArg(client.zeros((256,), np.float16)) for _ in range(2)]


@needs_ptxas
def test_ldmatrix_and_stmatrix_assemble_for_sm_90a():
    compiled = matrices_through_shared.compile(cp.CubeDim(32), *_f16_args(), target="sm_90a")
    for text in (
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x1.shared.b16",
        "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
        "stmatrix.sync.aligned.m8n8.x2.shared.b16",
        "stmatrix.sync.aligned.m8n8.x1.shared.b16",
    ):
        assert text in compiled.ptx
    assert compiled.cubin and compiled.resources.stack_bytes == 0


@needs_ptxas
def test_ldmatrix_assembles_for_sm_80():
    compiled = ldmatrix_only.compile(cp.CubeDim(32), *_f16_args(), target="sm_80")
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in compiled.ptx
    assert compiled.cubin


def test_stmatrix_is_refused_by_ptxas_for_sm_80():
    """stmatrix is an sm_90 instruction: ptxas says so for sm_80 (the interp runs it anyway)."""
    if not ptxas.available():
        pytest.skip(ptxas.unavailable_reason() or "ptxas not found")
    with pytest.raises(cp.CompileError, match="stmatrix"):
        matrices_through_shared.compile(cp.CubeDim(32), *_f16_args(), target="sm_80")


def test_interp_runs_the_assembled_kernel(client):
    """The kernel above through every runtime: x1 store last, so rows 0..7 come back as ldmatrix.x1 read them."""
    src = np.arange(256, dtype=np.float16)
    out = client.zeros((256,), np.float16)
    matrices_through_shared.launch(
        client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(client.create(src)), cp.ArrayArg(out)
    )
    np.testing.assert_array_equal(client.read(out)[:64], src[:64])
