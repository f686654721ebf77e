"""Every math function on the interp and cpu runtimes within the ulp bounds of docs/semantics/math-accuracy.md.

The oracle is mpmath at 120 bits: the exact value rounded to nothing, so an error of 0.5 ulp is a correctly
rounded result.  An ulp is the spacing of the type at the exact value (the subnormal spacing below the smallest
normal).  Inputs: each function's edge values and random samples (fixed seed) over its domain, uniform and
log-uniform.  ``BOUNDS`` is the table of the docs page, and a test checks that the page says the same.

``python -m tests.ir.test_math_accuracy`` prints the largest error measured per function and runtime.
"""

from __future__ import annotations

import functools
import math
import pathlib
import re

import numpy as np
import pytest

import cubepy as cp
from cubepy.ir import numerics

mpmath = pytest.importorskip("mpmath")
mp = mpmath.mp

N_RANDOM = 192
PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "semantics" / "math-accuracy.md"


def _lgamma(v):
    return mpmath.re(mpmath.loggamma(v)) if v <= 0 or v != int(v) or v > 2 else mpmath.mpf(0)


def _real(fn):
    def safe(*args):
        try:
            value = fn(*args)
        except (ValueError, ZeroDivisionError):
            return None
        return value if mpmath.im(value) == 0 else None

    return safe


# name -> (oracle, ranges (lo, hi, "lin"|"log"), edge values); binary functions take a second range.
UNARY = {
    "exp": (mpmath.exp, [(-80, 80, "lin"), (-1, 1, "lin")], [0.0, 1.0, -1.0, 88.0, -87.0]),
    "exp2": (lambda v: mpmath.mpf(2) ** v, [(-120, 120, "lin")], [0.0, 0.5, 10.0, -126.5]),
    "exp10": (lambda v: mpmath.mpf(10) ** v, [(-35, 35, "lin")], [0.0, 1.0, 3.0, -0.5]),
    "expm1": (mpmath.expm1, [(-80, 80, "lin"), (1e-12, 1e-1, "log")], [1e-30, -1e-8, 0.5, -0.5]),
    "log": (mpmath.log, [(1e-30, 1e30, "log"), (0.5, 2, "lin")], [1.0, 2.0, 1e-38]),
    "log2": (lambda v: mpmath.log(v, 2), [(1e-30, 1e30, "log"), (0.5, 2, "lin")], [1.0, 8.0, 3.0]),
    "log10": (mpmath.log10, [(1e-30, 1e30, "log"), (0.5, 2, "lin")], [1.0, 1000.0, 3.0]),
    "log1p": (mpmath.log1p, [(1e-12, 1e20, "log"), (-0.9, 1, "lin")], [1e-30, -1e-8, -0.5, 1.0]),
    "sin": (mpmath.sin, [(-100, 100, "lin"), (1e-6, 1, "log")], [0.5, 1.0, 3.0, 1e-20]),
    "cos": (mpmath.cos, [(-100, 100, "lin"), (1e-6, 1, "log")], [0.0, 0.5, 1.0, 3.0]),
    "tan": (mpmath.tan, [(-100, 100, "lin"), (1e-6, 1, "log")], [0.5, 1.0, 1.5, 1e-20]),
    "asin": (mpmath.asin, [(-1, 1, "lin"), (1e-8, 1, "log")], [0.0, 0.5, 1.0, -1.0]),
    "acos": (mpmath.acos, [(-1, 1, "lin")], [0.0, 0.5, 1.0, -1.0, 0.999]),
    "atan": (mpmath.atan, [(-1e3, 1e3, "lin"), (1e-8, 1e8, "log")], [0.0, 1.0, -1.0, 1e30]),
    "sinh": (mpmath.sinh, [(-80, 80, "lin"), (1e-8, 1, "log")], [0.0, 1.0, -1.0]),
    "cosh": (mpmath.cosh, [(-80, 80, "lin")], [0.0, 1.0, -1.0]),
    "tanh": (mpmath.tanh, [(-20, 20, "lin"), (1e-8, 1, "log")], [0.0, 0.5, -0.5, 20.0]),
    "asinh": (mpmath.asinh, [(-1e10, 1e10, "lin"), (1e-8, 1e8, "log")], [0.0, 1.0, -1.0]),
    "acosh": (mpmath.acosh, [(1, 1e10, "log"), (1, 2, "lin")], [1.0, 2.0, 1.0001]),
    "atanh": (mpmath.atanh, [(-0.999, 0.999, "lin"), (1e-8, 0.5, "log")], [0.0, 0.5, -0.5]),
    "erf": (mpmath.erf, [(-6, 6, "lin"), (1e-8, 1, "log")], [0.0, 0.5, 1.0, -2.0]),
    "erfc": (mpmath.erfc, [(-5, 26, "lin"), (0.1, 9, "lin")], [0.0, 1.0, -1.0, 10.0]),
    "lgamma": (
        _lgamma,
        [
            (1e-3, 100, "lin"),
            (0.9, 1.1, "lin"),
            (1.9, 2.1, "lin"),
            (1e-6, 1e30, "log"),
            (-2.2637, -1e-3, "lin"),
            (-100, -11.0001, "lin"),
        ],
        [1.0, 2.0, 2.5, 1.094, 0.5, 3.0, 1.0 + 2**-20, 2.0 - 2**-20, -0.5, -1.5, -2.0 + 2**-20, 1e-320, -1e-320],
    ),
    "tgamma": (mpmath.gamma, [(1e-2, 30, "lin"), (-9.9, -1e-2, "lin")], [1.0, 2.0, 0.5, 5.0, -0.5, -1.5, 10.5]),
    "cbrt": (
        lambda v: mpmath.sign(v) * mpmath.cbrt(abs(v)),
        [(-1e30, 1e30, "lin"), (1e-30, 1e30, "log"), (-8, 8, "lin")],
        [8.0, -27.0, 2.0, 2.0519840717315674, 3.287182331085205, 1e-40],
    ),
    "sqrt": (mpmath.sqrt, [(0, 1e30, "lin"), (1e-30, 1e30, "log")], [0.0, 2.0, 3.0]),
    "rsqrt": (lambda v: 1 / mpmath.sqrt(v), [(1e-30, 1e30, "log")], [1.0, 2.0, 3.0]),
    "recip": (lambda v: 1 / v, [(1e-30, 1e30, "log"), (-10, 10, "lin")], [1.0, 3.0, -7.0]),
}
BINARY = {
    "powf": (lambda a, b: a**b, [(0.01, 100, "lin")], [(-10, 10, "lin")]),
    "atan2": (mpmath.atan2, [(-100, 100, "lin")], [(-100, 100, "lin")]),
    "hypot": (lambda a, b: mpmath.sqrt(a * a + b * b), [(-1e3, 1e3, "lin")], [(-1e3, 1e3, "lin")]),
    "rhypot": (lambda a, b: 1 / mpmath.sqrt(a * a + b * b), [(-1e3, 1e3, "lin")], [(-1e3, 1e3, "lin")]),
}
FUNCTIONS = (*UNARY, *BINARY)

