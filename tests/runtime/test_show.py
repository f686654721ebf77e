"""``cp.show`` pictures of TMA copies and swizzles, and ``cp.coverage``: the data against the semantics.

Every expected value is written here from the definitions (the 16-byte-chunk XOR swizzle, the tile box
with element strides and out-of-bounds fill, the im2col walk as a plain loop over the pixel box), never
through ``cubepy.runtime.interp.tma`` or the picture code.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import cubepy as cp
from cubepy.viz import picture_of
from cubepy.viz.text import render_text
from tests.runtime.interp.test_tma_kernels import im2col_4d, load_2d, store_2d

CLIENT = cp.client("interp")


# -- swizzles ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, period", [("32B", 2), ("64B", 4), ("128B", 8)])
def test_swizzle_chunk_permutation(mode, period):
    picture = picture_of(mode)
    rows, chunks = np.indices((8, 8))
    assert (picture.data["landing"] == chunks ^ (rows % period)).all()
    # The shared-memory panel holds, at (line, chunk ^ (line % period)), the box row and chunk stored there.
    span = int(mode[:-1])
    after = picture.panel("in shared memory")
    for line, chunk in itertools.product(range(8), range(8)):
        byte = line * 128 + chunk * 16
        assert after.labels[line][chunk ^ (line % period)] == f"{byte // span}.{(byte % span) // 16}"
        assert after.groups[line, chunk ^ (line % period)] == (byte % span) // 16


def test_swizzle_rejects_an_unknown_mode():
    with pytest.raises(cp.TensorMapError, match="'96B' is not one of '32B', '64B', '128B'"):
        picture_of("96B")


# -- tiled tensor maps -----------------------------------------------------------------------------------
def test_tiled_box_with_element_stride_and_fill():
    x = CLIENT.create(np.zeros((10, 12), np.float32))
    tm = cp.TensorMapArg.tiled(x, (4, 8), elem_stride=(2, 1))
    picture = picture_of(tm, coords=(7, 8))
    # Rows 7 and 9 (stride 2 over a 4-row box), columns 8..15; columns 12.. are past the 12-wide tensor.
    expected = [(r, c) for r in (7, 9) for c in range(8, 16)]
    assert picture.data["sources"].tolist() == [list(p) for p in expected]
    assert picture.data["filled"].tolist() == [[c >= 12 for c in range(8, 16)]] * 2
    smem = picture.panel("shared memory")
    assert smem.labels[1][3] == "9,11" and smem.marks[1, 3] == 0
    assert smem.labels[0][5] == "7,13" and smem.marks[0, 5] == 1
    tensor = picture.panel("global tensor")
    rows, cols = [int(n) for n in tensor.row_names], [int(n) for n in tensor.col_names]
    assert rows == list(range(0, 11)) and cols == list(range(0, 16))  # the tensor, and the box's span
    assert tensor.labels[rows.index(9)][cols.index(11)] == "11"  # the 12th element copied
    assert tensor.marks[rows.index(7)][cols.index(12)] == 1  # filled
    assert tensor.marks[rows.index(8)][cols.index(9)] == 2  # skipped by the row stride
    assert tensor.labels[rows.index(0)][cols.index(0)] == "" and tensor.groups[0, 0] == 1  # not in the box


def test_tiled_box_rank_3_negative_corner():
    x = CLIENT.create(np.zeros((3, 5, 8), np.float32))
    tm = cp.TensorMapArg.tiled(x, (2, 3, 4))
    picture = picture_of(tm, coords=(-1, 3, 6))
    expected = np.array(list(itertools.product(range(-1, 1), range(3, 6), range(6, 10))))
    assert (picture.data["sources"] == expected).all()
    outside = (expected < 0) | (expected >= np.array([3, 5, 8]))
    assert (picture.data["filled"].ravel() == outside.any(axis=1)).all()
    assert [p.title.split(" ")[0] for p in picture.panels[:2]] == ["tensor[-1,", "tensor[0,"]


def test_tiled_picture_checks_the_copy_like_the_interp():
    x = CLIENT.create(np.zeros((8, 8), np.float32))
    tm = cp.TensorMapArg.tiled(x, (4, 4))
    with pytest.raises(cp.TensorMapError, match="needs 2 values"):
        picture_of(tm, coords=(0,))
    with pytest.raises(cp.CubeError, match="unknown keyword"):
        picture_of(tm, coords=(0, 0), offsets=(1,))


# -- im2col ------------------------------------------------------------------------------------------------
def walk(shape, lower, upper, start, offsets, ppc):
    """The im2col rows by the spec's loop: box pixels in order (n, then H, then W) from ``start``."""
    n_images, h, w = shape[:3]
    box = [
        (n, y, x)
        for n in range(n_images + 2)
        for y in range(lower[0], h - 1 + upper[0] + 1)
        for x in range(lower[1], w - 1 + upper[1] + 1)
    ]
    first = box.index(start)
    rows = []
    for n, y, x in box[first : first + ppc]:
        ry, rx = y + offsets[0], x + offsets[1]
        ok = n < n_images and 0 <= ry < h and 0 <= rx < w
        rows.append([n, y, x, ry, rx, int(ok)])
    return rows


