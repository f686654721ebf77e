"""MN-major (transposed) wgmma operands on the interp and the cpu runtime, against float64 numpy.

The shared-memory images are placed by ``tests.wgmma_hand.mn_image`` from the PTX ISA's canonical
MN-major layouts (see there), the K-major ones as ``test_wgmma.py`` places them.

Accumulators are moved with the hand-built ISA table (``tests.wgmma_hand``), never cubepy's own maps.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, LocalArray, SharedMemory, cube, f32, u64
from tests.wgmma_hand import SWIZZLE_WIDTH, d_table, interleaved_image, mn_image, mn_layout, swizzled_image

DTYPES = {"f16": (cp.f16, np.float16), "bf16": (cp.bf16, ml_dtypes.bfloat16)}
KERNELS: dict = {}


def k_extent(swizzle: str) -> int:
    """Elements of K in the test's tiles: one swizzle row of a K-major tile (64 with no swizzle)."""
    return 32 if swizzle == "none" else SWIZZLE_WIDTH[swizzle] // 2


def k_layout(swizzle: str) -> tuple[int, int, int]:
    """(LBO, SBO, step bytes) of the K-major tiles (as tests/runtime/interp/test_wgmma.py lays them out)."""
    if swizzle == "none":
        return 128, 128 * 64 // 16, 256
    width = SWIZZLE_WIDTH[swizzle]
    return 16, 8 * width, 32


def k_image(x: np.ndarray, swizzle: str) -> np.ndarray:
    lbo, sbo, _ = k_layout(swizzle)
    return interleaved_image(x, lbo, sbo) if swizzle == "none" else swizzled_image(x, swizzle)


def operand(x: np.ndarray, swizzle: str, major: str) -> tuple[np.ndarray, tuple[int, int, int]]:
    """(image bytes, (LBO, SBO, step bytes)) of operand ``x`` (rows x K) in ``major`` order."""
    if major == "MN":
        return mn_image(x, swizzle), mn_layout(x.shape[0], swizzle)
    return k_image(x, swizzle), k_layout(swizzle)