# The ulp bounds stated on the docs page: name -> {(runtime, type): bound}.  ``f32`` covers f16/bf16 too
# (computed in f32 and rounded once).  Measured maxima are in the page; a bound leaves a little room over them.
_I, _C = "interp", "cpu"


def _row(interp32, interp64, cpu32, cpu64):
    return {(_I, "f32"): interp32, (_I, "f64"): interp64, (_C, "f32"): cpu32, (_C, "f64"): cpu64}


BOUNDS: dict[str, dict[tuple[str, str], float]] = {
    "exp": _row(3, 1, 1, 1),
    "exp2": _row(2, 1, 1, 1),
    "exp10": _row(2, 1, 1, 2),
    "expm1": _row(3, 1, 1, 1),
    "log": _row(3, 1, 1, 1),
    "log2": _row(2, 1, 1, 1),
    "log10": _row(3, 2, 3, 2),
    "log1p": _row(2, 1, 1, 1),
    "sin": _row(2, 1, 1, 1),
    "cos": _row(2, 1, 1, 1),
    "tan": _row(2, 1, 1, 1),
    "asin": _row(3, 2, 1, 1),
    "acos": _row(2, 1, 2, 1),
    "atan": _row(2, 1, 1, 1),
    "sinh": _row(2, 1, 2, 2),
    "cosh": _row(2, 1, 2, 2),
    "tanh": _row(2, 2, 2, 3),
    "asinh": _row(2, 1, 2, 2),
    "acosh": _row(2, 2, 2, 2),
    "atanh": _row(2, 2, 2, 2),
    "erf": _row(1, 4, 1, 1),
    "erfc": _row(1, 3, 3, 3),
    "lgamma": _row(1, 4, 3, 3),
    "tgamma": _row(1, 5, 4, 5),
    "cbrt": _row(0.5, 3, 2, 3),
    "sqrt": _row(0.5, 0.5, 0.5, 0.5),
    "rsqrt": _row(2, 2, 2, 2),
    "recip": _row(0.5, 0.5, 0.5, 0.5),
    "powf": _row(2, 1, 1, 1),
    "atan2": _row(3, 1, 2, 1),
    "hypot": _row(1, 1, 1, 1),
    "rhypot": _row(2, 2, 2, 2),
}


