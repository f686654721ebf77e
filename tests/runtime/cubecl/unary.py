"""Shared by the ports of CubeCL's unary tests (``test_unary.py``, ``test_unary_int.py``): element types,
``as_type!`` and the fixed-output kernel (``test_unary_impl_fixed!``)."""

import functools
import math

import numpy as np

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, Line, cube

FLOATS = [cp.f16, cp.bf16, cp.f32, cp.f64]
INTS = [cp.i8, cp.i16, cp.i32, cp.i64]

PI = float(np.float32(math.pi))  # core::f32::consts::PI
NAN = float("nan")
INF = float("inf")


def as_type(elem, *values):
    """``as_type![F: ...]``: each value is an f32 literal converted with ``F::new``."""
    return np.asarray(values, dtype=np.float32).astype(elem.numpy)


def as_int(elem, *values):
    """``as_type![I: ...]``: each value is an i64 converted with ``I::new`` (``as`` cast, wraps)."""
    return np.asarray(values, dtype=np.int64).astype(elem.numpy)


@functools.cache
def make_unary_fixed_kernel(F, Out, func):
    # `test_unary_impl!` (Out = F), `test_unary_impl_fixed!` / `test_unary_impl_int_fixed!`: input and output
    # share N.
    @cube(launch_unchecked=True)
    def test_function(input: Array[Line[F]], output: Array[Line[Out]]):
        if ABSOLUTE_POS < input.len():
            output[ABSOLUTE_POS] = Line[Out](func(input[ABSOLUTE_POS]))

    return test_function


def launch_unary(client, kernel, values, input_vectorization, out_vectorization, out_dtype) -> np.ndarray:
    """One cube of ``len(values) / input_vectorization`` units over ``values``; the output buffer read back."""
    output_handle = client.empty((len(values),), out_dtype)
    kernel.launch_unchecked(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(len(values) // input_vectorization),
        cp.ArrayArg(client.create(values), line_size=input_vectorization),
        cp.ArrayArg(output_handle, line_size=out_vectorization),
    )
    return client.read(output_handle)


def run_unary_fixed(client, In, Out, func, cases):
    kernel = make_unary_fixed_kernel(In, Out, func)
    for input_vectorization, values, expected in cases:
        expected = np.asarray(expected).astype(Out.numpy)
        actual = launch_unary(client, kernel, values, input_vectorization, input_vectorization, Out.numpy)
        np.testing.assert_array_equal(actual, expected)
