"""Port of CubeCL's ``tensormap`` runtime tests (tiled load, tiled store, im2col load, metadata).

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/tensormap.rs`` (commit 01d73a1e9).
``F`` runs as f32 and f16 (CubeCL's ``FloatType`` set); generic kernels become one kernel per type,
made by a factory.  ``Barrier::shared(CUBE_DIM, UNIT_POS == 0)`` is ``cp.Barrier.shared``;
``SharedMemory::new_aligned(n, 1, 128)`` is ``cp.SharedMemory.aligned(F, n, 128)``; ``TiledArgs``
and ``Im2colArgs`` are ``cp.TensorMapArg.tiled`` / ``.im2col`` (tile and corners outermost first).
Not ported as written: ``test_tensormap_metadata`` reads ``shape(0)`` of the tensor maps inside the
kernel, which cubepy's public API does not give ``TensorMap``; the port checks the kernel's tensor metadata with
tensor maps bound in between, and the maps' shapes on the host.
"""

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, UNIT_POS, UNIT_POS_X, UNIT_POS_Y, Array, Comptime, Tensor, TensorMap, u32

FLOATS = [pytest.param(cp.f32, id="f32"), pytest.param(cp.f16, id="f16")]
_KERNELS: dict[tuple[str, str], object] = {}


def _load_kernel(F):
    key = ("load", F.name)
    if key not in _KERNELS:

        @cp.cube(launch=True)
        def tensormap_load(input: TensorMap[F], output: Array[F]):
            barrier = cp.Barrier.shared(cp.CUBE_DIM, UNIT_POS == 0)
            cp.sync_async_proxy_shared()
            stage = cp.SharedMemory.aligned(F, 32 * 16, 128)

            expected = cp.select(UNIT_POS == 0, u32(32 * 16 * F.size), u32(0))
            if UNIT_POS == 0:
                barrier.tma_load_2d(input, stage.slice(0, 32 * 16), 0, 8)
            token = barrier.arrive_and_expect_tx(1, expected)
            barrier.wait(token)

            out_pos = UNIT_POS_Y * 32 + UNIT_POS_X
            output[out_pos] = stage[out_pos]

        _KERNELS[key] = tensormap_load
    return _KERNELS[key]


def _store_kernel(F):
    key = ("store", F.name)
    if key not in _KERNELS:

        @cp.cube(launch=True)
        def tensormap_store(input: Array[F], output: TensorMap[F]):
            shared = cp.SharedMemory.aligned(F, 32 * 16, 128)

            in_pos = UNIT_POS_Y * 32 + UNIT_POS_X
            shared[in_pos] = input[in_pos]

            cp.sync_async_proxy_shared()
            cp.sync_cube()

            if UNIT_POS == 0:
                cp.tma_store_2d(shared.slice(0, 32 * 16), output, 16, 8)
                cp.tma_group_commit()
                cp.tma_group_wait_read(0)

        _KERNELS[key] = tensormap_store
    return _KERNELS[key]


def _im2col_kernel(F):
    key = ("im2col", F.name)
    if key not in _KERNELS:

        @cp.cube(launch=True)
        def tensormap_im2col_load(
            input: TensorMap[F],
            output: Tensor[F],
            tile_m: Comptime[int],
            kernel_h: Comptime[int],
            kernel_w: Comptime[int],
            channels: Comptime[int],
            pad_h: Comptime[int],
            pad_w: Comptime[int],
        ):
            tile_k = kernel_h * kernel_w
            tile_width = tile_m * channels  # Preserve 128-byte alignment, works for all float kinds.

            barrier = cp.Barrier.shared(cp.CUBE_DIM, UNIT_POS == 0)
            cp.sync_async_proxy_shared()
            stage = cp.SharedMemory.aligned(F, tile_k * tile_width, 128)

            expected = cp.select(UNIT_POS == 0, u32(tile_width * tile_k * F.size), u32(0))
            if UNIT_POS == 0:
                for kernel_y in cp.unroll(range(kernel_h)):
                    for kernel_x in cp.unroll(range(kernel_w)):
                        kernel_idx = kernel_y * kernel_w + kernel_x
                        slice_start = kernel_idx * tile_width
                        slice_end = slice_start + tile_width
                        stage_slice = stage.slice(slice_start, slice_end)
                        barrier.tma_load_im2col_4d(input, stage_slice, 0, -pad_h, -pad_w, 0, kernel_y, kernel_x)
            token = barrier.arrive_and_expect_tx(1, expected)
            barrier.wait(token)

            output[ABSOLUTE_POS] = stage[ABSOLUTE_POS]

        _KERNELS[key] = tensormap_im2col_load
    return _KERNELS[key]


