"""Reports from new users (issue 33) about the runtimes: bf16 subnormals and fp8 conversions on cpu, report
text, and ``CUBEPY_RUNTIME``.

Oracles: ``ml_dtypes`` (bf16 and fp8 rounding; fp8 after clipping to the largest finite value, the
``.satfinite`` rule of the PTX ISA's ``cvt``), the bit patterns written out by hand, and the guides' words.
"""

from __future__ import annotations

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, UNIT_POS, Array, f32
from cubepy.errors import SanitizerError, SanitizerKind

RUNTIMES = ["interp", "cpu"]

# -- item 2: bf16 subnormals survive a copy and a constant-table read -----------------------------------
# Subnormal bf16 patterns (exponent 0, mantissa not 0) of both signs, the smallest normal and 1.0.
BF16_BITS = np.array([0x0001, 0x8001, 0x007F, 0x0040, 0x807F, 0x0080, 0x3F80, 0x0000, 0x8000], np.uint16)
BF16_TABLE = BF16_BITS.view(ml_dtypes.bfloat16)


@cp.cube(launch=True)
def bf16_copy(a: Array[cp.bf16], out: Array[cp.bf16]):
    out[ABSOLUTE_POS] = a[ABSOLUTE_POS]  # a checked read: its value meets the out-of-bounds 0 in a phi


@cp.cube(launch=True)
def bf16_table(out: Array[cp.bf16]):
    table = cp.const_array(BF16_TABLE)
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = table[ABSOLUTE_POS]


