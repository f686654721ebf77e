"""Port of CubeCL's ``short_circuit`` runtime tests.

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/short_circuit.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD; not in the classic tree).

``testgen_short_circuit!`` is untyped. Python ``or`` / ``and`` on runtime bools must keep Rust's
``||`` / ``&&`` short-circuit: the right operand, which writes a side channel, must not run when
the left operand decides. The Rust helper takes ``&mut Array<u32>``; here the local array itself
is passed to the cube function, which writes through it.
"""

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, cube, u32


@cube
def mark_side_channel(side_channel):
    side_channel[0] = u32(1)
    return False


@cube(launch=True)
def kernel_short_circuit_or(output: Array[u32], left_input: u32):
    if UNIT_POS == 0:
        side_channel = cp.LocalArray[u32](1)
        side_channel[0] = u32(0)
        flag = (left_input != u32(0)) or mark_side_channel(side_channel)
        if flag:
            output[0] = side_channel[0]
        else:
            output[0] = u32(999)


@cube(launch=True)
def kernel_short_circuit_and(output: Array[u32], left_input: u32):
    if UNIT_POS == 0:
        side_channel = cp.LocalArray[u32](1)
        side_channel[0] = u32(0)
        flag = (left_input != u32(0)) and mark_side_channel(side_channel)
        if not flag:
            output[0] = side_channel[0]
        else:
            output[0] = u32(999)


# Pure operands take the eager path. The logical result must still be correct.


@cube(launch=True)
def kernel_pure_or(output: Array[u32], a: u32, b: u32):
    if UNIT_POS == 0:
        flag = (a != u32(0)) or (b != u32(0))
        if flag:
            output[0] = u32(1)
        else:
            output[0] = u32(0)


@cube(launch=True)
def kernel_pure_and(output: Array[u32], a: u32, b: u32):
    if UNIT_POS == 0:
        flag = (a != u32(0)) and (b != u32(0))
        if flag:
            output[0] = u32(1)
        else:
            output[0] = u32(0)


def test_short_circuit_or(client):
    handle = client.empty((1,), np.uint32)
    kernel_short_circuit_or.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle), 1)
    assert client.read(handle)[0] == 0, "`||` did not short-circuit"


def test_short_circuit_and(client):
    handle = client.empty((1,), np.uint32)
    kernel_short_circuit_and.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle), 0)
    assert client.read(handle)[0] == 0, "`&&` did not short-circuit"


def run_pure(client, kernel, a, b):
    handle = client.empty((1,), np.uint32)
    kernel.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle), a, b)
    return int(client.read(handle)[0])


@pytest.mark.parametrize(("a", "b", "expected"), [(0, 0, 0), (0, 7, 1), (5, 0, 1), (5, 7, 1)])
def test_pure_or(client, a, b, expected):
    assert run_pure(client, kernel_pure_or, a, b) == expected, f"{a} || {b}"


@pytest.mark.parametrize(("a", "b", "expected"), [(0, 0, 0), (0, 7, 0), (5, 0, 0), (5, 7, 1)])
def test_pure_and(client, a, b, expected):
    assert run_pure(client, kernel_pure_and, a, b) == expected, f"{a} && {b}"
