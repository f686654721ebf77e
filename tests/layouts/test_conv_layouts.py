"""Convolution layouts: every method against hand-computed coordinates, and what each one costs."""

import pytest

import cubepy as cp
from cubepy import u32
from cubepy_layouts import BatchedCoords, Coords2d, Layout
from cubepy_layouts.conv import (
    ConvolutionProblem,
    Im2colLayout,
    NhwcCoords,
    NhwcLayout,
    OutLayout,
    TmaIm2colLayout,
    TmaOutGradLayout,
    TmaWeightLayout,
    WeightLayout,
)
from tests.layouts.evaluate import run_layout

# x (2, 7, 9, 3), w (5, 3, 3, 3), stride 2, padding 1, dilation 2 -> out (2, 3, 4, 5);
# wgrad GEMM (m, n, k) = (5, 27, 24).
PROBLEM = ConvolutionProblem.conv2d((2, 7, 9, 3), (5, 3, 3, 3), stride=2, padding=1, dilation=2)


def comp(cls, launch):
    return cls.compilation_arg(launch)


def test_tma_out_grad_layout_is_free():
    launch = TmaOutGradLayout.from_problem(PROBLEM)
    assert (launch.rows, launch.cols) == (24, 5)
    arg = comp(TmaOutGradLayout, launch)
    to_source = cp.testing.expand_method(TmaOutGradLayout, "to_source_pos", arg, BatchedCoords)
    assert to_source.ops == [] and [str(v) for v in to_source.outputs] == ["scalar[3]", "scalar[4]"]
    in_bounds = cp.testing.expand_method(TmaOutGradLayout, "is_in_bounds", arg, BatchedCoords)
    assert in_bounds.ops == [] and str(in_bounds.outputs[0]) == "true"
    checked = cp.testing.expand_method(TmaOutGradLayout, "to_source_pos_checked", arg, BatchedCoords)
    assert checked.ops == [] and str(checked.outputs[-1]) == "true"
    shape = cp.testing.expand_method(TmaOutGradLayout, "shape", arg)
    assert shape.ops == [] and [str(v) for v in shape.outputs] == ["1usize", "scalar[0]", "scalar[1]"]
    assert run_layout(
        TmaOutGradLayout, launch, "to_source_pos", [[0, 17, 3], [0, 30, 9]], BatchedCoords, 2
    ).tolist() == [[17, 3], [30, 9]]
    assert run_layout(TmaOutGradLayout, launch, "is_in_bounds", [[0, 99, 99]], BatchedCoords, 1).tolist() == [[1]]
    assert run_layout(TmaOutGradLayout, launch, "shape", [[0, 0, 0]], BatchedCoords, 3).tolist() == [[1, 24, 5]]
    assert TmaOutGradLayout.Coordinates == (cp.usize, cp.u32, cp.u32)
    assert TmaOutGradLayout.SourceCoordinates == (cp.u32, cp.u32)


def test_nhwc_layout():
    launch = NhwcLayout.for_tensor(PROBLEM.x_shape, spatial=True)
    # strides (189, 27, 3, 1): (1, 2, 4, 2) -> 189 + 54 + 12 + 2 = 257.
    assert run_layout(NhwcLayout, launch, "to_source_pos", [[1, 2, 4, 2]], NhwcCoords, 1).tolist() == [[257]]
    in_bounds = run_layout(
        NhwcLayout, launch, "is_in_bounds", [[1, 6, 8, 2], [0, -1, 0, 0], [0, 0, 9, 0], [9, 0, 0, 9]], NhwcCoords, 1
    )
    assert in_bounds.ravel().tolist() == [1, 0, 0, 1]  # batch and channel are not checked here
    assert run_layout(NhwcLayout, launch, "shape", [[0, 0, 0, 0]], NhwcCoords, 4).tolist() == [[2, 7, 9, 3]]
    every = NhwcLayout.for_tensor(PROBLEM.x_shape, batch=True, spatial=True, channel=True)
    result = run_layout(NhwcLayout, every, "is_in_bounds", [[1, 6, 8, 2], [2, 0, 0, 0], [0, 0, 0, 3]], NhwcCoords, 1)
    assert result.ravel().tolist() == [1, 0, 0]
    unchecked = comp(NhwcLayout, NhwcLayout.for_tensor(PROBLEM.x_shape))
    bounds = cp.testing.expand_method(NhwcLayout, "is_in_bounds", unchecked, NhwcCoords)
    assert bounds.ops == [] and str(bounds.outputs[0]) == "true"


