"""``cp.coverage(client)``: record which global elements each cube reads and writes, then draw a heat map.

    with cp.coverage(client) as cov:
        kernel.launch(client, ...)
    cov.counts(out, "write")        # writes per element, in out's shape
    cov.show(out, "cover.png")      # never written (red), once (green), more than once (orange)

Only launches on ``client`` (an interp client) inside the block are recorded; nothing is recorded, and
nothing costs more than one test per global access, outside it.
"""

from __future__ import annotations

import os
from contextvars import Token
from typing import Any

import numpy as np

from cubepy.errors import CubeError
from cubepy.runtime.interp import coverage as recording
from cubepy.viz.picture import Panel, Picture

__all__ = ["Coverage"]

KINDS = ("write", "read")
MAX_CELLS = 64
WRITE_GROUPS = (
    {0: "never written", 1: "written once", 2: "written 2+ times"},
    {0: "#fb6a4a", 1: "#a1d99b", 2: "#fdae6b"},
)
READ_GROUPS = (
    {0: "never read", 1: "read once", 2: "read twice", 3: "read 3+ times"},
    {0: "#f4f4f4", 1: "#c6dbef", 2: "#6baed6", 3: "#2171b5"},
)


class Coverage:
    """The context manager of ``cp.coverage(client)``; after the block, ``counts``/``cubes``/``show``."""

    def __init__(self, client: Any) -> None:
        if getattr(client, "name", None) != "interp":
            raise CubeError(
                f"cp.coverage: coverage is recorded by the interp runtime; got {client!r} (use cp.client('interp'))"
            )
        self.client = client
        self.recorder = recording.Recorder(client)
        self._token: Token[recording.Recorder | None] | None = None

    def __enter__(self) -> Coverage:
        if self._token is not None:
            raise CubeError("cp.coverage: this recorder is already active")
        self._token = recording.ACTIVE.set(self.recorder)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            recording.ACTIVE.reset(self._token)
        self._token = None

    def _positions(self, handle: Any) -> np.ndarray:
        """The storage index of every element of ``handle``, in its shape."""
        if handle.client is not self.client:
            raise CubeError("cp.coverage: the handle belongs to another client than the one recorded")
        index = np.full(handle.shape, handle.offset, np.int64)
        for axis, stride in enumerate(handle.strides):
            shape = [1] * len(handle.shape)
            shape[axis] = handle.shape[axis]
            index = index + (np.arange(handle.shape[axis], dtype=np.int64) * stride).reshape(shape)
        return index

    def _entry(self, handle: Any, kind: str) -> recording.BufferCoverage | None:
        if kind not in KINDS:
            raise CubeError(f"cp.coverage: kind {kind!r} is not one of {KINDS}")
        entry = self.recorder.buffers.get(id(handle.storage))
        return entry if entry is not None and entry.storage is handle.storage else None

    def counts(self, handle: Any, kind: str = "write") -> np.ndarray:
        """How many times each element of ``handle`` was written (``kind="read"``: read), in its shape."""
        positions = self._positions(handle)
        entry = self._entry(handle, kind)
        return np.zeros(positions.shape, np.int64) if entry is None else entry.counts[kind][positions]

    def cubes(self, handle: Any, kind: str = "write") -> tuple[np.ndarray, np.ndarray]:
        """The lowest and highest cube (linear index, -1: none) that wrote (or read) each element."""
        positions = self._positions(handle)
        entry = self._entry(handle, kind)
        if entry is None:
            return np.full(positions.shape, -1, np.int64), np.full(positions.shape, -1, np.int64)
        lowest, highest = entry.cubes(kind)
        return lowest[positions], highest[positions]

    def picture(self, handle: Any, kind: str = "write") -> Picture:
        """A heat map over ``handle`` (2-D: leading dimensions stacked as rows), labelled with the cube(s)."""
        counts = self.counts(handle, kind)
        first, last = self.cubes(handle, kind)
        shape = counts.shape if counts.ndim else (1,)
        cols = shape[-1]
        grid = counts.reshape(-1, cols)
        first, last = first.reshape(-1, cols), last.reshape(-1, cols)
        rows = grid.shape[0]
        r_show, c_show = min(rows, MAX_CELLS), min(cols, MAX_CELLS)
        names, colours = WRITE_GROUPS if kind == "write" else READ_GROUPS
        top = max(names)
        panel = Panel.empty(
            f"{kind}s per element of the {'x'.join(map(str, shape))} tensor (label: cube)",
            r_show,
            c_show,
            x_label=f"dim {len(shape) - 1}",
            y_label=", ".join(f"dim {d}" for d in range(len(shape) - 1)),
            group_names=names,
            group_colors=colours,
        )
        if len(shape) > 2:
            panel.row_names = [",".join(map(str, np.unravel_index(r, shape[:-1]))) for r in range(r_show)]
        for r in range(r_show):
            for c in range(c_show):
                n = int(grid[r, c])
                panel.groups[r, c] = min(n, top)
                if n:
                    who = str(first[r, c]) if first[r, c] == last[r, c] else f"{first[r, c]},{last[r, c]}"
                    panel.labels[r][c] = who if n == 1 else f"{who} x{n}"
        notes = [
            f"{int((grid == 0).sum())} of {grid.size} elements never {kind}n"
            if kind == "write"
            else f"{int((grid == 0).sum())} of {grid.size} elements never read",
            "label: the cube (linear index x + y*CUBE_COUNT_X + ...) that touched it; a,b: the lowest and highest of several; "
            "xN: N accesses",
        ]
        if kind == "write":
            notes[0] = (
                f"{int((grid == 0).sum())} of {grid.size} elements never written, {int((grid > 1).sum())} "
                "written more than once"
            )
        if (r_show, c_show) != grid.shape:
            notes.append(f"the first {r_show} x {c_show} elements are drawn; counts() has them all")
        return Picture(
            f"coverage: {kind}s",
            [panel],
            notes,
            {"counts": counts, "first": first.reshape(shape), "last": last.reshape(shape)},
        )

    def show(
        self, handle: Any, path: str | os.PathLike[str] | None = None, kind: str = "write", *, color: bool | None = None
    ) -> Picture:
        """Draw the ``kind`` heat map of ``handle`` to ``path`` (.svg/.png) or the terminal."""
        from cubepy.viz.show import output

        result = self.picture(handle, kind)
        output(result, path, color=color)
        return result
