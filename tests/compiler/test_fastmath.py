"""Fast math (``@cube(fastmath=True)``, ``compile(fastmath=...)``, ``CUBEPY_FASTMATH``).

On the GPU target, f32 ``exp2, exp, log2, log, sin, cos, rsqrt`` and ``/`` become the approximate ``.ftz``
instructions nvcc's ``-use_fast_math`` emits; off, the PTX is what it always was.  The interp and cpu runtimes
keep the accurate functions: their results are checked against mpmath, with fast math on, under the bounds
``docs/semantics/math-accuracy.md`` states for them.
"""

from __future__ import annotations

import math
import pathlib
import re

import numpy as np
import pytest

import cubepy as cp
from cubepy import config, f32, f64
from cubepy.compiler import ptxas
from cubepy.runtime import cache

from .conftest import needs_ptxas

mpmath = pytest.importorskip("mpmath")

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "semantics" / "math-accuracy.md"
UNARY = ("exp2", "exp", "log2", "log", "sin", "cos", "rsqrt")
OPS = (*UNARY, "div")
_FNS = tuple(getattr(cp, name) for name in UNARY)
SMALLEST_NORMAL = 2.0**-126

# The instruction each op becomes with fast math on (exp and log through ex2 and lg2, as nvcc's __expf/__logf).
INSTRUCTIONS = {
    "exp2": "ex2.approx.ftz.f32",
    "exp": "ex2.approx.ftz.f32",
    "log2": "lg2.approx.ftz.f32",
    "log": "lg2.approx.ftz.f32",
    "sin": "sin.approx.ftz.f32",
    "cos": "cos.approx.ftz.f32",
    "rsqrt": "rsqrt.approx.ftz.f32",
    "div": "div.approx.ftz.f32",
}
# The ulp bounds the docs page states for the interp and cpu runtimes with fast math on (they compute the
# accurate functions, so these are the bounds of the main table), over the domains of DOMAINS.
BOUNDS = {
    "exp2": {"interp": 2, "cpu": 1},
    "exp": {"interp": 3, "cpu": 1},
    "log2": {"interp": 2, "cpu": 1},
    "log": {"interp": 3, "cpu": 1},
    "sin": {"interp": 2, "cpu": 1},
    "cos": {"interp": 2, "cpu": 1},
    "rsqrt": {"interp": 2, "cpu": 2},
    "div": {"interp": 0.5, "cpu": 0.5},
}
ORACLES = {
    "exp2": lambda v: mpmath.mpf(2) ** v,
    "exp": mpmath.exp,
    "log2": lambda v: mpmath.log(v, 2),
    "log": mpmath.log,
    "sin": mpmath.sin,
    "cos": mpmath.cos,
    "rsqrt": lambda v: 1 / mpmath.sqrt(v),
}
# The stated domains (where every result is a normal f32): (lo, hi, "lin" | "log") ranges and edge values.
DOMAINS = {
    "exp2": ([(-126, 127.9, "lin"), (-1, 1, "lin")], [0.0, 0.5, -126.0, 127.5, 1e-7]),
    "exp": ([(-87.3, 88.7, "lin"), (-1, 1, "lin")], [0.0, 1.0, -1.0, 88.7, -87.3]),
    "log2": ([(SMALLEST_NORMAL, 3e38, "log"), (0.5, 2, "lin")], [1.0, 2.0, 0.5, SMALLEST_NORMAL, 3e38]),
    "log": ([(SMALLEST_NORMAL, 3e38, "log"), (0.5, 2, "lin")], [1.0, 2.0, 0.5, SMALLEST_NORMAL, 3e38]),
    "sin": ([(-100 * math.pi, 100 * math.pi, "lin"), (-math.pi, math.pi, "lin")], [0.0, 0.5, 1.0, 1e-20, 3.0]),
    "cos": ([(-100 * math.pi, 100 * math.pi, "lin"), (-math.pi, math.pi, "lin")], [0.0, 0.5, 1.0, 3.0]),
    "rsqrt": ([(SMALLEST_NORMAL, 3e38, "log")], [1.0, 2.0, 3.0, 4.0, SMALLEST_NORMAL]),
}
N_RANDOM = 160


@cp.cube(launch=True, fastmath=True)
def fast_ops(x: cp.Tensor[f32], y: cp.Tensor[f32], out: cp.Tensor[f32]):
    i = cp.ABSOLUTE_POS
    if i < x.shape(1):
        for k in cp.unroll(range(len(_FNS))):
            out[k, i] = _FNS[k](x[k, i])
        out[len(_FNS), i] = x[len(_FNS), i] / y[len(_FNS), i]


