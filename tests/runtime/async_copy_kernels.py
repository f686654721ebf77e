"""Kernels with cp.async copies shared by the interp and cpu tests, and their numpy references."""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import UNIT_POS, Array, Line, f32, u32

UNITS = 32
TILE = 4 * UNITS  # each unit copies 4 f32 (16 bytes) of a tile


@cp.cube(launch=True)
def double_buffered(a: Array[f32], out: Array[f32], tiles: u32, variant: cp.Comptime[str]):
    """Sum over tiles of another unit's element, with the next tile's copy in flight during this tile."""
    smem = cp.SharedMemory[f32](256)
    u = UNIT_POS
    acc = f32(0)
    cp.memcpy_async(a[u * 4 : u * 4 + 4], smem[u * 4 : u * 4 + 4])  # FIRST
    cp.async_commit_group()
    for t in range(tiles):
        if t + 1 < tiles:
            s = ((t + 1) % 2) * 128 + u * 4
            g = (t + 1) * 128 + u * 4
            cp.memcpy_async(a[g : g + 4], smem[s : s + 4])  # COPY
            cp.async_commit_group()
            if variant != "nowait":
                cp.async_wait_group(1)
        else:
            if variant == "correct":
                cp.async_wait_group(0)
            elif variant == "wait1":
                cp.async_wait_group(1)  # wrong: the last tile's group is the only one in flight
        cp.sync_cube()
        acc += smem[(t % 2) * 128 + (u * 4 + 5) % 128]  # READ
        cp.sync_cube()
    out[u] = acc


@cp.cube(launch=True)
def pipelined(a: Array[f32], out: Array[f32], tiles: u32, stages: cp.Comptime[int]):
    """The same sum through ``cp.Pipeline(stages)`` (stages tiles in flight)."""
    smem = cp.SharedMemory[f32](128 * stages)
    pipe = cp.Pipeline(stages)
    u = UNIT_POS
    acc = f32(0)
    for p in range(stages - 1):  # the prologue fills every stage but one
        if p < tiles:
            pipe.producer_acquire()
            pipe.memcpy_async(a[p * 128 + u * 4 : p * 128 + u * 4 + 4], smem[p * 128 + u * 4 : p * 128 + u * 4 + 4])
            pipe.producer_commit()
    for t in range(tiles):
        ahead = t + stages - 1
        if ahead < tiles:
            s = (ahead % stages) * 128 + u * 4
            pipe.producer_acquire()
            pipe.memcpy_async(a[ahead * 128 + u * 4 : ahead * 128 + u * 4 + 4], smem[s : s + 4])
            pipe.producer_commit()
        pipe.consumer_wait()
        cp.sync_cube()
        acc += smem[(t % stages) * 128 + (u * 4 + 5) % 128]
        cp.sync_cube()
        pipe.consumer_release()
    out[u] = acc


@cp.cube(launch=True)
def ragged_rows(a: Array[f32], out: Array[f32]):
    """Each unit copies its 8 elements of ``a`` (fewer at the end: zero fill) and writes them back out."""
    smem = cp.SharedMemory[f32](8 * 32)
    u = UNIT_POS
    cp.memcpy_async(a[u * 8 : u * 8 + 8], smem[u * 8 : u * 8 + 8])
    cp.async_commit_group()
    cp.async_wait_group(0)
    for k in range(8):
        out[u * 8 + k] = smem[u * 8 + k]


@cp.cube(launch=True)
def ragged_lines(a: Array[Line[f32]], out: Array[Line[f32]]):
    """Each unit copies its 32 bytes of lines of ``a`` (two 16-byte chunks; zero fill past the end) and writes
    them out: 2 lines of 4 f32 or 4 lines of 2 (the line size is the launch's)."""
    per_unit = 8 // a.line_size
    smem = cp.SharedMemory[Line[f32, a.line_size]](per_unit * 32)
    u = UNIT_POS
    cp.memcpy_async(a[u * per_unit : u * per_unit + per_unit], smem[u * per_unit : u * per_unit + per_unit])
    cp.async_commit_group()
    cp.async_wait_group(0)
    for k in range(per_unit):
        out[u * per_unit + k] = smem[u * per_unit + k]


