"""Std layouts and views: every method against hand-computed coordinates, and what each one costs."""

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, cube, f32, u32, usize
from cubepy_layouts import (
    BatchedCoords,
    Chain,
    Coords1d,
    Coords2d,
    Layout,
    PermutedLayout,
    PlainLayout,
    SliceLayout,
    StridedLayout,
    Transpose,
    View,
    VirtualLayout,
    coords_add,
    coords_in_bounds,
    coords_max,
    coords_min,
    coords_sub,
)
from cubepy_layouts.conv import TmaOutGradLayout
from tests.layouts.evaluate import run_layout


def test_plain_layout():
    launch = PlainLayout.Launch(10)
    assert run_layout(PlainLayout, launch, "to_source_pos", [[0], [7]], Coords1d, 1).ravel().tolist() == [0, 7]
    assert run_layout(PlainLayout, launch, "is_in_bounds", [[9], [10]], Coords1d, 1).ravel().tolist() == [1, 0]
    assert run_layout(PlainLayout, launch, "shape", [[0]], Coords1d, 1).ravel().tolist() == [10]
    assert cp.testing.expand_method(PlainLayout, "to_source_pos", PlainLayout, usize).ops == []


def test_strided_layout():
    # a 3 x 4 matrix with rows 6 apart: linear 5 = (1, 1) -> 7, linear 11 = (2, 3) -> 15.
    launch = StridedLayout.Launch(3, 4, 6)
    assert run_layout(StridedLayout, launch, "to_source_pos", [[0], [5], [11]], Coords1d, 1).ravel().tolist() == [
        0,
        7,
        15,
    ]
    checked = run_layout(StridedLayout, launch, "to_source_pos_checked", [[11], [12]], Coords1d, 2)
    assert checked[:, 1].tolist() == [1, 0]
    assert run_layout(StridedLayout, launch, "shape", [[0]], Coords1d, 1).ravel().tolist() == [12]


def test_permuted_layout_transposes_and_broadcasts():
    # shape (3, 4) stored column-major (strides (1, 3)): linear 5 = (1, 1) -> 1 + 3 = 4; 11 = (2, 3) -> 11.
    launch = PermutedLayout.from_shape_strides((3, 4), (1, 3))
    assert run_layout(PermutedLayout, launch, "to_source_pos", [[0], [5], [11]], Coords1d, 1).ravel().tolist() == [
        0,
        4,
        11,
    ]
    # a (2, 3, 2) tensor broadcasting its middle dim (stride 0): linear 9 = (1, 1, 1) -> 1*2 + 1 = 3.
    broadcast = PermutedLayout.from_shape_strides((2, 3, 2), (2, 0, 1))
    assert run_layout(PermutedLayout, broadcast, "to_source_pos", [[9], [4]], Coords1d, 1).ravel().tolist() == [3, 0]
    assert run_layout(PermutedLayout, broadcast, "shape", [[0]], Coords1d, 1).ravel().tolist() == [12]
    assert run_layout(PermutedLayout, broadcast, "is_in_bounds", [[11], [12]], Coords1d, 1).ravel().tolist() == [1, 0]
    with pytest.raises(cp.LaunchError, match="1..4 dims"):
        PermutedLayout.from_shape_strides((1, 2, 3, 4, 5), (1, 1, 1, 1, 1))


def test_slice_layout():
    launch = SliceLayout.Launch((2, 3), (4, 5))
    assert run_layout(SliceLayout, launch, "to_source_pos", [[1, 1]], Coords2d, 2).tolist() == [[3, 4]]
    assert run_layout(SliceLayout, launch, "is_in_bounds", [[3, 4], [4, 0], [0, 5]], Coords2d, 1).ravel().tolist() == [
        1,
        0,
        0,
    ]
    assert run_layout(SliceLayout, launch, "shape", [[0, 0]], Coords2d, 2).tolist() == [[4, 5]]
    unchecked = SliceLayout.Launch((2, 3), (4, 5), False)
    assert run_layout(SliceLayout, unchecked, "is_in_bounds", [[9, 9]], Coords2d, 1).ravel().tolist() == [1]


def test_chain_and_transpose():
    # Transpose(TmaOutGradLayout(rows=6, cols=4)) seen through a slice at (0, 1, 2).
    grad = TmaOutGradLayout.Launch(6, 4)
    transposed = Transpose.Launch(grad)
    assert run_layout(Transpose, transposed, "to_source_pos", [[0, 3, 5]], BatchedCoords, 2).tolist() == [[5, 3]]
    assert run_layout(Transpose, transposed, "shape", [[0, 0, 0]], BatchedCoords, 3).tolist() == [[1, 4, 6]]
    chain = Chain.Launch(StridedLayout.Launch(3, 4, 6), PlainLayout.Launch(10))
    # plain first (in bounds below 10), then strided (below 12): 9 -> (2, 1) -> 13; 10 is out.
    result = run_layout(Chain, chain, "to_source_pos_checked", [[9], [10]], Coords1d, 2)
    assert result.tolist() == [[13, 1], [14, 0]]
    assert run_layout(Chain, chain, "shape", [[0]], Coords1d, 1).ravel().tolist() == [10]
    assert run_layout(Chain, chain, "is_in_bounds", [[3]], Coords1d, 1).ravel().tolist() == [1]


