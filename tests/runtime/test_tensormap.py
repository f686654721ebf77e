"""TensorMapArg: driver-order fields, and one test per encoder rule 1-22 (docs/semantics/tma.md, "What the encoder checks")."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from cubepy.errors import TensorMapError
from cubepy.runtime.handle import Handle, contiguous_strides
from cubepy.runtime.tensormap import CU_ENUM_VALUES, TensorMapArg, TensorMapCompilationArg

tiled = TensorMapArg.tiled
im2col = TensorMapArg.im2col


def handle(shape, dtype=np.float32, strides=None, offset=0):
    """A CPU handle over zeroed storage just large enough for `shape`/`strides` at `offset`."""
    strides = contiguous_strides(tuple(shape)) if strides is None else tuple(strides)
    span = 1 + sum((d - 1) * abs(s) for d, s in zip(shape, strides))
    return Handle(None, np.zeros(offset + span, dtype), dtype, shape, strides, offset)


class TensorLike:
    """Stands in for a TensorArg: a handle plus shape/strides (elements) that override the handle's."""

    def __init__(self, handle, shape=None, strides=None):
        self.handle = handle
        if shape is not None:
            self.shape = tuple(shape)
        if strides is not None:
            self.strides = tuple(strides)


def expect_rule(rule, param, fn, *args, **kwargs):
    with pytest.raises(TensorMapError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert f"breaks rule {rule}:" in message, message
    assert param in message, message
    return message


NHWC = (1, 3, 3, 8)  # a valid rank-4 im2col tensor (f32: 32-byte pixels)
IM2COL_OK = {"channels_per_pixel": 8, "pixels_per_column": 16, "lower_corner": (-1, -1), "upper_corner": (0, 0)}


def im2col_args(**changes):
    return {**IM2COL_OK, **changes}


# ---------------------------------------------------------------------------------- valid maps


def test_tiled_fields_are_driver_order():
    h = handle((4, 8, 16), np.float32)
    tm = tiled(h, (2, 4, 8), elem_stride=(2, 1, 1), swizzle="32B", l2_promotion="128B")
    assert tm.mode == "tiled" and tm.rank == 3 and tm.dtype == np.float32
    assert tm.global_dim == (16, 8, 4)
    assert tm.global_strides == (16 * 4, 8 * 16 * 4)  # bytes of dims 1 and 2
    assert tm.box_dim == (8, 4, 2)
    assert tm.elem_strides == (1, 1, 2)
    assert (tm.swizzle, tm.interleave, tm.l2_promotion, tm.oob_fill) == ("32B", "none", "128B", "zero")
    assert tm.global_address == 0 and tm.handle is h
    assert tm.box_bytes == 4 * 8 * 4 * 1  # ceil(2/2) = 1 plane of 4 x 8 f32


def test_tiled_box_bytes_rounds_up_partial_strides_and_ignores_dim0_stride():
    tm = tiled(handle((16, 16)), (8, 4), elem_stride=(4, 1))
    assert tm.box_bytes == 4 * 2 * 4  # rows: ceil(8/4) = 2


def test_im2col_fields_are_driver_order_with_w_first_corners():
    h = handle((2, 5, 7, 8), np.float16, offset=8)
    tm = im2col(
        h,
        channels_per_pixel=8,
        pixels_per_column=32,
        lower_corner=(-1, -2),
        upper_corner=(0, -1),
        elem_stride=(1, 2, 3, 1),
        oob_fill="nan",
    )
    assert tm.mode == "im2col" and tm.rank == 4
    assert tm.global_dim == (8, 7, 5, 2)
    assert tm.global_strides == (16, 7 * 16, 5 * 7 * 16)
    assert tm.lower_corner == (-2, -1) and tm.upper_corner == (-1, 0)  # (w, h)
    assert tm.elem_strides == (1, 3, 2, 1)  # {c, w, h, n}
    assert tm.channels_per_pixel == 8 and tm.pixels_per_column == 32
    assert tm.global_address == 16 and tm.oob_fill == "nan"
    assert tm.box_bytes == 32 * 8 * 2


def test_tensor_arg_shape_and_strides_override_the_handle():
    # A dW-style 2-D view (N*OH*OW, K) of a 4-D NHWC buffer, with a padded row pitch.
    h = handle((2, 3, 4, 12), np.float16, strides=(3 * 4 * 16, 4 * 16, 16, 1))
    view = TensorLike(h, shape=(24, 12), strides=(16, 1))
    tm = tiled(view, (8, 8))
    assert tm.global_dim == (12, 24) and tm.global_strides == (32,) and tm.handle is h
    assert tm.shape == (24, 12) and tm.strides == (16, 1)


def test_encode_params_tiled_match_the_driver_signature():
    tm = tiled(handle((64, 64)), (16, 32), swizzle="128B", oob_fill="nan", l2_promotion="256B")
    params = tm.encode_params(base_address=0x7F0000000000)
    assert list(params) == [
        "tensorDataType",
        "tensorRank",
        "globalAddress",
        "globalDim",
        "globalStrides",
        "boxDim",
        "elementStrides",
        "interleave",
        "swizzle",
        "l2Promotion",
        "oobFill",
    ]
    assert params["tensorDataType"] == "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"
    assert params["globalAddress"] == 0x7F0000000000
    assert params["globalDim"] == [64, 64] and params["globalStrides"] == [256]
    assert params["boxDim"] == [32, 16] and params["elementStrides"] == [1, 1]
    assert params["swizzle"] == "CU_TENSOR_MAP_SWIZZLE_128B"
    assert params["l2Promotion"] == "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"
    assert params["oobFill"] == "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"
    assert CU_ENUM_VALUES[params["tensorDataType"]] == 7 and CU_ENUM_VALUES[params["swizzle"]] == 3


def test_encode_params_im2col_match_the_driver_signature():
    tm = im2col(handle(NHWC), **IM2COL_OK)
    params = tm.encode_params()
    assert list(params) == [
        "tensorDataType",
        "tensorRank",
        "globalAddress",
        "globalDim",
        "globalStrides",
        "pixelBoxLowerCorner",
        "pixelBoxUpperCorner",
        "channelsPerPixel",
        "pixelsPerColumn",
        "elementStrides",
        "interleave",
        "swizzle",
        "l2Promotion",
        "oobFill",
    ]
    assert params["pixelBoxLowerCorner"] == [-1, -1] and params["pixelBoxUpperCorner"] == [0, 0]
    assert params["channelsPerPixel"] == 8 and params["pixelsPerColumn"] == 16


def test_encode_params_checks_the_final_address():
    tm = tiled(handle((64, 64)), (16, 32))
    expect_rule(3, "globalAddress", tm.encode_params, base_address=8)


@pytest.mark.parametrize(
    ("dtype", "enum"),
    [
        (np.float16, "FLOAT16"),
        (ml_dtypes.bfloat16, "BFLOAT16"),
        (np.float64, "FLOAT64"),
        (np.int8, "UINT8"),
        (np.int16, "UINT16"),
        (np.int32, "INT32"),
        (np.int64, "INT64"),
        (np.uint8, "UINT8"),
        (np.uint16, "UINT16"),
        (np.uint32, "UINT32"),
        (np.uint64, "UINT64"),
    ],
)
def test_every_supported_dtype_maps_to_a_driver_type(dtype, enum):
    es = np.dtype(dtype).itemsize
    tm = tiled(handle((4, 64 // es), dtype), (2, 16 // es))
    assert tm.encode_params()["tensorDataType"] == f"CU_TENSOR_MAP_DATA_TYPE_{enum}"


def test_compilation_arg_is_the_cache_key_part_only():
    a = tiled(handle((64, 64)), (16, 32)).compilation_arg()
    b = tiled(handle((32, 128)), (8, 8), swizzle="32B").compilation_arg()
    assert a == b == TensorMapCompilationArg("f32", 2, "tiled") and hash(a) == hash(b)
    c = im2col(handle(NHWC), **IM2COL_OK).compilation_arg()
    assert c == TensorMapCompilationArg("f32", 4, "im2col") and c != a
    with pytest.raises(AttributeError):
        a.rank = 3  # frozen


def test_interleave_is_accepted_on_rank_3_with_aligned_strides():
    tm = tiled(handle((4, 4, 8)), (2, 2, 8), interleave="32B", swizzle="32B", elem_stride=(1, 1, 2))
    assert tm.interleave == "32B" and tm.elem_strides == (2, 1, 1)
    assert tm.effective_elem_strides == (2, 1, 1)


# ---------------------------------------------------------------------------------- rules 1-11


def test_rule_1_unknown_element_type():
    expect_rule(1, "tensor.dtype", tiled, handle((4, 4), np.bool_), (4, 4))
    expect_rule(1, "tensor.dtype", tiled, handle((4, 4), np.complex64), (4, 2))


def test_fp8_maps_move_bytes_as_uint8():
    # cuda.h has no fp8 data type: an e4m3 tensor map is a UINT8 (code 0) map of the same bytes.
    tiled(handle((4, 16), ml_dtypes.float8_e4m3fn), (4, 16))


def test_rule_2_rank():
    expect_rule(2, "tensor rank", tiled, handle((1, 1, 1, 1, 1, 4)), (1, 1, 1, 1, 1, 4))
    expect_rule(2, "tensor rank", im2col, handle((3, 8)), **im2col_args(lower_corner=(), upper_corner=()))
    expect_rule(2, "tensor rank", tiled, handle((4, 8)), (4, 8), interleave="16B")


def test_rule_3_global_address_alignment():
    expect_rule(3, "tensor offset", tiled, handle((4, 4), offset=1), (4, 4))
    # 16-byte aligned is not enough with 32-byte interleave
    expect_rule(3, "tensor offset", tiled, handle((4, 4, 8), offset=4), (2, 2, 8), interleave="32B", swizzle="32B")


def test_rule_4_global_dim_range():
    expect_rule(4, "tensor.shape[0]", tiled, handle((0, 4)), (1, 4))
    huge = TensorLike(handle((2, 4)), shape=(2**32 + 1, 4), strides=(4, 1))
    expect_rule(4, "tensor.shape[0]", tiled, huge, (1, 4))
    tiled(TensorLike(handle((2, 4)), shape=(2**32, 4), strides=(4, 1)), (1, 4))  # the bound itself is fine


def test_rule_5_global_strides():
    expect_rule(5, "tensor.strides[0]", tiled, handle((4, 3)), (4, 4))  # 12-byte rows
    expect_rule(5, "innermost", tiled, handle((4, 4), strides=(8, 2)), (4, 4))
    # a Handle refuses negative strides itself (LaunchError), so a tensor-like object carries them here
    expect_rule(5, "tensor.strides[0]", tiled, TensorLike(handle((4, 4), offset=12), strides=(-4, 1)), (4, 4))
    expect_rule(5, "tensor.strides[0]", tiled, TensorLike(handle((2, 4)), strides=(2**38, 1)), (2, 4))
    expect_rule(5, "tensor.strides", tiled, TensorLike(handle((4, 4)), strides=(4,)), (4, 4))
    # 16-byte multiples are not enough with 32-byte interleave
    expect_rule(5, "tensor.strides[1]", tiled, handle((2, 2, 4)), (2, 2, 4), interleave="32B", swizzle="32B")


def test_rule_6_element_strides():
    h = handle((16, 16))
    expect_rule(6, "elem_stride[0]", tiled, h, (16, 4), elem_stride=(9, 1))
    expect_rule(6, "elem_stride[1] (innermost)", tiled, h, (16, 4), elem_stride=(1, 2))
    expect_rule(6, "elem_stride", tiled, h, (16, 4), elem_stride=(1, 1, 1))
    expect_rule(6, "elem_stride[0]", tiled, h, (16, 4), elem_stride=(0, 1))


def test_rule_7_interleave():
    expect_rule(7, "interleave", tiled, handle((4, 4, 8)), (2, 2, 8), interleave="8B")
    expect_rule(7, "swizzle", tiled, handle((4, 4, 8)), (2, 2, 8), interleave="32B", swizzle="none")


def test_rule_8_swizzle():
    expect_rule(8, "swizzle", tiled, handle((4, 32)), (4, 32), swizzle="256B")
    expect_rule(8, "swizzle", tiled, handle((4, 32)), (4, 32), swizzle="128B_atom_32B")  # sm_100+


def test_rule_9_l2_promotion():
    expect_rule(9, "l2_promotion", tiled, handle((4, 4)), (4, 4), l2_promotion="512B")


def test_rule_10_nan_fill_needs_a_float_type():
    expect_rule(10, "oob_fill", tiled, handle((4, 4), np.int32), (4, 4), oob_fill="nan")
    expect_rule(10, "oob_fill", tiled, handle((4, 4)), (4, 4), oob_fill="inf")
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64):
        tiled(handle((4, 16), dtype), (4, 16), oob_fill="nan")


def test_rule_11_descriptor_is_128_bytes_64_aligned():
    # The 128-byte, 64-byte-aligned CUtensorMap is a host struct a runtime allocates; no argument of
    # this API can make it wrong, so the class states the layout for the CUDA runtime to honour.
    assert TensorMapArg.DESCRIPTOR_BYTES == 128 and TensorMapArg.DESCRIPTOR_ALIGN == 64


# ---------------------------------------------------------------------------------- rules 12-15 (tiled)


def test_rule_12_box_dims():
    h = handle((300, 300))
    msg = expect_rule(12, "tile[1] (innermost)", tiled, h, (4, 300))
    assert "= 300" in msg
    expect_rule(12, "tile[0]", tiled, h, (0, 4))
    expect_rule(12, "tile", tiled, h, (4, 4, 4))


def test_rule_13_inner_row_multiple_of_16_bytes():
    expect_rule(13, "tile[1] (innermost)", tiled, handle((4, 4)), (4, 3))


def test_rule_14_swizzle_span():
    expect_rule(14, "tile[1] (innermost)", tiled, handle((4, 16)), (4, 16), swizzle="32B")
    expect_rule(14, "tile[1] (innermost)", tiled, handle((4, 64)), (4, 64), swizzle="128B")
    tiled(handle((4, 16)), (4, 8), swizzle="64B")  # narrower than the span: the driver accepts it


def test_rule_15_partial_element_stride():
    expect_rule(15, "tile[0]", tiled, handle((16, 16)), (6, 16), elem_stride=(4, 1))


# ---------------------------------------------------------------------------------- rules 16-22 (im2col)


def test_rule_16_corner_count():
    expect_rule(16, "lower_corner", im2col, handle(NHWC), **im2col_args(lower_corner=(-1,)))
    expect_rule(16, "upper_corner", im2col, handle(NHWC), **im2col_args(upper_corner=(0, 0, 0)))


def test_rule_17_corner_ranges():
    expect_rule(17, "lower_corner[0]", im2col, handle(NHWC), **im2col_args(lower_corner=(-129, 0)))
    expect_rule(
        17,
        "upper_corner[2]",
        im2col,
        handle((1, 2, 2, 2, 8)),
        **im2col_args(lower_corner=(0, 0, 0), upper_corner=(0, 0, 16)),
    )
    expect_rule(
        17, "lower_corner[0]", im2col, handle((1, 3, 8)), **im2col_args(lower_corner=(-32769,), upper_corner=(0,))
    )
    im2col(handle((1, 3, 8)), **im2col_args(lower_corner=(-32768,), upper_corner=(0,)))


def test_rule_18_pixel_box_non_empty():
    # W = 3: the last base is 3 - 1 + (-3) = -1 < lower 0
    expect_rule(18, "upper_corner[1]", im2col, handle(NHWC), **im2col_args(lower_corner=(0, 0), upper_corner=(0, -3)))
    im2col(handle(NHWC), **im2col_args(lower_corner=(0, 0), upper_corner=(0, -2)))  # one base


def test_rule_19_channels_per_pixel():
    expect_rule(19, "channels_per_pixel", im2col, handle((1, 3, 3, 300)), **im2col_args(channels_per_pixel=300))
    expect_rule(19, "channels_per_pixel", im2col, handle(NHWC), **im2col_args(channels_per_pixel=2))


def test_rule_20_pixels_per_column():
    expect_rule(20, "pixels_per_column", im2col, handle(NHWC), **im2col_args(pixels_per_column=0))
    expect_rule(20, "pixels_per_column", im2col, handle(NHWC), **im2col_args(pixels_per_column=1025))
    im2col(handle(NHWC), **im2col_args(pixels_per_column=1024))


def test_rule_21_im2col_swizzle_span():
    expect_rule(
        21, "channels_per_pixel", im2col, handle((1, 3, 3, 16)), **im2col_args(channels_per_pixel=16), swizzle="32B"
    )


def test_rule_22_batch_element_stride():
    expect_rule(22, "elem_stride[0] (N)", im2col, handle(NHWC), **im2col_args(), elem_stride=(2, 1, 1, 1))
