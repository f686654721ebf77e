"""``cubepy_layouts.show``: pictures of layouts and views, computed by running the layouts' own methods.

A layout's picture is its coordinate space as a grid (the last two coordinates; leading ones fixed by
``pos=``), each cell labelled with the source position ``to_source_pos`` gives it and marked when
``is_in_bounds`` is false.  A view's picture is its storage, each element labelled with the view
coordinate that reads it (and how many do).  The values come from ``evaluate``: a kernel launched on the
interp runtime that calls the layout's methods, the code every kernel using the layout runs.  Tensor
maps and swizzle modes go to ``cp.show``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import cubepy as cp
from cubepy.viz import Panel, Picture, output, picture_of
from cubepy_layouts.evaluate import LayoutProbe, evaluate, probe
from cubepy_layouts.view import View

__all__ = ["layout_picture", "picture", "show", "view_picture"]

MAX_CELLS = 48  # per grid axis unless rows=/cols= ask for more
ROW_WRAP = 16  # a 1-D coordinate space is drawn as rows of this many cells
MAX_COLOURS = 12  # distinct source values coloured (and named in the legend) at most
OOB = 1


def _is_layout(obj: Any) -> bool:
    return getattr(type(obj), "__layout_type__", None) is not None


def _span(name: str, value: Any, extent: int) -> range | list[int]:
    """The indices of ``name=``: None (the first MAX_CELLS), an int, ``(start, stop)``, a range or a list."""
    if value is None:
        return range(min(extent, MAX_CELLS))
    if isinstance(value, int):
        return range(value, value + 1)
    if isinstance(value, (range, list)):
        if not value:
            raise cp.CubeError(f"show: {name}={value!r} is empty")
        return value
    start, stop = (int(v) for v in value)
    if stop <= start:
        raise cp.CubeError(f"show: {name}=({start}, {stop}) is empty")
    return range(start, stop)


def _label(source: np.ndarray, groups: tuple[int, ...]) -> str:
    """``17,3`` for a flat source, ``1,-1,1,2|4,4`` for a nested one (top-level items split by ``|``)."""
    if len(set(groups)) == len(groups):  # flat: one value per top-level item
        return ",".join(map(str, source.tolist()))
    parts: dict[int, list[str]] = {}
    for value, group in zip(source.tolist(), groups):
        parts.setdefault(group, []).append(str(value))
    return "|".join(",".join(values) for values in parts.values())


def _coords_name(layout_probe: LayoutProbe) -> str:
    return f"{layout_probe.layout_type.__name__} {tuple(layout_probe.shape)}"


def _grid_coords(layout_probe: LayoutProbe, pos: Any, rows: Any, cols: Any):
    """The coordinates drawn: (grid rows, grid cols, coords (r*c, rank), row names, col names, axis names)."""
    shape = layout_probe.shape
    rank = len(shape)
    if rank == 1:
        total = list(_span("cols", cols, shape[0]) if cols is not None else range(min(shape[0], MAX_CELLS * ROW_WRAP)))
        n_rows = -(-len(total) // ROW_WRAP)
        width = min(ROW_WRAP, len(total))
        coords = np.full((n_rows * width, 1), -1, np.int64)
        coords[: len(total), 0] = total
        row_names = [str(total[r * width]) for r in range(n_rows)]
        return n_rows, width, coords, row_names, [f"+{c}" for c in range(width)], ("position", "")
    lead = tuple(int(p) for p in (pos if pos is not None else (0,) * (rank - 2)))
    if len(lead) != rank - 2:
        raise cp.CubeError(
            f"show: pos={pos!r} must fix the {rank - 2} leading coordinate(s) of a rank-{rank} "
            f"layout ({_coords_name(layout_probe)}); the grid is the last two"
        )
    r_range, c_range = _span("rows", rows, shape[-2]), _span("cols", cols, shape[-1])
    grid = np.array([(*lead, r, c) for r in r_range for c in c_range], np.int64).reshape(-1, rank)
    names = (f"coordinate {rank - 1}", f"coordinate {rank - 2}")
    return len(r_range), len(c_range), grid, [str(r) for r in r_range], [str(c) for c in c_range], names


def layout_picture(
    launch: Any, *, pos: Any = None, rows: Any = None, cols: Any = None, problem: Any = None, client=None
) -> Picture:
    """The layout ``launch`` over its coordinate space: each cell's source position, out of bounds marked.

    ``problem`` (a ``ConvolutionProblem``) colours rows by image where the grid's rows are the output
    pixels ``n*OH*OW + oh*OW + ow`` (as in ``TmaOutGradLayout.from_problem(problem)``).
    """
    layout_probe = probe(launch, client)
    n_rows, n_cols, coords, row_names, col_names, (x_label, y_label) = _grid_coords(layout_probe, pos, rows, cols)
    used = coords[:, 0] >= 0
    sources = np.zeros((len(coords), len(layout_probe.source_groups)), np.int64)
    in_bounds = np.zeros(len(coords), bool)
    sources[used], in_bounds[used] = evaluate(launch, coords[used], client, layout_probe)
    groups = layout_probe.source_groups
    major = sources[:, 0]
    distinct = sorted(set(major[used].tolist()))
    # Colour by source[0] when that tells few groups apart (e.g. the image of an NHWC position); one colour else.
    colour_of = {v: i for i, v in enumerate(distinct)} if len(groups) > 1 and len(distinct) <= MAX_COLOURS else {}
    name = layout_probe.layout_type.__name__
    lead = coords[0, :-2].tolist() if len(layout_probe.shape) > 2 else []
    title = f"shape {tuple(layout_probe.shape)}" + (f"; the grid is {tuple(lead)} + (row, col)" if lead else "")
    panel = Panel.empty(
        title,
        n_rows,
        n_cols,
        x_label=x_label,
        y_label=y_label,
        mark_names={OOB: "out of bounds (is_in_bounds is false)"},
    )
    panel.row_names, panel.col_names = row_names, col_names
    for k in np.flatnonzero(used):
        r, c = divmod(int(k), n_cols)
        panel.labels[r][c] = _label(sources[k], groups)
        panel.groups[r, c] = colour_of.get(int(major[k]), -1) if colour_of else 0
        panel.marks[r, c] = 0 if in_bounds[k] else OOB
    if 1 < len(colour_of) <= MAX_COLOURS:
        panel.group_names = {g: f"source[0] = {v}" for v, g in colour_of.items()}
    notes = [
        "each cell: to_source_pos(coordinate), the storage position it maps to"
        + (" (items of a nested source split by |)" if len(set(groups)) < len(groups) else "")
        + ("; colour: source[0]" if colour_of else ""),
        f"{int(used.sum())} coordinates, {int((used & ~in_bounds).sum())} out of bounds",
    ]
    if n_rows * n_cols < int(np.prod(layout_probe.shape[-2:])):
        notes.append("part of the coordinate space is drawn; pass rows=(start, stop), cols=(start, stop)")
    summary = (layout_probe.layout_type.__doc__ or "").strip().split("\n")[0].replace("``", "")
    if summary:
        notes.insert(0, f"{name}: {summary}")
    grid = coords[used][:, -2:]
    identity = bool(used.any()) and sources.shape[1] == 2 and bool((sources[used] == grid).all())
    if identity:
        hint = ""
        if problem is None and hasattr(layout_probe.layout_type, "from_problem"):
            hint = f"; {name}.from_problem(problem) with show(..., problem=problem) colours the rows by image"
        notes.insert(1, f"an identity map on this grid: every cell is its own (row, col){hint}")
    if problem is not None:
        notes.insert(0, _colour_by_image(panel, layout_probe, coords, problem))
    data = {
        "coords": coords[used],
        "sources": sources[used],
        "in_bounds": in_bounds[used],
        "shape": layout_probe.shape,
        "source_groups": groups,
    }
    return Picture(f"{name} layout" + (" (an identity grid)" if identity else ""), [panel], notes, data)


def _colour_by_image(panel: Panel, layout_probe: LayoutProbe, coords: np.ndarray, problem: Any) -> str:
    """Colour the rows (output pixels ``n*OH*OW + oh*OW + ow``) by image; the note that says so."""
    out_h, out_w, batch = (int(getattr(problem, name, 0)) for name in ("out_h", "out_w", "batch"))
    if not out_h * out_w or layout_probe.shape[-2] != batch * out_h * out_w:
        raise cp.CubeError(
            f"show(problem=...): the layout's {layout_probe.shape[-2]} rows are not the output pixels of "
            f"{problem!r} (N*OH*OW = {batch * out_h * out_w}); pass problem= with the layout its from_problem built"
        )
    pixels = out_h * out_w
    rows = coords.reshape(panel.shape[0], panel.shape[1], -1)[:, 0, -2]
    image = np.where(rows >= 0, rows // pixels, -1)
    panel.groups[:] = image[:, None]
    panel.y_label, panel.x_label = "row: output pixel", "col: output channel"
    panel.group_names = {
        int(n): f"image {int(n)} (rows {int(n) * pixels}..{(int(n) + 1) * pixels - 1})"
        for n in np.unique(image[image >= 0])
    }
    return (
        f"row = output pixel n*OH*OW + oh*OW + ow (OH x OW = {out_h} x {out_w}), col = output channel; "
        "the rows run across images without padding"
    )


def _storage_shape(storage: Any) -> tuple[int, ...]:
    shape = getattr(storage, "shape", None)
    if shape is None:
        raise cp.CubeError(
            f"show(view): the view's storage ({type(storage).__name__}) has no shape; give the view "
            "a Handle or a numpy array"
        )
    return tuple(int(s) for s in shape)


def _storage_grid(shape: tuple[int, ...]):
    """How a storage of ``shape`` is drawn (row-major, so element ``flat`` is at ``divmod(flat, cols)``):
    1-D wrapped in rows of ROW_WRAP, 2-D as is, more as (leading dims) x (last two dims), e.g. (n,h) x (w,c)."""
    names = lambda dims: [",".join(map(str, i)) for i in np.ndindex(*dims)]  # noqa: E731
    if len(shape) == 1:
        cols = min(ROW_WRAP, shape[0])
        rows = -(-shape[0] // cols)
        return rows, cols, [str(r * cols) for r in range(rows)], [f"+{c}" for c in range(cols)], ("index", "")
    if len(shape) == 2:
        return shape[0], shape[1], names(shape[:1]), names(shape[1:]), ("dim 1", "dim 0")
    lead = len(shape) - 2
    return (
        int(np.prod(shape[:-2])),
        shape[-2] * shape[-1],
        names(shape[:-2]),
        names(shape[-2:]),
        (f"dims {lead}, {lead + 1}", ", ".join(f"dim {d}" for d in range(lead))),
    )


def view_picture(view: View, *, start: Any = None, size: Any = None, client=None) -> Picture:
    """Which storage elements the view's coordinates ``[start, start + size)`` read, and how often."""
    if not _is_layout(view.layout):
        raise cp.CubeError(
            "show(view): the view's layout must be a layout's Launch value (e.g. "
            "PlainLayout.for_length(n)) so the picture can run it"
        )
    layout_probe = probe(view.layout, client)
    shape = layout_probe.shape
    start = tuple(int(s) for s in (start if start is not None else (0,) * len(shape)))
    size = tuple(int(s) for s in (size if size is not None else shape))
    if len(start) != len(shape) or len(size) != len(shape):
        raise cp.CubeError(
            f"show(view): start={start} and size={size} need {len(shape)} values (the layout's "
            f"coordinates, shape {shape})"
        )
    axes = [np.arange(s, s + n) for s, n in zip(start, size)]
    coords = np.stack([a.ravel() for a in np.meshgrid(*axes, indexing="ij")], axis=1).astype(np.int64)
    sources, in_bounds = evaluate(view.layout, coords, client, layout_probe)
    storage_shape = _storage_shape(view.storage)
    flat_source = sources.shape[1] == 1 and len(storage_shape) != 1
    if not flat_source and sources.shape[1] != len(storage_shape):
        raise cp.CubeError(
            f"show(view): source positions have {sources.shape[1]} values but the storage has shape {storage_shape}"
        )
    storage_pos = np.stack(np.unravel_index(sources[:, 0], storage_shape), axis=1) if flat_source else sources
    inside = in_bounds & np.all((storage_pos >= 0) & (storage_pos < np.asarray(storage_shape)), axis=1)
    rows, cols, row_names, col_names, (x_label, y_label) = _storage_grid(storage_shape)
    counts = np.zeros((rows, cols), np.int64)
    first: dict[tuple[int, int], int] = {}
    for k in np.flatnonzero(inside):
        flat = int(np.ravel_multi_index(tuple(storage_pos[k]), storage_shape))
        r, c = divmod(flat, cols)
        counts[r, c] += 1
        first.setdefault((r, c), int(k))
    reads = Panel.empty(
        f"storage {storage_shape}: elements read by the view",
        rows,
        cols,
        x_label=x_label,
        y_label=y_label,
        group_names={0: "not read", 1: "read once", 2: "read twice", 3: "read 3+ times"},
        group_colors={0: "#f4f4f4", 1: "#9ecae1", 2: "#fdae6b", 3: "#e6550d"},
    )
    reads.row_names, reads.col_names = row_names, col_names
    n_elements = int(np.prod(storage_shape))
    for r in range(rows):
        for c in range(cols):
            if r * cols + c < n_elements:  # a wrapped 1-D storage leaves the end of its last row empty
                reads.groups[r, c] = min(int(counts[r, c]), 3)
            if (r, c) in first:
                who = ",".join(map(str, coords[first[(r, c)]]))
                reads.labels[r][c] = who if counts[r, c] == 1 else f"{who} +{counts[r, c] - 1}"
    notes = [
        f"view coordinates {start} + {size} over {_coords_name(layout_probe)}; a cell is labelled with the "
        "first coordinate that reads it (+n: n more read it)",
        f"{int(inside.sum())} reads of storage elements; {int((~in_bounds).sum())} coordinates out of bounds "
        f"(read_checked gives 0 there); {int((in_bounds & ~inside).sum())} in bounds but outside the storage "
        "(positions another check must guard, e.g. padding)",
    ]
    data = {
        "coords": coords,
        "storage_pos": storage_pos,
        "in_bounds": in_bounds,
        "read_counts": counts.ravel()[:n_elements].reshape(storage_shape),
    }
    return Picture(f"View through {layout_probe.layout_type.__name__}", [reads], notes, data)


def picture(obj: Any, **coords: Any) -> Picture:
    """The picture data of a layout (``pos=``, ``rows=``, ``cols=``), a view (``start=``, ``size=``), or what
    ``cp.show`` draws (a tensor map's copy, a swizzle mode)."""
    if isinstance(obj, View):
        return view_picture(obj, **coords)
    if _is_layout(obj):
        return layout_picture(obj, **coords)
    return picture_of(obj, **coords)


def show(obj: Any, path: str | os.PathLike | None = None, *, color: bool | None = None, **coords: Any) -> Picture:
    """Draw a layout, a view, a tensor map's copy or a swizzle mode to ``path`` (.svg/.png) or the terminal."""
    result = picture(obj, **coords)
    output(result, path, color=color)
    return result
