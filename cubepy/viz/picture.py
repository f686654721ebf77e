"""The data of a picture, apart from how it is drawn: panels of labelled, coloured, marked grid cells.

A ``Picture`` is what ``show`` computes; the text and matplotlib renderers only draw it, so tests check
the data.  Each ``Panel`` is one grid: ``labels[r][c]`` is the text of a cell ("" for an empty cell),
``groups[r, c]`` picks its colour (-1: no colour) and ``marks[r, c]`` flags it (0: none; other codes are
named in ``mark_names``, e.g. "out of bounds: filled").  ``data`` keeps the exact mapping a picture was
drawn from (source positions, chunk permutations, im2col rows) for programs and tests.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

__all__ = ["Panel", "Picture", "MARK_SYMBOLS"]

# One symbol per mark code, for plain text (colour-free) output; code 0 is "no mark".
MARK_SYMBOLS = {1: "~", 2: ".", 3: "!", 4: "?"}


@attrs.define(eq=False)
class Panel:
    """One labelled grid: ``labels`` (rows x cols), ``groups`` (colour keys) and ``marks`` (flags)."""

    title: str
    labels: list[list[str]]
    groups: np.ndarray
    marks: np.ndarray
    row_names: list[str]
    col_names: list[str]
    x_label: str = ""
    y_label: str = ""
    group_names: dict[int, str] = attrs.field(factory=dict)
    mark_names: dict[int, str] = attrs.field(factory=dict)
    group_colors: dict[int, str] = attrs.field(factory=dict)  # fixed colours ("#rrggbb") for some groups

    def __attrs_post_init__(self) -> None:
        shape = (len(self.labels), len(self.labels[0]) if self.labels else 0)
        if self.groups.shape != shape or self.marks.shape != shape:
            raise ValueError(
                f"panel {self.title!r}: labels are {shape}, groups {self.groups.shape}, marks {self.marks.shape}"
            )
        if len(self.row_names) != shape[0] or len(self.col_names) != shape[1]:
            raise ValueError(
                f"panel {self.title!r}: {len(self.row_names)} row names and {len(self.col_names)} "
                f"column names for a {shape[0]} x {shape[1]} grid"
            )

    def legend(self) -> tuple[dict[int, str], dict[int, str]]:
        """The group and mark names that some cell of the grid uses (a legend names nothing absent)."""
        groups = set(np.unique(self.groups).tolist())
        marks = set(np.unique(self.marks).tolist())
        return (
            {g: n for g, n in self.group_names.items() if g in groups},
            {m: n for m, n in self.mark_names.items() if m in marks},
        )

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, cols)`` of the grid."""
        return self.groups.shape

    @classmethod
    def empty(cls, title: str, rows: int, cols: int, *, row_start: int = 0, col_start: int = 0, **kwargs: Any) -> Panel:
        """A blank ``rows x cols`` panel whose rows and columns are numbered from ``row_start``/``col_start``."""
        return cls(
            title,
            [[""] * cols for _ in range(rows)],
            np.full((rows, cols), -1, np.int64),
            np.zeros((rows, cols), np.int8),
            [str(row_start + r) for r in range(rows)],
            [str(col_start + c) for c in range(cols)],
            **kwargs,
        )


@attrs.define(eq=False)
class Picture:
    """What ``show`` draws: a title, panels side by side, notes under them, and the mapping behind them."""

    title: str
    panels: list[Panel]
    notes: list[str] = attrs.field(factory=list)
    data: dict[str, Any] = attrs.field(factory=dict)

    def panel(self, title_start: str) -> Panel:
        """The first panel whose title starts with ``title_start``."""
        for panel in self.panels:
            if panel.title.startswith(title_start):
                return panel
        raise KeyError(f"no panel titled {title_start!r}... in {[p.title for p in self.panels]}")


# Light, distinct colours (matplotlib's tab20 light half, then its dark half) so black labels stay readable.
PALETTE = [
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#dbdb8d",
    "#9edae5",
    "#c7c7c7",
    "#6baed6",
    "#fd8d3c",
    "#74c476",
    "#e377c2",
    "#9e9ac8",
    "#bcbd22",
    "#17becf",
    "#d6616b",
    "#8c6d31",
    "#7b4173",
]
MARK_COLOR = "#e0e0e0"  # background of a marked cell that has no group colour


def group_color(panel: Panel, group: int) -> str | None:
    """The colour of ``group`` in ``panel`` (None for -1: no colour)."""
    if group < 0:
        return None
    return panel.group_colors.get(group) or PALETTE[group % len(PALETTE)]
