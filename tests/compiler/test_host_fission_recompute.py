"""Unit values computed again in the stretch that reads them (``FissionPlan.recomputed``) instead of being kept
in the per-unit frame: which values qualify, that the loads built from them are vector loads, and that the
results are the interp's bit for bit."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_POS, UNIT_POS, UNIT_POS_X, UNIT_POS_Y, Array, SharedMemory, cube, f32, u32
from cubepy.compiler.emit_host import compile_host
from cubepy.compiler.passes import run_passes
from cubepy.compiler.targets.host_fission_plan import RECOMPUTE_LIMIT, plan_fission
from cubepy.ir import VarKind
from cubepy.ir.scope import walk
from examples.matmul_tiled import matmul
from tests.compiler.fission import RUNTIMES, _definition

MATRIX = cp.BufferCompilationArg("f32", 1, rank=2)


def _plan(kernel, cube_dim, *args):
    definition, _ = run_passes(_definition(kernel, cube_dim, *args))
    plan = plan_fission(definition)
    assert plan is not None
    return definition, plan


def _defined_by_source_line(definition, text: str) -> set:
    """Keys of the values the kernel defines on the lines of this file that hold ``text``."""
    source = Path(__file__)
    lines = {i for i, line in enumerate(source.read_text().splitlines(), 1) if text in line}
    return {
        (inst.out.kind, inst.out.id)
        for inst in walk(definition.body)
        if inst.out is not None
        and inst.loc is not None
        and Path(inst.loc.file).name == source.name
        and inst.loc.line in lines
    }


def test_the_matmul_rows_and_columns_are_recomputed_and_its_tile_loads_are_vector_loads():
    definition, plan = _plan(matmul, cp.CubeDim(16, 16), MATRIX, MATRIX, MATRIX, 16)
    # row and col (CUBE_POS_Y * tile + UNIT_POS_Y ...) are read in the K loop's stretches and in the store
    frame = {(v.kind, v.id) for v in plan.per_unit}
    row, col = (definition.body.instructions[i].out for i in (1, 3))  # CUBE_POS_Y * 16 (cube-wide) + UNIT_POS_Y
    for value in (row, col):
        assert value is not None and (value.kind, value.id) in plan.recomputed
        assert (value.kind, value.id) not in frame
    assert any(v.kind is VarKind.MUT for v in plan.per_unit)  # the accumulator stays per unit
    host = compile_host(_definition(matmul, cp.CubeDim(16, 16), MATRIX, MATRIX, MATRIX, 16))
    # read back from the frame, a row made every tile load a gather of 16 floats; now the A tile's loads, in
    # both copies of the K loop (proven and checked), are contiguous vector loads (masked by the check).  The B
    # tile's index, (k0 + UNIT_POS_Y) * n + col, LLVM does not prove free of 32-bit wrapping: it gathers.
    contiguous = re.findall(r"masked\.load\.v\d+f32\.p1|load <\d+ x float>, ptr addrspace\(1\)", host.llvm_opt)
    gathers = re.findall(r"masked\.gather\.v\d+f32", host.llvm_opt)
    assert len(contiguous) >= 2 and len(contiguous) >= len(gathers), (len(contiguous), len(gathers))


@cube(launch=True)
def offsets_across_barriers(data: Array[f32], out: Array[f32], scale: u32):
    """Values from the unit's position and a scalar, read after one and two barriers and in a loop."""
    tile = SharedMemory[f32](64)
    base = CUBE_POS * 64 + UNIT_POS  # recomputable
    mirrored = (u32(63) - UNIT_POS) * scale % u32(64)  # ``%`` is not recomputable: kept in the frame
    shifted = (base << u32(1)) - base  # recomputable, from another recomputed value
    tile[UNIT_POS] = data[base]
    cp.sync_cube()
    total = tile[mirrored]
    for r in range(3):
        cp.sync_cube()
        total += tile[(UNIT_POS + r) % 64] + f32(shifted - base)
    cp.sync_cube()
    out[base] = total


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_recomputed_and_kept_values_give_what_numpy_gives(runtime):
    client = cp.client(runtime)
    data = np.arange(128, dtype=np.float32) * 0.5
    hd, ho = client.create(data), client.zeros(128, np.float32)
    offsets_across_barriers.launch(client, cp.CubeCount(2), cp.CubeDim(64), cp.ArrayArg(hd), cp.ArrayArg(ho), 5)
    expected = np.zeros(128, np.float32)
    for cube_index in range(2):
        block = data[cube_index * 64 : cube_index * 64 + 64]
        for unit in range(64):
            total = np.float32(block[(63 - unit) * 5 % 64])
            for r in range(3):
                total = np.float32(total + np.float32(block[(unit + r) % 64] + np.float32(0)))
            expected[cube_index * 64 + unit] = total
    np.testing.assert_array_equal(client.read(ho), expected)