def test_virtual_layout_forwards_and_costs_nothing_more():
    launch = VirtualLayout.Launch(StridedLayout.Launch(3, 4, 6))
    assert run_layout(VirtualLayout, launch, "to_source_pos", [[5]], Coords1d, 1).ravel().tolist() == [7]
    comp = VirtualLayout.compilation_arg(launch)
    direct = cp.testing.expand_method(StridedLayout, "to_source_pos", StridedLayout, usize).ops
    assert cp.testing.expand_method(VirtualLayout, "to_source_pos", comp, usize).ops == direct
    assert cp.testing.expand_method(VirtualLayout, "is_in_bounds", comp, usize).ops == ["mul", "cast", "lt"]


def test_composite_compilation_args_compare_by_value():
    one = Chain.compilation_arg(Chain.Launch(PlainLayout.Launch(3), StridedLayout.Launch(1, 2, 3)))
    two = Chain.compilation_arg(Chain.Launch(PlainLayout.Launch(9), StridedLayout.Launch(4, 5, 6)))
    assert one == two and hash(one) == hash(two)
    with pytest.raises(cp.LaunchError, match="layout's Launch"):
        Chain.compilation_arg(Chain.Launch(3, 4))


def test_layout_protocol():
    for cls in (PlainLayout, StridedLayout, PermutedLayout, SliceLayout, Chain, Transpose, VirtualLayout):
        assert issubclass(cls, Layout) and issubclass(cls, cp.CubeType)
        for name in ("to_source_pos", "to_source_pos_checked", "shape", "is_in_bounds"):
            assert callable(getattr(cls, f"__expand_{name}"))


def test_coordinate_helpers():
    assert cp.testing.expand(coords_add, Coords2d, Coords2d).ops == ["add", "add"]
    assert cp.testing.expand(coords_sub, u32, u32).ops == ["sub"]
    assert cp.testing.expand(coords_min, Coords2d, Coords2d).ops == ["min", "min"]
    assert cp.testing.expand(coords_max, Coords2d, Coords2d).ops == ["max", "max"]
    assert cp.testing.expand(coords_in_bounds, Coords2d, Coords2d).ops == ["lt", "lt", "and"]


@cube(launch=True)
def view_roundtrip(data: Array[f32], out: Array[f32], layout: StridedLayout):
    """Copy a strided 3 x 4 block through views: checked reads, a slice, masked reads, checked writes."""
    source = View(data, layout)
    target = View(out, PlainLayout(u32(16)))
    pos = usize(ABSOLUTE_POS)
    target.write_checked(pos, source.read_checked(pos))
    window = source.slice(usize(4), usize(4))
    if ABSOLUTE_POS < 4:
        out[12 + ABSOLUTE_POS] = window.read_masked(pos, -1.0) + f32(window.shape()) * 0.0


def test_views_read_and_write_through_layouts():
    client = cp.client("interp")
    data = np.arange(18, dtype=np.float32)
    out = client.zeros((16,), np.float32)
    view_roundtrip.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(32),
        cp.ArrayArg(client.create(data)),
        cp.ArrayArg(out),
        StridedLayout.Launch(3, 4, 6),
    )
    expected = [0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15, 6, 7, 8, 9]
    assert client.read(out).tolist() == expected


def test_view_methods_cost_only_the_layout():
    @cube
    def read(data, pos):
        return View(data, TmaOutGradLayout(u32(4), u32(6))).is_in_bounds(pos)

    assert cp.testing.expand(read, Array[f32], BatchedCoords).ops == []


CHECKED_CASES = [
    (PlainLayout, PlainLayout.Launch(10), Coords1d, [[3], [10]], 1),
    (PermutedLayout, PermutedLayout.from_shape_strides((3, 4), (1, 3)), Coords1d, [[5], [12]], 1),
    (SliceLayout, SliceLayout.Launch((2, 3), (4, 5)), Coords2d, [[1, 1], [4, 0]], 2),
    (Transpose, Transpose.Launch(TmaOutGradLayout.Launch(6, 4)), BatchedCoords, [[0, 3, 5]], 2),
    (VirtualLayout, VirtualLayout.Launch(PlainLayout.Launch(4)), Coords1d, [[3], [4]], 1),
]


@pytest.mark.parametrize("case", CHECKED_CASES, ids=lambda c: c[0].__name__)
def test_checked_position_is_position_and_bounds(case):
    cls, launch, spec, coords, n_source = case
    checked = run_layout(cls, launch, "to_source_pos_checked", coords, spec, n_source + 1)
    assert checked[:, :n_source].tolist() == run_layout(cls, launch, "to_source_pos", coords, spec, n_source).tolist()
    assert checked[:, n_source].tolist() == run_layout(cls, launch, "is_in_bounds", coords, spec, 1)[:, 0].tolist()
