"""The ``shared_reciprocal`` pass: f32 divisions by a shared divisor become f64 multiplies, with the same bits.

The expected quotients are numpy's f32 division (IEEE, correctly rounded). The pass runs for the GPU
targets with fast f64 (sm_90a here); its result is also executed on the interp (a backend whose ``prepare``
adds the pass), which computes the f64 casts and multiply with numpy, so every runtime's division of these
kernels is checked bit for bit against numpy's, specials and subnormals included.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, Line, cube, f32
from cubepy.ir import walk
from cubepy.ir.reciprocal import shared_reciprocal
from cubepy.runtime.client import ComputeClient
from cubepy.runtime.interp.backend import InterpBackend

from ..compiler.conftest import needs_ptxas

PER_UNIT = 4


class _ReciprocalInterp(InterpBackend):
    """The interp running the kernel as the GPU back end compiles it: passes, then ``shared_reciprocal``."""

    def prepare(self, definition):
        return shared_reciprocal(super().prepare(definition))


@cube(launch=True)
def by_one_minus(x: Array[f32], out: Array[f32], p: f32):
    """``1 - p`` is written inside the unrolled loop: four instructions, one value (to the prologue)."""
    base = ABSOLUTE_POS * PER_UNIT
    for i in cp.unroll(range(PER_UNIT)):
        if base + i < out.len():
            out[base + i] = x[base + i] / (1.0 - p)


@cube(launch=True)
def by_loaded(x: Array[f32], d: Array[f32], out: Array[f32]):
    """An immutable divisor read from memory, divided by in a runtime loop (after its definition)."""
    divisor = d[ABSOLUTE_POS % d.len()]
    base = ABSOLUTE_POS * PER_UNIT
    for i in range(PER_UNIT):
        if base + i < out.len():
            out[base + i] = x[base + i] / divisor


@cube(launch=True)
def by_running_sum(x: Array[f32], out: Array[f32]):
    """A mutable sum, then four divisions by it in one stretch (before the first)."""
    base = ABSOLUTE_POS * PER_UNIT
    total = f32(0.0)
    for i in range(PER_UNIT):
        total += x[(base + i) % x.len()]
    for i in cp.unroll(range(PER_UNIT)):
        if base + i < out.len():
            out[base + i] = x[base + i] / total


@cube(launch=True)
def loop_by_sum(x: Array[f32], out: Array[f32]):
    """A mutable sum, then one division by it in a runtime loop that never assigns it: before that loop."""
    base = ABSOLUTE_POS * PER_UNIT
    total = f32(0.0)
    for i in range(PER_UNIT):
        total += x[(base + i) % x.len()]
    for i in range(PER_UNIT):
        if base + i < out.len():
            out[base + i] = x[base + i] / total


@cube(launch=True)
def running_quotients(x: Array[f32], out: Array[f32]):
    """The loop assigns its divisor before each division: left as a division."""
    base = ABSOLUTE_POS * PER_UNIT
    total = f32(1.0)
    for i in range(PER_UNIT):
        total += x[(base + i) % x.len()]
        if base + i < out.len():
            out[base + i] = x[base + i] / total


@cube(launch=True)
def by_sum_reassigned(x: Array[f32], out: Array[f32]):
    """A mutable divisor (a loop's sum) assigned again between its divisions: left as divisions."""
    base = ABSOLUTE_POS * PER_UNIT
    total = f32(0.0)
    for i in range(2):
        total += x[(base + i) % x.len()]
    out[base % out.len()] = x[(base + 2) % x.len()] / total
    for i in range(2):
        total += x[(base + i) % x.len()]
    out[(base + 1) % out.len()] = x[(base + 3) % x.len()] / total


@cube(launch=True)
def by_literals(x: Array[f32], out: Array[f32]):
    """Literal divisors (3 and 0: literal reciprocals; 0.5: LLVM's multiply, left alone) and a literal dividend."""
    i = ABSOLUTE_POS
    if i < x.len():
        out[4 * i] = x[i] / 3.0
        out[4 * i + 1] = x[i] / 0.5
        out[4 * i + 2] = 1.0 / x[i]
        out[4 * i + 3] = x[i] / 0.0


@cube(launch=True)
def line_by_scalar(x: Array[Line[f32]], d: Array[f32], out: Array[Line[f32]]):
    """A line divided by a scalar (broadcast): four lanes share one reciprocal."""
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = x[ABSOLUTE_POS] / d[0]


@cube(launch=True)
def line_by_early_broadcast(x: Array[Line[f32]], out: Array[Line[f32]]):
    """A mutable sum broadcast, then assigned again before the division that reads the broadcast: left alone."""
    i = ABSOLUTE_POS
    if i < out.len():
        total = f32(0.0)
        for k in range(2):
            total += x[i][k]
        early = Line(total, 4)
        for k in range(2):
            total += x[i][k + 2]
        out[i] = x[i] / early


@cube(launch=True)
def single_division(x: Array[f32], d: Array[f32], out: Array[f32]):
    """One division by a divisor used once: the reciprocal would cost more than it saves."""
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = x[ABSOLUTE_POS] / d[ABSOLUTE_POS]


# f32 values whose quotients reach every case: zeros, infinities, NaN, subnormals, the extremes, near-ties.
SPECIALS = np.array(
    [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        1.0,
        -1.0,
        3.0,
        1e-45,
        -1e-45,
        1.1754942e-38,
        1.1754944e-38,
        3.4028235e38,
        -3.4028235e38,
        0.1,
        1.0000001,
        0.99999994,
        2.0**-126,
        2.0**127,
        7.0,
        1e-30,
        1e30,
    ],
    np.float32,
)


def _values(n: int, seed: int) -> np.ndarray:
    """``SPECIALS``, then random bit patterns (every exponent, subnormals included)."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([SPECIALS, bits])[:n]


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    both_nan = np.isnan(got) & np.isnan(want)
    bits = np.dtype(f"u{got.dtype.itemsize}")
    differ = ~both_nan & (got.view(bits) != want.view(bits))
    assert not differ.any(), (
        f"{int(differ.sum())} differ; first at {int(np.argmax(differ))}: got {got[differ][:4]}, want {want[differ][:4]}"
    )


def _launch(client, kernel, units: int, *args) -> None:
    kernel.launch(client, cp.CubeCount(-(-units // 32)), cp.CubeDim(32), *args)


def _divisor_sweep():
    return [0.25, 0.7, 1.0, -np.inf, np.nan, 1.0 - 2.0**-24, 1e38, -3e38, 1.5e-45]


@pytest.mark.parametrize("p", _divisor_sweep())
def test_divisor_of_parameters_matches_numpy(client, p):
    """On the suite's runtime (the interp; the GPU under ``python -m cubepy.devcheck``)."""
    _check_parameter_divisor(client, p)


def test_other_divisors_match_numpy(client):
    """On the suite's runtime (the interp; the GPU under ``python -m cubepy.devcheck``)."""
    _check_other_divisors(client)


@pytest.mark.parametrize("runtime", ["interp with the pass", "cpu"])
def test_the_rewritten_kernels_and_the_cpu_runtime_match_numpy(runtime):
    """The IR the GPU back end compiles, run on the interp; and the cpu runtime (which divides)."""
    client = ComputeClient("interp", _ReciprocalInterp()) if runtime == "interp with the pass" else cp.client("cpu")
    for p in _divisor_sweep():
        _check_parameter_divisor(client, p)
    _check_other_divisors(client)


def _check_parameter_divisor(client, p: float) -> None:
    x = _values(256, 1)
    out = client.empty(x.shape, np.float32)
    _launch(
        client, by_one_minus, 256 // PER_UNIT, cp.ArrayArg(client.create(x)), cp.ArrayArg(out), cp.ScalarArg(p, f32)
    )
    with np.errstate(all="ignore"):
        _same_bits(client.read(out), x / (np.float32(1.0) - np.float32(p)))


def _check_other_divisors(client) -> None:
    x = _values(1024, 2)
    d = np.concatenate([SPECIALS, _values(64, 3)])[:64].astype(np.float32)
    hx, hd = client.create(x), client.create(d)
    units = len(x) // PER_UNIT
    with np.errstate(all="ignore"):
        out = client.empty(x.shape, np.float32)
        _launch(client, by_loaded, units, cp.ArrayArg(hx), cp.ArrayArg(hd), cp.ArrayArg(out))
        _same_bits(client.read(out), x / np.repeat(d[np.arange(units) % len(d)], PER_UNIT))

        out = client.empty(x.shape, np.float32)
        _launch(client, by_running_sum, units, cp.ArrayArg(hx), cp.ArrayArg(out))
        totals = np.zeros(units, np.float32)
        for i in range(PER_UNIT):  # the kernel's order of additions, each rounded to f32
            totals = totals + x[np.arange(units) * PER_UNIT + i]
        _same_bits(client.read(out), x / np.repeat(totals, PER_UNIT))

        out = client.empty(x.shape, np.float32)
        _launch(client, loop_by_sum, units, cp.ArrayArg(hx), cp.ArrayArg(out))
        _same_bits(client.read(out), x / np.repeat(totals, PER_UNIT))

        out = client.empty(x.shape, np.float32)
        _launch(client, running_quotients, units, cp.ArrayArg(hx), cp.ArrayArg(out))
        running = np.full(units, 1.0, np.float32)
        got = client.read(out).reshape(units, PER_UNIT)
        for i in range(PER_UNIT):
            running = running + x[np.arange(units) * PER_UNIT + i]
            _same_bits(got[:, i], x[np.arange(units) * PER_UNIT + i] / running)

        out = client.empty(x.shape, np.float32)
        _launch(client, by_sum_reassigned, units, cp.ArrayArg(hx), cp.ArrayArg(out))
        row = np.arange(units) * PER_UNIT
        half = (np.float32(0.0) + x[row]) + x[row + 1]
        got = client.read(out).reshape(units, PER_UNIT)
        _same_bits(got[:, 0], x[row + 2] / half)
        _same_bits(got[:, 1], x[row + 3] / ((half + x[row]) + x[row + 1]))

        out = client.empty((4 * len(x),), np.float32)
        _launch(client, by_literals, len(x), cp.ArrayArg(hx), cp.ArrayArg(out))
        want = np.stack([x / np.float32(3.0), x / np.float32(0.5), np.float32(1.0) / x, x / np.float32(0.0)], axis=1)
        want = want.reshape(-1)
        _same_bits(client.read(out), want)

        for divisor in SPECIALS[SPECIALS != 0][:8]:
            lines = client.create(x)
            out = client.empty(x.shape, np.float32)
            _launch(
                client,
                line_by_scalar,
                units,
                cp.ArrayArg(lines, line_size=4),
                cp.ArrayArg(client.create(np.array([divisor], np.float32))),
                cp.ArrayArg(out, line_size=4),
            )
            _same_bits(client.read(out), x / divisor)

        out = client.empty(x.shape, np.float32)
        _launch(client, line_by_early_broadcast, units, cp.ArrayArg(hx, line_size=4), cp.ArrayArg(out, line_size=4))
        lines = x.reshape(-1, 4)
        early = (np.float32(0.0) + lines[:, 0]) + lines[:, 1]
        _same_bits(client.read(out), (lines / early[:, None]).reshape(-1))


def test_the_identity_holds_over_random_pairs_and_hard_divisors():
    """The arithmetic fact the pass rests on, in numpy's IEEE f64: RN32(x * RN64(1/d)) == RN32(x / d)."""
    rng = np.random.default_rng(4)
    x = rng.integers(0, 2**32, 2_000_000, dtype=np.uint64).astype(np.uint32)
    d = rng.integers(0, 2**32, 2_000_000, dtype=np.uint64).astype(np.uint32)
    d[::2] = (d[::2] & np.uint32(0x807FFFFF)) | (x[::2] & np.uint32(0x7F800000))  # quotients near 1: hard ties
    hard = np.float32([3.0, 7.0, 1.0000001, 0.99999994, 1.5, 1e-45, 3.3858095e38, 3e-39, 1.1754942e-38])
    xs = [x.view(np.float32)] + [np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)] * 9
    ds = [d.view(np.float32)] + [np.full(len(xs[1]), h, np.float32) for h in hard]
    with np.errstate(all="ignore"):
        for xv, dv in zip(xs, ds):
            _same_bits((xv.astype(np.float64) * (1.0 / dv.astype(np.float64))).astype(np.float32), xv / dv)


