"""Differential fuzzing of runtime control flow: per-unit loop bounds and steps (zero, negative, signed
and unsigned mixes), break/continue, nested ifs under divergence, inner loops and atomics, on the
interp against a plain-Python run.  Every kernel also lowers and assembles with ptxas; every example
runs under a time limit, so a hang is a failure.

CI runs ``CUBEPY_FUZZ_EXAMPLES`` examples (default 30); the slow test runs ``CUBEPY_FUZZ_LONG``
(default 2000).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cubepy as cp
from cubepy.compiler import ptxas
from cubepy.testing import fuzz as fz
from cubepy.testing import fuzz_control as fc

EXAMPLES = int(os.environ.get("CUBEPY_FUZZ_EXAMPLES", "30"))
LONG = int(os.environ.get("CUBEPY_FUZZ_LONG", "2000"))
LIMIT_S = float(os.environ.get("CUBEPY_FUZZ_TIME_LIMIT", "60"))


def run_control_case(case: fc.ControlCase, tmp_dir: str, *, compile_too: bool = True) -> str | None:
    """Launch ``case`` on the interp and compare with the Python run; a mismatch text or None."""
    with fc.time_limit(LIMIT_S):
        kernel, _path = fz.load_kernel(case, tmp_dir)
        client = cp.client("interp")
        starts, ends, steps = case.arrays()
        out = client.zeros((fc.UNITS,), np.int32)
        total = client.zeros((1,), np.uint32)
        args = (cp.ArrayArg(out), cp.ArrayArg(total), *(cp.ArrayArg(client.create(a)) for a in (starts, ends, steps)))
        kernel.launch(client, cp.CubeCount(2), cp.CubeDim(fc.UNITS // 2), *args)
        if compile_too:
            compiled = kernel.compile(cp.CubeDim(fc.UNITS // 2), *args)
            assert compiled.ptx and (compiled.cubin or ptxas.find_ptxas() is None)
    want_out, want_total = case.reference()
    got_out, got_total = client.read(out), int(client.read(total)[0])
    if not np.array_equal(got_out, want_out) or got_total != want_total:
        return (
            f"interp out={got_out.tolist()} total={got_total}; Python out={want_out.tolist()} "
            f"total={want_total}\nstarts={case.starts}\nends={case.ends}\nsteps={case.steps}\n{case.source}"
        )
    return None


@pytest.mark.slow  # among the suite's heaviest: CI's slow tier runs it, and its fuzzer step again
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=EXAMPLES <= 30,
    database=None,
)
@given(st.data())
def test_runtime_control_flow_matches_python(tmp_path_factory, data):
    case = fc.gen_control_case(data.draw)
    problem = run_control_case(case, str(tmp_path_factory.mktemp("fuzz_control")))
    assert problem is None, problem


@pytest.mark.slow
@settings(max_examples=LONG, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.data())
def test_long_run_of_runtime_control_flow(tmp_path_factory, data):
    case = fc.gen_control_case(data.draw)
    problem = run_control_case(case, str(tmp_path_factory.mktemp("fuzz_control_long")), compile_too=False)
    assert problem is None, problem


def test_a_hang_is_a_failure_not_a_stuck_run():
    with pytest.raises(TimeoutError, match="a hang"), fc.time_limit(0.2):
        while True:
            pass


def test_the_zero_step_that_hung_the_interp_is_a_fuzz_case(tmp_path):
    body = (fc.Stmt("add", 1), fc.Stmt("atomic"))
    case = fc.ControlCase("i32", "i32", body, [1] * fc.UNITS, [0] * fc.UNITS, [0] * fc.UNITS)
    assert case.reference()[1] == 0
    assert run_control_case(case, str(tmp_path)) is None
    mixed = fc.ControlCase("u32", "i32", body, [9] * fc.UNITS, [0] * fc.UNITS, [-2] * fc.UNITS)
    assert mixed.reference()[1] == fc.UNITS * len(range(9, 0, -2))
    assert run_control_case(mixed, str(tmp_path)) is None