@pytest.mark.parametrize("start, offsets", [((0, -1, -1), (0, 1)), ((0, 1, 2), (2, 0)), ((1, 2, 3), (1, 1))])
def test_im2col_walk(start, offsets):
    shape = (2, 4, 5, 16)
    x = CLIENT.create(np.zeros(shape, np.float16))
    tm = cp.TensorMapArg.im2col(
        x, channels_per_pixel=16, pixels_per_column=24, lower_corner=(-1, -1), upper_corner=(-1, -1)
    )
    picture = picture_of(tm, coords=(*start, 0), offsets=offsets)
    expected = walk(shape, (-1, -1), (-1, -1), start, offsets, 24)
    assert picture.data["rows"].tolist() == expected
    table = picture.panel("shared memory")
    for k, (n, y, x_, ry, rx, ok) in enumerate(expected):
        assert table.labels[k] == [str(n), f"{y},{x_}", f"{ry},{rx}", f"+{offsets[0]},+{offsets[1]}"]
        assert table.marks[k, 0] == (0 if ok else 1)
    # In each image panel, the pixel a row reads is labelled with that row.
    image0 = picture.panel(f"image {start[0]}")
    rows, cols = [int(v) for v in image0.row_names], [int(v) for v in image0.col_names]
    for k, (n, _, _, ry, rx, _) in enumerate(expected):
        if n == start[0]:
            assert str(k) in image0.labels[rows.index(ry)][cols.index(rx)].split(",")


def test_im2col_channels_past_the_tensor_are_filled():
    x = CLIENT.create(np.zeros((1, 3, 3, 8), np.float32))
    tm = cp.TensorMapArg.im2col(x, channels_per_pixel=4, pixels_per_column=4, lower_corner=(0, 0), upper_corner=(0, 0))
    picture = picture_of(tm, coords=(0, 0, 0, 6), offsets=(0, 0))
    assert picture.data["channels"].tolist() == [6, 7, 8, 9]
    assert picture.data["filled_channels"].tolist() == [False, False, True, True]


# -- the pictures agree with what a kernel's copy delivers ------------------------------------------------
def test_pictures_match_kernel_copies():
    src = np.arange(10 * 12, dtype=np.float32).reshape(10, 12) + 1
    tm = cp.TensorMapArg.tiled(CLIENT.create(src), (4, 8), elem_stride=(2, 1))
    out = CLIENT.zeros((16,), np.float32)
    load_2d.launch(CLIENT, cp.CubeCount(1), cp.CubeDim(32), tm, cp.ArrayArg(out), 7, 8, 16, 128)
    picture = picture_of(tm, coords=(7, 8))
    sources, filled = picture.data["sources"], picture.data["filled"].ravel()
    drawn = np.where(filled, 0, src[np.clip(sources[:, 0], 0, 9), np.clip(sources[:, 1], 0, 11)])
    assert (CLIENT.read(out) == drawn).all()

    x = np.arange(2 * 4 * 5 * 8, dtype=np.float32).reshape(2, 4, 5, 8) + 1
    im2col = cp.TensorMapArg.im2col(
        CLIENT.create(x), channels_per_pixel=8, pixels_per_column=24, lower_corner=(-1, -1), upper_corner=(-1, -1)
    )
    out = CLIENT.zeros((24 * 8,), np.float32)
    im2col_4d.launch(CLIENT, cp.CubeCount(1), cp.CubeDim(32), im2col, cp.ArrayArg(out), 0, 1, 2, 0, 1, 1, 24 * 8)
    rows = picture_of(im2col, coords=(0, 1, 2, 0), offsets=(1, 1)).data["rows"]
    for k, (n, _, _, h, w, ok) in enumerate(rows.tolist()):
        assert (CLIENT.read(out).reshape(24, 8)[k] == (x[n, h, w] if ok else 0)).all()


