"""``cp.wgmma_*`` on the interp: results against float64 numpy for every input type and swizzle mode,
A from registers and from shared memory, descriptor bits by hand, and visibility only after the wait.

Shared memory is filled from images the test lays out by hand (``tests/wgmma_hand.py``); accumulators
and A registers are moved between units and matrices with the hand-built ISA tables, never with
cubepy's own fragment maps.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, LocalArray, SharedMemory, cube, f32, u64
from cubepy.errors import SanitizerError, SanitizerKind
from tests.wgmma_hand import SWIZZLE_WIDTH, a_table, d_table, interleaved_image, swizzled_image

# input name -> (element type in memory, K of one wgmma, numpy dtype)
INPUTS = {
    "f16": (cp.f16, 16, np.float16),
    "bf16": (cp.bf16, 16, ml_dtypes.bfloat16),
    "tf32": (cp.f32, 8, np.float32),
    "e4m3": (cp.e4m3, 32, ml_dtypes.float8_e4m3fn),
    "e5m2": (cp.e5m2, 32, ml_dtypes.float8_e5m2),
}
NONE_LBO, NONE_STEPS = 128, 2  # no swizzle: 2 wgmma steps (64 bytes of K), chunks 128 bytes apart
KERNELS: dict = {}


def layout_of(swizzle: str) -> tuple[int, int, int, int]:
    """(leading byte offset, stride byte offset, bytes of K, bytes a K step moves the start by)."""
    if swizzle == "none":
        row_bytes = 32 * NONE_STEPS
        return NONE_LBO, NONE_LBO * row_bytes // 16, row_bytes, 2 * NONE_LBO
    width = SWIZZLE_WIDTH[swizzle]
    return 16, 8 * width, width, 32


def image(x: np.ndarray, swizzle: str) -> np.ndarray:
    lbo, sbo, _, _ = layout_of(swizzle)
    raw = interleaved_image(x, lbo, sbo) if swizzle == "none" else swizzled_image(x, swizzle)
    return raw.view(x.dtype)


def wgmma_kernel(name: str, n: int, swizzle: str, a_in_registers: bool):
    """64 x n x (steps * K) with K-major tiles in shared memory; the accumulator starts from ``c`` and the first
    step's scale_d is ``accumulate``; each unit stores its raw accumulator registers."""
    key = (name, n, swizzle, a_in_registers)
    if key in KERNELS:
        return KERNELS[key]
    elem, k, _ = INPUTS[name]
    lbo, sbo, row_bytes, step_bytes = layout_of(swizzle)
    steps = row_bytes // 32
    a_items, b_items = 64 * row_bytes // elem.size, n * row_bytes // elem.size
    regs = 64 * k // 128
    half = n // 2

    @cube(launch=True)
    def wgmma_tile(
        a_img: Array[elem],
        b_img: Array[elem],
        a_regs: Array[elem],
        c: Array[f32],
        out: Array[f32],
        accumulate: cp.boolean,
    ):
        a_tile = SharedMemory[elem](a_items, alignment=1024)
        b_tile = SharedMemory[elem](b_items, alignment=1024)
        for i in range(UNIT_POS, a_items, 128):
            a_tile[i] = a_img[i]
        for i in range(UNIT_POS, b_items, 128):
            b_tile[i] = b_img[i]
        cp.sync_cube()
        acc = LocalArray[f32](half)
        for i in cp.unroll(range(half)):
            acc[i] = c[UNIT_POS * half + i]
        a_desc = cp.wgmma_descriptor(a_tile, lbo, sbo, swizzle)
        b_desc = cp.wgmma_descriptor(b_tile, lbo, sbo, swizzle)
        for s in cp.unroll(range(steps)):
            advance = u64(s * step_bytes // 16)
            scale = accumulate or s > 0
            if a_in_registers:
                a_frag = LocalArray[elem](regs)
                for i in cp.unroll(range(regs)):
                    a_frag[i] = a_regs[(s * 128 + UNIT_POS) * regs + i]
                cp.wgmma_fence()
                cp.wgmma_mma_async(
                    acc,
                    a_frag,
                    b_desc + advance,
                    shape=(64, n, k),
                    elem=elem if name != "tf32" else "tf32",
                    scale_d=scale,
                )
            else:
                cp.wgmma_fence()
                cp.wgmma_mma_async(
                    acc,
                    a_desc + advance,
                    b_desc + advance,
                    shape=(64, n, k),
                    elem=elem if name != "tf32" else "tf32",
                    scale_d=scale,
                )
        cp.wgmma_commit_group()
        cp.wgmma_wait_group(0)
        for i in cp.unroll(range(half)):
            out[UNIT_POS * half + i] = acc[i]

    KERNELS[key] = wgmma_tile
    return wgmma_tile


def random_inputs(name: str, rows: int, cols: int, rng) -> np.ndarray:
    """Values exactly representable in the input type (tf32: f32 with the 13 low mantissa bits clear)."""
    dtype = INPUTS[name][2]
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    if name == "tf32":
        return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return x.astype(dtype)


def run_tile(client, name, n, swizzle, a_in_registers, accumulate, seed=0):
    """(result as a 64 x n matrix, float64 reference, error bound)."""
    _, k, dtype = INPUTS[name]
    _, _, row_bytes, _ = layout_of(swizzle)
    kfull = row_bytes // np.dtype(dtype).itemsize
    steps = kfull // k
    rng = np.random.default_rng(seed)
    a, b = random_inputs(name, 64, kfull, rng), random_inputs(name, n, kfull, rng)
    c = rng.standard_normal((64, n)).astype(np.float32)
    d_map, a_map = d_table(n), a_table(np.dtype(dtype).itemsize)
    regs = len(a_map) // 128
    c_units = np.zeros(128 * (n // 2), np.float32)
    for (unit, i), (r, col) in d_map.items():
        c_units[unit * (n // 2) + i] = c[r, col]
    a_units = np.zeros(steps * 128 * regs, dtype)
    for s in range(steps):
        for (unit, i), (r, kk) in a_map.items():
            a_units[(s * 128 + unit) * regs + i] = a[r, s * k + kk]
    out = client.zeros((128 * (n // 2),), np.float32)
    kernel = wgmma_kernel(name, n, swizzle, a_in_registers)
    args = [image(a, swizzle), image(b, swizzle), a_units, c_units]
    kernel.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(128),
        *(cp.ArrayArg(client.create(x)) for x in args),
        cp.ArrayArg(out),
        cp.ScalarArg(accumulate, cp.boolean),
    )
    raw = client.read(out)
    got = np.zeros((64, n), np.float32)
    for (unit, i), (r, col) in d_map.items():
        got[r, col] = raw[unit * (n // 2) + i]
    wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
    reference = wide_a @ wide_b.T + (c if accumulate else 0)
    # Products are exact in f32's range; the interp sums them in f64 and rounds once to f32 per step, so
    # each step adds at most 2^-24 of the magnitude it sums (plus f64's own, negligible, rounding).
    magnitude = np.abs(wide_a) @ np.abs(wide_b).T + (np.abs(c) if accumulate else 0)
    return got, reference, steps * 2.0**-23 * magnitude + 1e-30


@pytest.mark.parametrize("swizzle", ["none", "32B", "64B", "128B"])
@pytest.mark.parametrize("name", list(INPUTS))
def test_a_64_x_64_tile_from_shared_memory_matches_numpy(client, name, swizzle):
    got, reference, bound = run_tile(client, name, 64, swizzle, a_in_registers=False, accumulate=True)
    assert (np.abs(got - reference) <= bound).all()


@pytest.mark.parametrize("n", [8, 128, pytest.param(256, marks=pytest.mark.slow)])
def test_other_widths(client, n):
    got, reference, bound = run_tile(client, "bf16", n, "128B", a_in_registers=False, accumulate=True, seed=n)
    assert (np.abs(got - reference) <= bound).all()


@pytest.mark.parametrize("swizzle", ["none", "128B"])
@pytest.mark.parametrize("name", list(INPUTS))
def test_a_from_registers_matches_numpy(client, name, swizzle):
    got, reference, bound = run_tile(client, name, 32, swizzle, a_in_registers=True, accumulate=True, seed=7)
    assert (np.abs(got - reference) <= bound).all()


def test_scale_d_false_overwrites_the_accumulator(client):
    got, reference, bound = run_tile(client, "f16", 16, "64B", a_in_registers=False, accumulate=False, seed=3)
    assert (np.abs(got - reference) <= bound).all()


# -- descriptor bits ----------------------------------------------------------------------------------------
@cube(launch=True)
def descriptors(out: Array[u64]):
    """Descriptors of slices of the second shared memory (its arena offset is 1024: the first fills 0..1023)."""
    first = SharedMemory[cp.f16](512, alignment=1024)
    second = SharedMemory[cp.f16](2048, alignment=1024)
    first[UNIT_POS] = cp.f16(0)
    if UNIT_POS == 0:
        out[0] = cp.wgmma_descriptor(second.slice(64, 2048), 128, 256, "128B")
        out[1] = cp.wgmma_descriptor(second, 16, 1024, "none")
        out[2] = cp.wgmma_descriptor(second, 16, 512, "64B")
        out[3] = cp.wgmma_descriptor(second.slice(16, 2048), 16, 256, "32B")
        out[4] = cp.wgmma_descriptor(first, 0x3FFF0, 0x3FFF0, "none")


def test_descriptor_bits_by_hand(client):
    out = client.zeros((5,), np.uint64)
    descriptors.launch(client, cp.CubeCount(1), cp.CubeDim(128), cp.ArrayArg(out))
    got = [int(v) for v in client.read(out)]
    # start address >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45, base offset 0 (49-51),
    # layout type in 62-63 (0 none, 1 128B, 2 64B, 3 32B).
    assert got[0] == (1 << 62) | (16 << 32) | (8 << 16) | 72  # 1024 + 64 * 2 = 1152 = 72 << 4
    assert got[0] == 0x4000_0010_0008_0048
    assert got[1] == 0x0000_0040_0001_0040  # start 1024 (64), LBO 16 (1), SBO 1024 (64), no swizzle
    assert got[2] == 0x8000_0020_0001_0040  # 64B: layout type 2; SBO 512 (32)
    assert got[3] == 0xC000_0010_0001_0042  # 32B: layout type 3; start 1024 + 32 = 1056 (66)
    assert got[4] == 0x0000_3FFF_3FFF_0000  # the widest offsets fill their 14 bits


# -- asynchronous visibility ------------------------------------------------------------------------------
@cube(launch=True)
def read_before_and_after_wait(before: Array[f32], middle: Array[f32], after: Array[f32], early: cp.boolean):
    """Two groups into two accumulators; snapshots before any wait, after wait_group(1), after wait_group(0)."""
    a_tile = SharedMemory[cp.f16](64 * 16, alignment=1024)
    b_tile = SharedMemory[cp.f16](8 * 16, alignment=1024)
    for i in range(UNIT_POS, 64 * 16, 128):
        a_tile[i] = cp.f16(1)
    if UNIT_POS < 8 * 16:
        b_tile[UNIT_POS] = cp.f16(2)
    cp.sync_cube()
    first = LocalArray[f32](4)
    second = LocalArray[f32](4)
    for i in cp.unroll(range(4)):
        first[i] = f32(-1)
        second[i] = f32(-2)
    a_desc = cp.wgmma_descriptor(a_tile, 128, 256, "none")
    b_desc = cp.wgmma_descriptor(b_tile, 128, 256, "none")
    cp.wgmma_fence()
    cp.wgmma_mma_async(first, a_desc, b_desc, shape=(64, 8, 16), elem=cp.f16, scale_d=True)
    cp.wgmma_commit_group()
    cp.wgmma_mma_async(second, a_desc, b_desc, shape=(64, 8, 16), elem=cp.f16, scale_d=False)
    cp.wgmma_mma_async(second, a_desc, b_desc, shape=(64, 8, 16), elem=cp.f16, scale_d=True)
    cp.wgmma_commit_group()
    if early:
        before[UNIT_POS] = first[0] + second[0]  # BUG when early: neither result is visible yet
    cp.wgmma_wait_group(1)
    middle[UNIT_POS * 2] = first[0]
    middle[UNIT_POS * 2 + 1] = second[1]  # BUG: the second group is still running (a pending read)
    cp.wgmma_wait_group(0)
    after[UNIT_POS * 2] = first[0]
    after[UNIT_POS * 2 + 1] = second[1]


def _visibility(client, early: bool):
    outs = [client.zeros((128,), np.float32), client.zeros((256,), np.float32), client.zeros((256,), np.float32)]
    read_before_and_after_wait.launch(
        client, cp.CubeCount(1), cp.CubeDim(128), *map(cp.ArrayArg, outs), cp.ScalarArg(early, cp.boolean)
    )
    return [client.read(o) for o in outs]


@pytest.mark.cubepy_sanitize(False)  # reads accumulators before their wait on purpose (a pending read)
def test_results_are_visible_only_after_their_wait_group():
    before, middle, after = _visibility(cp.client("interp"), early=True)
    # 16 products of 1 * 2: first = -1 + 32 = 31; second = 32 (overwrite), then + 32 (chained) = 64.
    np.testing.assert_array_equal(before, np.full(128, -3.0))  # both accumulators still hold their old values
    np.testing.assert_array_equal(middle[0::2], np.full(128, 31.0))  # wait_group(1): the older group is done
    np.testing.assert_array_equal(middle[1::2], np.full(128, -2.0))  # the newer one is not
    np.testing.assert_array_equal(after[0::2], np.full(128, 31.0))
    np.testing.assert_array_equal(after[1::2], np.full(128, 64.0))


def _bug_lines(kernel) -> list[int]:
    import inspect

    lines, first = inspect.getsourcelines(kernel.fn if hasattr(kernel, "fn") else kernel.__wrapped__)
    return [first + i for i, text in enumerate(lines) if "# BUG" in text]


@pytest.mark.parametrize("early", [True, False])
def test_the_sanitizer_reports_a_read_of_a_pending_accumulator(early):
    with pytest.raises(SanitizerError) as info:
        _visibility(cp.client("interp", sanitize=True), early=early)
    message = str(info.value)
    assert info.value.kind is SanitizerKind.WGMMA_PENDING_READ
    line = _bug_lines(read_before_and_after_wait)[0 if early else 1]
    assert f"test_wgmma.py:{line}: wgmma pending read" in message
    # Which unit reads first depends on the schedule (lockstep: unit 0).
    assert re.search(r"unit \(\d+, 0, 0\) of cube \(0, 0, 0\)", message) and "has not completed" in message
    assert "started at " in message and "test_wgmma.py:" in message.split("started at ", 1)[1]


# -- misuse ---------------------------------------------------------------------------------------------------
@cube(launch=True)
def misaligned_swizzled_tile(out: Array[f32]):
    a_tile = SharedMemory[cp.f16](64 * 64 + 64, alignment=1024)
    for i in range(UNIT_POS, 64 * 64 + 64, 128):
        a_tile[i] = cp.f16(1)
    cp.sync_cube()
    acc = LocalArray[f32](4)
    desc = cp.wgmma_descriptor(a_tile.slice(64, 64 * 64 + 64), 16, 1024, "128B")  # starts at byte 128
    cp.wgmma_fence()
    cp.wgmma_mma_async(acc, desc, desc, shape=(64, 8, 16), elem=cp.f16, scale_d=False)
    cp.wgmma_commit_group()
    cp.wgmma_wait_group(0)
    out[UNIT_POS] = acc[0]


@cube(launch=True)
def half_a_warpgroup(out: Array[f32]):
    a_tile = SharedMemory[cp.f16](64 * 16, alignment=1024)
    for i in range(UNIT_POS, 64 * 16, 128):
        a_tile[i] = cp.f16(1)
    cp.sync_cube()
    acc = LocalArray[f32](4)
    desc = cp.wgmma_descriptor(a_tile, 128, 256, "none")
    if UNIT_POS < 64:
        cp.wgmma_mma_async(acc, desc, desc, shape=(64, 8, 16), elem=cp.f16, scale_d=False)
    out[UNIT_POS] = f32(0)


@pytest.mark.parametrize(
    ("kernel", "detail"),
    [
        (misaligned_swizzled_tile, "128B-swizzled tile starts at shared byte 128"),
        (half_a_warpgroup, "wgmma is cooperative: every unit of the warpgroup must execute it"),
    ],
)
@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_misuse_is_reported(kernel, detail, runtime):
    client = cp.client(runtime)
    with pytest.raises(SanitizerError) as info:
        kernel.launch(client, cp.CubeCount(1), cp.CubeDim(128), cp.ArrayArg(client.zeros((128,), np.float32)))
    assert info.value.kind is SanitizerKind.WGMMA_MISUSE and detail in str(info.value)


def test_a_tile_read_of_unwritten_shared_memory_is_an_uninitialized_read():
    @cube(launch=True)
    def unwritten_b(out: Array[f32]):
        a_tile = SharedMemory[cp.f16](64 * 16, alignment=1024)
        b_tile = SharedMemory[cp.f16](8 * 16, alignment=1024)
        for i in range(UNIT_POS, 64 * 16, 128):
            a_tile[i] = cp.f16(1)
        cp.sync_cube()
        acc = LocalArray[f32](4)
        cp.wgmma_mma_async(
            acc,
            cp.wgmma_descriptor(a_tile, 128, 256),
            cp.wgmma_descriptor(b_tile, 128, 256),
            shape=(64, 8, 16),
            elem=cp.f16,
            scale_d=False,
        )
        cp.wgmma_commit_group()
        cp.wgmma_wait_group(0)
        out[UNIT_POS] = acc[0]

    client = cp.client("interp", sanitize=True)
    with pytest.raises(SanitizerError) as info:
        unwritten_b.launch(client, cp.CubeCount(1), cp.CubeDim(128), cp.ArrayArg(client.zeros((128,), np.float32)))
    assert info.value.kind is SanitizerKind.UNINITIALIZED_READ and "wgmma reads shared byte 2048" in str(info.value)


# -- tiles loaded by TMA with a 128-byte swizzle ------------------------------------------------------------
TMA_KERNELS: dict = {}


def tma_wgmma_kernel(name: str):
    """A and B (64 rows of 128 bytes each) loaded by TMA with swizzle 128B, then 4 wgmma K steps."""
    if name in TMA_KERNELS:
        return TMA_KERNELS[name]
    elem, k, _ = INPUTS[name]
    items = 64 * 128 // elem.size
    input_type = "tf32" if name == "tf32" else elem

    @cube(launch=True)
    def tma_then_wgmma(a_map: cp.TensorMap[elem], b_map: cp.TensorMap[elem], out: Array[f32]):
        bar = cp.Barrier.shared(cp.CUBE_DIM, UNIT_POS == 0)
        a_tile = SharedMemory.aligned(elem, items, 1024)
        b_tile = SharedMemory.aligned(elem, items, 1024)
        if UNIT_POS == 0:
            bar.arrive_and_expect_tx(1, 2 * 64 * 128)
            bar.tma_load_2d(a_map, a_tile, 0, 0)
            bar.tma_load_2d(b_map, b_tile, 0, 0)
        else:
            bar.arrive()
        bar.wait_parity(0)
        acc = LocalArray[f32](32)
        a_desc = cp.wgmma_descriptor(a_tile, 16, 1024, "128B")
        b_desc = cp.wgmma_descriptor(b_tile, 16, 1024, "128B")
        cp.wgmma_fence()
        for s in cp.unroll(range(4)):
            step = u64(2 * s)  # 32 bytes further along K
            cp.wgmma_mma_async(acc, a_desc + step, b_desc + step, shape=(64, 64, k), elem=input_type, scale_d=s > 0)
        cp.wgmma_commit_group()
        cp.wgmma_wait_group(0)
        for i in cp.unroll(range(32)):
            out[UNIT_POS * 32 + i] = acc[i]

    TMA_KERNELS[name] = tma_then_wgmma
    return tma_then_wgmma


@pytest.mark.parametrize("name", ["f16", "tf32", "e4m3"])
def test_tiles_loaded_by_tma_with_the_128B_swizzle(client, name):
    dtype = INPUTS[name][2]
    cols = 128 // np.dtype(dtype).itemsize
    rng = np.random.default_rng(11)
    a, b = random_inputs(name, 64, cols, rng), random_inputs(name, 64, cols, rng)
    maps = [cp.TensorMapArg.tiled(cp.TensorArg(client.create(x)), (64, cols), swizzle="128B") for x in (a, b)]
    out = client.zeros((128 * 32,), np.float32)
    tma_wgmma_kernel(name).launch(client, cp.CubeCount(1), cp.CubeDim(128), *maps, cp.ArrayArg(out))
    raw = client.read(out)
    got = np.zeros((64, 64))
    for (unit, i), (r, col) in d_table(64).items():
        got[r, col] = raw[unit * 32 + i]
    wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
    bound = 4 * 2.0**-23 * (np.abs(wide_a) @ np.abs(wide_b).T)
    assert (np.abs(got - wide_a @ wide_b.T) <= bound).all()
