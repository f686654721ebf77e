"""The lowered ``range_loop`` guard on the host JIT: trip counts for zero, negative and mixed steps.

Each case runs the guard ``_loop_test`` emits inside a counting loop (capped, so a guard that never
ends shows up as the cap rather than a hang) and compares with Python's ``len(range(...))``; a zero
step runs zero iterations, as in the interp.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import llvmlite.ir as ir
import numpy as np
import pytest

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower_control import _loop_test
from cubepy.ir import I32, I64, U32

from . import hostjit

CAP = 1000


def _trip_counter(elem):
    """Host function (start, end, step) -> iterations of the lowered loop (at most CAP)."""
    op = SimpleNamespace(start=SimpleNamespace(elem=elem), inclusive=False, step=SimpleNamespace(is_constant=False))

    def body(lowering, start, end, step):
        b = lowering.builder
        fn = b.function
        before = b.block
        header, latch, done = fn.append_basic_block("h"), fn.append_basic_block("l"), fn.append_basic_block("d")
        b.branch(header)
        b.position_at_end(header)
        index = b.phi(start.type)
        count = b.phi(lt.I32)
        index.add_incoming(start, before)
        count.add_incoming(ir.Constant(lt.I32, 0), before)
        under_cap = b.icmp_signed("<", count, ir.Constant(lt.I32, CAP))
        b.cbranch(b.and_(under_cap, _loop_test(lowering, op, index, end, step)), latch, done)
        b.position_at_end(latch)
        index.add_incoming(b.add(index, step), latch)
        count.add_incoming(b.add(count, ir.Constant(lt.I32, 1)), latch)
        b.branch(header)
        b.position_at_end(done)
        return count

    return hostjit.elementwise(body, [elem, elem, elem], I32)


@pytest.mark.parametrize("elem", [I32, I64])
def test_signed_trip_counts_match_python_and_a_zero_step_runs_none(elem):
    cases = list(itertools.product([-5, -1, 0, 1, 7], [-6, 0, 1, 9], [-3, -1, 0, 1, 2]))
    start, end, step = (np.array(column, dtype=np.int32 if elem is I32 else np.int64) for column in zip(*cases))
    counts = _trip_counter(elem)(start, end, step)
    expected = [0 if s == 0 else len(range(a, b, s)) for a, b, s in cases]
    np.testing.assert_array_equal(counts, expected)


def test_unsigned_zero_step_runs_none():
    cases = [(0, 5, 0), (1, 0, 0), (3, 3, 0), (0, 5, 2), (7, 2, 1)]
    start, end, step = (np.array(column, dtype=np.uint32) for column in zip(*cases))
    np.testing.assert_array_equal(_trip_counter(U32)(start, end, step), [0, 0, 0, 3, 0])