def test_what_is_recomputed_and_what_stays_in_the_frame():
    definition, plan = _plan(offsets_across_barriers, cp.CubeDim(64), *_args())
    base = _defined_by_source_line(definition, "base = CUBE_POS * 64 + UNIT_POS")
    shifted = _defined_by_source_line(definition, "shifted = (base << u32(1)) - base")
    mirrored = _defined_by_source_line(definition, "mirrored = (u32(63) - UNIT_POS)")
    assert base and shifted and mirrored
    frame = {(v.kind, v.id) for v in plan.per_unit}
    # CUBE_POS * 64 is computed once per cube; the sums with the unit's position are computed again
    assert max(base) in plan.recomputed and max(shifted) in plan.recomputed
    assert not (base | shifted) & frame
    # its ``(63 - UNIT_POS) * scale`` is recomputable, the ``%`` of it is not: that value is kept
    assert max(mirrored) in frame and max(mirrored) not in plan.recomputed


def _args():
    return (cp.BufferCompilationArg("f32", 1), cp.BufferCompilationArg("f32", 1), cp.ScalarCompilationArg("u32"))


@cube(launch=True)
def long_chain(out: Array[u32]):
    """A value built by more additions than RECOMPUTE_LIMIT, read after a barrier: it stays in the frame."""
    tile = SharedMemory[u32](32)
    value = UNIT_POS
    for step in cp.unroll(range(16)):
        value = value + u32(step)
    tile[UNIT_POS] = value
    cp.sync_cube()
    out[UNIT_POS] = tile[(UNIT_POS + 1) % 32] + value


def test_a_value_past_the_recompute_limit_stays_in_the_frame_and_is_right():
    definition, plan = _plan(long_chain, cp.CubeDim(32), cp.BufferCompilationArg("u32", 1))
    assert RECOMPUTE_LIMIT < 16
    read_later = {(v.kind, v.id) for v in plan.per_unit if v.kind is VarKind.CONST}
    assert read_later and not read_later & set(plan.recomputed)
    for runtime in RUNTIMES:
        client = cp.client(runtime)
        out = client.zeros(32, np.uint32)
        long_chain.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out))
        units = np.arange(32, dtype=np.uint32)
        value = units + np.uint32(sum(range(16)))
        np.testing.assert_array_equal(client.read(out), value[(units + 1) % 32] + value)


@cube(launch=True)
def tile_positions(out: Array[f32]):
    """A 2-D cube: each unit's row and column, read after a barrier, place a value from shared memory."""
    tile = SharedMemory[f32](128)
    row = UNIT_POS_Y * 16 + UNIT_POS_X
    tile[row] = f32(row) * 0.25
    cp.sync_cube()
    out[CUBE_POS * 128 + row] = tile[127 - row] + f32(UNIT_POS_X)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_2d_cube_reads_its_recomputed_positions_after_a_barrier(runtime):
    client = cp.client(runtime)
    out = client.zeros(256, np.float32)
    tile_positions.launch(client, cp.CubeCount(2), cp.CubeDim(16, 8), cp.ArrayArg(out))
    row = np.arange(128)
    expected = ((127 - row) * 0.25 + row % 16).astype(np.float32)
    np.testing.assert_array_equal(client.read(out), np.concatenate([expected, expected]))