def _compile(kernel, arrays: int, *, scalar: bool = False, lines: tuple[int, ...] = (), target="sm_90a", **options):
    """``kernel`` compiled for ``target`` with ``arrays`` f32 buffers (those in ``lines`` of lines of 4)."""
    client = cp.client("interp")
    args = [cp.ArrayArg(client.zeros((64,), np.float32), line_size=4 if i in lines else 1) for i in range(arrays)]
    if scalar:
        args.append(cp.ScalarArg(0.5, f32))
    return kernel.compile(cp.CubeDim(32), *args, target=target, **options)


def _ops(definition) -> list[str]:
    """The operations of ``definition`` in program order, a float one with its result's element type."""
    return [
        f"{inst.op}.{inst.out.elem.name}" if inst.out is not None and inst.out.elem.is_float else inst.op
        for inst in walk(definition.body)
    ]


def _ptx_ops(ptx: str) -> list[str]:
    return re.findall(r"^\s+(?:@%p\d+\s+)?([a-z][\w.]*)", ptx, re.MULTILINE)


@needs_ptxas
def test_parameter_divisor_one_reciprocal_in_the_prologue():
    compiled = _compile(by_one_minus, 2, scalar=True)
    ops = _ops(compiled.definition)
    assert ops[:2] == ["sub.f32", "wide_recip.f64"] and "div.f32" not in ops  # 1 - p, then 1 / f64(1 - p)
    assert ops.count("mul.f64") == PER_UNIT
    ptx = _ptx_ops(compiled.ptx)
    assert "div.rn.f32" not in ptx and "rcp.rn.f64" not in ptx and "div.rn.f64" not in ptx
    assert ptx.count("rcp.approx.ftz.f64") == 1 and ptx.count("fma.rn.f64") == 4 and ptx.count("mul.rn.f64") == PER_UNIT
    assert ptx.count("cvt.rn.f32.f64") == PER_UNIT
    assert compiled.pass_dumps[-1][0] == "shared_reciprocal" and compiled.ptxas_status == "assembled"


