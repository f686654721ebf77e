"""Pictures of TMA copies and swizzles, computed by the interp's own TMA emulation (``interp.tma``).

Every cell comes from ``tma.tiled_box``, ``tma.im2col_rows`` or ``tma.swizzle_addresses``: the functions
the interp's copies run, so a picture cannot disagree with what a kernel gets.  Coordinates are
given outermost first (numpy order), like ``TensorMapArg.tiled``'s tile and a kernel's copy coordinates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from cubepy.errors import TensorMapError
from cubepy.runtime.interp import tma
from cubepy.viz.picture import Panel, Picture

__all__ = ["im2col_picture", "swizzle_picture", "tensor_map_picture", "tiled_picture"]

SWIZZLE_MODES = ("32B", "64B", "128B")
LOADED, OUTSIDE_BOX = 0, 1  # groups of the global-tensor panel
FILLED, SKIPPED = 1, 2  # marks
MAX_PANELS = 4
CONTEXT = 2  # tensor cells shown around a box inside a large tensor
SMALL = 16  # a dimension up to this size is shown whole
PERIOD_LINES = {"32B": 2, "64B": 4, "128B": 8}  # 128-byte lines before a swizzle pattern repeats
MAX_COLS = 32  # widest grid drawn element by element (a wider box is drawn in 16-byte chunks or cut)
MAX_ROWS = 64
MAX_COLOURS = 12  # box rows coloured apart at most


def tensor_map_picture(tm: Any, **coords: Any) -> Picture:
    """The copy of ``tm`` at ``coords=(...)`` (and ``offsets=(...)`` for im2col), outermost first."""
    if tm.mode == "im2col":
        return im2col_picture(tm, **coords)
    return tiled_picture(tm, **coords)


def _fill_name(tm: Any) -> str:
    return "NaN" if tm.oob_fill == "nan" else "zero"


def _int_tuple(name: str, value: Any, length: int, where: str) -> tuple[int, ...]:
    try:
        items = tuple(int(v) for v in value)
    except TypeError:
        raise TensorMapError(f"{where}: {name} = {value!r} must be a sequence of {length} integers") from None
    if len(items) != length:
        raise TensorMapError(f"{where}: {name} = {value!r} needs {length} values (outermost first)")
    return items


def _window(lo: int, hi: int, dim: int) -> range:
    """Indices to draw along one dimension: the box [lo, hi], the tensor when small, a little context."""
    if dim <= SMALL:
        return range(min(lo, 0), max(hi, dim - 1) + 1)
    return range(min(lo, max(0, lo - CONTEXT)), max(hi, min(dim - 1, hi + CONTEXT)) + 1)


# -------------------------------------------------------------------- tiled


def tiled_picture(tm: Any, coords: Sequence[int] | None = None) -> Picture:
    """A tile-mode copy at ``coords``: the box over the global tensor, the filled and the skipped cells."""
    where = "show(tensor map)"
    rank = tm.rank
    if coords is None:
        coords = (0,) * rank
    coords = _int_tuple("coords", coords, rank, where)
    sources, valid = tma.tiled_box(tm, coords[::-1])  # driver order in and out
    counts = [-(-b // e) for b, e in zip(tm.box_dim, tm.effective_elem_strides)][::-1]  # numpy order
    sources = sources[:, ::-1]  # numpy order: (elements, rank)
    shape = tm.global_dim[::-1]
    strides = tm.effective_elem_strides[::-1]
    fill = _fill_name(tm)
    filled = ~valid

    # Shared-memory panel: the box's linear image, outer dimensions stacked as rows; as 16-byte chunks
    # where they lie after the swizzle (or when a row is too wide to draw element by element).
    cols = counts[-1]
    rows = len(sources) // cols
    if tm.swizzle == "none" and cols <= MAX_COLS:
        smem = Panel.empty(
            f"shared memory box ({rows} x {cols} elements, no swizzle)",
            rows,
            cols,
            x_label="element in the box's inner row",
            y_label="box row",
            group_names={LOADED: "copied from the tensor"},
            mark_names={FILLED: f"outside the tensor: {fill} fill"},
        )
        for k, (src, ok) in enumerate(zip(sources.tolist(), valid.tolist())):
            r, c = divmod(k, cols)
            smem.labels[r][c] = ",".join(map(str, src))
            smem.groups[r, c] = LOADED if ok else -1
            smem.marks[r, c] = 0 if ok else FILLED
        chunk_notes: list[str] = []
    else:
        smem, chunk_notes = _smem_chunks(tm, valid, cols, fill)

    # Global panels: the innermost two dimensions, one panel per outer index the box touches.
    index_of = {tuple(src): k for k, src in enumerate(sources.tolist())}
    outer_keys = sorted({tuple(src[:-2]) for src in sources.tolist()}) if rank > 2 else [()]
    panels = []
    # The box's span reaches one element stride past its last copied element (what the stride skips).
    r_lo, r_hi = (int(sources[:, -2].min()), int(sources[:, -2].max()) + strides[-2] - 1) if rank > 1 else (0, 0)
    c_lo, c_hi = int(sources[:, -1].min()), int(sources[:, -1].max()) + strides[-1] - 1
    r_range = _window(r_lo, r_hi, shape[-2]) if rank > 1 else range(1)
    c_range = _window(c_lo, c_hi, shape[-1])
    c_drawn = len(c_range)
    if c_drawn > MAX_COLS:  # a wide box: draw its first columns (a PNG thousands of pixels wide helps no one)
        c_range = range(c_range.start, c_range.start + MAX_COLS)
    if len(r_range) > MAX_ROWS:
        r_range = range(r_range.start, r_range.start + MAX_ROWS)
    for key in outer_keys[:MAX_PANELS]:
        outer_in = all(0 <= k < d for k, d in zip(key, shape[:-2]))
        name = f"tensor[{', '.join(map(str, key))}, :, :]" if key else "global tensor"
        title = f"{name} {shape[-2:] if rank > 1 else shape}: box at {coords}"
        panel = Panel.empty(
            title,
            len(r_range),
            len(c_range),
            row_start=r_range.start,
            col_start=c_range.start,
            x_label=f"dim {rank - 1} (innermost)",
            y_label=f"dim {rank - 2}" if rank > 1 else "",
            group_names={
                LOADED: "copied: label = index in the shared box",
                OUTSIDE_BOX: "tensor element not in the box",
            },
            group_colors={OUTSIDE_BOX: "#f4f4f4"},
            mark_names={
                FILLED: f"box outside the tensor: {fill} fill",
                SKIPPED: "in the box's span, skipped by the element stride",
            },
        )
        for i, r in enumerate(r_range):
            for j, c in enumerate(c_range):
                pos = (*key, r, c) if rank > 1 else (c,)
                inside = outer_in and all(0 <= p < d for p, d in zip(pos, shape))
                element = index_of.get(pos)
                if element is not None:
                    panel.labels[i][j] = str(element)
                    panel.groups[i, j] = LOADED if valid[element] else -1
                    panel.marks[i, j] = 0 if valid[element] else FILLED
                elif _in_span(pos, sources, strides):
                    panel.marks[i, j] = SKIPPED
                    panel.groups[i, j] = OUTSIDE_BOX if inside else -1
                elif inside:
                    panel.groups[i, j] = OUTSIDE_BOX
        panels.append(panel)
    notes = [
        f"{tm!r}",
        f"copy coordinates {coords} (outermost first); box {tuple(tm.box_dim[::-1])}, element strides "
        f"{strides}: {int(valid.sum())} elements copied, {int(filled.sum())} filled with {fill}",
    ]
    if len(outer_keys) > MAX_PANELS:
        notes.append(f"the box spans {len(outer_keys)} outer slices; the first {MAX_PANELS} are drawn")
    if c_drawn > MAX_COLS:
        notes.append(
            f"the tensor panel draws columns {c_range.start}..{c_range.stop - 1} of {c_range.start}.."
            f"{c_range.start + c_drawn - 1}; data['sources'] has every element"
        )
    notes += chunk_notes
    data = {"coords": coords, "sources": sources, "filled": filled.reshape(counts), "box_shape": tuple(counts)}
    return Picture(
        f"TMA tile copy of a {'x'.join(map(str, shape))} {tm.dtype_name} tensor", [*panels, smem], notes, data
    )


def _smem_chunks(tm: Any, valid: np.ndarray, cols: int, fill: str) -> tuple[Panel, list[str]]:
    """The box in shared memory as 128-byte lines of 16-byte chunks, each where the swizzle stores it."""
    item = np.dtype(tm.dtype).itemsize
    row_bytes = cols * item
    nbytes = valid.size * item
    chunks = -(-nbytes // 16)
    logical = np.arange(chunks, dtype=np.int64) * 16
    # Offsets from a destination aligned to the pattern's repeat (as TMA requires for a swizzled box).
    physical = logical if tm.swizzle == "none" else tma.swizzle_addresses(logical, tm.swizzle)
    lines = -(-chunks // 8)
    drawn = min(lines, MAX_ROWS)
    how = "no swizzle" if tm.swizzle == "none" else f"the {tm.swizzle} swizzle"
    row_chunks = -(-row_bytes // 16)
    box_rows = -(-nbytes // row_bytes)
    # Colour by chunk when a box row fits a 128-byte line (the swizzle's permutation shows); else by box row.
    by_chunk = row_chunks <= 8
    if by_chunk:
        names = {c: f"chunk {c} of a box row" for c in range(row_chunks)}
    else:
        names = {r: f"box row {r}" for r in range(box_rows)} if box_rows <= MAX_COLOURS else {}
    panel = Panel.empty(
        f"shared memory with {how}: 16-byte chunks (label: box row.chunk)",
        drawn,
        min(8, chunks),
        x_label="16-byte chunk in the 128-byte line",
        y_label="128-byte line",
        group_names=names,
        mark_names={FILLED: f"holds {fill} fill (elements outside the tensor)"},
    )
    per_chunk = max(1, 16 // item)
    filled = ~valid
    for q in range(chunks):
        line, col = divmod(int(physical[q]) // 16, 8)
        if line >= drawn:
            continue
        byte = q * 16
        box_row, chunk = byte // row_bytes, (byte % row_bytes) // 16
        panel.labels[line][col] = f"{box_row}.{chunk}"
        panel.groups[line, col] = chunk if by_chunk else (box_row if names else 0)
        panel.marks[line, col] = FILLED if filled[q * per_chunk : (q + 1) * per_chunk].any() else 0
    notes = [
        f"shared memory: box row r is bytes {row_bytes}*r.. of the box; chunk c of it holds elements "
        f"{per_chunk}*c..{per_chunk}*c+{per_chunk - 1} of that row"
        + ("" if tm.swizzle == "none" else f"; show({tm.swizzle!r}) explains the permutation")
    ]
    if drawn < lines:
        notes.append(f"shared memory: the first {drawn} of {lines} lines are drawn")
    return panel, notes


def _in_span(pos: tuple[int, ...], sources: np.ndarray, strides: Sequence[int]) -> bool:
    """Whether ``pos`` lies in the box's bounding span (between strided elements) without being copied."""
    lo, hi = sources.min(axis=0), sources.max(axis=0) + np.asarray(strides) - 1
    return bool(np.all((np.asarray(pos) >= lo) & (np.asarray(pos) <= hi)))


