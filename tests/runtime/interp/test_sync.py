"""Barriers in lockstep: divergent ones are sanitizer errors, early-returned units do not count."""

from __future__ import annotations

import numpy as np
import pytest

from cubepy.errors import SanitizerError
from cubepy.ir import ops

from .irb import U32, Builder, bi, c, launch


def guarded_sync_kernel(sync: str, bound: int, early_return: bool = False):
    """Units below ``bound`` reach a barrier (others skip it or, with early_return, returned before)."""
    b = Builder()
    out = b.buffer(U32)
    below = b.compare("lt", bi("unit_pos"), c(bound))
    if early_return:
        with b.if_(b.unary("not", below)):
            b.return_()
        getattr(b, sync)()
    else:
        with b.if_(below):
            getattr(b, sync)()
    b.store(out, bi("absolute_pos"), c(1))
    return b.kernel((64, 1, 1))


@pytest.mark.parametrize("sync", ["sync_cube", "sync_plane"])
def test_divergent_barrier_is_reported_under_sanitize(sync):
    kernel = guarded_sync_kernel(sync, 40)
    with pytest.raises(SanitizerError, match=f"divergent {sync}") as info:
        launch(kernel, 2, [np.zeros(128, np.uint32)], sanitize=True)
    assert "user_kernel.py:42" in str(info.value)
    # Without the sanitizer execution goes on, as lockstep allows.
    (out,) = launch(kernel, 2, [np.zeros(128, np.uint32)])
    assert out.sum() == 128


def test_barrier_of_whole_planes_is_not_divergent_for_sync_plane():
    # Units 0..31 form a whole plane: sync_plane there is fine, sync_cube is not.
    launch(guarded_sync_kernel("sync_plane", 32), 1, [np.zeros(64, np.uint32)], sanitize=True)
    with pytest.raises(SanitizerError):
        launch(guarded_sync_kernel("sync_cube", 32), 1, [np.zeros(64, np.uint32)], sanitize=True)


@pytest.mark.parametrize("sync", ["sync_cube", "sync_plane"])
def test_units_that_returned_do_not_count(sync):
    (out,) = launch(guarded_sync_kernel(sync, 40, early_return=True), 2, [np.zeros(128, np.uint32)], sanitize=True)
    np.testing.assert_array_equal(out, np.tile(np.arange(64) < 40, 2))


def test_barrier_reached_by_no_unit_of_a_cube_is_fine():
    b = Builder()
    with b.if_(b.compare("eq", bi("cube_pos"), c(0))):
        b.sync_cube()
        b.emit(ops.SyncProxyShared())
    launch(b.kernel((64, 1, 1)), 3, sanitize=True)