def run_ragged_lines(client, lines: int, width: int = 4) -> np.ndarray:
    """Launch ``ragged_lines`` (checked) on ``lines`` lines of ``width`` f32 (4 or 2); the 256 output items."""
    a = client.create(np.arange(1, width * lines + 1, dtype=np.float32))
    out = client.zeros((256,), np.float32)
    args = (cp.ArrayArg(a, line_size=width), cp.ArrayArg(out, line_size=width))
    ragged_lines.launch(client, cp.CubeCount(1), cp.CubeDim(UNITS), *args)
    return client.read(out)


@cp.cube(launch=True)
def one_chunk_from(a: Array[f32], out: Array[f32], start: u32):
    """Unit 0 copies the 16-byte chunk ``a[start : start + 4]`` (zero-filled past the end) into ``out[0:4]``."""
    smem = cp.SharedMemory[f32](4)
    if UNIT_POS == 0:
        cp.memcpy_async(a[start : start + 4], smem)
        cp.async_commit_group()
        cp.async_wait_group(0)
        for k in range(4):
            out[k] = smem[k]


@cp.cube(launch=True)
def read_after_wait_without_sync(a: Array[f32], out: Array[f32]):
    smem = cp.SharedMemory[f32](128)
    u = UNIT_POS
    cp.memcpy_async(a[u * 4 : u * 4 + 4], smem[u * 4 : u * 4 + 4])  # COPY
    cp.async_commit_group()
    cp.async_wait_group(0)
    out[u] = smem[(u * 4 + 4) % 128]  # READ: another unit's bytes, no sync_cube after its wait


def summed_reference(a: np.ndarray, tiles: int) -> np.ndarray:
    """What ``double_buffered`` and ``pipelined`` compute, in numpy (f32 additions in tile order)."""
    u = np.arange(UNITS)
    acc = np.zeros(UNITS, dtype=np.float32)
    for t in range(tiles):
        acc = (acc + a[t * TILE + (u * 4 + 5) % TILE]).astype(np.float32)
    return acc


def tiles_input(tiles: int) -> np.ndarray:
    """Distinct small integers (exact in f32 sums)."""
    return ((np.arange(tiles * TILE) * 7) % 97).astype(np.float32)


def run_double_buffered(client, tiles: int, variant: str = "correct") -> np.ndarray:
    """Launch ``double_buffered`` on one cube; its 32 results."""
    a = client.create(tiles_input(tiles))
    out = client.zeros((UNITS,), np.float32)
    double_buffered.launch(
        client, cp.CubeCount(1), cp.CubeDim(UNITS), cp.ArrayArg(a), cp.ArrayArg(out), cp.ScalarArg(tiles, u32), variant
    )
    return client.read(out)


def run_pipelined(client, tiles: int, stages: int) -> np.ndarray:
    """Launch ``pipelined`` on one cube; its 32 results."""
    a = client.create(tiles_input(tiles))
    out = client.zeros((UNITS,), np.float32)
    pipelined.launch(
        client, cp.CubeCount(1), cp.CubeDim(UNITS), cp.ArrayArg(a), cp.ArrayArg(out), cp.ScalarArg(tiles, u32), stages
    )
    return client.read(out)


def run_ragged(client, n: int) -> np.ndarray:
    """Launch ``ragged_rows`` (checked) on ``n`` inputs; the 256 outputs."""
    a = client.create(np.arange(1, n + 1, dtype=np.float32))
    out = client.zeros((256,), np.float32)
    ragged_rows.launch(client, cp.CubeCount(1), cp.CubeDim(UNITS), cp.ArrayArg(a), cp.ArrayArg(out))
    return client.read(out)