def test_where_the_reciprocal_goes():
    loaded = _ops(_compile(by_loaded, 3).definition)
    loop = next(op for op in loaded if "loop" in op)
    assert "div.f32" not in loaded and loaded.index("wide_recip.f64") < loaded.index(loop)  # hoisted out of the loop
    summed = _ops(_compile(by_running_sum, 2).definition)
    assert summed.count("wide_recip.f64") == 1 and summed.count("mul.f64") == PER_UNIT and "div.f32" not in summed
    in_loop = _ops(_compile(loop_by_sum, 2).definition)
    loops = [i for i, op in enumerate(in_loop) if "loop" in op]
    assert "div.f32" not in in_loop and loops[0] < in_loop.index("wide_recip.f64") < loops[1]  # between the loops
    running = _ops(_compile(running_quotients, 2).definition)
    assert running.count("div.f32") == 1 and "wide_recip.f64" not in running
    reassigned = _ops(_compile(by_sum_reassigned, 2).definition)
    assert reassigned.count("div.f32") == 2 and "wide_recip.f64" not in reassigned
    literals = _ops(_compile(by_literals, 2).definition)
    # x / 3 and x / 0 are x * (1/3 and inf in f64, literals); x / 0.5 (LLVM multiplies) and 1 / x stay
    assert literals.count("div.f32") == 2 and literals.count("mul.f64") == 2 and "wide_recip.f64" not in literals
    line = _ops(_compile(line_by_scalar, 3, lines=(0, 2)).definition)
    assert line.count("wide_recip.f64") == 1 and line.count("mul.f64") == 1 and "div.f32" not in line
    early = _ops(_compile(line_by_early_broadcast, 2, lines=(0, 1)).definition)
    assert early.count("div.f32") == 1 and "wide_recip.f64" not in early
    single = _ops(_compile(single_division, 3).definition)
    assert single.count("div.f32") == 1 and "wide_recip.f64" not in single