def test_im2col_layout():
    launch = Im2colLayout.from_problem(PROBLEM, "wgrad")
    assert (launch.rows, launch.cols) == (24, 27)
    # row 13 = (n 1, oh 0, ow 1); col 26 = (kh 2, kw 2, c 2): h = 0*2 + 2*2 - 1 = 3, w = 1*2 + 2*2 - 1 = 5.
    # row 0, col 0: h = w = -1 (the padding).  row 23 = (1, 2, 3), col 10 = (kh 1, kw 0, c 1): h = 5, w = 5.
    result = run_layout(
        Im2colLayout, launch, "to_source_pos_checked", [[13, 26], [0, 0], [23, 10], [24, 0], [0, 27]], Coords2d, 5
    )
    assert result[:3].tolist() == [[1, 3, 5, 2, 1], [0, -1, -1, 0, 1], [1, 5, 5, 1, 1]]
    assert result[3:, 4].tolist() == [0, 0]
    assert run_layout(Im2colLayout, launch, "shape", [[0, 0]], Coords2d, 2).tolist() == [[24, 27]]
    fprop = Im2colLayout.from_problem(PROBLEM, "fprop")
    assert (fprop.rows, fprop.cols) == (24, 27)
    unchecked = comp(Im2colLayout, Im2colLayout.from_problem(PROBLEM, "wgrad", check_rows=False, check_cols=False))
    assert cp.testing.expand_method(Im2colLayout, "is_in_bounds", unchecked, Coords2d).ops == []


def test_weight_layout():
    launch = WeightLayout.from_problem(PROBLEM)
    # row 14 = (kh 1, kw 1, c 2), col 4 -> w[4, 1, 1, 2].
    result = run_layout(WeightLayout, launch, "to_source_pos_checked", [[14, 4], [27, 0], [0, 5]], Coords2d, 5)
    assert result[0].tolist() == [4, 1, 1, 2, 1]
    assert result[1:, 4].tolist() == [0, 0]
    assert run_layout(WeightLayout, launch, "shape", [[0, 0]], Coords2d, 2).tolist() == [[27, 5]]


def test_out_layout():
    launch = OutLayout.from_problem(PROBLEM)
    # row 19 = (n 1, oh 1, ow 3), col 4.
    result = run_layout(OutLayout, launch, "to_source_pos_checked", [[19, 4], [24, 0], [0, 5]], Coords2d, 5)
    assert result[0].tolist() == [1, 1, 3, 4, 1]
    assert result[1:, 4].tolist() == [0, 0]
    assert run_layout(OutLayout, launch, "shape", [[0, 0]], Coords2d, 2).tolist() == [[24, 5]]


def test_tma_im2col_layout():
    launch = TmaIm2colLayout.from_problem(PROBLEM, "wgrad", check_kernel=True)
    # row 13 = (1, 0, 1): corner (1, 0*2 - 1, 1*2 - 1) = (1, -1, 1); col 26 = (tap 8 = (2, 2), c 2):
    # offsets (2*2, 2*2) = (4, 4).  col 27 is past the last tap: the channel moves out of range.
    result = run_layout(TmaIm2colLayout, launch, "to_source_pos", [[0, 13, 26], [0, 0, 27]], BatchedCoords, 6)
    assert result[0].tolist() == [1, -1, 1, 2, 4, 4]
    assert result[1].tolist() == [0, -1, -1, 0x7FFFFF00, 6, 0]  # tap 9 = (3, 0)
    assert run_layout(TmaIm2colLayout, launch, "shape", [[0, 0, 0]], BatchedCoords, 3).tolist() == [[1, 24, 27]]
    arg = comp(TmaIm2colLayout, launch)
    bounds = cp.testing.expand_method(TmaIm2colLayout, "is_in_bounds", arg, BatchedCoords)
    assert bounds.ops == [] and str(bounds.outputs[0]) == "true"
    plain = comp(TmaIm2colLayout, TmaIm2colLayout.from_problem(PROBLEM, "wgrad"))
    assert "select" not in cp.testing.expand_method(TmaIm2colLayout, "to_source_pos", plain, BatchedCoords).ops