# -- renderers -------------------------------------------------------------------------------------------
def test_text_plain_and_coloured():
    picture = picture_of("128B")
    plain = render_text(picture)
    assert "\x1b[" not in plain
    # Line 1 of the swizzled panel: chunk c of line 1 sits at c ^ 1.
    assert ["1", "1.1", "1.0", "1.3", "1.2", "1.5", "1.4", "1.7", "1.6"] in [
        line.split() for line in plain.splitlines()
    ]
    coloured = render_text(picture, color=True)
    assert "\x1b[48;2;" in coloured


def test_show_prints_to_the_terminal(capsys):
    x = CLIENT.create(np.zeros((4, 8), np.float32))
    picture = cp.show(cp.TensorMapArg.tiled(x, (4, 4)), coords=(2, 6))
    out = capsys.readouterr().out
    assert "TMA tile copy" in out and "\x1b[" not in out  # captured stdout is not a terminal: plain text
    assert "~ box outside the tensor: zero fill" in out
    assert picture.data["filled"].sum() == 12  # rows 4, 5 and columns 8, 9 of the 4x4 box


def test_file_rendering(tmp_path):
    pytest.importorskip("matplotlib")
    x = CLIENT.create(np.zeros((2, 4, 5, 16), np.float16))
    im2col = cp.TensorMapArg.im2col(
        x, channels_per_pixel=16, pixels_per_column=16, lower_corner=(-1, -1), upper_corner=(-1, -1)
    )
    tiled = cp.TensorMapArg.tiled(CLIENT.create(np.zeros((8, 8), np.float32)), (4, 4))
    for name, obj, coords in [
        ("swizzle.png", "64B", {}),
        ("swizzle.svg", "32B", {}),
        ("tiled.png", tiled, {"coords": (6, 6)}),
        ("im2col.svg", im2col, {"coords": (0, -1, -1, 0), "offsets": (1, 1)}),
    ]:
        cp.show(obj, tmp_path / name, **coords)
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG") if name.endswith(".png") else b"<svg" in data[:1000]


def test_file_rendering_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    with pytest.raises(cp.CubeError, match=r"pip install 'cubepy\[viz\]'"):
        cp.show("128B", tmp_path / "s.png")
    with pytest.raises(cp.CubeError, match="must end in .svg or .png"):
        cp.show("128B", tmp_path / "s.pdf")


def test_show_names_what_it_cannot_draw():
    with pytest.raises(cp.CubeError, match="cannot draw a list.*cubepy_layouts.show"):
        cp.show([1, 2])


# -- coverage ----------------------------------------------------------------------------------------------
@cp.cube(launch=True)
def write_twice_somewhere(out: cp.Array[cp.f32], n: cp.u32):
    if cp.ABSOLUTE_POS < n:
        out[cp.ABSOLUTE_POS] = cp.f32(1.0)
    if cp.ABSOLUTE_POS == 5:
        out[7] = cp.f32(2.0)


def test_coverage_counts_and_cubes():
    out = CLIENT.zeros((4, 6), np.float32)
    with cp.coverage(CLIENT) as cov:
        write_twice_somewhere.launch(CLIENT, cp.CubeCount(3), cp.CubeDim(4), cp.ArrayArg(out), 18)
    expected = np.zeros(24, np.int64)
    expected[:12] = 1  # 3 cubes x 4 units write elements 0..11
    expected[7] += 1  # unit 5 (cube 1) writes element 7 again
    assert cov.counts(out).ravel().tolist() == expected.tolist()
    first, last = cov.cubes(out)
    assert first.ravel()[:12].tolist() == [0] * 4 + [1] * 4 + [2] * 4 and (first.ravel()[12:] == -1).all()
    assert (cov.counts(out, "read") == 0).all()
    picture = cov.picture(out)
    panel = picture.panels[0]
    assert panel.labels[1][1] == "1 x2" and panel.groups[1, 1] == 2  # element 7: twice, by cube 1
    assert (
        panel.groups[2:] == 0
    ).all() and "12 of 24 elements never written, 1 written more than once" in picture.notes[0]
    # Outside the block nothing is recorded.
    write_twice_somewhere.launch(CLIENT, cp.CubeCount(3), cp.CubeDim(4), cp.ArrayArg(out), 18)
    assert cov.counts(out).sum() == expected.sum()