def test_not_for_slow_f64_targets_nor_fast_math():
    slow = _compile(by_one_minus, 2, scalar=True, target="sm_89")
    assert "shared_reciprocal" not in dict(slow.pass_dumps) and _ops(slow.definition).count("div.f32") == PER_UNIT
    fast = _compile(by_one_minus, 2, scalar=True, fastmath=True)
    assert _ops(fast.definition).count("div.f32") == PER_UNIT and "shared_reciprocal" not in dict(fast.pass_dumps)


def _gpu_wide_recip(d: np.ndarray, rcp_approx) -> np.ndarray:
    """``wide_recip``'s GPU sequence in numpy: ``rcp_approx``, then two Newton steps by correctly rounded fma."""
    from cubepy.ir.fma import fma

    with np.errstate(all="ignore"):
        wide = d.astype(np.float64)
        approx = rcp_approx(wide)
        residual = fma(-wide, approx, 1.0, np.float64)
        refined = fma(approx, residual, approx, np.float64)
        refined = fma(refined, fma(-wide, refined, 1.0, np.float64), refined, np.float64)
    return np.where(np.isnan(residual), approx, refined)


def _upper_word(x: np.ndarray) -> np.ndarray:
    return (x.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)


def _rcp_approx_truncated(x: np.ndarray) -> np.ndarray:
    """PTX's ``rcp.approx.ftz.f64``: 1 / (x's upper word), its upper word kept (x never subnormal here)."""
    with np.errstate(divide="ignore"):
        return _upper_word(1.0 / _upper_word(x))