@cp.cube(launch=True)
def exp2_kernel(x: cp.Array[f32], out: cp.Array[f32]):
    out[cp.ABSOLUTE_POS] = cp.exp2(x[cp.ABSOLUTE_POS])


@cp.cube(launch=True)
def sin_kernel(x: cp.Array[f32], out: cp.Array[f32]):
    out[cp.ABSOLUTE_POS] = cp.sin(x[cp.ABSOLUTE_POS])


@cp.cube(launch=True, fastmath=False)
def never_fast(x: cp.Array[f32], out: cp.Array[f32]):
    out[cp.ABSOLUTE_POS] = cp.sin(x[cp.ABSOLUTE_POS])


@cp.cube(launch=True, fastmath=True)
def fast_lines(x: cp.Array[cp.Line[f32]], out: cp.Array[cp.Line[f32]]):
    v = x[cp.ABSOLUTE_POS]
    out[cp.ABSOLUTE_POS] = cp.cos(v) / v


@cp.cube(launch=True, fastmath=True)
def fast_f64(x: cp.Array[f64], out: cp.Array[f64]):
    v = x[cp.ABSOLUTE_POS]
    out[cp.ABSOLUTE_POS] = cp.exp(v) + cp.log(v) + cp.sin(v) + cp.rsqrt(v) / v


@cp.cube(fastmath=True)  # a cube function accepts the option and leaves the choice to its kernel
def helper(v: f32) -> f32:
    return cp.sin(v)


@cp.cube(launch=True)
def calls_helper(x: cp.Array[f32], out: cp.Array[f32]):
    out[cp.ABSOLUTE_POS] = helper(x[cp.ABSOLUTE_POS])


def _arrays(elem=f32, line_size: int = 1):
    client = cp.client("interp")
    dtype = np.float64 if elem is f64 else np.float32
    return tuple(cp.ArrayArg(client.zeros((32,), dtype), line_size=line_size) for _ in range(2))


def _tensors():
    client = cp.client("interp")
    return tuple(cp.TensorArg(client.zeros((len(OPS), 32), np.float32)) for _ in range(3))


def _instructions(ptx: str) -> list[str]:
    """The PTX instructions' opcodes (``ex2.approx.ftz.f32``), in order."""
    names = []
    for line in ptx.splitlines():
        line = line.strip()
        if line and line[0].isalpha() and not line.startswith(".") and not line.endswith(":"):
            names.append(line.split()[0].rstrip(";"))
    return names


# -- the PTX --------------------------------------------------------------------------------------------------
def test_fast_math_emits_each_approximate_ftz_instruction():
    compiled = fast_ops.compile(cp.CubeDim(32), *_tensors(), unchecked=True)
    ops = _instructions(compiled.ptx)
    for name, instruction in INSTRUCTIONS.items():
        assert instruction in ops, f"{name}: no {instruction} in {ops}"
    assert ops.count("ex2.approx.ftz.f32") == 2  # exp2, and exp as ex2(x * log2 e)
    # exp and log scale by f32 log2(e) and ln(2) with mul.rn.ftz.f32, as nvcc's __expf and __logf
    assert ops.count("mul.rn.ftz.f32") == 2
    assert "0f3FB8AA3B" in compiled.ptx and "0f3F317218" in compiled.ptx
    assert not any(op.startswith("call") for op in ops)  # no libdevice function left


@needs_ptxas
def test_fast_math_ptx_passes_ptxas():
    compiled = fast_ops.compile(cp.CubeDim(32), *_tensors(), unchecked=True)
    assert compiled.ptxas_status == "assembled" and compiled.cubin


def test_off_none_of_the_approximate_forms():
    compiled = fast_ops.compile(cp.CubeDim(32), *_tensors(), unchecked=True, fastmath=False)
    ops = _instructions(compiled.ptx)
    for form in ("lg2.approx", "sin.approx", "cos.approx", "rsqrt.approx", "div.approx"):
        assert not any(op.startswith(form) for op in ops), form
    assert "div.rn.f32" in ops and "ex2.approx.f32" in ops


def test_exp2_off_is_what_nvcc_emits_for_exp2f():
    # nvcc 13.0 -O3 -arch=sm_90a, exp2f(x) without -use_fast_math: one `ex2.approx.f32` (ptxas then adds the
    # subnormal fix-up, the same for both); nothing else computes on f32.
    ptx = exp2_kernel.compile(cp.CubeDim(32), *_arrays(), unchecked=True, fastmath=False).ptx
    assert [op for op in _instructions(ptx) if op.endswith(".f32")] == ["ex2.approx.f32"]


