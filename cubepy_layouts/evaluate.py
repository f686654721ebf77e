"""Evaluate a layout on the host by running its own ``@cube`` methods on the interp runtime.

``evaluate(launch, coords)`` launches a small kernel that calls ``shape()`` and
``to_source_pos_checked(pos)`` of the layout ``launch`` describes, one unit per coordinate, so what it
returns is what a kernel using the layout computes.  A first launch probes the layout: the rank and
types of its coordinates (those of ``shape()``) and how many values its source position holds.
"""

# No `from __future__ import annotations`: kernel annotations name closure variables (the layout type).

import functools

import attrs
import numpy as np

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, cube, i64, u32
from cubepy_layouts.layout import layout_type_of

__all__ = ["LayoutProbe", "evaluate", "probe"]

UNITS = 256
PROBE_SLOTS = 64


def _flatten(value) -> list:
    if isinstance(value, tuple):
        return [leaf for item in value for leaf in _flatten(item)]
    return [value]


def _top_level_of_leaves(value) -> list[int]:
    """For each leaf of a (nested) tuple, the index of the top-level item holding it (-1: not a tuple)."""
    if not isinstance(value, tuple):
        return [-1]
    return [i for i, item in enumerate(value) for _ in _flatten(item)]


def _is_bool(value) -> bool:
    if isinstance(value, bool):
        return True
    var = getattr(value, "var", None)
    return var is not None and str(var.type) == "bool"


@cube
def _as_i64(value):
    if cp.comptime(_is_bool(value)):
        return i64(cp.select(value, 1, 0))
    return i64(value)


@cube
def _position(coords, base, shape):
    """The coordinates at ``coords[base..]``, each cast to the type of the matching ``shape()`` value."""
    leaves = _flatten(shape)
    values = tuple(_cast_like(coords[base + i], leaves[i]) for i in range(len(leaves)))
    if cp.comptime(isinstance(shape, tuple)):
        return values
    return values[0]


def _cast_like(value, like):
    elem = getattr(like, "elem", None)
    return value.cast(elem if elem is not None else u32)


@functools.cache
def _probe_kernel(layout_type):
    @cube(launch=True)
    def probe_layout(coords: Array[i64], out: Array[i64], layout: layout_type):
        if ABSOLUTE_POS == 0:
            shape = layout.shape()
            leaves = _flatten(shape)
            rank = len(leaves)
            source, _ok = layout.to_source_pos_checked(_position(coords, 0, shape))
            source_leaves = _flatten(source)
            tops = _top_level_of_leaves(source)
            out[0] = i64(rank)
            out[1] = i64(len(source_leaves))
            out[2] = i64(1 if cp.comptime(isinstance(shape, tuple)) else 0)
            for i in cp.unroll(range(rank)):
                out[3 + i] = _as_i64(leaves[i])
            for i in cp.unroll(range(len(tops))):
                out[3 + rank + i] = i64(tops[i])

    return probe_layout


@functools.cache
def _evaluate_kernel(layout_type, rank: int, n_source: int):
    width = n_source + 1

    @cube(launch=True)
    def evaluate_layout(coords: Array[i64], out: Array[i64], layout: layout_type, count: u32):
        if ABSOLUTE_POS < count:
            pos = _position(coords, ABSOLUTE_POS * rank, layout.shape())
            source, ok = layout.to_source_pos_checked(pos)
            leaves = _flatten(source)
            for i in cp.unroll(range(n_source)):
                out[ABSOLUTE_POS * width + i] = _as_i64(leaves[i])
            out[ABSOLUTE_POS * width + n_source] = _as_i64(ok)

    return evaluate_layout


@attrs.frozen
class LayoutProbe:
    """What a layout's ``shape()`` says, and how its source positions are built."""

    layout_type: type
    shape: tuple[int, ...]
    tuple_coords: bool  # coordinates are a tuple (else one scalar)
    source_groups: tuple[int, ...]  # per source value: its top-level item (-1: the source is one scalar)


def _client(client):
    return client if client is not None else cp.client("interp")


def probe(launch, client=None) -> LayoutProbe:
    """The shape and source structure of the layout ``launch`` (a ``SomeLayout.Launch(...)``)."""
    layout_type = layout_type_of(launch)
    client = _client(client)
    out = client.zeros((PROBE_SLOTS,), np.int64)
    coords = client.zeros((PROBE_SLOTS,), np.int64)
    _probe_kernel(layout_type).launch(
        client, cp.CubeCount(1), cp.CubeDim(1), cp.ArrayArg(coords), cp.ArrayArg(out), launch
    )
    values = client.read(out).tolist()
    rank, n_source, is_tuple = values[0], values[1], bool(values[2])
    shape = tuple(values[3 : 3 + rank])
    groups = tuple(values[3 + rank : 3 + rank + n_source])
    return LayoutProbe(layout_type, shape, is_tuple, groups)


def evaluate(launch, coords, client=None, layout_probe: LayoutProbe | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``to_source_pos_checked`` at each row of ``coords`` (n, rank): sources (n, values) and in-bounds (n,)."""
    layout_probe = layout_probe or probe(launch, client)
    client = _client(client)
    rank = len(layout_probe.shape)
    n_source = len(layout_probe.source_groups)
    coords = np.asarray(coords, dtype=np.int64).reshape(-1, rank)
    count = len(coords)
    if count == 0:
        return np.zeros((0, n_source), np.int64), np.zeros(0, bool)
    out = client.zeros((count * (n_source + 1),), np.int64)
    kernel = _evaluate_kernel(layout_probe.layout_type, rank, n_source)
    kernel.launch(
        client,
        cp.CubeCount(-(-count // UNITS)),
        cp.CubeDim(UNITS),
        cp.ArrayArg(client.create(coords.ravel())),
        cp.ArrayArg(out),
        launch,
        count,
    )
    table = client.read(out).reshape(count, n_source + 1)
    return table[:, :n_source], table[:, n_source].astype(bool)
