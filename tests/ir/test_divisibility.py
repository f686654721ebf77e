"""Integer scalars specialized on divisibility by 16, and what the range analysis makes of it: a ``min`` the
trailing zeros and a branch's order pin to one value becomes that value (``cubepy.ir.ranges``)."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, f32, i32, u32
from cubepy.ir import ops
from cubepy.ir.printer import format_kernel
from cubepy.ir.scope import walk


@cp.cube(launch=True, launch_unchecked=True)
def chunk_lengths(out: Array[u32], cols: u32):
    """out[u] = the items of the 8-item chunk at column 8u inside a row of ``cols``: 8, the tail, or 0."""
    col = UNIT_POS * 8
    valid = u32(0)
    if col < cols:
        valid = cp.min(cols - col, u32(8))
    out[UNIT_POS] = valid


def _mins(definition) -> int:
    return sum(isinstance(inst.operation, ops.Min) for inst in walk(definition.body))


def _compile(cols: int, **options):
    client = cp.client("interp")
    out = cp.ArrayArg(client.zeros((8,), np.uint32))
    return chunk_lengths.compile(cp.CubeDim(8), out, cp.ScalarArg(cols, u32), target="sm_80", **options)


@pytest.mark.parametrize(("value", "elem", "multiple"), [(512, u32, 16), (520, u32, 1), (0, u32, 16), (-32, i32, 16)])
def test_an_integer_scalar_is_specialized_on_divisibility_by_16(value, elem, multiple):
    @cp.cube(launch=True)
    def store(out: Array[f32], n: elem):  # type: ignore[valid-type]
        out[0] = f32(n)

    client = cp.client("interp")
    comp = store.compilation_args((cp.ArrayArg(client.zeros((1,), np.float32)), cp.ScalarArg(value, elem)))
    assert comp[1].multiple_of == multiple


def test_a_float_scalar_has_no_divisibility():
    @cp.cube(launch=True)
    def store(out: Array[f32], x: f32):
        out[0] = x

    client = cp.client("interp")
    comp = store.compilation_args((cp.ArrayArg(client.zeros((1,), np.float32)), 32.0))
    assert comp[1].multiple_of == 1


@pytest.mark.parametrize("unchecked", [False, True])
def test_min_of_a_multiple_of_8_below_a_multiple_of_16_is_folded(unchecked):
    """``cols`` a multiple of 16 and ``col`` of 8 with ``col < cols``: ``cols - col >= 8``, so the min is 8."""
    divisible = _compile(512, unchecked=unchecked)
    assert divisible.definition.params[1].multiple_of == 16
    assert _mins(divisible.definition) == 0
    ragged = _compile(20, unchecked=unchecked)  # 20 - 16 = 4: the min is live
    assert ragged.definition.params[1].multiple_of == 1
    assert _mins(ragged.definition) == 1


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_divisible_and_ragged_launches_each_get_their_kernel(runtime):
    """One launch per pattern, each against the lengths worked by hand (a cached divisible kernel must not
    serve the ragged launch)."""
    client = cp.client(runtime)
    out = client.zeros((8,), np.uint32)
    for cols, expected in ((32, [8, 8, 8, 8, 0, 0, 0, 0]), (20, [8, 8, 4, 0, 0, 0, 0, 0]), (48, [8] * 6 + [0, 0])):
        chunk_lengths.launch(client, cp.CubeCount(1), cp.CubeDim(8), cp.ArrayArg(out), cp.ScalarArg(cols, u32))
        np.testing.assert_array_equal(client.read(out), np.array(expected, np.uint32))


def test_the_printed_ir_says_which_scalars_are_multiples():
    assert "(scalar, multiple of 16)" in format_kernel(_compile(512).definition)
    assert "multiple of" not in format_kernel(_compile(20).definition)


@cp.cube(launch=True)
def shifted(out: Array[u32], cols: u32):
    """out[u] = cols + min(u << -1, 5): a shift amount is read as unsigned, so -1 shifts every bit out (0)."""
    col = i32(UNIT_POS) << i32(-1)
    out[UNIT_POS] = u32(cp.min(col, i32(5))) + cols


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_shift_by_a_negative_amount_is_understood_as_the_runtimes_do(runtime):
    """The trailing zeros of a shift by a negative literal are the width's (the result is 0), not fewer than
    none: the analysis must neither fail nor change the result (32 + 0, worked by hand)."""
    client = cp.client(runtime)
    out = client.zeros((4,), np.uint32)
    shifted.launch(client, cp.CubeCount(1), cp.CubeDim(4), cp.ArrayArg(out), cp.ScalarArg(32, u32))
    np.testing.assert_array_equal(client.read(out), np.full(4, 32, np.uint32))
