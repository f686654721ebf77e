"""Draw a ``Picture`` with matplotlib (the optional ``viz`` extra) into an SVG or PNG file."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cubepy.errors import CubeError
from cubepy.viz.picture import MARK_COLOR, Panel, Picture, group_color

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["render_file"]

HATCHES = {1: "////", 2: "....", 3: "xxxx", 4: "\\\\\\\\"}
CELL_H = 0.3  # inches per grid row
DPI = 150
MAX_PIXELS = 3000  # the longest side of a PNG, about
FONT = 7


def _matplotlib() -> type[Figure]:
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise CubeError(
            "drawing to a .svg/.png file needs matplotlib: pip install 'cubepy[viz]' "
            "(or show(obj) without a path prints the picture as text)"
        ) from None
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text (searchable, small)
    matplotlib.rcParams["svg.hashsalt"] = "cubepy"  # the same picture gives the same bytes
    return Figure


def _cell_width(panel: Panel) -> float:
    longest = max([len(t) for row in panel.labels for t in row] + [len(n) for n in panel.col_names] + [1])
    return max(0.36, 0.065 * longest + 0.16)


def _draw_panel(ax: Axes, panel: Panel) -> None:
    from matplotlib.patches import Patch, Rectangle

    rows, cols = panel.shape
    for r in range(rows):
        for c in range(cols):
            mark = int(panel.marks[r, c])
            face = group_color(panel, int(panel.groups[r, c])) or (MARK_COLOR if mark else "white")
            ax.add_patch(
                Rectangle(
                    (c, r),
                    1,
                    1,
                    facecolor=face,
                    edgecolor="#777777",
                    linewidth=0.4,
                    hatch=HATCHES.get(mark) if mark else None,
                )
            )
            label = panel.labels[r][c]
            if label:
                ax.text(c + 0.5, r + 0.5, label, ha="center", va="center", fontsize=FONT, color="black")
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)  # row 0 on top, as the text output and a matrix read
    step_c = max(1, cols // 32)
    step_r = max(1, rows // 48)
    ax.set_xticks([c + 0.5 for c in range(0, cols, step_c)])
    ax.set_xticklabels(panel.col_names[::step_c], fontsize=FONT)
    ax.set_yticks([r + 0.5 for r in range(0, rows, step_r)])
    ax.set_yticklabels(panel.row_names[::step_r], fontsize=FONT)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.tick_params(length=0)
    ax.set_xlabel(panel.x_label, fontsize=FONT + 1)
    ax.set_ylabel(panel.y_label, fontsize=FONT + 1)
    ax.set_title(panel.title, fontsize=FONT + 2, pad=18 if panel.x_label else 8)
    for spine in ax.spines.values():
        spine.set_visible(False)
    group_names, mark_names = panel.legend()
    handles = [
        Patch(facecolor=group_color(panel, g), edgecolor="#777777", label=name) for g, name in group_names.items()
    ]
    handles += [
        Patch(facecolor=MARK_COLOR, edgecolor="#777777", hatch=HATCHES.get(m), label=name)
        for m, name in mark_names.items()
    ]
    if handles:
        # As many columns as fit under the panel, so a wide legend never squeezes the grid.
        entry = 0.45 + 0.065 * max(len(str(h.get_label())) for h in handles)
        ncol = max(1, min(len(handles), int(_panel_width(panel) // entry)))
        ax.legend(
            handles=handles,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.02),
            fontsize=FONT,
            ncol=ncol,
            frameon=False,
            handlelength=1.6,
            handleheight=1.2,
        )


def _panel_width(panel: Panel) -> float:
    return max(panel.shape[1], 1) * _cell_width(panel)


def _legend_rows(panel: Panel) -> int:
    names = [name for names in panel.legend() for name in names.values()]
    count = len(names)
    if not count:
        return 0
    ncol = max(1, min(count, int(_panel_width(panel) // (0.45 + 0.065 * max(map(len, names))))))
    return -(-count // ncol)


def render_file(picture: Picture, path: str | os.PathLike[str]) -> str:
    """Write ``picture`` to ``path`` (.svg or .png); returns the path."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".svg", ".png"):
        raise CubeError(f"show: cannot write {path!r}: the path must end in .svg or .png")
    Figure = _matplotlib()
    widths = [_panel_width(panel) for panel in picture.panels]
    height = max(max(panel.shape[0], 1) * CELL_H for panel in picture.panels)
    legend_rows = max(_legend_rows(p) for p in picture.panels)
    fig_w = max(sum(widths) + 1.0 * len(widths) + 0.4, 4.5)
    # Room for titles, tick labels, legends and notes: constrained layout overlaps them when short of space.
    fig_h = height + 1.7 + 0.25 * legend_rows + 0.18 * len(picture.notes)
    fig = Figure(figsize=(fig_w, fig_h), layout="constrained")
    axes = fig.subplots(1, len(picture.panels), squeeze=False, gridspec_kw={"width_ratios": widths})[0]
    for ax, panel in zip(axes, picture.panels):
        _draw_panel(ax, panel)
        if len(picture.panels) == 1:  # one panel: the picture's title heads it (a suptitle would collide)
            ax.set_title(f"{picture.title}\n{panel.title}", fontsize=FONT + 3, pad=18 if panel.x_label else 8)
        ax.set_box_aspect(max(panel.shape[0], 1) * CELL_H / _panel_width(panel))
    if len(picture.panels) > 1:
        fig.suptitle(picture.title, fontsize=FONT + 4)
    if picture.notes:
        fig.supxlabel("\n".join(picture.notes), fontsize=FONT, ha="left", x=0.01)
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    metadata = {"Date": None} if ext == ".svg" else None  # no timestamp: the same picture, the same bytes
    # A PNG stays under MAX_PIXELS a side: a huge grid is drawn smaller rather than thousands of pixels wide.
    dpi = min(DPI, MAX_PIXELS / max(fig_w, fig_h))
    fig.savefig(path, dpi=dpi, bbox_inches="tight", metadata=metadata)
    return path
