"""The numpy TMA emulation in tile mode: hardware-checked cases, hand-worked rules and a loop reference.

Expected values come from tracel-ai/cubecl `runtime_tests/tensormap.rs` (asserted on GPUs), from
the TMA semantics (docs/semantics/tma.md: the swizzle formula), or from the loops in
``tma_reference.py``. Coordinates passed to the emulator are driver order (innermost first). The
im2col mode is in ``test_tma_im2col_emulation.py``.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cubepy.runtime.handle import Handle
from cubepy.runtime.interp.tma import (
    TmaWarning,
    im2col_load,
    swizzle_addresses,
    tiled_load,
    tiled_store,
)
from cubepy.runtime.tensormap import TensorMapArg
from tests.runtime.interp.tma_reference import (
    DTYPES,
    SENTINEL,
    as_values,
    expect_error,
    nan_bytes,
    raw_map,
    ref_store_image,
    ref_tiled_image,
    smem_of,
    to_handle,
)

# ---------------------------------------------------------------------------------- cubecl hardware tests


def test_cubecl_tensormap_load():
    # test_tensormap_load: 64x64 f32, tile {16, 32} (rows, cols), tma_load_2d(.., 0, 8) = driver {8, 0}
    values = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    tm = TensorMapArg.tiled(to_handle(values), (16, 32))
    smem = smem_of(4096)
    assert tiled_load(tm, [8, 0], smem, 0) == 32 * 16 * 4
    expected = [[i * 64 + j + 8 for j in range(32)] for i in range(16)]  # rows 0..15, columns 8..39
    np.testing.assert_array_equal(as_values(smem, 0, np.float32, (16, 32)), expected)
    assert (smem[2048:] == SENTINEL).all()


def test_cubecl_tensormap_store():
    # test_tensormap_store: smem holds 0..511, tma_store_2d(.., 16, 8) = driver {8, 16}
    out = to_handle(np.zeros((64, 64), np.float32))
    tm = TensorMapArg.tiled(out, (16, 32))
    smem = smem_of(2048)
    smem[:] = np.arange(512, dtype=np.float32).view(np.uint8)
    tiled_store(tm, [8, 16], smem, 0)
    expected = np.zeros((64, 64), np.float32)
    for y in range(16):
        for x in range(32):
            expected[y + 16, x + 8] = y * 32 + x
    np.testing.assert_array_equal(out.storage.reshape(64, 64), expected)


# ---------------------------------------------------------------------------------- tiled mode


def box_reference(values, box, coords, fill=0):
    """The tile at numpy-order `coords` of `values`, element by element, `fill` outside the array."""
    out = np.full(box, fill, np.float64)
    for k in np.ndindex(*box):
        g = tuple(c + i for c, i in zip(coords, k))
        if all(0 <= gi < d for gi, d in zip(g, values.shape)):
            out[k] = values[g]
    return out


@pytest.mark.parametrize(
    "coords",
    [(-3, -2), (-3, 6), (8, -5), (8, 7), (3, 2), (-4, -8), (10, 0), (0, 12), (100, 100), (-(2**31), 2**31 - 1)],
)
def test_tiles_hanging_off_every_edge_2d(coords):
    values = np.arange(1, 10 * 12 + 1, dtype=np.float32).reshape(10, 12)
    tm = TensorMapArg.tiled(to_handle(values), (4, 8))
    smem = smem_of(128)
    assert tiled_load(tm, list(reversed(coords)), smem, 0) == 128
    np.testing.assert_array_equal(as_values(smem, 0, np.float32, (4, 8)), box_reference(values, (4, 8), coords))


@pytest.mark.parametrize("coords", [(-1, -2, -3), (2, 4, 5), (-2, 5, 0), (1, 0, -4)])
def test_tiles_hanging_off_every_edge_3d(coords):
    values = np.arange(1, 3 * 6 * 8 + 1, dtype=np.int16).reshape(3, 6, 8)
    tm = TensorMapArg.tiled(to_handle(values), (2, 3, 8))
    smem = smem_of(256)
    assert tiled_load(tm, list(reversed(coords)), smem, 128) == 96
    np.testing.assert_array_equal(as_values(smem, 128, np.int16, (2, 3, 8)), box_reference(values, (2, 3, 8), coords))
    assert (smem[:128] == SENTINEL).all() and (smem[224:] == SENTINEL).all()


def test_handle_offset_and_padded_row_pitch():
    storage = np.arange(1000, dtype=np.float32)
    h = Handle(None, storage, np.float32, (5, 6), strides=(12, 1), offset=8)  # 48-byte rows at byte 32
    tm = TensorMapArg.tiled(h, (3, 4))
    assert tm.global_address == 32 and tm.global_strides == (48,)
    smem = smem_of(128)
    tiled_load(tm, [3, 1], smem, 0)
    expected = [[8 + 12 * r + c if c < 6 else 0 for c in range(3, 7)] for r in range(1, 4)]
    np.testing.assert_array_equal(as_values(smem, 0, np.float32, (3, 4)), expected)


@pytest.mark.parametrize("swizzle", ["32B", "64B", "128B"])
def test_swizzle_table(swizzle):
    # PTX 5.5.7 tables: in line y (128 bytes), chunk x holds the data of chunk x ^ (y mod k)
    k = {"32B": 2, "64B": 4, "128B": 8}[swizzle]
    y, x = np.meshgrid(np.arange(16), np.arange(8), indexing="ij")
    addrs = 1024 * 3 + y * 128 + x * 16 + 5
    expected = 1024 * 3 + y * 128 + (x ^ (y % k)) * 16 + 5
    np.testing.assert_array_equal(swizzle_addresses(addrs, swizzle), expected)
    np.testing.assert_array_equal(swizzle_addresses(addrs, "none"), addrs)


@pytest.mark.parametrize(
    ("swizzle", "dst"), [("32B", 0), ("64B", 512), ("128B", 2048), ("128B", 128), ("64B", 384), ("32B", 128)]
)
def test_swizzled_tiled_load(swizzle, dst):
    span = {"32B": 32, "64B": 64, "128B": 128}[swizzle]
    values = np.arange(20 * 40, dtype=np.float32).reshape(20, 40)
    tm = TensorMapArg.tiled(to_handle(values), (16, span // 4), swizzle=swizzle)
    smem = smem_of(4096)
    if dst % {"32B": 256, "64B": 512, "128B": 1024}[swizzle]:
        with pytest.warns(TmaWarning, match="phase"):
            tiled_load(tm, [4, 2], smem, dst)
    else:
        tiled_load(tm, [4, 2], smem, dst)
    image = box_reference(values, (16, span // 4), (2, 4)).astype(np.float32).view(np.uint8).ravel()
    expected = smem_of(4096)
    ref_store_image(expected, dst, image, swizzle)
    np.testing.assert_array_equal(smem, expected)


def test_swizzle_128B_phase_follows_the_programming_guide():
    # dst one line past a 1024-byte boundary: tile row y (128 bytes) keeps chunk x at ((y + 1) % 8) ^ x
    values = np.arange(8 * 32, dtype=np.float32).reshape(8, 32)
    tm = TensorMapArg.tiled(to_handle(values), (8, 32), swizzle="128B")
    smem = smem_of(2048)
    with pytest.warns(TmaWarning):
        tiled_load(tm, [0, 0], smem, 128)
    lines = smem[128 : 128 + 1024].reshape(8, 8, 16)
    for y in range(8):
        for x in range(8):
            chunk = values[y, 4 * x : 4 * x + 4].view(np.uint8)
            np.testing.assert_array_equal(lines[y, ((y + 1) % 8) ^ x], chunk)


def test_element_strides():
    values = np.arange(16 * 16, dtype=np.float32).reshape(16, 16)
    tm = TensorMapArg.tiled(to_handle(values), (8, 4), elem_stride=(2, 1))
    smem = smem_of(128)
    assert tiled_load(tm, [3, 1], smem, 0) == 4 * 4 * 4  # ceil(8/2) = 4 rows
    np.testing.assert_array_equal(as_values(smem, 0, np.float32, (4, 4)), values[1:9:2, 3:7])
    cube = np.arange(9 * 2 * 4, dtype=np.int32).reshape(9, 2, 4)
    tm3 = TensorMapArg.tiled(to_handle(cube), (6, 2, 4), elem_stride=(3, 1, 1))
    assert tiled_load(tm3, [0, 0, 1], smem, 0) == 2 * 2 * 4 * 4
    np.testing.assert_array_equal(as_values(smem, 0, np.int32, (2, 2, 4)), cube[[1, 4]])


def test_element_stride_not_dividing_the_box_still_loads_the_last_element():
    # Rule 15 forbids this map, so build it past the encoder: box 5 rows, stride 2 -> rows +0, +2, +4
    values = np.arange(16 * 4, dtype=np.float32).reshape(16, 4) + 1
    valid = TensorMapArg.tiled(to_handle(values), (4, 4), elem_stride=(2, 1))
    tm = raw_map(valid, box_dim=(4, 5))
    smem = smem_of(128)
    assert tiled_load(tm, [0, 1], smem, 0) == 3 * 4 * 4
    np.testing.assert_array_equal(as_values(smem, 0, np.float32, (3, 4)), values[[1, 3, 5]])
    assert tiled_load(tm, [0, 12], smem, 0) == 48  # rows 12, 14, 16: the last is OOB
    np.testing.assert_array_equal(as_values(smem, 0, np.float32, (3, 4)), [values[12], values[14], [0] * 4])


def test_dim0_element_stride_is_ignored_without_interleave():
    # Section 1.3: with interleave NONE the hardware treats elementStrides[0] as 1 (rule 6 forbids
    # anything else at construction, so the map is built past the encoder).
    values = np.arange(8 * 8, dtype=np.float32).reshape(8, 8)
    tm = raw_map(TensorMapArg.tiled(to_handle(values), (2, 4)), elem_strides=(2, 1))
    smem = smem_of(128)
    assert tiled_load(tm, [1, 3], smem, 0) == 32
    np.testing.assert_array_equal(as_values(smem, 0, np.float32, (2, 4)), values[3:5, 1:5])


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_nan_fill(dtype):
    es = np.dtype(dtype).itemsize
    cols = 32 // es
    values = np.arange(4 * cols).reshape(4, cols).astype(dtype)
    tm = TensorMapArg.tiled(to_handle(values), (4, cols), oob_fill="nan")
    smem = smem_of(256)
    tiled_load(tm, [-1, 2], smem, 0)
    tile = as_values(smem, 0, dtype, (4, cols)).astype(np.float64)
    assert np.isnan(tile[:, 0]).all() and np.isnan(tile[2:, :]).all()
    np.testing.assert_array_equal(tile[:2, 1:], values[2:, : cols - 1].astype(np.float64))
    assert (smem[:es] == nan_bytes(dtype)).all()  # canonical quiet NaN of the type


def test_integer_fill_is_zero():
    values = np.full((4, 16), -1, np.int8)
    tm = TensorMapArg.tiled(to_handle(values), (4, 16))
    smem = smem_of(64)
    tiled_load(tm, [8, 2], smem, 0)
    np.testing.assert_array_equal(as_values(smem, 0, np.int8, (4, 16)), [[-1] * 8 + [0] * 8] * 2 + [[0] * 16] * 2)


def test_store_clips_to_the_tensor():
    out = to_handle(np.full((10, 12), -1, np.float32))
    tm = TensorMapArg.tiled(out, (4, 8))
    smem = smem_of(256)
    smem[:128] = np.arange(1, 33, dtype=np.float32).view(np.uint8)
    tiled_store(tm, [8, 8], smem, 0)  # rows 8..11, columns 8..15: only 2 x 4 elements exist
    expected = np.full((10, 12), -1, np.float32)
    expected[8:10, 8:12] = np.arange(1, 33).reshape(4, 8)[:2, :4]
    np.testing.assert_array_equal(out.storage.reshape(10, 12), expected)
    tiled_store(tm, [100, 100], smem, 0)  # all OOB: nothing written
    np.testing.assert_array_equal(out.storage.reshape(10, 12), expected)


def test_store_unswizzles():
    values = np.arange(16 * 64, dtype=np.float16).reshape(16, 64)
    tm_in = TensorMapArg.tiled(to_handle(values), (8, 64), swizzle="128B")
    out = to_handle(np.zeros((16, 64), np.float16))
    tm_out = TensorMapArg.tiled(out, (8, 64), swizzle="128B")
    smem = smem_of(1024)
    tiled_load(tm_in, [0, 4], smem, 0)
    tiled_store(tm_out, [0, 2], smem, 0)
    expected = np.zeros((16, 64), np.float16)
    expected[2:10] = values[4:12]
    np.testing.assert_array_equal(out.storage.reshape(16, 64), expected)


# ---------------------------------------------------------------------------------- preconditions


def test_precondition_errors_tiled():
    tm = TensorMapArg.tiled(to_handle(np.zeros((16, 16), np.float32)), (4, 4))
    smem = smem_of(1024)
    expect_error(r"rule 24", tiled_load, tm, [0, 0], smem, 64)
    expect_error(r"rule 28", tiled_load, tm, [0, 0], smem, 1024)
    expect_error(r"rule 28", tiled_load, tm, [0, 0], smem, -128)
    expect_error(r"rule 23", tiled_load, tm, [0, 0, 0], smem, 0)
    expect_error(r"\.s32", tiled_load, tm, [2**31, 0], smem, 0)
    expect_error(r"1-D uint8", tiled_load, tm, [0, 0], np.zeros(256, np.float32), 0)
    expect_error(r"rule 27", tiled_store, tm, [0, -1], smem, 0)
    expect_error(r"rule 24", tiled_store, tm, [0, 0], smem, 16)
    expect_error(r"interleave", tiled_load, raw_map(tm, interleave="16B"), [0, 0], smem, 0)
    im = TensorMapArg.im2col(
        to_handle(np.zeros((1, 3, 3, 8), np.float32)),
        channels_per_pixel=8,
        pixels_per_column=4,
        lower_corner=(0, 0),
        upper_corner=(0, 0),
    )
    expect_error(r"rule 23", tiled_load, im, [0, 0, 0, 0], smem, 0)
    expect_error(r"rule 23", im2col_load, tm, [0, 0], [], smem, 0)


def test_emulator_refuses_rows_narrower_than_the_swizzle_span():
    tm = TensorMapArg.tiled(to_handle(np.zeros((16, 16), np.float32)), (4, 8), swizzle="64B")
    expect_error(r"rule 14", tiled_load, tm, [0, 0], smem_of(1024), 0)
    im = TensorMapArg.im2col(
        to_handle(np.zeros((1, 3, 3, 8), np.float32)),
        channels_per_pixel=8,
        pixels_per_column=4,
        lower_corner=(0, 0),
        upper_corner=(0, 0),
        swizzle="64B",
    )
    expect_error(r"rule 21", im2col_load, im, [0, 0, 0, 0], [0, 0], smem_of(1024), 0)


def test_map_reaching_outside_the_allocation_is_an_error():
    class Oversized:
        handle = to_handle(np.zeros((4, 4), np.float32))
        shape = (64, 4)
        strides = (4, 1)

    tm = TensorMapArg.tiled(Oversized(), (2, 4))  # claims 64 rows of 16 bytes over a 64-byte buffer
    assert tiled_load(tm, [0, 2], smem_of(128), 0) == 32  # rows 2..3 exist
    expect_error(r"outside the buffer", tiled_load, tm, [0, 3], smem_of(128), 0)
    expect_error(r"outside the buffer", tiled_load, tm, [0, 63], smem_of(128), 0)
    assert tiled_load(tm, [0, 64], smem_of(128), 0) == 32  # wholly OOB: nothing is read


# ---------------------------------------------------------------------------------- property tests


@st.composite
def tiled_cases(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    es = dtype.itemsize
    rank = draw(st.integers(1, 4))
    swizzle = draw(st.sampled_from(["none", "32B", "64B", "128B"]))
    if swizzle == "none":
        box0 = draw(st.integers(1, 3)) * 16 // es
    else:
        box0 = {"32B": 32, "64B": 64, "128B": 128}[swizzle] // es
    dims = [draw(st.integers(1, box0 + 9))] + [draw(st.integers(1, 6)) for _ in range(rank - 1)]
    estr = [1] + [draw(st.integers(1, 3)) for _ in range(rank - 1)]
    box = [box0] + [estr[i] * draw(st.integers(1, 2)) for i in range(1, rank)]
    byte_strides = [es]
    for i in range(1, rank):
        inner = byte_strides[i - 1] * dims[i - 1]
        byte_strides.append(-(-inner // 16) * 16 + 16 * draw(st.integers(0, 2)))
    coords = [draw(st.integers(-box[i] - 2, dims[i] + 1)) for i in range(rank)]
    offset_bytes = 16 * draw(st.integers(0, 3))
    nan = dtype.kind == "f" or dtype == np.dtype(ml_dtypes.bfloat16)  # bf16's kind is "V"
    oob = draw(st.sampled_from(["zero", "nan"])) if nan else "zero"
    dst = 128 * draw(st.integers(0, 9))
    seed = draw(st.integers(0, 2**32 - 1))
    return dtype, dims, box, estr, byte_strides, coords, offset_bytes, swizzle, oob, dst, seed


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiled_cases())
def test_tiled_load_matches_the_loop_reference(case):
    dtype, dims, box, estr, byte_strides, coords, offset_bytes, swizzle, oob, dst, seed = case
    es = dtype.itemsize
    rank = len(dims)
    rng = np.random.default_rng(seed)
    span_bytes = offset_bytes + sum((d - 1) * s for d, s in zip(dims, byte_strides)) + es + 64
    raw = rng.integers(0, 256, -(-span_bytes // es) * es, dtype=np.uint8)
    strides = [s // es for s in reversed(byte_strides)]
    h = Handle(None, raw.view(dtype), dtype, tuple(reversed(dims)), strides, offset_bytes // es)
    tm = TensorMapArg.tiled(h, tuple(reversed(box)), elem_stride=tuple(reversed(estr)), swizzle=swizzle, oob_fill=oob)
    fill = nan_bytes(dtype) if oob == "nan" else np.zeros(es, np.uint8)
    image = ref_tiled_image(raw, offset_bytes, es, dims, byte_strides, box, estr, coords, fill)
    expected = smem_of(dst + image.size + 256)
    ref_store_image(expected, dst, image, swizzle)
    smem = smem_of(expected.size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TmaWarning)
        assert tiled_load(tm, coords, smem, dst) == image.size
    np.testing.assert_array_equal(smem, expected)
    assert rank == tm.rank
