"""``cubepy_layouts.show``: pictures of layouts and views, checked against the layouts' index formulas.

Expected source positions are written here from each layout's definition (plain numpy), never through
``evaluate`` or the picture code.  The pictures themselves come from the layouts' methods run on the
interp, so these tests also check that path.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import cubepy as cp
import cubepy_layouts as cl
from cubepy.cli import main
from cubepy_layouts import Chain, PlainLayout, StridedLayout, Transpose, View
from cubepy_layouts.conv import ConvolutionProblem, Im2colLayout, TmaIm2colLayout, TmaOutGradLayout

# x (2, 7, 9, 3), w (5, 3, 3, 3), stride 2, padding 1, dilation 2 -> out (2, 3, 4, 5); 24 output pixels.
PROBLEM = ConvolutionProblem.conv2d((2, 7, 9, 3), (5, 3, 3, 3), stride=2, padding=1, dilation=2)
CLIENT = cp.client("interp")
ROOT = Path(__file__).resolve().parents[2]


def split_pixel(row):
    n, rest = divmod(row, 3 * 4)
    return (n, *divmod(rest, 4))


def test_tma_out_grad_layout_grid():
    picture = cl.picture(TmaOutGradLayout.from_problem(PROBLEM))
    rows, cols = np.indices((24, 5))
    assert picture.data["shape"] == (1, 24, 5)
    assert (picture.data["sources"] == np.stack([rows.ravel(), cols.ravel()], axis=1)).all()
    assert picture.data["in_bounds"].all()
    panel = picture.panels[0]
    assert panel.shape == (24, 5) and panel.labels[17][3] == "17,3" and not panel.marks.any()


def test_tma_im2col_layout_grid():
    picture = cl.picture(TmaIm2colLayout.from_problem(PROBLEM, "wgrad"), rows=(0, 24), cols=range(0, 27, 4))
    panel = picture.panels[0]
    for i, row in enumerate(range(24)):
        n, oh, ow = split_pixel(row)
        for j, col in enumerate(range(0, 27, 4)):
            tap, channel = divmod(col, 3)
            kh, kw = divmod(tap, 3)
            corner = (n, oh * 2 - 1, ow * 2 - 1, channel)
            assert panel.labels[i][j] == f"{','.join(map(str, corner))}|{kh * 2},{kw * 2}"
    assert panel.col_names == [str(c) for c in range(0, 27, 4)]
    assert picture.data["source_groups"] == (0, 0, 0, 0, 1, 1)
    # Colour by image (source[0]): rows 0..11 are image 0, 12..23 image 1.
    assert (panel.groups[:12] == 0).all() and (panel.groups[12:] == 1).all()


def test_im2col_layout_marks_out_of_bounds():
    picture = cl.picture(Im2colLayout.from_problem(PROBLEM, "fprop"), rows=(20, 28), cols=(24, 30))
    panel = picture.panels[0]
    for i, row in enumerate(range(20, 28)):
        for j, col in enumerate(range(24, 30)):
            inside = row < 24 and col < 27
            assert panel.marks[i, j] == (0 if inside else 1), (row, col)
            if inside:
                n, oh, ow = split_pixel(row)
                tap, c = divmod(col, 3)
                kh, kw = divmod(tap, 3)
                assert panel.labels[i][j] == f"{n},{oh * 2 - 1 + kh * 2},{ow * 2 - 1 + kw * 2},{c}"


def test_plain_layout_wraps_and_marks():
    picture = cl.picture(PlainLayout.for_length(20), cols=(0, 24))
    panel = picture.panels[0]
    assert panel.shape == (2, 16) and panel.row_names == ["0", "16"]
    assert panel.labels[1][3] == "19" and panel.marks[1, 3] == 0
    assert [panel.marks[1, c] for c in range(4, 8)] == [1, 1, 1, 1]
    assert panel.labels[1][8] == ""  # past the requested range: no coordinate


def test_strided_chain_and_transpose():
    strided = cl.picture(StridedLayout.Launch(3, 4, 6))
    assert strided.data["sources"].ravel().tolist() == [(p // 4) * 6 + p % 4 for p in range(12)]
    chain = cl.picture(Chain.Launch(StridedLayout.Launch(3, 4, 6), PlainLayout.Launch(10)), cols=(0, 12))
    assert chain.data["sources"][:10].ravel().tolist() == [(p // 4) * 6 + p % 4 for p in range(10)]
    assert chain.data["in_bounds"].tolist() == [True] * 10 + [False] * 2
    transposed = cl.picture(Transpose.Launch(TmaOutGradLayout.Launch(6, 4)))
    assert transposed.data["shape"] == (1, 4, 6)
    rows, cols = np.indices((4, 6))
    assert (transposed.data["sources"] == np.stack([cols.ravel(), rows.ravel()], axis=1)).all()


def test_view_reads_of_im2col():
    x = CLIENT.zeros(PROBLEM.x_shape, np.float32)
    picture = cl.picture(View(x, Im2colLayout.from_problem(PROBLEM, "fprop")), start=(0, 0), size=(4, 27))
    expected = np.zeros(PROBLEM.x_shape, np.int64)
    outside = 0
    for row in range(4):
        n, oh, ow = split_pixel(row)
        for col in range(27):
            tap, c = divmod(col, 3)
            kh, kw = divmod(tap, 3)
            h, w = oh * 2 - 1 + kh * 2, ow * 2 - 1 + kw * 2
            if 0 <= h < 7 and 0 <= w < 9:
                expected[n, h, w, c] += 1
            else:
                outside += 1
    assert (picture.data["read_counts"] == expected).all()
    panel = picture.panels[0]
    # Drawn as (n, h) rows by (w, c) columns.
    assert panel.shape == (2 * 7, 9 * 3) and panel.row_names[8] == "1,1" and panel.col_names[5] == "1,2"
    assert (panel.groups == np.minimum(expected.reshape(14, 27), 3)).all()
    assert f"{outside} in bounds but outside the storage" in picture.notes[1]
    assert picture.notes[0].startswith("view coordinates (0, 0) + (4, 27) over Im2colLayout (24, 27)")


def test_view_of_a_flat_layout_over_a_2d_tensor():
    storage = CLIENT.zeros((3, 6), np.float32)
    picture = cl.picture(View(storage, StridedLayout.Launch(3, 4, 6)))
    expected = np.zeros((3, 6), np.int64)
    expected[:, :4] = 1
    assert (picture.data["read_counts"] == expected).all()
    assert picture.panels[0].labels[2][1] == "9"  # view position 9 = row 2, col 1
    flat = cl.picture(View(CLIENT.zeros((20,), np.float32), PlainLayout.for_length(20)), start=(2,), size=(18,))
    panel = flat.panels[0]
    assert panel.shape == (2, 16) and panel.labels[1][3] == "19" and panel.labels[0][1] == ""
    assert panel.groups[0, 1] == 0 and panel.groups[0, 2] == 1 and panel.groups[1, 4] == -1  # past the end


def test_show_text_and_files(tmp_path, capsys):
    cl.show(TmaOutGradLayout.Launch(4, 3))
    out = capsys.readouterr().out
    assert "TmaOutGradLayout layout" in out and "3,2" in out
    cl.show("64B")  # delegated to cp.show
    assert "64B swizzle" in capsys.readouterr().out
    cl.show(TmaOutGradLayout.Launch(4, 3), tmp_path / "grad.txt")
    assert "3,2" in (tmp_path / "grad.txt").read_text()
    pytest.importorskip("matplotlib")
    cl.show(TmaIm2colLayout.from_problem(PROBLEM, "wgrad"), tmp_path / "im2col.svg", rows=(0, 8), cols=(0, 6))
    cl.show(View(CLIENT.zeros((3, 6), np.float32), StridedLayout.Launch(3, 4, 6)), tmp_path / "view.png")
    assert b"<svg" in (tmp_path / "im2col.svg").read_bytes()[:1000]
    assert (tmp_path / "view.png").read_bytes().startswith(b"\x89PNG")


def test_show_errors_name_the_problem():
    with pytest.raises(cp.CubeError, match="must fix the 1 leading coordinate"):
        cl.picture(TmaOutGradLayout.Launch(4, 3), pos=(0, 0))
    with pytest.raises(cp.CubeError, match=r"rows=\(3, 3\) is empty"):
        cl.picture(TmaOutGradLayout.Launch(4, 3), rows=(3, 3))


SHOWN = """
import numpy as np
import cubepy as cp
from cubepy_layouts.conv import TmaOutGradLayout

