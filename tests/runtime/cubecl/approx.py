"""Helpers shared by the ported CubeCL tests: CubeCL's approx compare."""

from __future__ import annotations

import numpy as np

import cubepy as cp

F32_EPSILON = float(np.finfo(np.float32).eps)


def type_epsilon(elem):
    """``F::epsilon()`` for the float types of the suite."""
    if elem is cp.f16:
        return 2.0**-10
    if elem is cp.bf16:
        return 2.0**-7
    if elem is cp.f64:
        return 2.0**-52
    return 2.0**-23


def assert_equals_approx(elem, actual, expected, epsilon):
    """``binary::assert_equals_approx``: relative error, epsilon scaled to the type's epsilon."""
    actual = np.asarray(actual).astype(np.float64)
    expected = np.asarray(expected).astype(np.float64)
    epsilon = max(epsilon / F32_EPSILON * type_epsilon(elem), epsilon)
    for i, (a, e) in enumerate(zip(actual[: len(expected)], expected)):
        allowed_error = max(epsilon * abs(e), epsilon)
        with np.errstate(invalid="ignore"):  # inf - inf
            difference = abs(a - e)
        ok = (
            difference < allowed_error
            or (np.isnan(a) and np.isnan(e))
            or (np.isinf(a) and np.isinf(e) and np.signbit(a) == np.signbit(e))
        )
        assert ok, (
            f"Values differ more than epsilon: actual={a}, expected={e}, "
            f"difference={difference}, epsilon={epsilon}\nindex: {i}\n"
            f"actual: {actual}\nexpected: {expected}"
        )