def _samples(ranges, rng: np.random.Generator, count: int) -> np.ndarray:
    parts = []
    for lo, hi, scale in ranges:
        if scale == "log":
            sign = -1.0 if hi < 0 else 1.0
            a, b = sorted((abs(lo), abs(hi)))
            parts.append(sign * np.exp(rng.uniform(np.log(a), np.log(b), count)))
        else:
            parts.append(rng.uniform(lo, hi, count))
    return np.concatenate(parts)


@functools.cache
def inputs(name: str, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """The inputs of ``name`` in ``dtype`` (the second operand of a binary function; zeros otherwise)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    numpy_type = np.dtype(dtype)
    if name in UNARY:
        _, ranges, edges = UNARY[name]
        x = np.concatenate([np.array(edges, np.float64), _samples(ranges, rng, N_RANDOM)])
        y = np.zeros_like(x)
    else:
        _, x_ranges, y_ranges = BINARY[name]
        x, y = _samples(x_ranges, rng, N_RANDOM), _samples(y_ranges, rng, N_RANDOM)
    with np.errstate(over="ignore"):
        return x.astype(numpy_type), y.astype(numpy_type)


@functools.cache
def exact(name: str, dtype: str) -> tuple:
    """mpmath's value at each input (None where undefined)."""
    mp.prec = 120
    x, y = inputs(name, dtype)
    if name in UNARY:
        fn = _real(UNARY[name][0])
        return tuple(fn(mpmath.mpf(float(v))) for v in x)
    fn = _real(BINARY[name][0])
    return tuple(fn(mpmath.mpf(float(a)), mpmath.mpf(float(b))) for a, b in zip(x, y))


def ulp_errors(got: np.ndarray, want: tuple, dtype: str) -> np.ndarray:
    """|got - exact| in ulps of the exact value in ``dtype`` (results beyond the type's range are skipped)."""
    info = np.finfo(np.dtype(dtype))
    largest, tiny_exp = mpmath.mpf(float(info.max)), info.minexp
    errors = []
    for g, w in zip(got, want):
        if w is None or not mpmath.isfinite(w) or abs(w) > largest:
            continue
        if not math.isfinite(float(g)):
            errors.append(math.inf)
            continue
        exponent = max(int(mpmath.floor(mpmath.log(abs(w), 2))) if w != 0 else tiny_exp, tiny_exp)
        ulp = mpmath.ldexp(1, exponent - info.nmant)
        errors.append(float(abs(mpmath.mpf(float(g)) - w) / ulp))
    return np.array(errors)


# -- the runtimes --------------------------------------------------------------------------------------------
F = cp.TypeVar("F", cp.f16, cp.f32, cp.f64)
_UNARY_FNS = tuple(getattr(cp, name) for name in UNARY)
_BINARY_FNS = tuple(getattr(cp, name) for name in BINARY)


@cp.cube(launch=True)
def every_function(x: cp.Tensor[F], y: cp.Tensor[F], out: cp.Tensor[F]):
    i = cp.ABSOLUTE_POS
    if i < x.shape(1):
        for k in cp.unroll(range(len(_UNARY_FNS))):
            out[k, i] = _UNARY_FNS[k](x[k, i])
        for k in cp.unroll(range(len(_BINARY_FNS))):
            row = len(_UNARY_FNS) + k
            out[row, i] = _BINARY_FNS[k](x[row, i], y[row, i])


@functools.cache
def results(runtime: str, dtype: str) -> dict[str, np.ndarray]:
    """Every function's results on ``runtime``: one launch of ``every_function``."""
    width = max(len(inputs(name, dtype)[0]) for name in FUNCTIONS)
    x = np.ones((len(FUNCTIONS), width), np.dtype(dtype))
    y = np.ones_like(x)
    for row, name in enumerate(FUNCTIONS):
        a, b = inputs(name, dtype)
        x[row, : len(a)], y[row, : len(b)] = a, b
    client = cp.client(runtime)
    out = client.zeros(x.shape, x.dtype)
    every_function.launch(
        client,
        cp.CubeCount((width + 127) // 128),
        cp.CubeDim(128),
        cp.TensorArg(client.create(x)),
        cp.TensorArg(client.create(y)),
        cp.TensorArg(out),
    )
    got = client.read(out)
    return {name: got[row, : len(inputs(name, dtype)[0])] for row, name in enumerate(FUNCTIONS)}


def measured(name: str, runtime: str, dtype: str) -> float:
    """The largest error of ``name`` on ``runtime`` in ``dtype``, in ulps."""
    return float(ulp_errors(results(runtime, dtype)[name], exact(name, dtype), dtype).max())


# -- tests ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_within_the_documented_bound(name, runtime, dtype):
    bound = BOUNDS[name][(runtime, "f32" if dtype == "float32" else "f64")]
    errors = ulp_errors(results(runtime, dtype)[name], exact(name, dtype), dtype)
    assert len(errors) > N_RANDOM // 2
    worst = int(np.argmax(errors))
    assert errors.max() <= bound, f"{name} on {runtime} {dtype}: {errors.max():.3f} ulp > {bound} (input #{worst})"


@pytest.mark.parametrize("name", FUNCTIONS)
def test_on_python_values_outside_a_kernel(name):
    """``cp.<name>`` on Python floats folds through the interp's f64 semantics: the same bound, no KeyError."""
    x, y = inputs(name, "float64")
    function = getattr(cp, name)
    got = np.array([function(float(a)) if name in UNARY else function(float(a), float(b)) for a, b in zip(x, y)])
    assert all(isinstance(v, float) for v in got[:3])
    assert ulp_errors(got, exact(name, "float64"), "float64").max() <= BOUNDS[name][("interp", "f64")]


def test_exact_functions_on_python_values_match_python():
    """The exact ones (and the predicates) fold to what Python's math module, exact for them, computes."""
    for a, b in [(7.5, -2.0), (-7.5, 2.0), (5.0, 3.0), (1e-300, 7.0), (-0.0, 1.0), (2.5, 0.5)]:
        assert cp.copysign(a, b) == math.copysign(a, b)
        assert cp.fmod(a, b) == math.fmod(a, b) and math.copysign(1, cp.fmod(a, b)) == math.copysign(1, math.fmod(a, b))
        assert cp.remainder(a, b) == math.remainder(a, b)
        assert cp.nextafter(a, b) == math.nextafter(a, b)
    assert cp.fmod(1.0, 0.0) != cp.fmod(1.0, 0.0)  # NaN, as in a kernel (Python's math raises)
    assert cp.is_nan(math.nan) is True and cp.is_inf(-math.inf) is True and cp.is_nan(1.0) is False
    assert (cp.floor(2.5), cp.ceil(2.5), cp.trunc(-2.5), cp.round(2.5), cp.abs(-3)) == (2, 3, -2, 2, 3)
    assert cp.fma(0.1, 10.0, -1.0) == 5.551115123125783e-17  # one rounding: 0.1 * 10 - 1 is 0.0 in two


def _ulps_of(values: np.ndarray, want: list, reference: list) -> np.ndarray:
    """|values - want| in ulps (f64) of the reference magnitudes."""
    return np.array(
        [
            float(abs(mpmath.mpf(float(v)) - w) / mpmath.ldexp(1, int(mpmath.floor(mpmath.log(abs(r), 2))) - 52))
            for v, w, r in zip(values, want, reference)
        ]
    )


def test_lgamma_next_to_its_zeros_at_1_and_2():
    """x = 1 +- 2^-k and 2 +- 2^-k: the value is tiny (~0.42 2^-k) and must be accurate relative to itself."""
    mp.prec = 200
    steps = [2.0**-k for k in range(2, 53)] + [1e-3 * k for k in range(1, 40)]
    x = np.array([c + s * d for c in (1.0, 2.0) for s in (1, -1) for d in steps] + [1.094, 2.5, 1.5, 0.9])
    x = x[(x != 1.0) & (x != 2.0)]  # 2 + 2^-52 rounds to 2
    want = [mpmath.re(mpmath.loggamma(mpmath.mpf(float(v)))) for v in x]
    got = numerics.lgamma(x)  # what the interp evaluates (f64), checked end to end in the table above
    errors = _ulps_of(got, want, want)
    assert errors.max() <= BOUNDS["lgamma"][("interp", "f64")], (x[np.argmax(errors)], errors.max())
    x32 = x.astype(np.float32)
    want32 = tuple(mpmath.re(mpmath.loggamma(mpmath.mpf(float(v)))) for v in x32)
    assert ulp_errors(numerics.lgamma(x32).astype(np.float32), want32, "float32").max() <= 1


# Between -11.0001 and -2.2637 lgamma crosses zero next to every integer: the reflection's two terms cancel there,
# and the error is bounded in ulps of lgamma(-x) (the size of those terms) instead, as libdevice documents too.
NEGATIVE_ZEROS_BOUND = 8


@cp.cube(launch=True)
def lgamma_kernel(x: cp.Array[cp.f64], out: cp.Array[cp.f64]):
    i = cp.ABSOLUTE_POS
    if i < x.len():
        out[i] = cp.lgamma(x[i])


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_lgamma_between_its_negative_zeros(runtime):
    mp.prec = 150
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-11.0001, -2.2637, 256), [-2.4570247382208006, -2.7476826467274127, -3.5]])
    client = cp.client(runtime)
    out = client.zeros(x.shape, np.float64)
    lgamma_kernel.launch(client, cp.CubeCount(3), cp.CubeDim(128), cp.ArrayArg(client.create(x)), cp.ArrayArg(out))
    want = [mpmath.re(mpmath.loggamma(mpmath.mpf(float(v)))) for v in x]
    scale = [max(abs(w), abs(mpmath.loggamma(mpmath.mpf(-float(v))))) for w, v in zip(want, x)]
    assert _ulps_of(client.read(out), want, scale).max() <= NEGATIVE_ZEROS_BOUND


