"""TMA and barriers inside kernels: loads, stores, im2col walks, swizzles, phases and misuse.

Every expected buffer is computed here from the semantics (docs/semantics/tma.md) by plain
indexing of the source tensor, never through ``cubepy.runtime.interp.tma``.  Every kernel launched
is also compiled and assembled by ptxas (tests/conftest.py).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_DIM, UNIT_POS, Array, Comptime, TensorMap, f32, i32, u32

CUBE = cp.CubeDim(32)
ONE = cp.CubeCount(1)


# -- kernels ---------------------------------------------------------------------------------------------
@cp.cube
def copy_out(stage, out, size):
    """Every unit copies its share of the stage to ``out``."""
    for i in range(UNIT_POS, size, CUBE_DIM):
        out[i] = stage[i]


@cp.cube(launch=True)
def load_2d(tmap: TensorMap[f32], out: Array[f32], y: i32, x: i32, size: Comptime[int], align: Comptime[int]):
    bar = cp.Barrier.shared(CUBE_DIM, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, size, align)
    if UNIT_POS == 0:
        bar.arrive_and_expect_tx(1, size * 4)
        bar.tma_load_2d(tmap, stage.slice(0, size), y, x)
    else:
        bar.arrive()
    bar.wait_parity(0)
    copy_out(stage, out, size)


@cp.cube(launch=True)
def load_3d(tmap: TensorMap[f32], out: Array[f32], z: i32, y: i32, x: i32, size: Comptime[int]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, size, 128)
    if UNIT_POS == 0:
        bar.tma_load_3d(tmap, stage, z, y, x)
        bar.arrive_and_expect_tx(1, size * 4)
    bar.wait_parity(0)
    copy_out(stage, out, size)


@cp.cube(launch=True)
def store_2d(tmap: TensorMap[f32], src: Array[f32], y: i32, x: i32, size: Comptime[int]):
    stage = cp.SharedMemory.aligned(f32, size, 128)
    for i in range(UNIT_POS, size, CUBE_DIM):
        stage[i] = src[i]
    cp.sync_async_proxy_shared()
    cp.sync_cube()
    if UNIT_POS == 0:
        cp.tma_store_2d(stage, tmap, y, x)
        cp.tma_group_commit()
        cp.tma_group_wait(0)


@cp.cube(launch=True)
def im2col_3d(tmap: TensorMap[f32], out: Array[f32], n: i32, w: i32, c: i32, w_off: u32, size: Comptime[int]):
    bar = cp.Barrier.shared(CUBE_DIM, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, size, 128)
    if UNIT_POS == 0:
        bar.tma_load_im2col_3d(tmap, stage, n, w, c, w_off)
    tx = cp.select(UNIT_POS == 0, u32(size * 4), u32(0))
    bar.wait(bar.arrive_and_expect_tx(1, tx))
    copy_out(stage, out, size)


@cp.cube(launch=True)
def im2col_4d(
    tmap: TensorMap[f32], out: Array[f32], n: i32, h: i32, w: i32, c: i32, h_off: u32, w_off: u32, size: Comptime[int]
):
    bar = cp.Barrier.shared(CUBE_DIM, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, size, 128)
    if UNIT_POS == 0:
        bar.tma_load_im2col_4d(tmap, stage, n, h, w, c, h_off, w_off)
    tx = cp.select(UNIT_POS == 0, u32(size * 4), u32(0))
    bar.wait(bar.arrive_and_expect_tx(1, tx))
    copy_out(stage, out, size)


@cp.cube(launch=True)
def im2col_5d(
    tmap: TensorMap[f32],
    out: Array[f32],
    n: i32,
    d: i32,
    h: i32,
    w: i32,
    c: i32,
    d_off: u32,
    h_off: u32,
    w_off: u32,
    size: Comptime[int],
):
    bar = cp.Barrier.shared(CUBE_DIM, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, size, 128)
    if UNIT_POS == 0:
        bar.expect_tx(size * 4)
        bar.tma_load_im2col_5d(tmap, stage, n, d, h, w, c, d_off, h_off, w_off)
    bar.arrive_and_wait()
    copy_out(stage, out, size)


@cp.cube(launch=True)
def pipeline_sum(tmap: TensorMap[f32], out: Array[f32], stages: Comptime[int]):
    """Reuse one barrier for ``stages`` phases: load tile k, wait on parity k % 2, accumulate."""
    bar = cp.Barrier.shared(CUBE_DIM, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, 64, 128)
    acc = f32(0.0)
    for k in cp.unroll(range(stages)):
        if UNIT_POS == 0:
            bar.tma_load_2d(tmap, stage, k * 4, 0)
        token = bar.arrive_and_expect_tx(1, cp.select(UNIT_POS == 0, u32(256), u32(0)))
        bar.wait_parity(k % 2)
        bar.wait(token)
        acc += stage[UNIT_POS]
        cp.sync_cube()
    out[UNIT_POS] = acc


# -- references --------------------------------------------------------------------------------------------
def tiled_reference(src: np.ndarray, start, box, elem_stride=None) -> np.ndarray:
    """The box at ``start`` (numpy order) read element by element; out-of-bounds elements are 0."""
    elem_stride = elem_stride or (1,) * src.ndim
    counts = [-(-b // e) for b, e in zip(box, elem_stride)]
    out = np.zeros(counts, src.dtype)
    for k in itertools.product(*(range(c) for c in counts)):
        g = [s + i * e for s, i, e in zip(start, k, elem_stride)]
        if all(0 <= gi < dim for gi, dim in zip(g, src.shape)):
            out[k] = src[tuple(g)]
    return out.reshape(-1)


def conv_im2col_rows(x: np.ndarray, filt, pad, stride, dil, tap, m0: int, rows: int, c0: int, cpp: int) -> np.ndarray:
    """Rows ``m0..m0+rows`` of the im2col matrix of tap ``tap`` (a direct convolution's input indices).

    ``x`` is N, *spatial, C; spatial parameters are outermost first.  Row m is output pixel m in
    (n, o...) row-major order; past the last image the rows are zero.
    """
    n_img, *spatial, channels = x.shape
    out_dims = [(i + 2 * p - d * (f - 1) - 1) // s + 1 for i, p, s, d, f in zip(spatial, pad, stride, dil, filt)]
    result = np.zeros((rows, cpp), x.dtype)
    for r in range(rows):
        m = m0 + r
        idx = []
        for o in reversed(out_dims):
            idx.append(m % o)
            m //= o
        n = m
        o_pos = idx[::-1]
        if n >= n_img:
            continue
        pix = [o * s - p + t * d for o, s, p, t, d in zip(o_pos, stride, pad, tap, dil)]
        if all(0 <= q < i for q, i in zip(pix, spatial)):
            for k in range(cpp):
                if 0 <= c0 + k < channels:
                    result[r, k] = x[(n, *pix, c0 + k)]
    return result.reshape(-1)


def _conv_map(handle, *, cpp, ppc, pad, filt, dil, stride):
    """An im2col map for a convolution (docs/semantics/tma.md, "Im2col mode"), parameters outermost first."""
    lower = [-p for p in pad]
    upper = [p - d * (f - 1) for p, d, f in zip(pad, dil, filt)]
    return cp.TensorMapArg.im2col(
        cp.TensorArg(handle),
        channels_per_pixel=cpp,
        pixels_per_column=ppc,
        lower_corner=lower,
        upper_corner=upper,
        elem_stride=(1, *stride, 1),
    )


def _source(client, shape, seed=0):
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return values, client.create(values)


# -- tiled loads --------------------------------------------------------------------------------------------
EDGE_STARTS = [
    (-8, -8),
    (-8, 4),
    (-8, 16),
    (10, -8),
    (10, 16),
    (30, -8),
    (30, 4),
    (30, 16),
    (-15, -15),
    (39, 23),
    (45, 0),
    (0, 40),
    (-16, 0),
]


@pytest.mark.parametrize("start", EDGE_STARTS, ids=str)
def test_tile_hanging_off_every_edge(client, start):
    src, handle = _source(client, (40, 24))
    out = client.empty((16 * 16,), np.float32)
    load_2d.launch(
        client,
        ONE,
        CUBE,
        cp.TensorMapArg.tiled(cp.TensorArg(handle), (16, 16)),
        cp.ArrayArg(out),
        start[0],
        start[1],
        256,
        128,
    )
    np.testing.assert_array_equal(client.read(out), tiled_reference(src, start, (16, 16)))


def test_nan_fill_on_every_out_of_bounds_element(client):
    src, handle = _source(client, (20, 8))
    out = client.empty((16 * 8,), np.float32)
    tmap = cp.TensorMapArg.tiled(cp.TensorArg(handle), (16, 8), oob_fill="nan")
    load_2d.launch(client, ONE, CUBE, tmap, cp.ArrayArg(out), 12, -4, 128, 128)
    got = client.read(out).reshape(16, 8)
    expected = tiled_reference(src, (12, -4), (16, 8)).reshape(16, 8)
    inside = np.zeros((16, 8), bool)
    inside[:8, 4:] = True
    np.testing.assert_array_equal(got[inside], expected[inside])
    assert np.isnan(got[~inside]).all()


SPANS = {"32B": (8, 1), "64B": (16, 3), "128B": (32, 7)}


@pytest.mark.parametrize("swizzle", ["32B", "64B", "128B"])
def test_each_swizzle_mode_moves_16_byte_chunks(client, swizzle):
    inner, mask = SPANS[swizzle]
    rows = 16
    src, handle = _source(client, (24, 40))
    out = client.empty((rows * inner,), np.float32)
    tmap = cp.TensorMapArg.tiled(cp.TensorArg(handle), (rows, inner), swizzle=swizzle)
    load_2d.launch(client, ONE, CUBE, tmap, cp.ArrayArg(out), 3, 5, rows * inner, 1024)
    linear = tiled_reference(src, (3, 5), (rows, inner)).view(np.uint8)
    expected = np.empty_like(linear)
    for o in range(0, linear.size, 16):  # chunk at linear byte o lands at o ^ (((o >> 7) & M) << 4)
        a = o ^ (((o >> 7) & mask) << 4)
        expected[a : a + 16] = linear[o : o + 16]
    np.testing.assert_array_equal(client.read(out).view(np.uint8), expected)
    assert not np.array_equal(expected, linear)


@pytest.mark.parametrize("elem_stride", [(1, 2, 1), (3, 1, 1), (2, 4, 1)], ids=str)
def test_element_strides_greater_than_one(client, elem_stride):
    src, handle = _source(client, (9, 14, 16))
    box = (6, 8, 16)
    counts = [b // e for b, e in zip(box, elem_stride)]
    size = int(np.prod(counts))
    out = client.empty((size,), np.float32)
    tmap = cp.TensorMapArg.tiled(cp.TensorArg(handle), box, elem_stride=elem_stride)
    load_3d.launch(client, ONE, CUBE, tmap, cp.ArrayArg(out), 1, -3, 0, size)
    np.testing.assert_array_equal(client.read(out), tiled_reference(src, (1, -3, 0), box, elem_stride))


def test_one_barrier_through_several_phases(client):
    src, handle = _source(client, (16, 16))
    out = client.empty((32,), np.float32)
    pipeline_sum.launch(client, ONE, CUBE, cp.TensorMapArg.tiled(cp.TensorArg(handle), (4, 16)), cp.ArrayArg(out), 3)
    expected = sum(src[4 * k : 4 * k + 4].reshape(-1)[:32] for k in range(3))
    np.testing.assert_allclose(client.read(out), expected, rtol=1e-6)


# -- tiled stores ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("start", [(0, 0), (12, 16), (20, 28), (0, 28)], ids=str)
def test_store_clips_to_the_tensor(client, start):
    values = np.arange(16 * 16, dtype=np.float32) + 1
    src = client.create(values)
    dst = client.create(np.zeros((24, 36), np.float32))
    store_2d.launch(
        client, ONE, CUBE, cp.TensorMapArg.tiled(cp.TensorArg(dst), (16, 16)), cp.ArrayArg(src), start[0], start[1], 256
    )
    expected = np.zeros((24 + 16, 36 + 16), np.float32)
    expected[start[0] : start[0] + 16, start[1] : start[1] + 16] = values.reshape(16, 16)
    np.testing.assert_array_equal(client.read(dst), expected[:24, :36])


# -- im2col --------------------------------------------------------------------------------------------------
def test_im2col_walk_crosses_into_the_next_image(client):
    x, handle = _source(client, (2, 4, 4, 8))
    tmap = _conv_map(handle, cpp=8, ppc=8, pad=(1, 1), filt=(3, 3), dil=(1, 1), stride=(1, 1))
    out = client.empty((64,), np.float32)
    # linear output 12 = (n=0, p=3, q=0): base (h, w) = (2, -1); tap (1, 1)
    im2col_4d.launch(client, ONE, CUBE, tmap, cp.ArrayArg(out), 0, 2, -1, 0, 1, 1, 64)
    expected = conv_im2col_rows(x, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 12, 8, 0, 8)
    np.testing.assert_array_equal(client.read(out), expected)
    np.testing.assert_array_equal(client.read(out).reshape(8, 8)[4:], x[1, 0, :, :])


def test_im2col_past_the_last_image_is_zero(client):
    x, handle = _source(client, (2, 4, 4, 8))
    tmap = _conv_map(handle, cpp=8, ppc=24, pad=(1, 1), filt=(3, 3), dil=(1, 1), stride=(1, 1))
    out = client.empty((192,), np.float32)
    im2col_4d.launch(client, ONE, CUBE, tmap, cp.ArrayArg(out), 1, 0, -1, 0, 0, 2, 192)
    expected = conv_im2col_rows(x, (3, 3), (1, 1), (1, 1), (1, 1), (0, 2), 20, 24, 0, 8)
    np.testing.assert_array_equal(client.read(out), expected)
    assert not client.read(out)[-8 * 12 :].any()


@pytest.mark.parametrize("tap", [(0, 0), (1, 2), (2, 1)], ids=str)
def test_im2col_stride_2(client, tap):
    x, handle = _source(client, (1, 5, 5, 8))
    tmap = _conv_map(handle, cpp=8, ppc=9, pad=(1, 1), filt=(3, 3), dil=(1, 1), stride=(2, 2))
    out = client.empty((72,), np.float32)
    im2col_4d.launch(client, ONE, CUBE, tmap, cp.ArrayArg(out), 0, -1, -1, 0, tap[0], tap[1], 72)
    np.testing.assert_array_equal(
        client.read(out), conv_im2col_rows(x, (3, 3), (1, 1), (2, 2), (1, 1), tap, 0, 9, 0, 8)
    )


def test_im2col_stride_2_rows_follow_the_spec_example(client):
    x, handle = _source(client, (1, 5, 5, 8))
    tmap = _conv_map(handle, cpp=8, ppc=9, pad=(1, 1), filt=(3, 3), dil=(1, 1), stride=(2, 2))
    out = client.empty((72,), np.float32)
    im2col_4d.launch(client, ONE, CUBE, tmap, cp.ArrayArg(out), 0, -1, -1, 0, 0, 0, 72)
    rows = client.read(out).reshape(9, 8)
    # worked by hand: (-1,-1)0, (-1,1)0, (-1,3)0, (1,-1)0, (1,1), (1,3), (3,-1)0, (3,1), (3,3)
    for row, pix in enumerate([None, None, None, None, (1, 1), (1, 3), None, (3, 1), (3, 3)]):
        np.testing.assert_array_equal(rows[row], 0 if pix is None else x[0, pix[0], pix[1]])


@pytest.mark.parametrize("tap", [(0, 0), (2, 1), (1, 2)], ids=str)
def test_im2col_dilation_2(client, tap):
    x, handle = _source(client, (1, 6, 6, 8))
    tmap = _conv_map(handle, cpp=8, ppc=16, pad=(2, 2), filt=(3, 3), dil=(2, 2), stride=(1, 1))
    out = client.empty((128,), np.float32)
    im2col_4d.launch(client, ONE, CUBE, tmap, cp.ArrayArg(out), 0, -2, -2, 0, 2 * tap[0], 2 * tap[1], 128)
    np.testing.assert_array_equal(
        client.read(out), conv_im2col_rows(x, (3, 3), (2, 2), (1, 1), (2, 2), tap, 0, 16, 0, 8)
    )


@pytest.mark.parametrize("tap", [0, 1, 2])
def test_im2col_1d_convolution_over_two_images(client, tap):
    x, handle = _source(client, (2, 10, 16))
    tmap = _conv_map(handle, cpp=8, ppc=20, pad=(1,), filt=(3,), dil=(1,), stride=(1,))
    out = client.empty((160,), np.float32)
    im2col_3d.launch(client, ONE, CUBE, tmap, cp.ArrayArg(out), 0, -1, 8, tap, 160)
    np.testing.assert_array_equal(client.read(out), conv_im2col_rows(x, (3,), (1,), (1,), (1,), (tap,), 0, 20, 8, 8))


@pytest.mark.parametrize("tap", [(0, 0, 0), (1, 0, 1), (1, 1, 1)], ids=str)
def test_im2col_3d_convolution(client, tap):
    x, handle = _source(client, (1, 3, 3, 3, 8))
    tmap = _conv_map(handle, cpp=8, ppc=64, pad=(1, 1, 1), filt=(2, 2, 2), dil=(1, 1, 1), stride=(1, 1, 1))
    out = client.empty((512,), np.float32)
    im2col_5d.launch(client, ONE, CUBE, tmap, cp.ArrayArg(out), 0, -1, -1, -1, 0, *tap, 512)
    np.testing.assert_array_equal(
        client.read(out), conv_im2col_rows(x, (2, 2, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1), tap, 0, 64, 0, 8)
    )


# -- misuse ------------------------------------------------------------------------------------------------
@cp.cube(launch=True)
def never_enough_arrivals(tmap: TensorMap[f32], out: Array[f32]):
    bar = cp.Barrier.shared(CUBE_DIM + 1, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    if UNIT_POS == 0:
        bar.tma_load_2d(tmap, stage, 0, 0)
    bar.wait(bar.arrive_and_expect_tx(1, cp.select(UNIT_POS == 0, u32(1024), u32(0))))
    out[UNIT_POS] = stage[UNIT_POS]


@cp.cube(launch=True)
def expects_too_many_bytes(tmap: TensorMap[f32], out: Array[f32]):
    bar = cp.Barrier.shared(CUBE_DIM, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, 256, 128)
    if UNIT_POS == 0:
        bar.tma_load_2d(tmap, stage, 0, 0)
    bar.wait(bar.arrive_and_expect_tx(1, cp.select(UNIT_POS == 0, u32(2048), u32(0))))
    out[UNIT_POS] = stage[UNIT_POS]


@cp.cube(launch=True)
def waits_in_one_branch(tmap: TensorMap[f32], out: Array[f32]):
    bar = cp.Barrier.shared(CUBE_DIM, UNIT_POS == 0)
    if UNIT_POS < 16:
        bar.arrive_and_wait()
    else:
        bar.arrive_and_wait()
    out[UNIT_POS] = f32(1.0)


@cp.cube(launch=True)
def load_into_slice(tmap: TensorMap[f32], out: Array[f32], start: Comptime[int], end: Comptime[int]):
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    stage = cp.SharedMemory.aligned(f32, 512, 128)
    if UNIT_POS == 0:
        bar.tma_load_2d(tmap, stage.slice(start, end), 0, 0)
        bar.arrive_and_expect_tx(1, 1024)
    bar.wait_parity(0)
    out[UNIT_POS] = stage[UNIT_POS]


@cp.cube(launch=True)
def uninitialised(tmap: TensorMap[f32], out: Array[f32]):
    bar = cp.Barrier.shared(CUBE_DIM, UNIT_POS == 99)
    bar.arrive_and_wait()
    out[UNIT_POS] = f32(1.0)


def _tile_map(client):
    _, handle = _source(client, (32, 32))
    return cp.TensorMapArg.tiled(cp.TensorArg(handle), (16, 16))


def _raises(error, match, kernel, client, *args):
    out = client.zeros((32,), np.float32)
    with pytest.raises(error, match=match) as info:
        kernel.launch(client, ONE, CUBE, _tile_map(client), cp.ArrayArg(out), *args)
    assert "test_tma_kernels.py:" in str(info.value)
    assert not client.read(out).any()  # a failed launch writes nothing
    return info.value


def test_deadlock_when_arrivals_never_come(client):
    err = _raises(cp.SanitizerError, "deadlock", never_enough_arrivals, client)
    assert "1 of 33 arrivals pending" in str(err)


def test_deadlock_when_fewer_bytes_arrive_than_expected(client):
    err = _raises(cp.SanitizerError, "deadlock", expects_too_many_bytes, client)
    assert "1024 transaction bytes outstanding" in str(err)


def test_wait_that_needs_units_of_another_branch(client):
    """The waiting units are suspended until the units of the other branch arrive (as a GPU would): the interp
    splits them off as a blocked group, the compiled cpu runtime suspends them; on both the kernel completes."""
    out = client.zeros((32,), np.float32)
    waits_in_one_branch.launch(client, ONE, CUBE, _tile_map(client), cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), np.ones(32))


def test_misaligned_destination(client):
    err = _raises(cp.SanitizerError, "rule 24", load_into_slice, client, 16, 272)
    assert isinstance(err, cp.TensorMapError)


def test_box_larger_than_its_slice(client):
    _raises(cp.TensorMapError, "shared slice holds 128 items", load_into_slice, client, 0, 128)


def test_slice_past_the_end_of_shared_memory(client):
    _raises(cp.SanitizerError, "runs past the end", load_into_slice, client, 384, 640)


def test_barrier_used_before_init(client):
    _raises(cp.SanitizerError, "before barrier_init", uninitialised, client)


def test_im2col_base_outside_the_bounding_box(client):
    _, handle = _source(client, (1, 4, 4, 8))
    tmap = _conv_map(handle, cpp=8, ppc=4, pad=(1, 1), filt=(3, 3), dil=(1, 1), stride=(1, 1))
    out = client.zeros((32,), np.float32)
    with pytest.raises(cp.TensorMapError, match="rule 26") as info:
        im2col_4d.launch(client, ONE, CUBE, tmap, cp.ArrayArg(out), 0, -2, -1, 0, 0, 0, 32)
    assert "test_tma_kernels.py:" in str(info.value)


def test_im2col_offset_out_of_range(client):
    _, handle = _source(client, (1, 4, 4, 8))
    tmap = _conv_map(handle, cpp=8, ppc=4, pad=(1, 1), filt=(3, 3), dil=(1, 1), stride=(1, 1))
    out = client.zeros((32,), np.float32)
    with pytest.raises(cp.TensorMapError, match="rule 26"):
        im2col_4d.launch(client, ONE, CUBE, tmap, cp.ArrayArg(out), 0, -1, -1, 0, 256, 0, 32)


def test_store_at_negative_coordinates(client):
    dst = client.create(np.zeros((24, 36), np.float32))
    src = client.create(np.ones(256, np.float32))
    with pytest.raises(cp.TensorMapError, match="rule 27"):
        store_2d.launch(
            client, ONE, CUBE, cp.TensorMapArg.tiled(cp.TensorArg(dst), (16, 16)), cp.ArrayArg(src), -1, 0, 256
        )


def test_copy_with_a_map_of_another_rank(client):
    src, handle = _source(client, (4, 8, 16))
    out = client.zeros((512,), np.float32)
    with pytest.raises(cp.ExpandError, match="rank 3"):
        load_2d.launch(
            client, ONE, CUBE, cp.TensorMapArg.tiled(cp.TensorArg(handle), (2, 8, 16)), cp.ArrayArg(out), 0, 0, 256, 128
        )


@cp.cube(launch=True)
def arrivals_cycle_phases(out: Array[u32]):
    bar = cp.Barrier.shared(8, UNIT_POS == 0)
    token = bar.arrive()  # 32 arrivals complete 4 phases of 8; each unit waits on its own phase
    bar.wait(token)
    bar.wait_parity(1)  # four phases completed: the current one (4) has parity 0
    out[UNIT_POS] = u32(1)


def test_arrivals_beyond_one_phase_complete_the_next_phases(client):
    out = client.zeros((32,), np.uint32)
    arrivals_cycle_phases.launch(client, ONE, CUBE, cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), np.ones(32))


def test_tiled_copy_with_an_im2col_map(client):
    _, handle = _source(client, (1, 10, 8))
    tmap = _conv_map(handle, cpp=8, ppc=4, pad=(1,), filt=(3,), dil=(1,), stride=(1,))
    out = client.zeros((512,), np.float32)
    with pytest.raises(cp.ExpandError, match="needs a tiled tensor map"):
        load_3d.launch(client, ONE, CUBE, tmap, cp.ArrayArg(out), 0, 0, 0, 32)


@cp.cube(launch=True)
def store_then_fail(tmap: TensorMap[f32], src: Array[f32], size: Comptime[int]):
    """Cube 0 stores its tile at (0, 0); cube 1 then stores at a negative row, which is an error."""
    stage = cp.SharedMemory.aligned(f32, size, 128)
    for i in range(UNIT_POS, size, CUBE_DIM):
        stage[i] = src[i]
    cp.sync_async_proxy_shared()
    cp.sync_cube()
    if UNIT_POS == 0:
        cp.tma_store_2d(stage, tmap, i32(0) - i32(cp.CUBE_POS) * 100, i32(0))


def test_failed_launch_restores_a_tensor_written_only_through_tma_stores(client):
    dst = client.create(np.zeros((24, 36), np.float32))
    src = client.create(np.ones(256, np.float32))
    with pytest.raises(cp.TensorMapError, match="rule 27"):
        store_then_fail.launch(
            client, cp.CubeCount(2), CUBE, cp.TensorMapArg.tiled(cp.TensorArg(dst), (16, 16)), cp.ArrayArg(src), 256
        )
    np.testing.assert_array_equal(client.read(dst), np.zeros((24, 36), np.float32))
