"""Port of CubeCL's ``unary`` runtime tests.

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/unary.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD; superset of the classic file at 3956d6153).

``testgen_unary!`` runs per FloatType (f16, bf16, f32, f64); ``testgen_unary_int!`` runs per
IntType (i8, i16, i32, i64). The expected values are the literal arrays of the Rust test, given
as f32 literals and converted to the element type (``as_type!``).

Operations cubepy's public API names (sin, cos, tan, tanh, sqrt, rsqrt, recip, abs, trunc) are used directly.
The others have no name in cubepy's public API; their tests use the name written next to them (CubeCL's
method name, ``expm1`` for ``exp_m1``) and are skipped while ``cubepy`` does not export it.
"""

import numpy as np
import pytest

import cubepy as cp
from cubepy import f32, u32
from tests.runtime.cubecl.unary import (
    FLOATS,
    INF,
    NAN,
    PI,
    as_type,
    launch_unary,
    make_unary_fixed_kernel,
    run_unary_fixed,
)


def assert_equals_approx(actual, expected, epsilon):
    """``unary::assert_equals_approx``: absolute error below ``epsilon``."""
    actual = np.asarray(actual).astype(np.float64)
    expected = np.asarray(expected).astype(np.float64)
    for i, (a, e) in enumerate(zip(actual, expected)):
        with np.errstate(invalid="ignore"):  # inf - inf
            difference = abs(a - e)
        ok = (
            difference < epsilon
            or (np.isnan(a) and np.isnan(e))
            or (np.isinf(a) and np.isinf(e) and np.signbit(a) == np.signbit(e))
        )
        assert ok, (
            f"Values differ more than epsilon: actual={a}, expected={e}, "
            f"difference={difference}, epsilon={epsilon}\nindex: {i}\n"
            f"actual: {actual}\nexpected: {expected}"
        )


def run_unary(client, F, func, cases, epsilon=0.02):
    # `test_unary_impl!`'s kernel: `Vector::cast_from($unary_func(input[i]))`.
    kernel = make_unary_fixed_kernel(F, F, func)
    for input_vectorization, out_vectorization, values, expected in cases:
        values = as_type(F, *values)
        expected = as_type(F, *expected)
        # Rust allocates `input.len()` elements and binds `expected.len()` of them.
        actual = launch_unary(client, kernel, values, input_vectorization, out_vectorization, F.numpy)
        assert_equals_approx(actual[: len(expected)], expected, epsilon)


def same_three(values, expected):
    """Cases for vectorization 1, 2 and 4 on the same data (in == out vectorization)."""
    return [(v, v, values, expected) for v in (1, 2, 4)]


