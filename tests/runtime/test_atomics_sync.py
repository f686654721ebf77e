"""CUDA's atomicInc/atomicDec, fences, predicate barriers and plane matches (numba-cuda's names)."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import u32


@cp.cube(launch=True)
def inc_dec(counter: cp.Array[cp.Atomic[u32]], olds: cp.Array[u32], limit: u32, dec: cp.Comptime[bool]):
    u = cp.UNIT_POS
    if dec:
        olds[u] = counter[0].fetch_dec(limit)
    else:
        olds[u] = counter[0].fetch_inc(limit)


def _inc(old: int, limit: int) -> int:
    return 0 if old >= limit else old + 1  # CUDA's atomicInc


def _dec(old: int, limit: int) -> int:
    return limit if old == 0 or old > limit else old - 1  # CUDA's atomicDec


@pytest.mark.parametrize("dec, start, limit", [(False, 0, 10), (False, 50, 10), (False, 7, 0), (True, 3, 5),
                                               (True, 100, 10), (True, 0, 0)])
def test_fetch_inc_and_dec_wrap_like_cuda(client, dec, start, limit):
    counter = client.create(np.array([start], np.uint32))
    olds = client.zeros((64,), np.uint32)
    inc_dec.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(counter), cp.ArrayArg(olds), limit, dec)
    step = _dec if dec else _inc
    value, expected_olds = start, []
    for _ in range(64):  # any order of the 64 updates gives the same sequence of old values
        expected_olds.append(value)
        value = step(value, limit)
    assert client.read(counter)[0] == value
    assert sorted(client.read(olds).tolist()) == sorted(expected_olds)


@pytest.mark.ptxas
def test_fetch_inc_and_dec_are_the_hardware_instructions():
    client = cp.client("interp")
    args = (cp.ArrayArg(client.zeros((1,), np.uint32)), cp.ArrayArg(client.zeros((64,), np.uint32)), 10)
    assert "atom.global.inc.u32" in inc_dec.compile((64, 1, 1), *args, False).ptx
    assert "atom.global.dec.u32" in inc_dec.compile((64, 1, 1), *args, True).ptx


@cp.cube
def inc_of_i32(counter: cp.Array[cp.Atomic[cp.i32]]):
    counter[0].fetch_inc(5)


def test_fetch_inc_counts_in_u32_only():
    with pytest.raises(cp.VerifyError, match=r"atomic_inc counts in u32"):
        cp.testing.expand(inc_of_i32, cp.Array[cp.Atomic[cp.i32]])