def _rcp_approx_off_by(scale: float):
    """The same, then off by ``scale`` (a relative error of 2^-18 either way: more than the hardware's)."""
    return lambda x: _rcp_approx_truncated(x) * scale


@pytest.mark.parametrize("scale", [1.0, 1 + 2.0**-18, 1 - 2.0**-18])
def test_the_gpu_sequence_gives_the_same_quotients(scale):
    """The GPU's reciprocal, emulated (the PTX ISA's rcp.approx.ftz.f64, the fma steps exactly rounded), is within
    1.13 * 2^-53 of 1/d and gives the quotients numpy's division gives; zeros, infinities and NaN exactly."""
    rng = np.random.default_rng(5)
    d = np.concatenate([SPECIALS, rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    r = _gpu_wide_recip(d, _rcp_approx_off_by(scale))
    finite = np.isfinite(d) & (d != 0)
    exact = np.float64(1.0) / d[finite].astype(np.longdouble)
    error = np.abs((r[finite].astype(np.longdouble) - exact) / exact)
    assert float(error.max()) <= 1.13 * 2.0**-53
    with np.errstate(all="ignore"):
        _same_bits(r[~finite], (1.0 / d[~finite].astype(np.float64)))
        x = rng.integers(0, 2**32, len(d), dtype=np.uint64).astype(np.uint32).view(np.float32)
        _same_bits((x.astype(np.float64) * r).astype(np.float32), x / d)
