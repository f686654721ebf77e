"""The numpy TMA emulation against hardware-checked cases, the spec's worked examples and loop references.

Expected values come from tracel-ai/cubecl `runtime_tests/tensormap.rs` (asserted on GPUs), from
the TMA semantics (docs/semantics/tma.md: the swizzle formula and a hand-worked im2col example), or from the simple loops below.
Coordinates passed to the emulator are driver order (innermost first).
"""

from __future__ import annotations

import types
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cubepy.errors import TensorMapError
from cubepy.runtime.handle import Handle
from cubepy.runtime.interp.tma import (
    TmaWarning,
    im2col_load,
    im2col_pixels,
    swizzle_addresses,
    tiled_load,
    tiled_store,
)
from cubepy.runtime.tensormap import TensorMapArg

SENTINEL = 0xA5


def to_handle(array, dtype=None):
    """A contiguous CPU handle holding a copy of `array`."""
    data = np.ascontiguousarray(array, dtype=dtype)
    return Handle(None, data.reshape(-1).copy(), data.dtype, data.shape)


def smem_of(nbytes):
    return np.full(nbytes, SENTINEL, np.uint8)


def as_values(smem, dst, dtype, shape):
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    return smem[dst : dst + count * dtype.itemsize].view(dtype).reshape(shape)


def raw_map(tm, **changes):
    """A copy of `tm`'s fields with some changed, bypassing the encoder (for emulator-only cases)."""
    fields = {name: getattr(tm, name) for name in TensorMapArg.__slots__}
    return types.SimpleNamespace(**{**fields, **changes})


def nan_bytes(dtype):
    return np.full(1, np.nan, dtype).view(np.uint8)


# ---------------------------------------------------------------------------------- loop references


def ref_swizzle(addr, swizzle):
    """PTX swizzle tables: 16-byte chunk x of 128-byte line y goes to chunk x ^ (y mod k)."""
    k = {"none": 1, "32B": 2, "64B": 4, "128B": 8}[swizzle]
    line, chunk, byte = addr // 128, (addr // 16) % 8, addr % 16
    return line * 128 + (chunk ^ (line % k)) * 16 + byte


def ref_store_image(smem, dst, image, swizzle):
    for o in range(0, len(image), 16):
        a = ref_swizzle(dst + o, swizzle)
        smem[a : a + 16] = image[o : o + 16]


