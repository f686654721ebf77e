"""``cp.range(..., unroll=N)``: the IR carries the hint, the PTX keeps the loop rolled or LLVM unrolls it, and
every runtime still runs it as ``range``."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, f32
from cubepy.errors import CubeError
from cubepy.ir import ops
from cubepy.ir import walk as walk_ir


@cp.cube(launch=True)
def strided_sum(x: Array[f32], out: Array[f32]):
    acc = f32(0)
    for c in cp.range(UNIT_POS, x.len(), 32, unroll=1):
        acc += x[c]
    out[UNIT_POS] = acc


@cp.cube(launch=True)
def strided_sum_by_four(x: Array[f32], out: Array[f32]):
    acc = f32(0)
    for c in cp.range(UNIT_POS, x.len(), 32, unroll=4):
        acc += x[c]
    out[UNIT_POS] = acc


@cp.cube(launch=True)
def strided_sum_plain(x: Array[f32], out: Array[f32]):
    acc = f32(0)
    for c in range(UNIT_POS, x.len(), 32):
        acc += x[c]
    out[UNIT_POS] = acc


def _expected(x: np.ndarray) -> np.ndarray:
    padded = np.zeros(-(-x.size // 32) * 32, np.float32)
    padded[: x.size] = x
    return padded.reshape(-1, 32).sum(axis=0, dtype=np.float32)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize("kernel", [strided_sum, strided_sum_by_four])
def test_a_hinted_loop_runs_as_range(runtime, kernel):
    client = cp.client(runtime)
    x = np.arange(1000, dtype=np.float32) % 7
    out = client.zeros((32,), np.float32)
    kernel.launch(client, 1, 32, cp.ArrayArg(client.create(x)), cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), _expected(x))  # small integers: exact in any order


def _compile(kernel):
    client = cp.client("interp")
    return kernel.compile(cp.CubeDim(32), cp.ArrayArg(client.zeros(64, f32)), cp.ArrayArg(client.zeros(32, f32)))


def test_the_ir_carries_the_hint_and_prints_it():
    compiled = _compile(strided_sum)
    loops = [i.operation for i in walk_ir(compiled.definition.body) if isinstance(i.operation, ops.RangeLoop)]
    assert [loop.unroll for loop in loops] == [1]
    assert re.search(r"range_loop .* step \S+ unroll 1", compiled.ir)


@pytest.mark.ptxas
def test_unroll_1_keeps_the_loop_rolled_for_ptxas():
    hinted, plain = _compile(strided_sum), _compile(strided_sum_plain)
    assert hinted.ptx.count('.pragma "nounroll";') == 1
    assert ".pragma" not in plain.ptx
    assert hinted.cubin and plain.cubin  # ptxas accepts both


def test_unroll_4_unrolls_the_loop_four_times_in_llvm():
    ptx = _compile(strided_sum_by_four).ptx
    loop = ptx[ptx.index('.pragma "nounroll";') :]  # LLVM marks the unrolled loop: ptxas unrolls no further
    loop = loop[: re.search(r"\n\$L__BB\d+_\d+:", loop).start()]  # up to the next label
    assert loop.count("ld.global.nc.b32") == 4, loop  # four loads per trip (read-only, unaliased: .nc)


@pytest.mark.parametrize("bad", [0, -2, True, 2.5])
def test_unroll_must_be_a_positive_int(bad):
    @cp.cube(launch=True)
    def bad_hint(out: Array[f32]):
        for c in cp.range(0, 8, unroll=bad):
            out[c] = f32(1)

    client = cp.client("interp")
    with pytest.raises(CubeError, match=r"cp.range: unroll must be a positive int or None"):
        bad_hint.launch(client, 1, 1, cp.ArrayArg(client.zeros(8, f32)))


def test_outside_a_kernel_cp_range_is_range():
    assert list(cp.range(1, 10, 3, unroll=1)) == [1, 4, 7]