# -------------------------------------------------------------------- im2col


def im2col_picture(tm: Any, coords: Sequence[int] | None = None, offsets: Sequence[int] | None = None) -> Picture:
    """An im2col copy: which pixel each shared-memory row reads, walking W, then H, then images."""
    where = "show(im2col tensor map)"
    rank, spatial = tm.rank, tm.rank - 2
    coords = _int_tuple("coords", (0,) * rank if coords is None else coords, rank, where)
    offsets = _int_tuple("offsets", (0,) * spatial if offsets is None else offsets, spatial, where)
    n, pix, row_ok, ch, ch_ok = tma.im2col_rows(tm, coords[::-1], offsets[::-1])
    read = pix[::-1].T  # (ppc, spatial), outermost spatial dim first (D, H, W)
    base = read - np.asarray(offsets)
    shape = tm.global_dim[::-1]  # (N, [D,] [H,] W, C)
    ppc = tm.pixels_per_column
    fill = _fill_name(tm)
    dims = "DHW"[3 - spatial :]

    # A colour per run of the walk along W (one output row of one image), so rows and pixels match up.
    run_key = [(int(n[k]), *map(int, base[k, :-1])) for k in range(ppc)]
    runs = {key: g for g, key in enumerate(dict.fromkeys(run_key))}
    groups = np.array([runs[key] for key in run_key])

    table = Panel.empty(
        f"shared memory: {ppc} rows of {tm.channels_per_pixel} channels",
        ppc,
        4,
        y_label="smem row",
        mark_names={FILLED: f"pixel outside the tensor: row is {fill} fill"},
    )
    table.col_names = ["image", f"base ({','.join(dims)})", f"reads ({','.join(dims)})", "tap offset"]
    for k in range(ppc):
        table.labels[k] = [
            str(int(n[k])),
            ",".join(map(str, base[k])),
            ",".join(map(str, read[k])),
            "+" + ",+".join(map(str, offsets)),
        ]
        table.groups[k, :] = groups[k]
        table.marks[k, :] = 0 if row_ok[k] else FILLED

    # One panel per (image, outer spatial index) plane the walk reads from; grid H x W (1 x W for NWC).
    planes = sorted({(int(n[k]), *map(int, read[k, :-2])) for k in range(ppc)})
    panels = []
    lower = tm.lower_corner[::-1]
    upper = tm.upper_corner[::-1]
    h_reads = read[:, -2] if spatial > 1 else np.zeros(ppc, np.int64)
    if spatial > 1:
        h_range = range(
            min(0, int(h_reads.min()), lower[-2] + offsets[-2]),
            max(shape[-3] - 1, int(h_reads.max()), shape[-3] - 1 + upper[-2] + offsets[-2]) + 1,
        )
    else:
        h_range = range(1)
    w_range = range(
        min(0, int(read[:, -1].min()), lower[-1] + offsets[-1]),
        max(shape[-2] - 1, int(read[:, -1].max()), shape[-2] - 1 + upper[-1] + offsets[-1]) + 1,
    )
    for plane in planes[:MAX_PANELS]:
        image_in = 0 <= plane[0] < shape[0] and all(0 <= p < d for p, d in zip(plane[1:], shape[1:-3]))
        name = f"image {plane[0]}" + "".join(f", d={p}" for p in plane[1:])
        if not image_in:
            name += " (outside the tensor)"
        panel = Panel.empty(
            f"{name} (label: smem row)",
            len(h_range),
            len(w_range),
            row_start=h_range.start,
            col_start=w_range.start,
            x_label="W",
            y_label="H" if spatial > 1 else "",
            mark_names={FILLED: f"outside the tensor: {fill} fill"},
            group_colors={len(runs): "#f4f4f4"},
            group_names={len(runs): "pixel not read by this copy"},
        )
        for i, h in enumerate(h_range):
            for j, w in enumerate(w_range):
                if image_in and (spatial == 1 or 0 <= h < shape[-3]) and 0 <= w < shape[-2]:
                    panel.groups[i, j] = len(runs)
        for k in range(ppc):
            if (int(n[k]), *map(int, read[k, :-2])) != plane:
                continue
            i, j = int(h_reads[k]) - h_range.start, int(read[k, -1]) - w_range.start
            panel.labels[i][j] = str(k) if not panel.labels[i][j] else f"{panel.labels[i][j]},{k}"
            panel.groups[i, j] = groups[k]
            panel.marks[i, j] = 0 if row_ok[k] else FILLED
        panels.append(panel)
    notes = [
        f"{tm!r}",
        f"copy at corner {coords} (N, {', '.join(dims)}, C) with tap offsets {offsets}: each smem row is one "
        f"pixel (base + offset), walking {' then '.join(dims[::-1])} inside the pixel box "
        f"[lower {tuple(lower)}, extent - 1 + upper {tuple(upper)}], then the next image",
        f"channels {int(ch[0])}..{int(ch[-1])}"
        + ("" if ch_ok.all() else f" ({int((~ch_ok).sum())} past C: {fill} fill)"),
    ]
    if len(planes) > MAX_PANELS:
        notes.append(f"the walk reads {len(planes)} image planes; the first {MAX_PANELS} are drawn")
    rows_data = np.column_stack([n, base, read, row_ok.astype(np.int64)])
    data = {
        "coords": coords,
        "offsets": offsets,
        "rows": rows_data,
        "filled_rows": ~row_ok,
        "channels": ch,
        "filled_channels": ~ch_ok,
    }
    return Picture(
        f"TMA im2col copy from a {'x'.join(map(str, shape))} {tm.dtype_name} tensor", [*panels, table], notes, data
    )


