"""Read-only, unaliased buffers load through the non-coherent path (``ld.global.nc``); aliased or written ones do not.

Whether a buffer is unaliased is decided per launch (``Kernel.compilation_args``): no other buffer or
tensor-map argument may overlap its memory.  The decision is part of the cache key.
"""

from __future__ import annotations

import re

import numpy as np

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, f32
from cubepy.frontend.argument_facts import mark_overlaps
from cubepy.frontend.buffer_launch import BufferCompilationArg


@cp.cube(launch=True)
def saxpy(a: f32, x: Array[f32], y: Array[f32], out: Array[f32]):
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = a * x[ABSOLUTE_POS] + y[ABSOLUTE_POS]


def test_read_only_unaliased_inputs_use_the_non_coherent_path():
    client = cp.client("interp")
    x, y, out = (client.zeros((64,), np.float32) for _ in range(3))
    ptx = saxpy.compile(cp.CubeDim(64), 2.0, cp.ArrayArg(x), cp.ArrayArg(y), cp.ArrayArg(out)).ptx
    data_loads = re.findall(r"ld\.global(\.nc)?\.b32\s+%r\d+, \[%rd\d+\];", ptx)  # x and y (not the info words)
    assert data_loads == [".nc", ".nc"]


def test_an_input_aliasing_the_output_is_read_coherently():
    client = cp.client("interp")
    x, y = client.zeros((64,), np.float32), client.zeros((64,), np.float32)
    ptx = saxpy.compile(cp.CubeDim(64), 2.0, cp.ArrayArg(x), cp.ArrayArg(y), cp.ArrayArg(y)).ptx
    plain = [line for line in ptx.splitlines() if re.search(r"ld\.global\.b32", line)]
    cached = [line for line in ptx.splitlines() if re.search(r"ld\.global\.nc\.b32\s+%r\d+, \[%rd\d+\];", line)]
    assert len(plain) == 1 and len(cached) == 1  # y (also the output) plainly, x through the read-only path


def test_the_in_place_launch_still_computes_what_numpy_does():
    client = cp.client("interp")
    x, y = np.arange(64, dtype=np.float32), np.ones(64, np.float32)
    hx, hy = client.create(x), client.create(y)
    saxpy.launch(client, 1, 64, 2.0, cp.ArrayArg(hx), cp.ArrayArg(hy), cp.ArrayArg(hy))
    np.testing.assert_array_equal(client.read(hy), 2 * x + y)


def test_overlaps_are_found_by_byte_range_within_one_storage():
    client = cp.client("interp")
    whole = client.zeros((16,), np.float32)
    other = client.zeros((16,), np.float32)
    comp = BufferCompilationArg("f32", 1)
    args = (cp.ArrayArg(whole[0:8]), cp.ArrayArg(whole[8:16]), cp.ArrayArg(other))
    assert [c.exclusive for c in mark_overlaps((comp, comp, comp), args)] == [True, True, True]
    args = (cp.ArrayArg(whole[0:9]), cp.ArrayArg(whole[8:16]), cp.ArrayArg(other))
    assert [c.exclusive for c in mark_overlaps((comp, comp, comp), args)] == [False, False, True]
    tensor = client.zeros((4, 4), np.float32)
    tmap = cp.TensorMapArg.tiled(cp.TensorArg(tensor), (4, 4))
    args = (cp.TensorArg(tensor), tmap)
    assert [getattr(c, "exclusive", None) for c in mark_overlaps((comp, "map"), args)] == [False, None]
