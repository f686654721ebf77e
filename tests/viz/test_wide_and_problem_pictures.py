"""Pictures a user makes: a wide or swizzled TMA box (capped size, the swizzled shared-memory panel) and
``TmaOutGradLayout`` drawn plain (said to be an identity grid) or with its problem (rows coloured by image).

Expected cells are written by hand from the PTX swizzle rule (chunk c of 128-byte line L lands at chunk
c XOR (L mod 8) for 128B) and the layout's definition, not through the picture code.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
import cubepy_layouts as cl
from cubepy.errors import CubeError
from cubepy_layouts.conv import ConvolutionProblem, TmaOutGradLayout

CLIENT = cp.client("interp")
PROBLEM = ConvolutionProblem.conv2d((2, 4, 5, 16), (8, 3, 3, 16), padding=1)  # out 2 x 4 x 5 x 8: 40 pixels


def _tiled(shape, box, swizzle="none", dtype=np.float16):
    return cp.TensorMapArg.tiled(cp.TensorArg(CLIENT.create(np.zeros(shape, dtype))), box, swizzle=swizzle)


def test_a_swizzled_box_shows_shared_memory_after_the_swizzle():
    picture = cl.picture(_tiled((64, 256), (8, 64), "128B"), coords=(0, 0))
    smem = picture.panel("shared memory")
    assert "128B swizzle" in smem.title and smem.shape == (8, 8)  # 8 rows of 128 bytes, 8 chunks each
    for line in range(8):
        for chunk in range(8):
            assert smem.labels[line][chunk ^ line] == f"{line}.{chunk}"


def test_a_32b_swizzle_pairs_box_rows_in_a_line():
    # f32 rows of 8 elements = 32 bytes, so four box rows share a 128-byte line; 32B flips the chunk's low bit
    # on odd lines (address bit 4 ^= bit 7)
    picture = cl.picture(_tiled((16, 8), (16, 8), "32B", np.float32), coords=(0, 0))
    smem = picture.panel("shared memory")
    assert smem.shape == (4, 8)  # 512 bytes: four 128-byte lines
    for byte in range(0, 512, 16):
        line, chunk = divmod(byte // 16, 8)
        swizzled = chunk ^ (line & 1)  # the 32B pattern flips bit 4 of the address by bit 7
        assert smem.labels[line][swizzled] == f"{byte // 32}.{(byte % 32) // 16}"


def test_an_unswizzled_narrow_box_keeps_its_element_panel():
    picture = cl.picture(_tiled((10, 12), (4, 8), dtype=np.float32), coords=(0, 0))
    smem = picture.panel("shared memory")
    assert smem.shape == (4, 8) and "no swizzle" in smem.title and smem.labels[1][3] == "1,3"


def test_a_wide_box_is_cut_to_a_readable_width():
    picture = cl.picture(_tiled((64, 256), (8, 256)), coords=(0, 0))
    assert all(panel.shape[1] <= 32 for panel in picture.panels)
    assert any("draws columns 0..31" in note for note in picture.notes)
    assert picture.data["sources"].shape == (8 * 256, 2)  # the data keeps every element


@pytest.mark.slow  # matplotlib's import and a PNG render: seconds on a loaded machine
def test_a_wide_box_png_stays_small(tmp_path):
    pytest.importorskip("matplotlib")
    image = pytest.importorskip("PIL.Image")
    path = tmp_path / "wide.png"
    cl.show(_tiled((64, 256), (8, 64), "128B"), path, coords=(0, 0))
    assert max(image.open(path).size) <= 3000  # was 7973 x 840 before the cap


def test_a_plain_out_grad_layout_says_it_is_an_identity_grid():
    picture = cl.picture(TmaOutGradLayout.Launch(40, 8), rows=(0, 8))
    assert "identity grid" in picture.title
    assert any("from_problem(problem)" in note and "problem=problem" in note for note in picture.notes)


def test_the_problem_colours_out_grad_rows_by_image():
    picture = cl.picture(TmaOutGradLayout.from_problem(PROBLEM), rows=(0, 40), problem=PROBLEM)
    panel = picture.panels[0]
    pixels = 4 * 5  # OH x OW
    expected = (np.arange(40) // pixels)[:, None].repeat(8, axis=1)
    np.testing.assert_array_equal(panel.groups, expected)
    assert panel.group_names == {0: "image 0 (rows 0..19)", 1: "image 1 (rows 20..39)"}
    assert "OH x OW = 4 x 5" in picture.notes[0]


def test_a_problem_that_does_not_match_the_layout_is_refused():
    with pytest.raises(CubeError, match=r"layout's 41 rows are not the output pixels"):
        cl.picture(TmaOutGradLayout.Launch(41, 8), rows=(0, 8), problem=PROBLEM)