# f32 values whose cube root lies within 64 f64 ulps of a midpoint between two f32 values (an exhaustive search
# of [1, 8), the three binades in which the root's significand runs through all values).
HARD_CBRT = [2.0519840717315674, 3.287182331085205, 2.5269105434417725, 1.6117353439331055, 2.2415966987609863]


@pytest.mark.parametrize("sign", [1, -1])
def test_cbrt_f32_is_correctly_rounded_even_from_an_inaccurate_f64_root(monkeypatch, sign):
    """Perturb the f64 root by 14 ulps (past the midpoint for the hardest case): the exact decision still rounds right."""
    monkeypatch.setattr(numerics, "_cbrt64", lambda v: np.cbrt(v) + sign * 14 * np.spacing(np.cbrt(v)))
    mp.prec = 200
    x = np.array(HARD_CBRT + [-h for h in HARD_CBRT] + [8.0, 1e-40], np.float32)
    got = numerics.cbrt(x)
    assert got.dtype == np.float32
    want = tuple(mpmath.sign(v) * mpmath.cbrt(abs(mpmath.mpf(float(v)))) for v in x)
    assert ulp_errors(got, want, "float32").max() <= 0.5


def test_the_docs_page_states_these_bounds():
    """Each row of the page's table gives the interp and cpu bounds this file tests (and a GPU column)."""
    rows = {}
    for line in PAGE.read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0] in BOUNDS:
            rows[cells[0]] = cells[1:]
    assert set(rows) == set(BOUNDS)
    for name, cells in rows.items():
        stated = [float(re.sub(r"[^0-9.]", "", c)) for c in cells[:4]]
        assert stated == [BOUNDS[name][key] for key in [(_I, "f32"), (_I, "f64"), (_C, "f32"), (_C, "f64")]], name


# f16 computes in f32 and rounds once: within half an ulp of its own plus the f32 error (a few 2^-13 ulps).
HALF_BOUND = 0.51


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_f16_is_the_f32_result_rounded_once(runtime):
    worst = {
        name: ulp_errors(results(runtime, "float16")[name], exact(name, "float16"), "float16") for name in FUNCTIONS
    }
    assert all(len(e) >= 16 for e in worst.values())  # cosh: most samples overflow f16
    over = {name: float(e.max()) for name, e in worst.items() if e.max() > HALF_BOUND}
    assert not over, over


if __name__ == "__main__":
    for function in FUNCTIONS:
        cells = [f"{measured(function, rt, dt):.3f}" for rt in ("interp", "cpu") for dt in ("float32", "float64")]
        print(function, *cells)
