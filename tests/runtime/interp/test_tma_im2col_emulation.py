"""The numpy TMA emulation in im2col mode: hardware-checked cases, the worked examples, a direct
convolution and a loop reference.

Expected values come from tracel-ai/cubecl `runtime_tests/tensormap.rs` (asserted on GPUs), from the
hand-worked im2col examples of docs/semantics/tma.md, from a direct convolution, or from the loops in
``tma_reference.py``. Coordinates passed to the emulator are driver order (innermost first).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cubepy.runtime.handle import Handle
from cubepy.runtime.interp.tma import (
    TmaWarning,
    im2col_load,
    im2col_pixels,
)
from cubepy.runtime.tensormap import TensorMapArg
from tests.runtime.interp.tma_reference import (
    SENTINEL,
    as_values,
    direct_im2col,
    expect_error,
    ref_im2col_image,
    ref_im2col_rows,
    ref_store_image,
    smem_of,
    to_handle,
)


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