def test_coverage_of_tma_copies():
    src = CLIENT.create(np.arange(8 * 16, dtype=np.float32).reshape(8, 16))
    tm = cp.TensorMapArg.tiled(src, (4, 8))
    out = CLIENT.zeros((32,), np.float32)
    dst = CLIENT.zeros((8, 16), np.float32)
    tm_dst = cp.TensorMapArg.tiled(dst, (4, 8))
    with cp.coverage(CLIENT) as cov:
        load_2d.launch(CLIENT, cp.CubeCount(1), cp.CubeDim(32), tm, cp.ArrayArg(out), 6, 12, 32, 128)
        store_2d.launch(CLIENT, cp.CubeCount(1), cp.CubeDim(32), tm_dst, cp.ArrayArg(out), 2, 4, 32)
    reads = np.zeros((8, 16), np.int64)
    reads[6:8, 12:16] = 1  # the box (6..9, 12..19) clipped to the tensor
    assert (cov.counts(src, "read") == reads).all()
    writes = np.zeros((8, 16), np.int64)
    writes[2:6, 4:12] = 1
    assert (cov.counts(dst) == writes).all()
    assert (cov.counts(out) == 1).all()  # copy_out: every unit writes its share once


def test_coverage_needs_the_interp():
    class Other:
        name = "cuda"

    with pytest.raises(cp.CubeError, match="interp"):
        cp.coverage(Other())


def test_coverage_picture_renders(tmp_path):
    pytest.importorskip("matplotlib")
    out = CLIENT.zeros((4, 6), np.float32)
    with cp.coverage(CLIENT) as cov:
        write_twice_somewhere.launch(CLIENT, cp.CubeCount(3), cp.CubeDim(4), cp.ArrayArg(out), 18)
    cov.show(out, tmp_path / "cover.png")
    assert (tmp_path / "cover.png").read_bytes().startswith(b"\x89PNG")


@cp.cube(launch=True)
def overlapping_tiles(dst: cp.Array[cp.f32], cols: cp.u32):
    row = cp.CUBE_POS_Y * 3 + cp.UNIT_POS_Y  # tiles are 4 rows high but step 3: row 3 twice, row 7 never
    dst[row * cols + cp.CUBE_POS_X * 4 + cp.UNIT_POS_X] = cp.f32(1.0)


def test_coverage_finds_overlapping_and_missing_tiles():
    dst = CLIENT.zeros((8, 12), np.float32)
    with cp.coverage(CLIENT) as cov:
        overlapping_tiles.launch(CLIENT, cp.CubeCount(3, 2), cp.CubeDim(4, 4), cp.ArrayArg(dst), 12)
    expected = np.ones((8, 12), np.int64)
    expected[3] = 2
    expected[7] = 0
    assert (cov.counts(dst) == expected).all()
    lowest, highest = cov.cubes(dst)
    # Cube (x, y) is linear x + 3*y: row 3 is written by cubes x (y = 0) and x + 3 (y = 1).
    assert lowest[3].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert highest[3].tolist() == [3] * 4 + [4] * 4 + [5] * 4
    assert (lowest[7] == -1).all() and (highest[7] == -1).all()
    panel = cov.picture(dst).panels[0]
    assert panel.labels[3][5] == "1,4 x2" and panel.groups[3, 5] == 2 and panel.groups[7, 0] == 0


@cp.cube(launch=True)
def copy_lines(x: cp.Array[cp.Line[cp.f32]], out: cp.Array[cp.Line[cp.f32]]):
    if cp.ABSOLUTE_POS < 3:
        out[cp.ABSOLUTE_POS] = x[cp.ABSOLUTE_POS]


def test_coverage_counts_every_element_of_a_line():
    x = CLIENT.create(np.arange(16, dtype=np.float32))
    out = CLIENT.zeros((16,), np.float32)
    with cp.coverage(CLIENT) as cov:
        copy_lines.launch(
            CLIENT, cp.CubeCount(1), cp.CubeDim(4), cp.ArrayArg(x, line_size=4), cp.ArrayArg(out, line_size=4)
        )
    assert cov.counts(x, "read").tolist() == [1] * 12 + [0] * 4  # 3 lines of 4
    assert cov.counts(out).tolist() == [1] * 12 + [0] * 4
