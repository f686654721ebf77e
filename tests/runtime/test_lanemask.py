"""The ``cp.LANEMASK_*`` values (CUDA's ``%lanemask_*``) per lane, against masks built by hand."""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import u32


@cp.cube(launch=True)
def lanemasks(out: cp.Tensor[u32]):
    u = cp.UNIT_POS
    out[u, 0] = cp.LANEMASK_EQ
    out[u, 1] = cp.LANEMASK_LT
    out[u, 2] = cp.LANEMASK_LE
    out[u, 3] = cp.LANEMASK_GT
    out[u, 4] = cp.LANEMASK_GE


@cp.cube(launch=True)
def compact(flags: cp.Array[u32], rank: cp.Array[u32]):
    u = cp.UNIT_POS
    keep = flags[u] != 0
    ballot = cp.plane_ballot(keep)[0]
    if keep:
        rank[u] = cp.count_ones(ballot & cp.LANEMASK_LT)  # the classic stream-compaction slot


def test_each_lane_gets_its_masks(client):
    out = client.zeros((64, 5), np.uint32)
    lanemasks.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.TensorArg(out))
    full = 0xFFFFFFFF
    expected = [
        [
            1 << (u % 32),
            (1 << (u % 32)) - 1,
            (2 << (u % 32)) - 1 & full,
            ~((2 << (u % 32)) - 1) & full,
            ~((1 << (u % 32)) - 1) & full,
        ]
        for u in range(64)
    ]
    np.testing.assert_array_equal(client.read(out), np.array(expected, np.uint64).astype(np.uint32))


def test_ballot_and_lanemask_lt_give_each_kept_lane_its_rank(client):
    flags = (np.arange(32) % 3 != 1).astype(np.uint32)
    rank = client.create(np.full(32, 99, np.uint32))
    compact.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(client.create(flags)), cp.ArrayArg(rank))
    expected = np.where(flags != 0, np.cumsum(flags) - 1, 99)
    np.testing.assert_array_equal(client.read(rank), expected)