def test_exp2_on_is_the_ftz_form():
    ptx = exp2_kernel.compile(cp.CubeDim(32), *_arrays(), unchecked=True, fastmath=True).ptx
    assert [op for op in _instructions(ptx) if op.endswith(".f32")] == ["ex2.approx.ftz.f32"]


def test_lines_use_the_instruction_per_lane():
    compiled = fast_lines.compile(cp.CubeDim(8), *_arrays(line_size=4), unchecked=True)
    ops = _instructions(compiled.ptx)
    assert ops.count("cos.approx.ftz.f32") == 4 and ops.count("div.approx.ftz.f32") == 4
    if ptxas.available():
        assert compiled.ptxas_status == "assembled"


def test_f64_is_untouched():
    on = fast_f64.compile(cp.CubeDim(32), *_arrays(f64), unchecked=True)
    off = fast_f64.compile(cp.CubeDim(32), *_arrays(f64), unchecked=True, fastmath=False)
    assert on.definition.fastmath and not off.definition.fastmath
    assert on.ptx == off.ptx  # libdevice's f64 functions, the same bits


# -- the option's resolution ---------------------------------------------------------------------------------
def _is_fast(kernel, **options) -> bool:
    ptx = kernel.compile(cp.CubeDim(32), *_arrays(), unchecked=True, **options).ptx
    return "sin.approx.ftz.f32" in _instructions(ptx)


def test_the_setting_is_off_by_default_and_typed(monkeypatch):
    monkeypatch.delenv("CUBEPY_FASTMATH", raising=False)
    assert config.get("CUBEPY_FASTMATH") is False
    monkeypatch.setenv("CUBEPY_FASTMATH", "on")
    assert config.get("CUBEPY_FASTMATH") is True
    monkeypatch.setenv("CUBEPY_FASTMATH", "fast")
    with pytest.raises(cp.CubeError, match="CUBEPY_FASTMATH"):
        config.get("CUBEPY_FASTMATH")


def test_compile_argument_then_decorator_then_setting():
    assert not _is_fast(sin_kernel)
    assert _is_fast(sin_kernel, fastmath=True)
    with config.override(CUBEPY_FASTMATH=True):
        assert _is_fast(sin_kernel)  # the decorator left it to the setting
        assert not _is_fast(sin_kernel, fastmath=False)
        assert not _is_fast(never_fast)  # the decorator's choice wins over the setting
    assert _is_fast(never_fast, fastmath=True)


def test_a_cube_function_follows_its_kernel():
    assert not _is_fast(calls_helper)
    assert _is_fast(calls_helper, fastmath=True)


def test_testing_expand_marks_the_definition():
    assert cp.testing.expand(sin_kernel, cp.Array[f32], cp.Array[f32], fastmath=True).definition.fastmath
    assert not cp.testing.expand(sin_kernel, cp.Array[f32], cp.Array[f32]).definition.fastmath
    assert cp.testing.expand(fast_lines, cp.Array[f32], cp.Array[f32]).definition.fastmath


# -- the caches ----------------------------------------------------------------------------------------------
def test_the_disk_key_includes_fast_math():
    args = ("compile", "sm_90a", "kernel-id", (32, 1, 1), True, (1, 2))
    off = cache.entry_key(*args, True, False)
    assert off == cache.entry_key(*args, True)  # the keys of kernels without fast math are unchanged
    assert cache.entry_key(*args, True, True) != off


def test_compile_never_serves_one_for_the_other_from_disk(tmp_path):
    with config.override(CUBEPY_CACHE_DIR=str(tmp_path)):
        assert _is_fast(sin_kernel, fastmath=True)
        assert not _is_fast(sin_kernel, fastmath=False)
        assert _is_fast(sin_kernel, fastmath=True)
        assert not _is_fast(sin_kernel)
    assert len(list((tmp_path / "compile").rglob("*.pkl"))) == 2


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_launches_cache_each_choice_apart(runtime):
    client = cp.client(runtime)
    x = client.create(np.linspace(0.5, 2.0, 32, dtype=np.float32))
    out = client.zeros((32,), np.float32)

    def launch():
        sin_kernel.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(x), cp.ArrayArg(out))

    before = dict(client.stats)  # the client may be shared with other tests
    with config.override(CUBEPY_FASTMATH=True):
        launch()
    launch()
    launch()
    assert client.stats["misses"] - before["misses"] == 2 and client.stats["hits"] - before["hits"] == 1
    built = [getattr(a, "definition", a) for key, a in client._cache.items() if key[0] == sin_kernel.identity]
    assert sorted(definition.fastmath for definition in built) == [False, True]


