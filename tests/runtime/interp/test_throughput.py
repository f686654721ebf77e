"""The interp stays fast on wide grids: a 2**20-lane vector add runs well under a second."""

from __future__ import annotations

import time

import numpy as np

from cubepy.runtime import interp
from cubepy.runtime.bindings import Bindings, BufferBinding
from cubepy.runtime.handle import Handle

from .test_control_flow import vector_add_kernel


def test_vector_add_of_a_million_lanes_is_fast():
    n = 1 << 20
    kernel = vector_add_kernel(cube_dim=(256, 1, 1))
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    handles = [Handle(None, array, np.float32, (n,)) for array in (x.copy(), x.copy(), np.zeros(n, np.float32))]
    bindings = Bindings([BufferBinding(h, 1, (n,), (1,)) for h in handles])
    interp.run(kernel, (n // 256, 1, 1), bindings)  # warm: prepares the program
    start = time.perf_counter()
    interp.run(kernel, (n // 256, 1, 1), bindings)
    elapsed = time.perf_counter() - start
    np.testing.assert_array_equal(handles[2].storage, x + x)
    assert elapsed < 1.0, f"vector add of 2**20 lanes took {elapsed:.3f} s"
