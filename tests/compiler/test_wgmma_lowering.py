"""wgmma in PTX: the instruction forms for each input type and N, with A from shared memory or registers,
accepted by ptxas for sm_90a without spills; and the cpu runtime's refusal."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, LocalArray, SharedMemory, cube, f32

INPUTS = {"f16": cp.f16, "bf16": cp.bf16, "tf32": cp.f32, "e4m3": cp.e4m3, "e5m2": cp.e5m2}
K = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32}


def tile_kernel(name: str, n: int, a_in_registers: bool):
    """One wgmma of 64 x n x K from a 128B-swizzled tile, stored raw per unit."""
    elem, k = INPUTS[name], K[name]
    items = 64 * 128 // elem.size
    half = n // 2
    regs = 64 * k // 128
    input_type = "tf32" if name == "tf32" else elem

    @cube(launch=True)
    def one_wgmma(tile_in: Array[elem], out: Array[f32]):
        tile = SharedMemory[elem](max(items, n * 128 // elem.size), alignment=1024)
        for i in range(UNIT_POS, items, 128):
            tile[i] = tile_in[i]
        cp.sync_cube()
        acc = LocalArray[f32](half)
        for i in cp.unroll(range(half)):
            acc[i] = f32(0)
        desc = cp.wgmma_descriptor(tile, 16, 1024, "128B")
        if a_in_registers:
            a_frag = LocalArray[elem](regs)
            for i in cp.unroll(range(regs)):
                a_frag[i] = tile_in[UNIT_POS * regs + i]
            cp.wgmma_fence()
            cp.wgmma_mma_async(acc, a_frag, desc, shape=(64, n, k), elem=input_type, scale_d=True)
        else:
            cp.wgmma_fence()
            cp.wgmma_mma_async(acc, desc, desc, shape=(64, n, k), elem=input_type, scale_d=True)
        cp.wgmma_commit_group()
        cp.wgmma_wait_group(0)
        for i in cp.unroll(range(half)):
            out[UNIT_POS * half + i] = acc[i]

    return one_wgmma


def compile_tile(name: str, n: int, a_in_registers: bool):
    kernel = tile_kernel(name, n, a_in_registers)
    return kernel.compile(
        cp.CubeDim(128), cp.BufferCompilationArg(INPUTS[name], 1), cp.BufferCompilationArg(f32, 1), target="sm_90a"
    )


@pytest.mark.ptxas
@pytest.mark.parametrize("n", [8, 64, 128, 256])
@pytest.mark.parametrize("name", list(INPUTS))
def test_each_type_and_width_assembles_for_sm_90a(name, n):
    compiled = compile_tile(name, n, a_in_registers=False)
    instruction = f"wgmma.mma_async.sync.aligned.m64n{n}k{K[name]}.f32.{name}.{name}"
    lines = [line for line in compiled.ptx.splitlines() if instruction in line]
    assert len(lines) == 1, compiled.ptx
    registers = re.search(r"\{([^}]*)\}", lines[0]).group(1).split(",")
    assert len(registers) == n // 2  # m64nN: N/2 f32 accumulator registers per unit
    # A and B descriptors, the scale-d predicate, then the immediates (f16/bf16 add the two transposes).
    tail = lines[0].split("}", 1)[1]
    assert tail.strip().endswith("p, 1, 1, 0, 0;" if name in ("f16", "bf16") else "p, 1, 1;")
    for fence in ("wgmma.fence.sync.aligned;", "wgmma.commit_group.sync.aligned;", "wgmma.wait_group.sync.aligned 0;"):
        assert fence in compiled.ptx
    assert compiled.cubin
    assert compiled.resources.spill_store_bytes == 0 and compiled.resources.spill_load_bytes == 0


@pytest.mark.ptxas
@pytest.mark.parametrize("name", list(INPUTS))
def test_a_from_registers_takes_four_b32_registers(name):
    compiled = compile_tile(name, 64, a_in_registers=True)
    line = next(line for line in compiled.ptx.splitlines() if "wgmma.mma_async" in line)
    a_operand = line.split("}, ", 1)[1]
    assert re.match(r"\{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, p, 1, 1", a_operand), line
    assert line.rstrip().endswith("p, 1, 1, 0;" if name in ("f16", "bf16") else "p, 1, 1;")
    assert compiled.cubin


@cube(launch=True)
def a_converted_from_f32(tile_in: Array[cp.f16], values: Array[f32], out: Array[f32]):
    """A from registers that are computed (f32 -> f16 conversions) and used after another wgmma, as
    FlashAttention's P is (S = Q K^T, then P V)."""
    tile = SharedMemory[cp.f16](64 * 64, alignment=1024)
    for i in range(UNIT_POS, 64 * 64, 128):
        tile[i] = tile_in[i]
    cp.sync_cube()
    acc = LocalArray[f32](32)
    scores = LocalArray[f32](32)
    p = LocalArray[f32](8)
    for i in cp.unroll(range(32)):
        acc[i] = f32(0)
    for i in cp.unroll(range(8)):
        p[i] = values[UNIT_POS * 8 + i] * f32(0.5)
    fragment = cp.wgmma_a_from_accumulator(p, 0, cp.f16)
    desc = cp.wgmma_descriptor(tile, 16, 1024, "128B")
    cp.wgmma_fence()
    cp.wgmma_mma_async(scores, desc, desc, shape=(64, 64, 16), elem=cp.f16, scale_d=False)
    cp.wgmma_commit_group()
    cp.wgmma_mma_async(acc, fragment, desc, shape=(64, 64, 16), elem=cp.f16)
    cp.wgmma_commit_group()
    cp.wgmma_wait_group(0)
    for i in cp.unroll(range(32)):
        out[UNIT_POS * 32 + i] = acc[i] + scores[i]


