"""``cp.wgmma_store_accumulator``: a warpgroup's f32 accumulator written to shared memory as f16/bf16 with
``stmatrix``, row-major or in TMA's 128-byte swizzle, the layout an epilogue's TMA store reads.

Expected tiles are built in numpy: the accumulator is filled through the PTX ISA's fragment figure
(``tests.wgmma_hand.d_table``), the swizzled image by the byte rule of ``tests.wgmma_hand.swizzled_image``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, Comptime, LocalArray, SharedMemory, cube, f32
from tests.wgmma_hand import d_table, swizzled_image

DTYPES = {"f16": (cp.f16, np.float16), "bf16": (cp.bf16, ml_dtypes.bfloat16)}
KERNELS: dict = {}


def store_kernel(name: str):
    """Fill the accumulator from ``fill`` (one row of N/2 values per unit), store it, copy the tile out."""
    if name in KERNELS:
        return KERNELS[name]
    elem = DTYPES[name][0]

    @cube(launch=True)
    def store(
        fill: Array[f32],
        out: Array[elem],
        n: Comptime[int],
        layout: Comptime[str],
        row_items: Comptime[int],
        box_items: Comptime[int],
        tile_items: Comptime[int],
    ):
        tile = SharedMemory[elem](tile_items, alignment=1024)
        for i in range(UNIT_POS, tile_items, 128):
            tile[i] = elem(0.0)
        cp.sync_cube()
        acc = LocalArray[f32](n // 2)
        for i in cp.unroll(range(n // 2)):
            acc[i] = fill[UNIT_POS * (n // 2) + i]
        cp.wgmma_store_accumulator(acc, tile, elem, row_items, layout, box_items)
        cp.sync_cube()
        for i in range(UNIT_POS, tile_items, 128):
            out[i] = tile[i]

    KERNELS[name] = store
    return store


def _fill(data: np.ndarray) -> np.ndarray:
    n = data.shape[1]
    fill = np.zeros((128, n // 2), np.float32)
    for (unit, i), (r, c) in d_table(n).items():
        fill[unit, i] = data[r, c]
    return fill.reshape(-1)


CASES = [  # n, layout, row_items, box_items
    (16, "row_major", 16, 0),
    (64, "row_major", 72, 0),  # padded rows
    (128, "row_major", 128, 0),
    (32, "128B", 0, 0),  # fewer columns than a swizzle row
    (64, "128B", 0, 0),
    (128, "128B", 0, 64 * 64 + 512),  # two boxes with a gap between them
]


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize("name", ["f16", "bf16"])
@pytest.mark.parametrize(("n", "layout", "row_items", "box_items"), CASES)
def test_the_accumulator_lands_where_the_layout_says(runtime, name, n, layout, row_items, box_items):
    client = cp.client(runtime, sanitize=True) if runtime == "interp" else cp.client(runtime)
    dtype = DTYPES[name][1]
    data = np.random.default_rng(n).standard_normal((64, n)).astype(np.float32)
    if layout == "row_major":
        tile_items = 64 * row_items
        want = np.zeros((64, row_items), dtype)
        want[:, :n] = data.astype(dtype)
        want = want.reshape(-1)
    else:
        boxes = -(-n // 64)
        stride = box_items if boxes > 1 else 64 * 64
        tile_items = (boxes - 1) * stride + 64 * 64
        want = np.zeros(tile_items, dtype)
        for b in range(boxes):
            box = np.zeros((64, 64), dtype)
            part = data[:, 64 * b : 64 * b + 64].astype(dtype)
            box[:, : part.shape[1]] = part
            want[b * stride : b * stride + 64 * 64] = swizzled_image(box, "128B").view(dtype)
    out = client.zeros((tile_items,), dtype)
    store_kernel(name).launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(128),
        cp.ArrayArg(client.create(_fill(data))),
        cp.ArrayArg(out),
        n,
        layout,
        row_items,
        box_items,
        tile_items,
    )
    np.testing.assert_array_equal(client.read(out).view(np.uint16), want.view(np.uint16))


@pytest.mark.ptxas
def test_each_16_columns_are_one_stmatrix_x4_and_it_assembles():
    compiled = store_kernel("f16").compile(
        cp.CubeDim(128),
        cp.BufferCompilationArg(f32, 1),
        cp.BufferCompilationArg(cp.f16, 1),
        128,
        "128B",
        0,
        64 * 64 * 2,
        64 * 64 * 2,
        target="sm_90a",
    )
    stores = [line for line in compiled.ptx.splitlines() if "stmatrix" in line]
    assert len(stores) == 128 // 16 and all("stmatrix.sync.aligned.m8n8.x4.shared.b16" in line for line in stores)
    assert compiled.cubin and compiled.resources.spill_store_bytes == 0


@pytest.mark.parametrize(
    ("elem", "row_items", "layout", "box_items", "message"),
    [
        ("f32", 64, "row_major", 0, "elem must be cp.f16 or cp.bf16"),
        ("f16", 60, "row_major", 0, "row_items must be a multiple of 8 of at least the 64 columns"),
        ("f16", 0, "64B", 0, "layout '64B'; expected one of row_major, 128B"),
    ],
)
def test_bad_arguments_are_refused_with_the_kernel_line(elem, row_items, layout, box_items, message):
    element = getattr(cp, elem)

    @cube(launch=True)
    def bad(out: Array[f32]):
        tile = SharedMemory[cp.f16](64 * 64, alignment=1024)
        acc = LocalArray[f32](32)
        for i in cp.unroll(range(32)):
            acc[i] = f32(i)
        cp.wgmma_store_accumulator(acc, tile, element, row_items, layout, box_items)
        out[0] = f32(tile[0])

    client = cp.client("interp")
    with pytest.raises(cp.CubeError, match=message) as info:
        bad.launch(client, cp.CubeCount(1), cp.CubeDim(128), cp.ArrayArg(client.zeros((1,), np.float32)))
    assert "test_wgmma_store_accumulator.py:" in str(info.value)


def test_a_second_box_without_its_spacing_is_refused():
    @cube(launch=True)
    def bad(out: Array[f32]):
        tile = SharedMemory[cp.f16](2 * 64 * 64, alignment=1024)
        acc = LocalArray[f32](64)
        for i in cp.unroll(range(64)):
            acc[i] = f32(i)
        cp.wgmma_store_accumulator(acc, tile, cp.f16, layout="128B")
        out[0] = f32(tile[0])

    client = cp.client("interp")
    with pytest.raises(cp.CubeError, match="box_items must be a multiple of 512"):
        bad.launch(client, cp.CubeCount(1), cp.CubeDim(128), cp.ArrayArg(client.zeros((1,), np.float32)))
