"""Checked mode that LLVM can optimize: per-axis unit ranges and the bound the kernel's own guard reads."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, UNIT_POS_X, UNIT_POS_Y, Array, SharedMemory, Tensor, cube, f32


@cube(launch=True, launch_unchecked=True)
def transpose_tile(out: Array[f32]):
    tile = SharedMemory[f32](256)
    tile[UNIT_POS_Y * 16 + UNIT_POS_X] = f32(UNIT_POS)
    cp.sync_cube()
    value = tile[UNIT_POS_X * 16 + UNIT_POS_Y]
    if UNIT_POS < out.len():
        out[UNIT_POS] = value


def _instructions(ptx: str) -> list[str]:
    return [line.strip() for line in ptx.splitlines() if line.startswith("\t") and not line.strip().startswith(".")]


def _compile(unchecked: bool):
    out = cp.ArrayArg(cp.client("interp").zeros(256, f32))
    return transpose_tile.compile(cp.CubeDim(16, 16), out, unchecked=unchecked)


def test_unit_reads_carry_their_axis_range():
    llvm = _compile(unchecked=False).llvm
    ranges = dict(re.findall(r"(![0-9]+) = !\{ (i32 0, i32 \d+) \}", llvm))
    for axis, bound in (("x", 16), ("y", 16), ("z", 1)):
        call = re.search(rf"sreg\.tid\.{axis}\"\(\), !range (![0-9]+)", llvm)
        assert call is not None and ranges[call.group(1)] == f"i32 0, i32 {bound}", llvm


def test_checked_tile_costs_no_more_compares_or_loads_than_unchecked():
    """Shared accesses are provably in bounds; the global check is the kernel's own ``len()`` guard."""
    checked, unchecked = _instructions(_compile(False).ptx), _instructions(_compile(True).ptx)

    def count(body: list[str], prefix: str) -> int:
        return sum(i.startswith(prefix) for i in body)

    for prefix in ("setp", "ld.global", "ld.shared", "st.shared"):
        assert count(checked, prefix) == count(unchecked, prefix), (prefix, checked)
    assert len(checked) <= len(unchecked) + 1  # the merged guard may be laid out with one more `bra`


@cube(launch=True)
def read_all(t: Tensor[f32], out: Array[f32]):
    out[UNIT_POS] = t[UNIT_POS]


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_view_shorter_than_its_allocation_keeps_the_allocation_bound(runtime):
    """``len()`` 4, ``buffer_len()`` 8: checked reads stay bounded by the allocation, as before."""
    client = cp.client(runtime)
    data = np.arange(8, dtype=np.float32) + 1
    view = cp.TensorArg.from_raw_parts(client.create(data), (1,), (4,))
    out = client.zeros(12, f32)
    read_all.launch(client, cp.CubeCount(1), cp.CubeDim(12), view, cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), np.concatenate([data, np.zeros(4, np.float32)]))
    params = read_all.compile(cp.CubeDim(12), view, cp.ArrayArg(out)).definition.params
    assert [p.len_is_buffer_len for p in params] == [False, True]