# -- accuracy on the interp and cpu runtimes ------------------------------------------------------------------
def _samples(ranges, rng: np.random.Generator) -> np.ndarray:
    parts = []
    for lo, hi, scale in ranges:
        if scale == "log":
            parts.append(np.exp(rng.uniform(np.log(lo), np.log(hi), N_RANDOM)))
        else:
            parts.append(rng.uniform(lo, hi, N_RANDOM))
    return np.concatenate(parts)


def _inputs() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per op, f32 inputs over its stated domain (for ``div``, quotients of normal results)."""
    rng = np.random.default_rng(30)
    found = {}
    for name in UNARY:
        ranges, edges = DOMAINS[name]
        x = np.concatenate([np.array(edges), _samples(ranges, rng)]).astype(np.float32)
        found[name] = (x, np.ones_like(x))
    # |y| in [2^-126, 2^126] (div.approx's stated range); |x| chosen so that x / y stays a normal f32
    count = 2 * N_RANDOM
    y = np.exp2(rng.uniform(-126, 126, count)) * rng.choice([-1.0, 1.0], count)
    x = y * np.exp2(rng.uniform(-60, 60, count)) * rng.uniform(1, 2, count) * rng.choice([-1.0, 1.0], count)
    x = np.concatenate([[1.0, 3.0, -7.0, 1e30], np.clip(x, -3e38, 3e38)]).astype(np.float32)
    y = np.concatenate([[3.0, 7.0, 3.0, 1e10], y]).astype(np.float32)
    found["div"] = (x, y)
    return found


def _exact(name: str, x: np.ndarray, y: np.ndarray) -> list:
    mpmath.mp.prec = 120
    if name == "div":
        return [mpmath.mpf(float(a)) / mpmath.mpf(float(b)) for a, b in zip(x, y)]
    return [ORACLES[name](mpmath.mpf(float(v))) for v in x]


def _ulps(got: np.ndarray, want: list) -> np.ndarray:
    """|got - exact| in f32 ulps of the exact value (the subnormal spacing below the smallest normal)."""
    errors = []
    for g, w in zip(got, want):
        exponent = max(int(mpmath.floor(mpmath.log(abs(w), 2))) if w != 0 else -126, -126)
        ulp = mpmath.ldexp(1, exponent - 23)
        errors.append(float(abs(mpmath.mpf(float(g)) - w) / ulp) if math.isfinite(float(g)) else math.inf)
    return np.array(errors)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_fast_math_results_within_the_stated_bounds(runtime):
    inputs = _inputs()
    width = max(len(x) for x, _ in inputs.values())
    x = np.ones((len(OPS), width), np.float32)
    y = np.ones_like(x)
    for row, name in enumerate(OPS):
        a, b = inputs[name]
        x[row, : len(a)], y[row, : len(b)] = a, b
    client = cp.client(runtime)
    out = client.zeros(x.shape, np.float32)
    fast_ops.launch(
        client,
        cp.CubeCount((width + 127) // 128),
        cp.CubeDim(128),
        cp.TensorArg(client.create(x)),
        cp.TensorArg(client.create(y)),
        cp.TensorArg(out),
    )
    got = client.read(out)
    for row, name in enumerate(OPS):
        a, b = inputs[name]
        errors = _ulps(got[row, : len(a)], _exact(name, a, b))
        bound = BOUNDS[name][runtime]
        worst = int(np.argmax(errors))
        assert errors.max() <= bound, f"{name} on {runtime}: {errors.max():.3f} ulp > {bound} at x={a[worst]!r}"


def test_the_docs_page_states_these_bounds():
    text = PAGE.read_text()
    section = text[text.index("## Fast math") :]
    for name, instruction in INSTRUCTIONS.items():
        label = "`/`" if name == "div" else f"`{name}`"
        row = next((line for line in section.splitlines() if line.startswith(f"| {label} |")), None)
        assert row is not None, f"no fast-math row for {name}"
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert instruction in row, row
        assert len(cells) == 6 and cells[-1] == f"{BOUNDS[name]['interp']} / {BOUNDS[name]['cpu']}", row
    assert re.search(r"CUBEPY_FASTMATH", section)