@pytest.mark.ptxas
def test_computed_a_registers_are_written_before_the_fence():
    # the fence pins A's packed registers, so the conversions and the packing happen before it: ptxas needs
    # no warpgroup.arrive of its own between the fence and the wgmma (it notes each one it injects as C7519)
    compiled = a_converted_from_f32.compile(
        cp.CubeDim(128),
        cp.BufferCompilationArg(cp.f16, 1),
        cp.BufferCompilationArg(f32, 1),
        cp.BufferCompilationArg(f32, 1),
        target="sm_90a",
    )
    assert compiled.cubin
    assert "cvt.rn.f16x2.f32" in compiled.ptx  # the pairs convert packed
    assert "C7519" not in compiled.ptxas_log, compiled.ptxas_log


def test_wgmma_outside_sm_90a_is_refused():
    kernel = tile_kernel("f16", 8, a_in_registers=False)
    with pytest.raises(cp.CompileError, match="wgmma needs sm_90a"):
        kernel.compile(
            cp.CubeDim(128), cp.BufferCompilationArg(cp.f16, 1), cp.BufferCompilationArg(f32, 1), target="sm_80"
        )


@pytest.mark.parametrize("name", list(INPUTS))
@pytest.mark.parametrize("a_in_registers", [False, True], ids=["a-smem", "a-regs"])
def test_the_cpu_runtime_gives_the_interps_bits(name, a_in_registers):
    kernel = tile_kernel(name, 16, a_in_registers)
    elem = INPUTS[name]
    rng = np.random.default_rng(3)
    values = rng.standard_normal(64 * 128 // elem.size).astype(np.float32)
    results = []
    for runtime in ("interp", "cpu"):
        client = cp.client(runtime)
        out = client.zeros((128 * 8,), np.float32)
        tile = client.create(values.astype(elem.numpy))
        kernel.launch(client, cp.CubeCount(2), cp.CubeDim(128), cp.ArrayArg(tile), cp.ArrayArg(out))
        results.append(client.read(out))
    assert np.any(results[0] != 0)
    np.testing.assert_array_equal(results[1], results[0])


def transposed_kernel(name: str, major_a: str, major_b: str, a_in_registers: bool):
    """One m64n64k16 wgmma on 128B-swizzled tiles with the given major orders."""
    elem = INPUTS[name]

    @cube(launch=True)
    def transposed(tile_in: Array[elem], out: Array[f32]):
        tile = SharedMemory[elem](64 * 64, alignment=1024)
        for i in range(UNIT_POS, 64 * 64, 128):
            tile[i] = tile_in[i]
        cp.sync_cube()
        acc = LocalArray[f32](32)
        desc = cp.wgmma_descriptor(tile, 8192, 1024, "128B")
        cp.wgmma_fence()
        if a_in_registers:
            a_frag = LocalArray[elem](8)
            for i in cp.unroll(range(8)):
                a_frag[i] = tile_in[UNIT_POS * 8 + i]
            cp.wgmma_fence()
            cp.wgmma_mma_async(acc, a_frag, desc, shape=(64, 64, 16), elem=elem, scale_d=False, major_b=major_b)
        else:
            cp.wgmma_mma_async(
                acc, desc, desc, shape=(64, 64, 16), elem=elem, scale_d=False, major_a=major_a, major_b=major_b
            )
        cp.wgmma_commit_group()
        cp.wgmma_wait_group(0)
        for i in cp.unroll(range(32)):
            out[UNIT_POS * 32 + i] = acc[i]

    return transposed


@pytest.mark.ptxas
@pytest.mark.parametrize("name", ["f16", "bf16"])
@pytest.mark.parametrize(
    "majors, a_in_registers, tail",
    [
        (("MN", "MN"), False, "p, 1, 1, 1, 1;"),
        (("K", "MN"), False, "p, 1, 1, 0, 1;"),
        (("MN", "K"), False, "p, 1, 1, 1, 0;"),
        (("K", "MN"), True, "p, 1, 1, 1;"),
    ],
)
def test_mn_major_tiles_set_the_transpose_immediates(name, majors, a_in_registers, tail):
    kernel = transposed_kernel(name, *majors, a_in_registers)
    compiled = kernel.compile(
        cp.CubeDim(128), cp.BufferCompilationArg(INPUTS[name], 1), cp.BufferCompilationArg(f32, 1), target="sm_90a"
    )
    line = next(line for line in compiled.ptx.splitlines() if "wgmma.mma_async" in line)
    assert f"wgmma.mma_async.sync.aligned.m64n64k16.f32.{name}.{name}" in line
    assert line.rstrip().endswith(tail), line
    assert compiled.cubin  # ptxas accepted it for sm_90a