def test_tma_weight_layout():
    launch = TmaWeightLayout.from_problem(PROBLEM, 16)  # channels padded 3 -> 16 per tap
    assert (launch.rows, launch.cols, launch.channels) == (144, 5, 16)
    # k 37 = (tap 2, channel 5), n 4 -> box corner (4, 2, 5) of the (C_out, taps, C_in) filter.
    assert run_layout(TmaWeightLayout, launch, "to_source_pos", [[0, 37, 4]], BatchedCoords, 3).tolist() == [[4, 2, 5]]
    assert run_layout(TmaWeightLayout, launch, "shape", [[0, 0, 0]], BatchedCoords, 3).tolist() == [[1, 144, 5]]
    arg = comp(TmaWeightLayout, launch)
    bounds = cp.testing.expand_method(TmaWeightLayout, "is_in_bounds", arg, BatchedCoords)
    assert bounds.ops == [] and str(bounds.outputs[0]) == "true"
    assert cp.testing.expand_method(TmaWeightLayout, "to_source_pos", arg, BatchedCoords).ops == ["floordiv", "mod"]


@pytest.mark.parametrize(
    "cls", [NhwcLayout, Im2colLayout, WeightLayout, OutLayout, TmaIm2colLayout, TmaOutGradLayout, TmaWeightLayout]
)
def test_conv_layouts_follow_the_protocol(cls):
    assert issubclass(cls, Layout) and issubclass(cls, cp.CubeType) and issubclass(cls, cp.LaunchArg)
    for name in ("to_source_pos", "to_source_pos_checked", "shape", "is_in_bounds"):
        assert callable(getattr(cls, f"__expand_{name}"))
    assert cls.ExpandType.__name__ == f"{cls.__name__}Expand"
    assert callable(cls.into_mut)


def test_building_a_layout_inside_a_kernel():
    @cp.cube
    def build(rows, cols, pos):
        return TmaOutGradLayout(rows, cols).to_source_pos(pos)

    assert cp.testing.expand(build, u32, u32, BatchedCoords).ops == []


CHECKED_CASES = [
    (NhwcLayout, NhwcLayout.for_tensor(PROBLEM.x_shape, spatial=True), NhwcCoords, [[1, 2, 4, 2], [0, -1, 3, 1]], 1),
    (Im2colLayout, Im2colLayout.from_problem(PROBLEM, "fprop"), Coords2d, [[13, 26], [24, 3]], 4),
    (WeightLayout, WeightLayout.from_problem(PROBLEM), Coords2d, [[14, 4], [27, 1]], 4),
    (OutLayout, OutLayout.from_problem(PROBLEM), Coords2d, [[19, 4], [3, 5]], 4),
    (TmaIm2colLayout, TmaIm2colLayout.from_problem(PROBLEM, "wgrad"), BatchedCoords, [[0, 13, 26]], 6),
    (TmaOutGradLayout, TmaOutGradLayout.from_problem(PROBLEM), BatchedCoords, [[0, 5, 3]], 2),
    (TmaWeightLayout, TmaWeightLayout.from_problem(PROBLEM, 16), BatchedCoords, [[0, 37, 4]], 3),
]


@pytest.mark.parametrize("case", CHECKED_CASES, ids=lambda c: c[0].__name__)
def test_checked_position_is_position_and_bounds(case):
    cls, launch, spec, coords, n_source = case
    checked = run_layout(cls, launch, "to_source_pos_checked", coords, spec, n_source + 1)
    assert checked[:, :n_source].tolist() == run_layout(cls, launch, "to_source_pos", coords, spec, n_source).tolist()
    assert checked[:, n_source].tolist() == run_layout(cls, launch, "is_in_bounds", coords, spec, 1)[:, 0].tolist()
