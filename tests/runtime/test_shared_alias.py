"""``SharedMemory.alias``: one shared memory's bytes seen as another type, on the interp, cpu and PTX.

Expected values are numpy's ``view`` of the same bytes (little endian, as every runtime lays shared memory out).
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, SharedMemory, f16, f32, u32
from cubepy.errors import SanitizerError, SanitizerKind


@cp.cube(launch=True)
def reinterpret(halves: Array[f16], words: Array[f32], back: Array[f16], synced: u32):
    """Units write 256 halves; the bytes 256..511 are read back as 64 f32, then written as f32 and read as halves."""
    stage = SharedMemory[f16](256)
    tile = SharedMemory.alias(stage, f32, 64, byte_offset=256)
    for i in range(UNIT_POS, 256, 64):
        stage[i] = halves[i]
    if synced == 1:
        cp.sync_cube()
    words[UNIT_POS] = tile[UNIT_POS]
    cp.sync_cube()
    tile[UNIT_POS] = tile[UNIT_POS] * 2.0
    cp.sync_cube()
    for i in range(UNIT_POS, 256, 64):
        back[i] = stage[i]


def _launch(client, synced: int = 1):
    rng = np.random.default_rng(4)
    halves = rng.standard_normal(256).astype(np.float16)
    words, back = client.zeros((64,), np.float32), client.zeros((256,), np.float16)
    args = (cp.ArrayArg(client.create(halves)), cp.ArrayArg(words), cp.ArrayArg(back), cp.ScalarArg(synced, u32))
    reinterpret.launch(client, cp.CubeCount(1), cp.CubeDim(64), *args)
    return halves, client.read(words), client.read(back)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_the_view_reads_and_writes_the_same_bytes(runtime):
    halves, words, back = _launch(cp.client(runtime, sanitize=runtime == "interp"))
    seen = halves[128:].view(np.float32)
    np.testing.assert_array_equal(words.view(np.uint32), seen.view(np.uint32))
    doubled = (seen * np.float32(2.0)).view(np.float16)
    np.testing.assert_array_equal(back[:128].view(np.uint16), halves[:128].view(np.uint16))
    np.testing.assert_array_equal(back[128:].view(np.uint16), doubled.view(np.uint16))


def test_the_sanitizer_sees_one_set_of_bytes():
    # without the sync, a unit reads through the view bytes other units wrote through the stage
    with pytest.raises(SanitizerError) as info:
        _launch(cp.client("interp", sanitize=True), synced=0)
    assert info.value.kind is SanitizerKind.DATA_RACE
    assert "test_shared_alias.py" in str(info.value)


def test_the_ir_names_the_viewed_bytes_and_no_space_is_added():
    client = cp.client("interp")
    args = [cp.ArrayArg(client.zeros((n,), dt)) for n, dt in ((256, np.float16), (64, np.float32), (256, np.float16))]
    compiled = reinterpret.compile(cp.CubeDim(64), *args, cp.ScalarArg(1, u32), target="sm_90a")
    assert "shared[1]: f32[64] align 16 = bytes of shared[0] from 256" in compiled.ir
    assert 'getelementptr inbounds (i8, ptr addrspace(3) @"shared0", i32 256)' in compiled.llvm


@pytest.mark.ptxas
def test_ptxas_assembles_the_views_with_no_shared_memory_of_their_own():
    client = cp.client("interp")
    args = [cp.ArrayArg(client.zeros((n,), dt)) for n, dt in ((256, np.float16), (64, np.float32), (256, np.float16))]
    compiled = reinterpret.compile(cp.CubeDim(64), *args, cp.ScalarArg(1, u32), target="sm_90a")
    assert compiled.cubin and compiled.resources.shared_bytes == 512
    big = big_view.compile(cp.CubeDim(64), cp.ArrayArg(client.zeros((64,), np.float32)), target="sm_90a")
    assert big.cubin and big.dynamic_shared_bytes == 80_000


@pytest.mark.parametrize(
    "of_length, item, length, offset, detail",
    [
        (256, f32, 65, 256, "do not fit the 512 bytes"),
        (256, f32, 4, 6, "at an item boundary"),
        (256, f32, 4, -4, "byte_offset must be a comptime int >= 0"),
    ],
)
def test_a_view_must_fit_its_memory_at_an_item_boundary(of_length, item, length, offset, detail):
    @cp.cube(launch=True)
    def bad(out: Array[f32]):
        stage = SharedMemory[f16](of_length)
        view = SharedMemory.alias(stage, item, length, byte_offset=offset)
        out[0] = view[0]

    with pytest.raises(cp.ExpandError, match=detail):
        bad.compile(cp.CubeDim(32), cp.ArrayArg(cp.client("interp").zeros((1,), np.float32)))


@cp.cube(launch=True)
def big_view(out: Array[f32]):
    """A view into a shared memory too large for static shared memory (one dynamic array holds both)."""
    stage = SharedMemory[f16](40_000)
    tile = SharedMemory.alias(stage, f32, 64, byte_offset=65_536)
    tile[UNIT_POS] = f32(UNIT_POS)
    cp.sync_cube()
    out[UNIT_POS] = f32(stage[32_768 + 2 * UNIT_POS + 1])  # the high half of each f32


def test_a_view_into_dynamic_shared_memory_takes_no_space_of_its_own():
    client = cp.client("cpu")
    out = client.zeros((64,), np.float32)
    big_view.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(out))
    high = np.arange(64, dtype=np.float32).view(np.uint16)[1::2].view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(client.read(out), high)
    compiled = big_view.compile(cp.CubeDim(64), cp.ArrayArg(out), target="sm_90a")
    assert compiled.dynamic_shared_bytes == 80_000
    assert "getelementptr inbounds (i8, ptr addrspace(3) @dynamic_shared, i32 65536)" in compiled.llvm


@cp.cube(launch=True)
def near_the_limit(out: Array[f32]):
    """200 KiB of shared memory and a 64 KiB view of it: within the 227 KiB a cube may have."""
    stage = SharedMemory[f32](51_200)
    tile = SharedMemory.alias(stage, f32, 16_384)
    tile[UNIT_POS] = f32(UNIT_POS)
    cp.sync_cube()
    out[UNIT_POS] = stage[UNIT_POS]


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_views_do_not_count_against_the_shared_memory_limit(runtime):
    client = cp.client(runtime)
    out = client.zeros((32,), np.float32)
    near_the_limit.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), np.arange(32, dtype=np.float32))


def test_a_view_of_a_view_starts_at_an_item_boundary_of_the_root():
    # halves 1.. seen as f16, then f32 from byte 0 of that view: byte 2 of the stage, no f32 boundary
    @cp.cube(launch=True)
    def misaligned(out: Array[f32]):
        stage = SharedMemory[f16](256)
        tail = SharedMemory.alias(stage, f16, 255, byte_offset=2)
        words = SharedMemory.alias(tail, f32, 4)
        out[0] = words[0]

    with pytest.raises(cp.ExpandError, match="at an item boundary"):
        misaligned.compile(cp.CubeDim(32), cp.ArrayArg(cp.client("interp").zeros((1,), np.float32)))

    @cp.cube(launch=True)
    def aligned(out: Array[f32], halves: Array[f16]):
        stage = SharedMemory[f16](256)
        tail = SharedMemory.alias(stage, f16, 254, byte_offset=2)
        words = SharedMemory.alias(tail, f32, 4, byte_offset=2)  # byte 4 of the stage: halves 2 and 3
        for i in range(UNIT_POS, 256, 32):
            stage[i] = halves[i]
        cp.sync_cube()
        out[UNIT_POS] = words[UNIT_POS % 4]

    client = cp.client("cpu")
    halves = np.arange(256, dtype=np.float16)
    out = client.zeros((32,), np.float32)
    aligned.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out), cp.ArrayArg(client.create(halves)))
    expected = np.tile(halves[2:10].view(np.float32), 8)
    np.testing.assert_array_equal(client.read(out).view(np.uint32), expected.view(np.uint32))
