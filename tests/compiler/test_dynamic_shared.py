"""Kernels over 48 KiB of shared memory get it as one dynamic (extern) array; smaller ones stay static."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_POS, UNIT_POS, Array, Comptime, SharedMemory, cube, f32


@cube(launch=True)
def reverse_rows(data: Array[f32], out: Array[f32], n: Comptime[int]):
    """Each cube reverses its row of ``n`` floats through shared memory (plus a small second array)."""
    small = SharedMemory[f32](256)
    row = SharedMemory[f32](n)
    for i in range(UNIT_POS, n, 256):
        row[i] = data[CUBE_POS * n + i]
    small[UNIT_POS] = f32(1.0)
    cp.sync_cube()
    for i in range(UNIT_POS, n, 256):
        out[CUBE_POS * n + i] = row[n - 1 - i] + small[UNIT_POS]


def _args(client, n):
    x = np.arange(2 * n, dtype=np.float32)
    return x, (cp.ArrayArg(client.create(x)), cp.ArrayArg(client.empty((2 * n,), np.float32)), n)


def test_large_shared_memory_is_dynamic(client):
    n = 16384  # 64 KiB, over the 48 KiB static limit
    x, args = _args(client, n)
    compiled = reverse_rows.compile(cp.CubeDim(256), *args)
    # 256 f32 (1 KiB) then the row at the next 16-byte boundary: 1024 + 65536 bytes.
    assert compiled.dynamic_shared_bytes == 1024 + 4 * n
    assert ".extern .shared .align 1024 .b8 dynamic_shared[];" in compiled.ptx
    reverse_rows.launch(client, cp.CubeCount(2), cp.CubeDim(256), *args)
    np.testing.assert_array_equal(client.read(args[1].handle), x.reshape(2, n)[:, ::-1].ravel() + 1.0)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not found")
def test_ptxas_accepts_dynamic_and_reports_no_static_shared(client):
    _, args = _args(client, 16384)
    compiled = reverse_rows.compile(cp.CubeDim(256), *args)
    assert compiled.cubin
    assert compiled.resources.shared_bytes == 0


def test_small_shared_memory_stays_static(client):
    _, args = _args(client, 1024)
    compiled = reverse_rows.compile(cp.CubeDim(256), *args)
    assert compiled.dynamic_shared_bytes == 0
    assert ".extern .shared" not in compiled.ptx
    if compiled.resources is not None:
        assert compiled.resources.shared_bytes == 1024 + 4 * 1024
