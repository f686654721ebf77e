"""Draw a ``Picture`` as text: ANSI background colours on a terminal, plain text with mark symbols otherwise."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from cubepy.viz.picture import MARK_COLOR, MARK_SYMBOLS, Panel, Picture, group_color

__all__ = ["render_text", "use_color"]

MAX_CELL = 14  # a longer label is cut, with "…", so wide grids stay legible


def use_color(stream: TextIO | None = None, force: bool | None = None) -> bool:
    """Colour when ``force`` says so, else when ``stream`` is a terminal and NO_COLOR is unset."""
    if force is not None:
        return force
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    stream = sys.stdout if stream is None else stream
    return bool(getattr(stream, "isatty", lambda: False)())


def _background(hex_color: str) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"\x1b[48;2;{r};{g};{b}m\x1b[38;2;0;0;0m"


_RESET = "\x1b[0m"


def _cell_text(panel: Panel, r: int, c: int) -> str:
    label = panel.labels[r][c] or ("·" if panel.groups[r, c] >= 0 else "")
    mark = int(panel.marks[r, c])
    if mark:  # the symbol shows the mark with or without colour
        label = f"{label}{MARK_SYMBOLS.get(mark, '*')}"
    if len(label) > MAX_CELL:
        label = label[: MAX_CELL - 1] + "…"
    return label


def render_panel(panel: Panel, color: bool) -> list[str]:
    """The lines of one panel: a title, a header of column names, then one line per grid row."""
    rows, cols = panel.shape
    texts = [[_cell_text(panel, r, c) for c in range(cols)] for r in range(rows)]
    width = max([len(t) for row in texts for t in row] + [len(n) for n in panel.col_names] + [1])
    name_width = max([len(n) for n in panel.row_names] + [len(panel.y_label)])
    lines = [panel.title]
    if panel.x_label:
        lines.append(" " * (name_width + 1) + f"{panel.x_label} →")
    lines.append(f"{panel.y_label:>{name_width}} " + " ".join(f"{n:>{width}}" for n in panel.col_names))
    for r in range(rows):
        cells = []
        for c in range(cols):
            text = f"{texts[r][c]:>{width}}"
            if color:
                background = group_color(panel, int(panel.groups[r, c]))
                if background is None and panel.marks[r, c]:
                    background = MARK_COLOR
                if background is not None:
                    text = f"{_background(background)}{text}{_RESET}"
            cells.append(text)
        lines.append(f"{panel.row_names[r]:>{name_width}} " + " ".join(cells))
    legend = []
    group_names, mark_names = panel.legend()
    for group, name in group_names.items():
        if color:
            legend.append(f"{_background(group_color(panel, group) or MARK_COLOR)}  {_RESET} {name}")
        elif any(panel.groups[r, c] == group and not panel.labels[r][c] for r in range(rows) for c in range(cols)):
            legend.append(f"· {name}")  # without colour only the unlabelled cells of a group need a key
    for mark, name in mark_names.items():
        legend.append(f"{MARK_SYMBOLS.get(mark, '*')} {name}")
    if legend:
        lines.append("  " + "   ".join(legend))
    return lines


def render_text(picture: Picture, color: bool = False) -> str:
    """The whole picture as text: title, each panel one under the other, then the notes."""
    out = [picture.title, "=" * len(picture.title)]
    for panel in picture.panels:
        out.append("")
        out.extend(render_panel(panel, color))
    if picture.notes:
        out.append("")
        out.extend(f"note: {note}" for note in picture.notes)
    return "\n".join(out) + "\n"