def ref_tiled_image(gmem, address, es, dims, byte_strides, box, estr, coords, fill):
    """Section 1.5: the dense linear image of a tile-mode box, one element at a time (dim 0 fastest)."""
    r = len(dims)
    e = [1, *estr[1:]]
    n = [-(-box[i] // e[i]) for i in range(r)]
    image = []
    for k_rev in np.ndindex(*reversed(n)):
        k = k_rev[::-1]
        g = [coords[i] + k[i] * e[i] for i in range(r)]
        if all(0 <= g[i] < dims[i] for i in range(r)):
            a = address + sum(g[i] * byte_strides[i] for i in range(r))
            image.extend(gmem[a : a + es])
        else:
            image.extend(fill)
    return np.array(image, np.uint8)


def ref_im2col_rows(dims, lower, upper, estr, ppc, coords, offsets):
    """Section 2.3's enumeration loop, verbatim: (n, pixel) per shared-memory row."""
    rank = len(dims)
    s = rank - 2
    last = [dims[1 + j] - 1 + upper[j] for j in range(s)]
    b = list(coords[1 : 1 + s])
    n = coords[rank - 1]
    rows = []
    for _ in range(ppc):
        rows.append((n, [b[j] + offsets[j] for j in range(s)]))
        j = 0
        b[0] += estr[1]
        while j < s and b[j] > last[j]:
            b[j] = lower[j]
            if j + 1 < s:
                b[j + 1] += estr[j + 2]
            else:
                n += estr[rank - 1]
            j += 1
    return rows


def ref_im2col_image(x, rows, c0, cpp, fill):
    """Section 2.5: channels c0..c0+cpp of each row's pixel of the NDHWC array `x`, filled when OOB."""
    out = []
    for n, pix in rows:
        spatial = tuple(reversed(pix))  # rows hold W first; numpy indexes (..., H, W)
        ok = 0 <= n < x.shape[0] and all(0 <= p < d for p, d in zip(spatial, x.shape[1:-1]))
        for k in range(cpp):
            ch = c0 + k
            if ok and 0 <= ch < x.shape[-1]:
                out.extend(np.asarray(x[(n, *spatial, ch)]).reshape(1).view(np.uint8))
            else:
                out.extend(fill)
    return np.array(out, np.uint8)


def direct_im2col(x, tap, c0, cpp, m0, ppc, stride, pad, dil, filt):
    """Section 2.4 from the convolution side: row p is output pixel m0 + p, reading
    X[n, o*stride - pad + tap*dil, c0:c0+cpp] with zeros in the padding and past the last image."""
    n_img, spatial, chans = x.shape[0], x.shape[1:-1], x.shape[-1]
    out_dims = [(i + 2 * p - d * (f - 1) - 1) // s + 1 for i, p, d, f, s in zip(spatial, pad, dil, filt, stride)]
    rows = np.zeros((ppc, cpp), x.dtype)
    for p in range(ppc):
        m = m0 + p
        n, rest = divmod(m, int(np.prod(out_dims)))
        o = np.unravel_index(rest, out_dims)
        idx = [o[j] * stride[j] - pad[j] + tap[j] * dil[j] for j in range(len(spatial))]
        if n < n_img and all(0 <= i < d for i, d in zip(idx, spatial)):
            for k in range(cpp):
                if 0 <= c0 + k < chans:
                    rows[p, k] = x[(n, *idx, c0 + k)]
    return rows, out_dims


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


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_cubecl_im2col_load(dtype):
    # test_tensormap_load_im2col: 3x3 input, 8 channels, 2x2 filter, pad 1; one load per tap
    n, h, w, c = 1, 3, 3, 8
    x = np.arange(1, h * w * c + 1).reshape(n, h, w, c).astype(dtype)
    tm = TensorMapArg.im2col(
        to_handle(x), channels_per_pixel=c, pixels_per_column=16, lower_corner=(-1, -1), upper_corner=(0, 0)
    )
    es = np.dtype(dtype).itemsize
    tile_bytes = 16 * c * es
    smem = smem_of(4 * tile_bytes)
    for ky in range(2):
        for kx in range(2):
            dst = (ky * 2 + kx) * tile_bytes
            # tma_load_im2col_4d(map, smem, n=0, h=-1, w=-1, c=0, h_off=ky, w_off=kx)
            assert im2col_load(tm, [0, -1, -1, 0], [kx, ky], smem, dst) == tile_bytes
    pixels = [
        0,
        0,
        0,
        0,
        0,
        1,
        2,
        3,
        0,
        4,
        5,
        6,
        0,
        7,
        8,
        9,
        0,
        0,
        0,
        0,
        1,
        2,
        3,
        0,
        4,
        5,
        6,
        0,
        7,
        8,
        9,
        0,
        0,
        1,
        2,
        3,
        0,
        4,
        5,
        6,
        0,
        7,
        8,
        9,
        0,
        0,
        0,
        0,
        1,
        2,
        3,
        0,
        4,
        5,
        6,
        0,
        7,
        8,
        9,
        0,
        0,
        0,
        0,
        0,
    ]
    expected = [v for p in pixels for v in ([0] * c if p == 0 else range((p - 1) * c + 1, p * c + 1))]
    np.testing.assert_array_equal(as_values(smem, 0, dtype, (64 * c,)).astype(np.float32), expected)


# ---------------------------------------------------------------------------------- spec worked examples


def nhwc_4x4():
    x = np.arange(1 * 4 * 4 * 8).reshape(1, 4, 4, 8).astype(np.float16)
    tm = TensorMapArg.im2col(
        to_handle(x), channels_per_pixel=8, pixels_per_column=16, lower_corner=(-1, -1), upper_corner=(-1, -1)
    )
    return x, tm


@pytest.mark.parametrize(
    ("tap", "zero_rows"),
    [
        ((0, 0), {0, 1, 2, 3, 4, 8, 12}),
        ((1, 1), set()),
        ((2, 2), {3, 7, 11, 12, 13, 14, 15}),
        ((0, 2), {0, 1, 2, 3, 7, 11, 15}),
    ],
)
def test_spec_2_6_worked_example(tap, zero_rows):
    x, tm = nhwc_4x4()
    r, s = tap
    smem = smem_of(256)
    assert im2col_load(tm, [0, -1, -1, 0], [s, r], smem, 0) == 256
    rows = as_values(smem, 0, np.float16, (16, 8))
    for j in range(16):
        if j in zero_rows:
            assert (rows[j] == 0).all(), j
        else:  # row j = output (p, q) = (j div 4, j mod 4) reads input (p - 1 + r, q - 1 + s)
            np.testing.assert_array_equal(rows[j], x[0, j // 4 - 1 + r, j % 4 - 1 + s])


def test_spec_2_6_swizzle_32B_swaps_halves_of_rows_4_to_7():
    x = np.arange(4 * 4 * 16).reshape(1, 4, 4, 16).astype(np.float16)
    tm = TensorMapArg.im2col(
        to_handle(x),
        channels_per_pixel=16,
        pixels_per_column=16,
        lower_corner=(-1, -1),
        upper_corner=(-1, -1),
        swizzle="32B",
    )
    smem = smem_of(512)
    im2col_load(tm, [0, -1, -1, 0], [1, 1], smem, 0)  # tap (1,1): row j is pixel j
    rows = as_values(smem, 0, np.float16, (16, 16))
    for j in range(16):
        pixel = x[0, j // 4, j % 4]
        if (j // 4) % 2 == 1:  # rows 4-7, 12-15: the two 16-byte halves trade places
            pixel = np.concatenate([pixel[8:], pixel[:8]])
        np.testing.assert_array_equal(rows[j], pixel, err_msg=str(j))


def test_spec_2_6_split_across_two_images():
    x = np.arange(2 * 4 * 4 * 8).reshape(2, 4, 4, 8).astype(np.float16)
    tm = TensorMapArg.im2col(
        to_handle(x), channels_per_pixel=8, pixels_per_column=8, lower_corner=(-1, -1), upper_corner=(-1, -1)
    )
    smem = smem_of(128)
    im2col_load(tm, [0, -1, 2, 0], [1, 1], smem, 0)  # linear output 12 = (n=0, p=3, q=0), tap (1,1)
    rows = as_values(smem, 0, np.float16, (8, 8))
    for p in range(4):
        np.testing.assert_array_equal(rows[p], x[0, 3, p])  # (n=0, h=3, w=0..3)
        np.testing.assert_array_equal(rows[4 + p], x[1, 0, p])  # (n=1, h=0, w=0..3): no gap


def test_spec_2_6_stride_2():
    x = np.arange(1, 1 + 5 * 5 * 8).reshape(1, 5, 5, 8).astype(np.float32)
    tm = TensorMapArg.im2col(
        to_handle(x),
        channels_per_pixel=8,
        pixels_per_column=9,
        lower_corner=(-1, -1),
        upper_corner=(-1, -1),
        elem_stride=(1, 2, 2, 1),
    )
    smem = smem_of(9 * 32)
    im2col_load(tm, [0, -1, -1, 0], [0, 0], smem, 0)
    reads = [(-1, -1), (-1, 1), (-1, 3), (1, -1), (1, 1), (1, 3), (3, -1), (3, 1), (3, 3)]
    rows = as_values(smem, 0, np.float32, (9, 8))
    for row, (h, w) in zip(rows, reads):
        np.testing.assert_array_equal(row, x[0, h, w] if h >= 0 and w >= 0 else 0)


def test_im2col_pixels_restart_at_lower_corner():
    # Property 1 (Triton example 4): a start at (h=1, w=3) of a 4x4 box runs w=3, then (h=2, w=0).
    x = np.zeros((1, 4, 4, 8), np.float16)
    tm = TensorMapArg.im2col(
        to_handle(x), channels_per_pixel=8, pixels_per_column=4, lower_corner=(0, 0), upper_corner=(0, 0)
    )
    n, pix = im2col_pixels(tm, [0, 3, 1, 0], [0, 0])
    assert n.tolist() == [0, 0, 0, 0]
    assert pix.tolist() == [[3, 0, 1, 2], [1, 2, 2, 2]]  # W row, H row


# ---------------------------------------------------------------------------------- im2col vs convolution


@pytest.mark.parametrize(
    ("shape", "filt", "stride", "pad", "dil", "tap", "m0", "ppc"),
    [
        ((2, 5, 5, 8), (3, 3), (1, 1), (2, 2), (2, 2), (1, 2), 0, 50),  # dilation 2 through the offsets
        ((2, 5, 5, 8), (3, 3), (1, 1), (2, 2), (2, 2), (2, 0), 7, 30),
        ((2, 5, 6, 8), (3, 2), (2, 2), (1, 0), (1, 1), (2, 1), 3, 16),  # stride 2, straddling images
        ((3, 9, 8), (3,), (2,), (1,), (1,), (2,), 2, 12),  # rank 3 (NWC)
        ((2, 11, 8), (4,), (1,), (3,), (3,), (3,), 5, 40),  # rank 3, dilation 3, past the last image
        ((2, 3, 4, 5, 8), (2, 3, 3), (1, 1, 2), (1, 1, 1), (1, 1, 1), (1, 2, 0), 4, 40),  # rank 5
        ((1, 4, 3, 3, 8), (3, 2, 2), (2, 1, 1), (1, 0, 1), (1, 2, 1), (2, 1, 1), 0, 20),  # rank 5, dil 2 (H)
    ],
)
def test_im2col_matches_direct_convolution(shape, filt, stride, pad, dil, tap, m0, ppc):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    spatial = len(shape) - 2
    cpp = 8
    upper = [p - d * (f - 1) for p, d, f in zip(pad, dil, filt)]
    tm = TensorMapArg.im2col(
        to_handle(x),
        channels_per_pixel=cpp,
        pixels_per_column=ppc,
        lower_corner=[-p for p in pad],
        upper_corner=upper,
        elem_stride=(1, *stride, 1),
    )
    expected, out_dims = direct_im2col(x, tap, 0, cpp, m0, ppc, stride, pad, dil, filt)
    n0, rest = divmod(m0, int(np.prod(out_dims)))
    o0 = np.unravel_index(rest, out_dims)
    base = [int(o0[j]) * stride[j] - pad[j] for j in range(spatial)]
    coords = [0, *reversed(base), n0]
    offsets = [t * d for t, d in zip(reversed(tap), reversed(dil))]
    smem = smem_of(ppc * cpp * 4 + 128)
    assert im2col_load(tm, coords, offsets, smem, 0) == ppc * cpp * 4
    np.testing.assert_array_equal(as_values(smem, 0, np.float32, (ppc, cpp)), expected)
    assert (smem[ppc * cpp * 4 :] == SENTINEL).all()


def test_im2col_channel_block_past_c_is_zero():
    # cubek's trick: a huge channel coordinate makes the whole load OOB zeros, still full tx bytes
    x = np.ones((1, 3, 3, 8), np.float32)
    tm = TensorMapArg.im2col(
        to_handle(x), channels_per_pixel=8, pixels_per_column=4, lower_corner=(0, 0), upper_corner=(0, 0)
    )
    smem = smem_of(128)
    assert im2col_load(tm, [0x7FFFFF00, 0, 0, 0], [0, 0], smem, 0) == 128
    assert (smem == 0).all()
    im2col_load(tm, [4, 0, 0, 0], [0, 0], smem, 0)  # half the channels in range
    np.testing.assert_array_equal(as_values(smem, 0, np.float32, (4, 8)), [[1] * 4 + [0] * 4] * 4)


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


def expect_error(pattern, fn, *args):
    with pytest.raises(TensorMapError, match=pattern):
        fn(*args)


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


@pytest.mark.parametrize(
    ("shape", "bad_offsets", "good_offsets"),
    [((1, 3, 8), [65536], [65535]), ((1, 3, 3, 8), [256, 0], [255, 255]), ((1, 3, 3, 3, 8), [0, 32, 0], [31, 31, 31])],
)
def test_im2col_offset_ranges(shape, bad_offsets, good_offsets):
    spatial = len(shape) - 2
    tm = TensorMapArg.im2col(
        to_handle(np.zeros(shape, np.float32)),
        channels_per_pixel=8,
        pixels_per_column=4,
        lower_corner=[0] * spatial,
        upper_corner=[0] * spatial,
    )
    coords = [0] * len(shape)
    smem = smem_of(128)
    expect_error(r"rule 26", im2col_load, tm, coords, bad_offsets, smem, 0)
    expect_error(r"rule 26", im2col_load, tm, coords, [-1] * spatial, smem, 0)
    expect_error(r"rule 23", im2col_load, tm, coords, [0] * (spatial + 1), smem, 0)
    assert im2col_load(tm, coords, good_offsets, smem, 0) == 128  # far OOB: all zeros
    assert (smem == 0).all()


def test_im2col_base_outside_the_box_and_off_lattice():
    tm = TensorMapArg.im2col(
        to_handle(np.zeros((1, 5, 5, 8), np.float32)),
        channels_per_pixel=8,
        pixels_per_column=4,
        lower_corner=(-1, -1),
        upper_corner=(-1, -1),
        elem_stride=(1, 2, 2, 1),
    )
    smem = smem_of(128)
    expect_error(r"rule 26.*bounding box", im2col_load, tm, [0, -2, -1, 0], [0, 0], smem, 0)
    expect_error(r"rule 26.*bounding box", im2col_load, tm, [0, -1, 4, 0], [0, 0], smem, 0)
    with pytest.warns(TmaWarning, match="lattice"):
        im2col_load(tm, [0, 0, -1, 0], [0, 0], smem, 0)
    # [INFERRED] the walk keeps stepping from the off-lattice base, then restarts at the lower corner
    with pytest.warns(TmaWarning, match="lattice"):
        n, pix = im2col_pixels(tm, [0, 2, -1, 0], [0, 0])
    assert n.tolist() == [0, 0, 0, 0]
    assert pix[0].tolist() == [2, -1, 1, 3] and pix[1].tolist() == [-1, 1, 1, 1]


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

DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int8, np.uint16, np.int32, np.uint64]


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


@st.composite
def im2col_cases(draw):
    dtype = np.dtype(draw(st.sampled_from([np.float16, np.float32, np.int8, np.float64])))
    es = dtype.itemsize
    rank = draw(st.integers(3, 5))
    s = rank - 2
    cpp = (16 // es) * draw(st.integers(1, 3))
    chans = (16 // es) * draw(st.integers(1, 4))  # the W stride must stay a multiple of 16 bytes
    spatial = [draw(st.integers(1, 5)) for _ in range(s)]  # W first
    batch = draw(st.integers(1, 3))
    lower = [draw(st.integers(-3, 2)) for _ in range(s)]
    upper = [draw(st.integers(max(-3, lower[j] - spatial[j] + 1), 2)) for j in range(s)]
    estr = [draw(st.integers(1, 3)) for _ in range(s)]
    base = []
    for j in range(s):
        last = spatial[j] - 1 + upper[j]
        base.append(lower[j] + estr[j] * draw(st.integers(0, (last - lower[j]) // estr[j])))
    offsets = [draw(st.integers(0, 4)) for _ in range(s)]
    c0 = draw(st.integers(-cpp, chans + 1))
    n0 = draw(st.integers(-1, batch))
    ppc = draw(st.integers(1, 40))
    swizzle = {32: "32B", 64: "64B", 128: "128B"}.get(cpp * es, "none")
    swizzle = draw(st.sampled_from(["none", swizzle]))
    return dtype, spatial, batch, chans, lower, upper, estr, base, offsets, c0, n0, cpp, ppc, swizzle


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(im2col_cases(), st.integers(0, 2**32 - 1))
def test_im2col_load_matches_the_loop_reference(case, seed):
    dtype, spatial, batch, chans, lower, upper, estr, base, offsets, c0, n0, cpp, ppc, swizzle = case
    shape = (batch, *reversed(spatial), chans)
    raw = np.random.default_rng(seed).integers(0, 256, int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    x = raw.view(dtype).reshape(shape)
    tm = TensorMapArg.im2col(
        Handle(None, raw.view(dtype), dtype, shape),
        channels_per_pixel=cpp,
        pixels_per_column=ppc,
        lower_corner=lower[::-1],
        upper_corner=upper[::-1],
        elem_stride=(1, *reversed(estr), 1),
        swizzle=swizzle,
    )
    dims = [chans, *spatial, batch]
    coords = [c0, *base, n0]
    rows = ref_im2col_rows(dims, lower, upper, [1, *estr, 1], ppc, coords, offsets)
    image = ref_im2col_image(x, rows, c0, cpp, np.zeros(dtype.itemsize, np.uint8))
    expected = smem_of(image.size + 256)
    ref_store_image(expected, 0, image, swizzle)
    smem = smem_of(expected.size)
    assert im2col_load(tm, coords, offsets, smem, 0) == image.size
    np.testing.assert_array_equal(smem, expected)