@cp.cube(launch=True)
def tensormap_metadata(
    input_1: Tensor[cp.f32], output: TensorMap[cp.f32], input_2: TensorMap[cp.f32], output_2: Tensor[u32]
):
    output_2[0] = u32(input_1.shape(0))
    output_2[3] = u32(output_2.shape(0))


@pytest.mark.parametrize("F", FLOATS)
def test_tensormap_load(client, F):
    values = np.arange(64 * 64).astype(F.numpy).reshape(64, 64)
    handle = client.create(values)
    out = client.empty((16 * 32,), F.numpy)

    _load_kernel(F).launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(32, 16),
        cp.TensorMapArg.tiled(cp.TensorArg(handle), (16, 32)),
        cp.ArrayArg(out),
    )

    expected = np.array([it + 8 for i in range(16) for it in range(i * 64, i * 64 + 32)]).astype(F.numpy)
    np.testing.assert_array_equal(client.read(out), expected)


@pytest.mark.parametrize("F", FLOATS)
def test_tensormap_store(client, F):
    values = np.arange(32 * 16).astype(F.numpy)
    handle = client.create(values)
    out = client.create(np.zeros((64, 64), F.numpy))

    _store_kernel(F).launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(32, 16),
        cp.ArrayArg(handle),
        cp.TensorMapArg.tiled(cp.TensorArg.from_raw_parts(out, (64, 1), (64, 64)), (16, 32)),
    )

    expected = np.zeros(64 * 64, np.float64)
    for y in range(16):
        for x in range(32):
            expected[(y + 16) * 64 + (x + 8)] = y * 32 + x
    np.testing.assert_array_equal(client.read(out).reshape(-1), expected.astype(F.numpy))


@pytest.mark.parametrize("F", FLOATS)
def test_tensormap_load_im2col(client, F):
    n, h, w, c = 1, 3, 3, 8
    kernel_h, kernel_w = 2, 2
    pad_h, pad_w = 1, 1
    corner_h = pad_h - (kernel_h - 1)
    corner_w = pad_w - (kernel_w - 1)
    out_h, out_w = 4, 4

    tile_m = n * out_h * out_w
    tile_k = kernel_h * kernel_w * c
    out_size = tile_m * tile_k

    values = np.arange(1, h * w * c + 1).astype(F.numpy).reshape(n, h, w, c)
    handle = client.create(values)
    out = client.empty((out_size,), F.numpy)

    _im2col_kernel(F).launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(tile_m * c, kernel_h * kernel_w),
        cp.TensorMapArg.im2col(
            cp.TensorArg(handle),
            channels_per_pixel=c,
            pixels_per_column=tile_m,
            lower_corner=(-pad_h, -pad_w),
            upper_corner=(corner_h, corner_w),
        ),
        cp.TensorArg.from_raw_parts(out, (tile_m, 1), (tile_k, tile_m)),
        tile_m,
        kernel_h,
        kernel_w,
        c,
        pad_h,
        pad_w,
    )

    expected = [0, 0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9]
    expected += [0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9, 0]
    expected += [0, 1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9, 0, 0, 0, 0]
    expected += [1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9, 0, 0, 0, 0, 0]
    expected_actual = []
    for v in expected:
        if v == 0:
            expected_actual += [0] * c
        else:
            ch_start = (v - 1) * c + 1
            expected_actual += list(range(ch_start, ch_start + c))
    np.testing.assert_array_equal(client.read(out), np.array(expected_actual).astype(F.numpy))


def test_tensormap_metadata(client):
    in_handle_1 = client.empty((1,), np.float32)
    in_handle_2 = client.empty((16,), np.float32)
    out_handle_1 = client.empty((16,), np.float32)
    out_handle_2 = client.empty((4,), np.uint32)
    strides = (16, 1)
    input_1 = cp.TensorArg.from_raw_parts(in_handle_1, strides, (2, 3))
    input_2 = cp.TensorArg.from_raw_parts(in_handle_2, strides, (4, 5))
    output_1 = cp.TensorArg.from_raw_parts(out_handle_1, strides, (6, 7))
    output_2 = cp.TensorArg.from_raw_parts(out_handle_2, strides, (8, 9))
    map_1 = cp.TensorMapArg.tiled(output_1, (16, 16))
    map_2 = cp.TensorMapArg.tiled(input_2, (16, 32))

    tensormap_metadata.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(32, 16), input_1, map_1, map_2, output_2)

    actual = client.read(out_handle_2)
    assert (actual[0], map_2.shape[0], map_1.shape[0], actual[3]) == (2, 4, 6, 8)
