"""``cp.show``: compute a picture of a tensor-map copy, a swizzle mode or recorded coverage, then draw it."""

from __future__ import annotations

import os
import sys
from typing import Any

from cubepy.errors import CubeError
from cubepy.viz.picture import Picture
from cubepy.viz.text import render_text, use_color

__all__ = ["output", "picture_of", "show"]


def picture_of(obj: Any, **coords: Any) -> Picture:
    """The picture data of a ``TensorMapArg`` copy (``coords=``, ``offsets=``) or a swizzle mode."""
    from cubepy.runtime.tensormap import TensorMapArg
    from cubepy.viz import tma_pictures

    if isinstance(obj, Picture):
        return obj
    if isinstance(obj, str):
        if coords:
            raise CubeError(f"show({obj!r}): a swizzle mode takes only lines=, not {sorted(coords)}")
        return tma_pictures.swizzle_picture(obj)
    if isinstance(obj, TensorMapArg):
        unknown = set(coords) - ({"coords", "offsets"} if obj.mode == "im2col" else {"coords"})
        if unknown:
            raise CubeError(
                f"show(tensor map): unknown keyword(s) {sorted(unknown)}; a {obj.mode} copy takes "
                + ("coords=(n, h, w, c), offsets=(h, w)" if obj.mode == "im2col" else "coords=(...)")
            )
        return tma_pictures.tensor_map_picture(obj, **coords)
    raise CubeError(
        f"show: cannot draw a {type(obj).__name__}; cp.show draws a TensorMapArg or a swizzle mode "
        "('32B', '64B', '128B'); cubepy_layouts.show also draws layouts and views"
    )


def output(picture: Picture, path: str | os.PathLike[str] | None = None, *, color: bool | None = None) -> None:
    """Write ``picture`` to ``path`` (.svg/.png through matplotlib) or print it (``color``: None = auto)."""
    if path is None:
        sys.stdout.write(render_text(picture, use_color(sys.stdout, color)))
        return
    if os.fspath(path).lower().endswith((".txt", ".ansi")):
        with open(path, "w") as f:
            f.write(render_text(picture, bool(color) or os.fspath(path).lower().endswith(".ansi")))
        return
    from cubepy.viz.plot import render_file

    render_file(picture, path)


def show(obj: Any, path: str | os.PathLike[str] | None = None, *, color: bool | None = None, **coords: Any) -> Picture:
    """Draw ``obj`` (a tensor map's copy at ``coords``, or a swizzle mode) to ``path`` or the terminal."""
    picture = picture_of(obj, **coords)
    output(picture, path, color=color)
    return picture