GRAD = TmaOutGradLayout.Launch(4, 3)
MODE = "128B"


def tile():
    x = cp.client("interp").create(np.zeros((6, 8), np.float32))
    return cp.TensorMapArg.tiled(x, (4, 4)), {"coords": (4, 6)}
"""


def test_cli_show(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    module = tmp_path / "shown.py"
    module.write_text(SHOWN)
    assert main(["show", f"{module}:GRAD"]) == 0
    assert "TmaOutGradLayout layout" in capsys.readouterr().out
    assert main(["show", f"{module}:tile"]) == 0
    assert "box outside the tensor" in capsys.readouterr().out
    assert main(["show", f"{module}:MODE", "--out", str(tmp_path / "mode.txt")]) == 0
    assert "128B swizzle" in (tmp_path / "mode.txt").read_text()
    with pytest.raises(SystemExit, match="has no object named 'nope'"):
        main(["show", f"{module}:nope"])
    sys.modules.pop("shown", None)


@pytest.mark.slow
def test_docs_pictures_generate(tmp_path):
    pytest.importorskip("matplotlib")
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import gen_pictures
    finally:
        sys.path.remove(str(ROOT / "docs"))
    written = gen_pictures.generate(str(tmp_path))
    names = {Path(p).name for p in written}
    for name in (
        "tma_out_grad_layout",
        "tma_im2col_layout",
        "im2col_copy",
        "swizzle_32B",
        "swizzle_64B",
        "swizzle_128B",
        "tiled_copy",
        "coverage",
    ):
        assert {f"{name}.svg", f"{name}.png"} <= names
    assert all(Path(p).stat().st_size > 1000 for p in written)