@cp.cube(launch=True)
def bf16_round(a: Array[f32], out: Array[cp.bf16]):
    if ABSOLUTE_POS < a.len():
        out[ABSOLUTE_POS] = cp.bf16(a[ABSOLUTE_POS])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_bf16_subnormals_keep_their_bits(runtime):
    client = cp.client(runtime)
    n = len(BF16_BITS)
    source, out = client.create(BF16_TABLE), client.zeros((n,), ml_dtypes.bfloat16)
    bf16_copy.launch(client, cp.CubeCount(1), cp.CubeDim(n), cp.ArrayArg(source), cp.ArrayArg(out))
    assert client.read(out).view(np.uint16).tolist() == BF16_BITS.tolist()
    out = client.zeros((n,), ml_dtypes.bfloat16)
    bf16_table.launch(client, cp.CubeCount(1), cp.CubeDim(16), cp.ArrayArg(out))
    assert client.read(out).view(np.uint16).tolist() == BF16_BITS.tolist()


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_f32_to_bf16_rounds_into_subnormals_as_ml_dtypes(runtime):
    rng = np.random.default_rng(5)
    # f32 values whose bf16 is subnormal (below 2^-126), ties included, and a few normal ones.
    tiny = (rng.integers(1, 1 << 23, 200, dtype=np.int64).astype(np.uint32)).view(np.float32)
    values = np.concatenate([tiny, -tiny, np.float32([2.0**-133, 3 * 2.0**-134, 1.0, -2.5])]).astype(np.float32)
    client = cp.client(runtime)
    out = client.zeros(values.shape, ml_dtypes.bfloat16)
    bf16_round.launch(
        client,
        cp.CubeCount(-(-len(values) // 64)),
        cp.CubeDim(64),
        cp.ArrayArg(client.create(values)),
        cp.ArrayArg(out),
    )
    expected = values.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(client.read(out).view(np.uint16), expected)


# -- item 5: fp8 conversions on the cpu runtime ---------------------------------------------------------
def _fp8_oracle(values: np.ndarray, dtype, largest: float) -> np.ndarray:
    """cvt.rn.satfinite: round to nearest even after clipping to the largest finite value; NaN stays NaN."""
    clipped = np.where(np.isnan(values), values, np.clip(values, -largest, largest))
    return clipped.astype(dtype).view(np.uint8)


def _fp8_inputs() -> np.ndarray:
    rng = np.random.default_rng(8)
    bits = rng.integers(0, 1 << 32, 4000, dtype=np.uint64).astype(np.uint32)
    edges = np.float32(
        [0.0, 1.0, 448.0, 449.0, 464.0, 480.0, 1e6, 57344.0, 61439.0, 61440.0, 2.0**-9, 2.0**-10, 3 * 2.0**-10]
        + [2.0**-16, 2.0**-17, 3 * 2.0**-17, 1.0625, 1.1875, np.inf, np.nan, 1e-40]
    )
    values = np.concatenate([bits.view(np.float32), edges])
    return np.concatenate([values, -values]).astype(np.float32)


@cp.cube(launch=True)
def fp8_round_trip(
    a: Array[f32], q4: Array[cp.e4m3], q5: Array[cp.e5m2], back4: Array[f32], back5: Array[f32], half4: Array[cp.f16]
):
    i = ABSOLUTE_POS
    if i < a.len():
        q4[i] = cp.e4m3(a[i])
        q5[i] = cp.e5m2(a[i])
        back4[i] = f32(q4[i])
        back5[i] = f32(q5[i])
        half4[i] = cp.f16(q4[i])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_fp8_conversions_match_ml_dtypes_with_saturation(runtime):
    values = _fp8_inputs()
    n = len(values)
    client = cp.client(runtime)
    handles = [
        client.create(values),
        client.zeros((n,), ml_dtypes.float8_e4m3fn),
        client.zeros((n,), ml_dtypes.float8_e5m2),
        client.zeros((n,), np.float32),
        client.zeros((n,), np.float32),
        client.zeros((n,), np.float16),
    ]
    try:
        fp8_round_trip.launch(client, cp.CubeCount(-(-n // 128)), cp.CubeDim(128), *(cp.ArrayArg(h) for h in handles))
    except cp.CompileError as error:  # a failure, not the suite's skip for operations a runtime declines
        pytest.fail(f"{runtime} refused an fp8 conversion with a {type(error).__name__}")
    q4, q5 = client.read(handles[1]).view(np.uint8), client.read(handles[2]).view(np.uint8)
    expected4 = _fp8_oracle(values, ml_dtypes.float8_e4m3fn, 448.0)
    expected5 = _fp8_oracle(values, ml_dtypes.float8_e5m2, 57344.0)
    np.testing.assert_array_equal(q4, expected4)
    np.testing.assert_array_equal(q5, expected5)
    # Back to f32 and f16: exact (every fp8 value is an f16 value); NaN bits as ml_dtypes gives them.
    np.testing.assert_array_equal(
        client.read(handles[3]).view(np.uint32),
        expected4.view(ml_dtypes.float8_e4m3fn).astype(np.float32).view(np.uint32),
    )
    np.testing.assert_array_equal(
        client.read(handles[4]).view(np.uint32),
        expected5.view(ml_dtypes.float8_e5m2).astype(np.float32).view(np.uint32),
    )
    np.testing.assert_array_equal(
        client.read(handles[5]).view(np.uint16),
        expected4.view(ml_dtypes.float8_e4m3fn).astype(np.float16).view(np.uint16),
    )


# -- item 11: report text as the guides word it -----------------------------------------------------------
@cp.cube(launch=True)
def one_arrival_short(out: Array[f32]):
    bar = cp.Barrier.shared(2, UNIT_POS == 0)
    if UNIT_POS == 0:
        bar.arrive_and_expect_tx(1, 512)
    bar.wait_parity(0)
    out[UNIT_POS] = f32(1)


@cp.cube(launch=True)
def partner_left_early(out: Array[f32]):
    # Plane 1 arrives once and leaves; plane 0 then waits for a second phase nobody will start.
    bar = cp.Barrier.shared(32, UNIT_POS == 0)
    if UNIT_POS >= 32:
        bar.arrive()
    else:
        bar.wait_parity(0)
        bar.wait_parity(1)
    out[UNIT_POS] = f32(1)


def _report(kernel, units: int, **client_options) -> SanitizerError:
    client = cp.client("interp", **client_options)
    with pytest.raises(SanitizerError) as caught:
        kernel.launch(client, cp.CubeCount(1), cp.CubeDim(units), cp.ArrayArg(client.zeros((units,), np.float32)))
    return caught.value


@pytest.mark.parametrize("schedule", ["lockstep", "random", "adversarial"])
def test_deadlock_report_says_barrier_deadlock_once_and_its_schedule_once(schedule):
    options = {"seed": 3} if schedule == "random" else {}
    text = str(_report(one_arrival_short, 32, schedule=schedule, **options))
    assert text.count("deadlock") == 1 and "barrier deadlock: wait on barrier[0] can never complete" in text
    suffix = "(schedule random:3)" if schedule == "random" else f"(schedule {schedule})"
    assert text.count("(schedule") == (0 if schedule == "lockstep" else 1)
    if schedule != "lockstep":
        assert suffix in text
    assert "np.int64" not in text and "by unit (0, 0, 0) of cube (0, 0, 0)" in text


def test_a_wait_left_short_by_units_that_finished_is_a_barrier_deadlock_naming_them():
    error = _report(partner_left_early, 64)
    assert error.kind is SanitizerKind.BARRIER_DEADLOCK
    assert str(error).startswith(f"{__file__}:") and "barrier deadlock: " in str(error)
    assert "32 units of this cube already finished the kernel" in str(error)


def test_positions_print_as_plain_ints():
    from cubepy.runtime.interp.values import Topology

    topology = Topology((32, 1, 1), (np.int64(2), 1, 1), 0, 2)
    assert repr(topology.unit_pos_of(np.int64(33))) == "(1, 0, 0)"
    assert repr(topology.cube_pos_of(np.int64(33))) == "(1, 0, 0)"


# -- item 12: CUBEPY_RUNTIME accepts every runtime cp.runtimes() can list --------------------------------
def test_cubepy_runtime_accepts_every_runtime_name():
    from cubepy import config
    from cubepy.runtime.client import RUNTIMES as KNOWN

    assert set(config.RUNTIME_NAMES) == set(KNOWN)
    assert set(cp.runtimes()) <= set(config.RUNTIME_NAMES)


def test_cubepy_runtime_cpu_selects_the_cpu_client():
    env = dict(os.environ, CUBEPY_RUNTIME="cpu")
    code = "import cubepy as cp; print('RUNTIME', cp.client().name)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "RUNTIME cpu" in done.stdout
    env["CUBEPY_RUNTIME"] = "gpu"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "expected one of 'interp', 'cpu', 'cuda'" in bad.stderr
