"""A plane collective the whole plane reaches is the plain full-mask butterfly; a divergent one tests activemask.

The expected PTX is written as ``# CHECK`` comments in each kernel, matched by ``filecheck``.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, UNIT_POS, Array, cube, f32, u32
from tests.filecheck import filecheck


@cube(launch=True)
def uniform_sum(x: Array[f32], out: Array[f32]):
    # CHECK-NOT: activemask
    # CHECK: shfl.sync.bfly.b32 {{%r[0-9]+}}, {{%r[0-9]+}}, 16, 31, -1;
    # CHECK: shfl.sync.bfly.b32 {{%r[0-9]+}}, {{%r[0-9]+}}, 1, 31, -1;
    # CHECK-NOT: activemask
    # CHECK-NOT: shfl.sync.idx
    out[ABSOLUTE_POS] = cp.plane_sum(x[ABSOLUTE_POS])


@cube(launch=True)
def divergent_sum(x: Array[f32], out: Array[f32]):
    # CHECK: activemask.b32
    # CHECK: shfl.sync
    if UNIT_POS < 20:
        out[ABSOLUTE_POS] = cp.plane_sum(x[ABSOLUTE_POS])


@cube(launch=True)
def guarded_then_sum(x: Array[f32], out: Array[f32], n: u32):
    # CHECK: activemask.b32
    if ABSOLUTE_POS >= n:
        return
    out[ABSOLUTE_POS] = cp.plane_sum(x[ABSOLUTE_POS])


def _ptx(kernel, *scalars):
    client = cp.client("interp")
    args = [cp.ArrayArg(client.zeros(64, f32)), cp.ArrayArg(client.zeros(64, f32)), *scalars]
    return kernel.compile(cp.CubeDim(64), *args, unchecked=True).ptx


@pytest.mark.parametrize(
    "kernel, scalars",
    [(uniform_sum, ()), (divergent_sum, ()), (guarded_then_sum, (cp.ScalarArg(50, u32),))],
    ids=["uniform", "divergent", "after-early-return"],
)
def test_ptx_of_plane_sum(kernel, scalars, tmp_path):
    filecheck(kernel, _ptx(kernel, *scalars), tmp_path)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_results_match_numpy_with_and_without_the_active_mask(runtime):
    client = cp.client(runtime)
    x = np.arange(64, dtype=np.float32) * 0.5
    planes = x.reshape(2, 32)
    for kernel, scalars, expected in [
        (uniform_sum, (), np.repeat(planes.sum(axis=1), 32)),
        (divergent_sum, (), np.where(np.arange(64) < 20, planes[0, :20].sum(), -1.0)),
        (
            guarded_then_sum,
            (cp.ScalarArg(50, u32),),
            np.concatenate([np.repeat(planes[0].sum(), 32), np.repeat(planes[1, :18].sum(), 18), np.full(14, -1.0)]),
        ),
    ]:
        hx, ho = client.create(x), client.create(np.full(64, -1.0, np.float32))
        kernel.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(hx), cp.ArrayArg(ho), *scalars)
        np.testing.assert_array_equal(client.read(ho), expected.astype(np.float32), err_msg=kernel.name)
