"""``cp.wgmma_*`` on the interp: results against float64 numpy for every input type and swizzle mode,
A from registers and from shared memory, descriptor bits by hand, and visibility only after the wait.

Shared memory is filled from images the test lays out by hand (``tests/wgmma_hand.py``); accumulators
and A registers are moved between units and matrices with the hand-built ISA tables, never with
cubepy's own fragment maps.
"""

from __future__ import annotations

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
    def wgmma_tile(a_img: Array[elem], b_img: Array[elem], a_regs: Array[elem], c: Array[f32], out: Array[f32], accumulate: cp.boolean):
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
                cp.wgmma_mma_async(acc, a_frag, b_desc + advance, shape=(64, n, k), elem=elem if name != "tf32" else "tf32", scale_d=scale)
            else:
                cp.wgmma_fence()
                cp.wgmma_mma_async(acc, a_desc + advance, b_desc + advance, shape=(64, n, k), elem=elem if name != "tf32" else "tf32", scale_d=scale)
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


@pytest.mark.parametrize("n", [8, 128, 256])
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