# --- float unary ops -----------------------------------------------------------------------


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_sin(client, F):
    run_unary(
        client,
        F,
        cp.sin,
        same_three([0.0, 1.5707964, 3.1415927, -1.5707964], [0.0, 1.0, 0.0, -1.0]),
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_cos(client, F):
    run_unary(
        client,
        F,
        cp.cos,
        same_three([0.0, 1.5707964, 3.1415927, -1.5707964], [1.0, 0.0, -1.0, 0.0]),
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_tan(client, F):
    run_unary(
        client,
        F,
        cp.tan,
        same_three([0.0, 0.7853982, 1.0471976, -0.7853982], [0.0, 1.0, 1.7320508, -1.0]),
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_asin(client, F):
    run_unary(
        client,
        F,
        cp.asin,
        [
            (
                1,
                1,
                [0.0, 0.5, 1.0, -0.5, -1.0],
                [0.0, 0.5235988, 1.5707964, -0.5235988, -1.5707964],
            ),
            (2, 2, [0.0, 0.5, 1.0, -0.5], [0.0, 0.5235988, 1.5707964, -0.5235988]),
            (4, 4, [0.0, 0.5, 1.0, -0.5], [0.0, 0.5235988, 1.5707964, -0.5235988]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_acos(client, F):
    run_unary(
        client,
        F,
        cp.acos,
        [
            (
                1,
                1,
                [1.0, 0.5, 0.0, -0.5, -1.0],
                [0.0, 1.0471976, 1.5707964, 2.0943952, 3.1415927],
            ),
            (2, 2, [1.0, 0.5, 0.0, -0.5], [0.0, 1.0471976, 1.5707964, 2.0943952]),
            (4, 4, [1.0, 0.5, 0.0, -0.5], [0.0, 1.0471976, 1.5707964, 2.0943952]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_atan(client, F):
    run_unary(
        client,
        F,
        cp.atan,
        [
            (
                1,
                1,
                [0.0, 1.0, -1.0, 1000.0, -1000.0],
                [0.0, 0.7853982, -0.7853982, 1.5697963, -1.5697963],
            ),
            (2, 2, [0.0, 1.0, -1.0, 1000.0], [0.0, 0.7853982, -0.7853982, 1.5697963]),
            (4, 4, [0.0, 1.0, -1.0, 1000.0], [0.0, 0.7853982, -0.7853982, 1.5697963]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_sinh(client, F):
    run_unary(
        client,
        F,
        cp.sinh,
        [
            (
                1,
                1,
                [0.0, 1.0, -1.0, 2.0, -2.0],
                [0.0, 1.1752012, -1.1752012, 3.6268604, -3.6268604],
            ),
            (2, 2, [0.0, 1.0, -1.0, 2.0], [0.0, 1.1752012, -1.1752012, 3.6268604]),
            (4, 4, [0.0, 1.0, -1.0, 2.0], [0.0, 1.1752012, -1.1752012, 3.6268604]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_cosh(client, F):
    run_unary(
        client,
        F,
        cp.cosh,
        [
            (
                1,
                1,
                [0.0, 1.0, -1.0, 2.0, -2.0],
                [1.0, 1.5430807, 1.5430807, 3.7621956, 3.7621956],
            ),
            (2, 2, [0.0, 1.0, -1.0, 2.0], [1.0, 1.5430807, 1.5430807, 3.7621956]),
            (4, 4, [0.0, 1.0, -1.0, 2.0], [1.0, 1.5430807, 1.5430807, 3.7621956]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_tanh(client, F):
    run_unary(
        client,
        F,
        cp.tanh,
        [
            (
                1,
                1,
                [0.0, 1.0, -1.0, 2.0, -2.0],
                [0.0, 0.7615942, -0.7615942, 0.9640276, -0.9640276],
            ),
            (2, 2, [0.0, 1.0, -1.0, 2.0], [0.0, 0.7615942, -0.7615942, 0.9640276]),
            (4, 4, [0.0, 1.0, -1.0, 2.0], [0.0, 0.7615942, -0.7615942, 0.9640276]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_asinh(client, F):
    run_unary(
        client,
        F,
        cp.asinh,
        [
            (
                1,
                1,
                [0.0, 1.0, -1.0, 2.0, -2.0],
                [0.0, 0.8813736, -0.8813736, 1.4436355, -1.4436355],
            ),
            (2, 2, [0.0, 1.0, -1.0, 2.0], [0.0, 0.8813736, -0.8813736, 1.4436355]),
            (4, 4, [0.0, 1.0, -1.0, 2.0], [0.0, 0.8813736, -0.8813736, 1.4436355]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_acosh(client, F):
    run_unary(
        client,
        F,
        cp.acosh,
        same_three([1.0, 2.0, 3.0, 10.0], [0.0, 1.316958, 1.7627472, 2.993223]),
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_atanh(client, F):
    run_unary(
        client,
        F,
        cp.atanh,
        [
            (
                1,
                1,
                [0.0, 0.5, -0.5, 0.9, -0.9],
                [0.0, 0.54930615, -0.54930615, 1.4722195, -1.4722195],
            ),
            (2, 2, [0.0, 0.5, -0.5, 0.9], [0.0, 0.54930615, -0.54930615, 1.4722195]),
            (4, 4, [0.0, 0.5, -0.5, 0.9], [0.0, 0.54930615, -0.54930615, 1.4722195]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_sqrt(client, F):
    run_unary(
        client,
        F,
        cp.sqrt,
        [
            (1, 1, [0.0, 1.0, 4.0, 9.0, 16.0, 25.0], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
            (2, 2, [0.0, 1.0, 4.0, 9.0], [0.0, 1.0, 2.0, 3.0]),
            (4, 4, [0.0, 1.0, 4.0, 9.0], [0.0, 1.0, 2.0, 3.0]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_degrees(client, F):
    # f32 arithmetic on the PI constant, as in Rust (`PI / 2.`, `PI * 2.`, ...).
    pi = np.float32(PI)
    run_unary(
        client,
        F,
        cp.to_degrees,
        [
            (
                1,
                1,
                [0.0, pi / 2, pi, pi * 2, -pi / 2, -pi, -pi * 2],
                [0.0, 90.0, 180.0, 360.0, -90.0, -180.0, -360.0],
            ),
            (2, 2, [0.0, pi / 2, pi, -pi / 2], [0.0, 90.0, 180.0, -90.0]),
            (4, 4, [0.0, pi / 2, pi, -pi / 2], [0.0, 90.0, 180.0, -90.0]),
        ],
        epsilon=0.3,
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_radians(client, F):
    pi = np.float32(PI)
    run_unary(
        client,
        F,
        cp.to_radians,
        [
            (
                1,
                1,
                [0.0, 90.0, 180.0, 360.0, -90.0, -180.0, -360.0],
                [0.0, pi / 2, pi, pi * 2, -pi / 2, -pi, -pi * 2],
            ),
            (2, 2, [0.0, 90.0, 180.0, -90.0], [0.0, pi / 2, pi, -pi / 2]),
            (4, 4, [0.0, 90.0, 180.0, -90.0], [0.0, pi / 2, pi, -pi / 2]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_magnitude(client, F):
    run_unary(
        client,
        F,
        cp.magnitude,
        [
            (1, 1, [-1.0, 23.1, -1.4, 5.1], [1.0, 23.1, 1.4, 5.1]),
            (2, 1, [-1.0, 0.0, 1.0, 5.0], [1.0, 5.099]),
            (4, 1, [-1.0, 0.0, 1.0, 5.0], [5.196]),
            (4, 1, [0.0, 0.0, 0.0, 0.0], [0.0]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_vector_sum(client, F):
    run_unary(
        client,
        F,
        cp.vector_sum,
        [
            (1, 1, [-1.0, 23.1, -1.4, 5.1], [-1.0, 23.1, -1.4, 5.1]),
            (2, 1, [1.0, 3.0, 2.0, 5.0], [4.0, 7.0]),
            (4, 1, [1.0, 2.0, 3.0, 4.0], [10.0]),
            (4, 1, [0.0, 0.0, 0.0, 0.0], [0.0]),
            (4, 1, [-1.0, 1.0, -2.0, 2.0], [0.0]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_abs(client, F):
    run_unary(client, F, cp.abs, same_three([-1.0, 0.0, 2.0, -3.0], [1.0, 0.0, 2.0, 3.0]))


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_inverse_sqrt(client, F):
    # Rust: `Vector::inverse_sqrt`; cubepy's public API: `rsqrt`.
    run_unary(
        client,
        F,
        cp.rsqrt,
        [
            (1, 1, [1.0, 4.0, 16.0, 0.25], [1.0, 0.5, 0.25, 2.0]),
            (2, 2, [9.0, 25.0, 0.0625, 100.0], [0.33333334, 0.2, 4.0, 0.1]),
            (4, 4, [0.0, 0.01, 64.0, 0.111111], [INF, 10.0, 0.125, 3.0]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_recip(client, F):
    run_unary(client, F, cp.recip, same_three([1.0, 2.0, 4.0, 0.5], [1.0, 0.5, 0.25, 2.0]))


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_normalize(client, F):
    run_unary(
        client,
        F,
        cp.normalize,
        [
            (1, 1, [-1.0, 0.0, 1.0, 5.0], [-1.0, NAN, 1.0, 1.0]),
            (2, 2, [-1.0, 0.0, 1.0, 5.0], [-1.0, 0.0, 0.196, 0.981]),
            (4, 4, [-1.0, 0.0, 1.0, 5.0], [-0.192, 0.0, 0.192, 0.962]),
            (4, 4, [0.0, 0.0, 0.0, 0.0], [NAN, NAN, NAN, NAN]),
            (2, 2, [0.0, 0.0, 1.0, 0.0], [NAN, NAN, 1.0, 0.0]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_trunc(client, F):
    run_unary(
        client,
        F,
        cp.trunc,
        [
            (1, 1, [-1.2, -1.0, -0.0, 0.0], [-1.0, -1.0, -0.0, 0.0]),
            (2, 2, [NAN, 1.0, 1.2, 1.9], [NAN, 1.0, 1.0, 1.0]),
            (4, 4, [-0.9, 0.2, NAN, 1.99], [-0.0, 0.0, NAN, 1.0]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_is_nan(client, F):
    run_unary_fixed(
        client,
        F,
        u32,
        cp.is_nan,
        [
            (1, as_type(F, 0.0, NAN, INF, -INF), [0, 1, 0, 0]),
            (2, as_type(F, INF, -100.0, NAN, -INF), [0, 0, 1, 0]),
            (4, as_type(F, -INF, INF, 100.0, NAN), [0, 0, 0, 1]),
        ],
    )


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_is_inf(client, F):
    run_unary_fixed(
        client,
        F,
        u32,
        cp.is_inf,
        [
            (1, as_type(F, 0.0, NAN, INF, -INF), [0, 0, 1, 1]),
            (2, as_type(F, INF, -100.0, NAN, -INF), [1, 0, 0, 1]),
            (4, as_type(F, -INF, INF, 100.0, NAN), [1, 1, 0, 0]),
        ],
    )


def ordered_f32_bits(value):
    bits = int(np.asarray(value, dtype=np.float32).view(np.int32))
    return -(2**31) - bits if bits < 0 else bits


def assert_f32_ulp_le(actual, expected, max_ulp):
    if actual == expected:
        return
    diff = abs(ordered_f32_bits(actual) - ordered_f32_bits(expected))
    assert diff <= max_ulp, (
        f"Values differ by more than {max_ulp} ulp: actual={actual}, expected={expected}, ulp_diff={diff}"
    )


def test_expm1_f32(client):
    values = np.asarray([0.0, 1.0e-7, 10.0, -1.0e-7], dtype=np.float32)
    # Rust computes the expectation with f32::exp_m1 on the host.
    expected = np.expm1(values)
    kernel = make_unary_fixed_kernel(f32, f32, cp.expm1)

    for input_vectorization, out_vectorization in [(1, 1), (2, 2), (4, 4)]:
        actual = launch_unary(client, kernel, values, input_vectorization, out_vectorization, np.float32)
        assert actual[0] == 0.0
        assert_f32_ulp_le(actual[1], expected[1], 2)
        assert_f32_ulp_le(actual[2], expected[2], 2)
        assert_f32_ulp_le(actual[3], expected[3], 2)