# -------------------------------------------------------------------- swizzle


def swizzle_picture(mode: str, lines: int = 8) -> Picture:
    """Where each 16-byte chunk of a box (rows of 32, 64 or 128 bytes) lands in shared memory."""
    if mode not in SWIZZLE_MODES:
        raise TensorMapError(f"show: swizzle mode {mode!r} is not one of {', '.join(map(repr, SWIZZLE_MODES))}")
    span = int(mode[:-1])
    logical = np.arange(lines * 8, dtype=np.int64) * 16  # the box's linear image, chunk by chunk
    physical = tma.swizzle_addresses(logical, mode)
    landing = ((physical % 128) // 16).reshape(lines, 8)
    box_row, chunk = logical // span, (logical % span) // 16
    per_row = span // 16
    names = {c: f"chunk {c} of a box row (bytes {16 * c}..{16 * c + 15})" for c in range(per_row)}
    before = Panel.empty(
        "box image, unswizzled (label: box row.chunk)",
        lines,
        8,
        x_label="16-byte chunk in the 128-byte line",
        y_label="line",
        group_names=names,
    )
    after = Panel.empty(
        f"in shared memory with swizzle {mode}", lines, 8, x_label="16-byte chunk in the 128-byte line", y_label="line"
    )
    for k in range(lines * 8):
        label = f"{box_row[k]}.{chunk[k]}"
        r, c = divmod(k, 8)
        before.labels[r][c] = label
        before.groups[r, c] = chunk[k]
        pr, pc = divmod(int(physical[k]) // 16, 8)
        after.labels[pr][pc] = label
        after.groups[pr, pc] = chunk[k]
    period = PERIOD_LINES[mode]
    notes = [
        f"{mode}: chunk c of 128-byte line L moves to chunk c XOR (L mod {period}); the pattern repeats "
        f"every {128 * period} bytes",
        f"box rows are {span} bytes ({per_row} chunks)"
        + ("" if span == 128 else f", so {128 // span} box rows share a 128-byte line"),
        "shared-memory addresses are absolute: a destination not aligned to the repeat shifts the phase",
    ]
    data = {"mode": mode, "landing": landing, "physical_chunk": (physical // 16).reshape(lines, 8)}
    return Picture(f"{mode} swizzle: where each 16-byte chunk lands", [before, after], notes, data)