def mn_kernel(name: str, n: int, swizzle: str, major_a: str, major_b: str, a_size: int, b_size: int, layouts):
    key = (name, n, swizzle, major_a, major_b, a_size, b_size, layouts)
    if key in KERNELS:
        return KERNELS[key]
    elem = DTYPES[name][0]
    (lbo_a, sbo_a, step_a), (lbo_b, sbo_b, step_b) = layouts
    steps = k_extent(swizzle) // 16
    half = n // 2

    @cube(launch=True)
    def mn_tile(a_img: Array[elem], b_img: Array[elem], out: Array[f32]):
        a_tile = SharedMemory[elem](a_size, alignment=1024)
        b_tile = SharedMemory[elem](b_size, alignment=1024)
        for i in range(UNIT_POS, a_size, 128):
            a_tile[i] = a_img[i]
        for i in range(UNIT_POS, b_size, 128):
            b_tile[i] = b_img[i]
        cp.sync_cube()
        acc = LocalArray[f32](half)
        a_desc = cp.wgmma_descriptor(a_tile, lbo_a, sbo_a, swizzle)
        b_desc = cp.wgmma_descriptor(b_tile, lbo_b, sbo_b, swizzle)
        cp.wgmma_fence()
        for s in cp.unroll(range(steps)):
            cp.wgmma_mma_async(
                acc,
                a_desc + u64(s * step_a // 16),
                b_desc + u64(s * step_b // 16),
                shape=(64, n, 16),
                elem=elem,
                scale_d=s > 0,
                major_a=major_a,
                major_b=major_b,
            )
        cp.wgmma_commit_group()
        cp.wgmma_wait_group(0)
        for i in cp.unroll(range(half)):
            out[UNIT_POS * half + i] = acc[i]

    KERNELS[key] = mn_tile
    return mn_tile


def run_mn(client, name: str, n: int, swizzle: str, major_a: str, major_b: str, seed: int = 0):
    """(result 64 x n, float64 reference, error bound) of A (64 x K) @ B (K x n), B held as N x K rows."""
    dtype = DTYPES[name][1]
    ks = k_extent(swizzle)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((64, ks)).astype(dtype)
    b_t = rng.standard_normal((n, ks)).astype(dtype)  # B's N x K view; MN-major stores its K x N transpose
    (a_img, a_layout), (b_img, b_layout) = operand(a, swizzle, major_a), operand(b_t, swizzle, major_b)
    kernel = mn_kernel(name, n, swizzle, major_a, major_b, a_img.size // 2, b_img.size // 2, (a_layout, b_layout))
    out = client.zeros((128 * (n // 2),), np.float32)
    kernel.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(128),
        cp.ArrayArg(client.create(a_img.view(dtype))),
        cp.ArrayArg(client.create(b_img.view(dtype))),
        cp.ArrayArg(out),
    )
    raw = client.read(out)
    got = np.zeros((64, n), np.float32)
    for (unit, i), (r, col) in d_table(n).items():
        got[r, col] = raw[unit * (n // 2) + i]
    wide_a, wide_b = a.astype(np.float64), b_t.astype(np.float64)
    magnitude = np.abs(wide_a) @ np.abs(wide_b).T
    return got, wide_a @ wide_b.T, (ks // 16) * 2.0**-23 * magnitude + 1e-30


@pytest.mark.parametrize("swizzle", ["none", "32B", "64B", "128B"])
@pytest.mark.parametrize("majors", [("K", "MN"), ("MN", "K"), ("MN", "MN")], ids=["b-mn", "a-mn", "both-mn"])
def test_mn_major_tiles_match_numpy(client, swizzle, majors):
    got, reference, bound = run_mn(client, "f16", 64, swizzle, *majors)
    assert (np.abs(got - reference) <= bound).all()


@pytest.mark.parametrize("swizzle", ["none", "32B", "128B"])
def test_mn_major_b_of_several_blocks_in_bf16(client, swizzle):
    # N = 128: two 64-element MN blocks of the 128B swizzle (LBO apart), 8 of the 32B one, 16 core matrices
    got, reference, bound = run_mn(client, "bf16", 128, swizzle, "MN", "MN", seed=1)
    assert (np.abs(got - reference) <= bound).all()


def test_the_cpu_runtime_reads_mn_major_tiles_as_the_interp():
    results = []
    for runtime in ("interp", "cpu"):
        got, reference, bound = run_mn(cp.client(runtime), "f16", 64, "64B", "MN", "MN", seed=4)
        assert (np.abs(got - reference) <= bound).all()
        results.append(got)
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"major_b": "N"}, "major_b='N'; expected 'K' or 'MN'"),
        ({"major_a": "MN", "elem": "tf32"}, "major_a='MN' needs f16 or bf16 inputs"),
    ],
)
def test_bad_major_arguments_are_refused_with_the_kernel_line(kwargs, message):
    elem = kwargs.pop("elem", cp.f16)
    mem = cp.f32 if elem == "tf32" else elem

    @cube(launch=True)
    def bad(out: Array[f32]):
        tile = SharedMemory[mem](64 * 64, alignment=1024)
        acc = LocalArray[f32](4)
        desc = cp.wgmma_descriptor(tile, 16, 1024, "128B")
        cp.wgmma_mma_async(acc, desc, desc, shape=(64, 8, 16 if elem != "tf32" else 8), elem=elem, **kwargs)
        out[0] = acc[0]

    client = cp.client("interp")
    with pytest.raises(cp.CubeError, match=message) as info:
        bad.launch(client, cp.CubeCount(1), cp.CubeDim(128), cp.ArrayArg(client.zeros((1,), np.float32)))
    assert "test_wgmma_mn_major.py:" in str(info.value)


def test_a_from_registers_with_major_a_mn_is_refused():
    @cube(launch=True)
    def bad(out: Array[f32]):
        tile = SharedMemory[cp.f16](64 * 64, alignment=1024)
        acc = LocalArray[f32](4)
        frag = LocalArray[cp.f16](8)
        desc = cp.wgmma_descriptor(tile, 16, 1024, "128B")
        cp.wgmma_mma_async(acc, frag, desc, shape=(64, 8, 16), elem=cp.f16, major_a="MN")
        out[0] = acc[0]

    client = cp.client("interp")
    with pytest.raises(cp.CubeError, match="A from registers has no major order"):
        bad.launch(client, cp.CubeCount(1), cp.CubeDim(128), cp.ArrayArg(client.zeros((1,), np.float32)))
