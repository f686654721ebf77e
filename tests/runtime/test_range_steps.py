"""Runtime ``range`` steps on the interp: a zero step runs zero iterations (the sanitizer names the line),
and a signed step with unsigned bounds keeps its sign (numba-cuda's expectations, see
docs/semantics/numba-differences.md)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import cubepy as cp
from cubepy import config, i32, u32


@cp.cube(launch=True)
def count_trips(out: cp.Array[i32], starts: cp.Array[i32], ends: cp.Array[i32], steps: cp.Array[i32]):
    k = cp.ABSOLUTE_POS
    if k < out.len():
        n = cp.runtime(0)
        for _ in range(starts[k], ends[k], steps[k]):
            n += 1
        out[k] = n


@cp.cube(launch=True)
def zero_step(out: cp.Array[i32], x: i32, y: i32):
    for _ in range(x, y, y - x + 1):
        out[0] += 1


@cp.cube(launch=True)
def count_down_unsigned(out: cp.Array[i32], n: u32, step: i32):
    for _ in range(n, 0, step):
        out[0] += 1


@pytest.mark.cubepy_sanitize(False)  # the zero step is the point; the sanitizer would report it
def test_per_lane_trip_counts_match_python_and_a_zero_step_runs_none(client):
    cases = list(itertools.product([-4, 0, 3], [-5, 0, 6], [-2, -1, 0, 1, 3]))
    starts, ends, steps = (np.array(column, np.int32) for column in zip(*cases))
    out = client.zeros((len(cases),), np.int32)
    with config.override(CUBEPY_SANITIZE=False):  # the sanitizer reports zero steps (tested below)
        count_trips.launch(
            client,
            cp.CubeCount(1),
            cp.CubeDim(len(cases)),
            cp.ArrayArg(out),
            *(cp.ArrayArg(client.create(a)) for a in (starts, ends, steps)),
        )
    np.testing.assert_array_equal(client.read(out), [0 if s == 0 else len(range(a, b, s)) for a, b, s in cases])


@pytest.mark.cubepy_sanitize(False)  # the zero step is the point; the sanitizer would report it
def test_a_zero_runtime_step_ends_at_once(client):
    # numba's port: range(x, y, y - x + 1) with x=1, y=0 hung the interp.
    out = client.zeros((1,), np.int32)
    with config.override(CUBEPY_SANITIZE=False):  # the sanitizer reports zero steps (tested below)
        zero_step.launch(
            client, cp.CubeCount(1), cp.CubeDim(1), cp.ArrayArg(out), cp.ScalarArg(1, i32), cp.ScalarArg(0, i32)
        )
    assert client.read(out)[0] == 0


def test_the_sanitizer_reports_a_zero_step_with_its_line():
    client = cp.client("interp", sanitize=True)
    out = client.zeros((1,), np.int32)
    with pytest.raises(cp.SanitizerError, match=r"test_range_steps.py:\d+: .*range\(\) step is zero"):
        zero_step.launch(
            client, cp.CubeCount(1), cp.CubeDim(1), cp.ArrayArg(out), cp.ScalarArg(1, i32), cp.ScalarArg(0, i32)
        )


@pytest.mark.parametrize("n, step", [(5, -1), (6, -2), (5, 1)])
def test_a_signed_step_over_unsigned_bounds_keeps_its_sign(client, n, step):
    out = client.zeros((1,), np.int32)
    count_down_unsigned.launch(
        client, cp.CubeCount(1), cp.CubeDim(1), cp.ArrayArg(out), cp.ScalarArg(n, u32), cp.ScalarArg(step, i32)
    )
    assert client.read(out)[0] == len(range(n, 0, step))
