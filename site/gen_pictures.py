"""Generate the pictures the docs embed into ``docs/img/generated/`` (SVG and PNG).

Run it as ``python docs/gen_pictures.py [OUT_DIR]``, or let MkDocs run it before every build: it is also
a hook module (``hooks: [docs/gen_pictures.py]`` in mkdocs.yml) whose ``on_pre_build`` writes the files.
Every picture is computed by cubepy itself (the layouts' own methods run on the interp, the interp's TMA
emulation), so the docs always show what the code does.  A file is rewritten only when its bytes change,
so ``mkdocs serve`` does not rebuild in a loop.
"""

from __future__ import annotations

import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import cubepy as cp  # noqa: E402
import cubepy_layouts as cl  # noqa: E402
from cubepy import CUBE_POS_X, CUBE_POS_Y, UNIT_POS_X, UNIT_POS_Y, Array, cube, f32  # noqa: E402
from cubepy.viz import picture_of  # noqa: E402
from cubepy_layouts.conv import ConvolutionProblem, TmaIm2colLayout, TmaOutGradLayout  # noqa: E402

# A small weight-gradient convolution: x (2, 4, 5, 16) f16, 3x3 filter, padding 1 -> out (2, 4, 5, 8).
PROBLEM = ConvolutionProblem.conv2d((2, 4, 5, 16), (8, 3, 3, 16), padding=1)


@cube(launch=True)
def copy_tiles(src: Array[f32], dst: Array[f32], cols: cp.u32):
    """Copies 4x4 tiles, one per cube, with a bug: tiles step 3 rows, so rows overlap and the last is missed."""
    row = CUBE_POS_Y * 3 + UNIT_POS_Y
    col = CUBE_POS_X * 4 + UNIT_POS_X
    dst[row * cols + col] = src[row * cols + col]


def pictures(client) -> dict[str, object]:
    """Name -> picture data, for every picture the docs show."""
    out = {}
    out_grad = cl.picture(TmaOutGradLayout.from_problem(PROBLEM), rows=(0, 24))
    # Colour the rows by image: row = n*OH*OW + oh*OW + ow runs across images without padding.
    pixels = PROBLEM.out_h * PROBLEM.out_w
    grid = out_grad.panels[0]
    grid.groups[:] = (np.arange(grid.shape[0]) // pixels)[:, None]
    grid.group_names = {n: f"image {n} (rows {n * pixels}..{(n + 1) * pixels - 1})" for n in range(PROBLEM.batch)}
    out_grad.notes.insert(
        0,
        f"row = output pixel n*OH*OW + oh*OW + ow (OH x OW = {PROBLEM.out_h} x {PROBLEM.out_w}), "
        f"col = output channel; the rows run across images without padding",
    )
    out["tma_out_grad_layout"] = out_grad
    # wgrad reads im2col as (K, N) = (N*OH*OW pixels, taps * C_in): one column per tap, at channel 0.
    channels = PROBLEM.in_channels
    im2col_layout = cl.picture(
        TmaIm2colLayout.from_problem(PROBLEM, "wgrad"), rows=(0, 12), cols=range(0, 9 * channels, channels)
    )
    im2col_layout.notes.insert(
        0,
        "label: the TMA im2col load of the tile at (row, col): corner n,h,w,c | tap "
        f"offsets kh,kw; columns are taps (col = tap * {channels} + channel)",
    )
    out["tma_im2col_layout"] = im2col_layout
    x = client.create(np.zeros(PROBLEM.x_shape, np.float16))
    im2col = cp.TensorMapArg.im2col(
        x, channels_per_pixel=16, pixels_per_column=32, lower_corner=(-1, -1), upper_corner=(-1, -1)
    )
    # Output pixel 0 of image 0 has its top-left input pixel at (-1, -1); tap (kh, kw) = (0, 1) reads +(0, 1).
    out["im2col_copy"] = picture_of(im2col, coords=(0, -1, -1, 0), offsets=(0, 1))
    for mode in ("32B", "64B", "128B"):
        out[f"swizzle_{mode}"] = picture_of(mode)
    t = client.create(np.zeros((10, 12), np.float32))
    tiled = cp.TensorMapArg.tiled(t, (4, 8), elem_stride=(2, 1))
    out["tiled_copy"] = picture_of(tiled, coords=(7, 8))
    src = client.create(np.arange(8 * 12, dtype=np.float32).reshape(8, 12))
    dst = client.zeros((8, 12), np.float32)
    with cp.coverage(client) as cov:  # a 3 x 2 grid of 4x4 tiles over an 8 x 12 tensor
        copy_tiles.launch(client, cp.CubeCount(3, 2), cp.CubeDim(4, 4), cp.ArrayArg(src), cp.ArrayArg(dst), 12)
    out["coverage"] = cov.picture(dst, "write")
    return out


def _write_if_changed(path: str, render) -> bool:
    """Render to a temporary file and replace ``path`` only when the bytes differ."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(suffix=os.path.splitext(path)[1], dir=directory)
    os.close(fd)
    try:
        render(tmp)
        with open(tmp, "rb") as new:
            data = new.read()
        if os.path.exists(path):
            with open(path, "rb") as old:
                if old.read() == data:
                    return False
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the site serves it
        os.replace(tmp, path)
        return True
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def generate(out_dir: str | None = None) -> list[str]:
    """Write every picture as SVG and PNG into ``out_dir`` (default docs/img/generated); the paths."""
    from cubepy.viz.plot import render_file

    out_dir = out_dir or os.path.join(ROOT, "docs", "img", "generated")
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for name, picture in pictures(cp.client("interp")).items():
        for ext in (".svg", ".png"):
            path = os.path.join(out_dir, name + ext)
            _write_if_changed(path, lambda p, picture=picture: render_file(picture, p))
            written.append(path)
    return written


def on_pre_build(config) -> None:
    """MkDocs hook: generate the pictures into ``<docs_dir>/img/generated`` before each build."""
    generate(os.path.join(config["docs_dir"], "img", "generated"))


if __name__ == "__main__":
    for path in generate(sys.argv[1] if len(sys.argv) > 1 else None):
        print(path)
