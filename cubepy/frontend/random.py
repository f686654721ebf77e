"""Triton's random numbers inside kernels: counter-based Philox4x32-10, written as cube functions.

``cp.randint(seed, offset)`` and ``cp.rand(seed, offset)`` give the same bits as Triton's
``tl.randint``/``tl.rand`` for the same seed and offset; ``cp.randn`` is Triton's Box-Muller on the
same two words, through this runtime's ``log``/``cos`` (docs/guide/random-and-autotune.md states the
bound).  There is no new IR operation: the rounds are ``cp.mul_hi`` and wrapping ``u32`` arithmetic, so
the interp, the cpu runtime and PTX (``mul.hi.u32``) run the same code.

The public functions are plain Python so that a bad argument is reported at the user's kernel line;
they normalise the seed into two ``u32`` keys (a 64-bit seed splits into its low and high words, a
signed one is sign-extended first, as Triton's ``seed.to(tl.uint64)``) and the offset into the first two
counter words (its low word, and the high word of a 64-bit offset), then call the cube functions below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from cubepy.frontend import operations, source
from cubepy.frontend.decorator import cube
from cubepy.frontend.elem import f32, i32, u32, u64
from cubepy.frontend.intrinsics import bitcast, mul_hi, unroll
from cubepy.frontend.intrinsics import max as _max
from cubepy.frontend.values import ExpandBase

I32, U32, U64 = i32.ir, u32.ir, u64.ir

__all__ = ["rand", "rand4x", "randint", "randint4x", "randn", "randn4x"]

# Philox4x32's multipliers and Weyl key increments (Salmon et al. 2011, as Triton and Random123 use them).
PHILOX_ROUND_A = 0xD2511F53
PHILOX_ROUND_B = 0xCD9E8D57
PHILOX_KEY_A = 0x9E3779B9
PHILOX_KEY_B = 0xBB67AE85
N_ROUNDS = 10
# Triton's u32 -> f32 scale: in f32 it is 2**-31 * (1 - 2**-24), the largest with (2**31 - 1) * scale < 1.0
# after f32 rounding, so rand() never returns 1.0.
_UNIFORM_SCALE = 4.6566127342e-10
_TWO_PI = 6.283185307179586
_MIN_UNIFORM = 1.0e-7


def _math(name: str) -> Callable[[Any], Any]:
    # The float math functions are generated from the IR's records (no static names to import).
    def function(x: Any) -> Any:
        return operations.unary(name, x)

    function.__name__ = name
    return function


cos, log, sin, sqrt = _math("cos"), _math("log"), _math("sin"), _math("sqrt")


@cube
def philox4x32(c0, c1, c2, c3, k0, k1, rounds):  # type: ignore[no-untyped-def]  # cube function: the DSL reads its annotations
    """``rounds`` Philox4x32 rounds of the u32 counter ``(c0..c3)`` under the key ``(k0, k1)``."""
    for _ in unroll(range(rounds)):  # a comptime count: straight-line code, as Triton unrolls it
        hi_b = mul_hi(c2, PHILOX_ROUND_B)
        hi_a = mul_hi(c0, PHILOX_ROUND_A)
        lo_b = c2 * PHILOX_ROUND_B
        lo_a = c0 * PHILOX_ROUND_A
        c0 = hi_b ^ c1 ^ k0
        c2 = hi_a ^ c3 ^ k1
        c1 = lo_b
        c3 = lo_a
        k0 = k0 + PHILOX_KEY_A
        k1 = k1 + PHILOX_KEY_B
    return (c0, c1, c2, c3)


@cube
def uint_to_uniform_float(x):  # type: ignore[no-untyped-def]  # cube function: the DSL reads its annotations
    """Triton's ``uint_to_uniform_float``: the word as i32, ``~x`` where negative, times just under 2**-31."""
    s = bitcast(x, i32)
    s = s ^ (s >> 31)  # ~s where s < 0 (its arithmetic shift is all ones), s elsewhere
    return f32(s) * _UNIFORM_SCALE


@cube
def pair_uniform_to_normal(u1, u2):  # type: ignore[no-untyped-def]  # cube function: the DSL reads its annotations
    """Triton's Box-Muller transform: two normals from two uniforms (``u1`` clamped below to 1e-7)."""
    u1 = _max(u1, f32(_MIN_UNIFORM))
    th = u2 * _TWO_PI
    r = sqrt(log(u1) * -2.0)
    return (r * cos(th), r * sin(th))


def _rounds(n_rounds: Any, name: str) -> int:
    if isinstance(n_rounds, bool) or not isinstance(n_rounds, int) or n_rounds < 1:
        source.fail(f"cp.{name}: n_rounds must be a positive Python int (comptime), got {n_rounds!r}")
    return n_rounds


def _keys(seed: Any, name: str) -> tuple[Any, Any]:
    """The two u32 Philox keys of ``seed``: its low and high words after widening to 64 bits."""
    if operations.is_number(seed):
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
            source.fail(f"cp.{name}: the seed must be an integer (u32, u64, i32, i64 or a Python int), got {seed!r}")
        value = int(seed)
        if not -(2**63) <= value < 2**64:
            source.fail(f"cp.{name}: the seed {value} does not fit in 64 bits")
        value &= 2**64 - 1  # a negative seed is its two's complement, as Triton's sign extension gives
        return operations.cast(value & 0xFFFFFFFF, U32), operations.cast(value >> 32, U32)
    if not isinstance(seed, ExpandBase):
        source.fail(f"cp.{name}: the seed must be an integer (u32, u64, i32 or i64), got {type(seed).__name__}")
    x = operations.as_element(seed, "seed")
    if not x.elem.is_int or x.elem.bits > 64:
        source.fail(f"cp.{name}: the seed must be an integer (u32, u64, i32 or i64), got {x.type!r}")
    if x.elem.bits <= 32 and x.elem.kind == "uint":
        return operations.cast(x, U32), operations.cast(0, U32)
    wide = operations.cast(x, U64)  # sign-extends a signed seed, as Triton's seed.to(tl.uint64) does
    return operations.cast(wide, U32), operations.cast(wide >> 32, U32)


def _counter(offset: Any, name: str) -> tuple[Any, Any]:
    """The first two counter words of ``offset``, as Triton's ``randint4x``: the low 32 bits (a narrower offset
    widened first) and, for a 64-bit offset, the high 32 bits (else 0)."""
    if operations.is_number(offset):
        if isinstance(offset, (bool, np.bool_)) or not isinstance(offset, (int, np.integer)):
            source.fail(f"cp.{name}: the offset must be an integer, got {offset!r}")
        value = int(offset)
        if not -(2**63) <= value < 2**64:
            source.fail(f"cp.{name}: the offset {value} does not fit in 64 bits")
        # Triton types a Python int as i32 when it fits (then the high word is 0), else as a 64-bit integer.
        high: Any = 0 if -(2**31) <= value < 2**31 else (value >> 32) & 0xFFFFFFFF
        return operations.cast(value & 0xFFFFFFFF, U32), operations.cast(high, U32)
    if not isinstance(offset, ExpandBase):
        source.fail(f"cp.{name}: the offset must be an integer value, got {type(offset).__name__}")
    x = operations.as_element(offset, "offset")
    if not x.elem.is_int or x.elem.bits > 64:
        source.fail(f"cp.{name}: the offset must be an integer (u32, i32, u64 or i64), got {x.type!r}")
    if x.elem.bits < 32:
        x = operations.cast(x, I32 if x.elem.kind == "int" else U32)  # Triton's offset.to(uint32) widens first
    low = x if x.elem is U32 else (bitcast(x, u32) if x.elem.bits == 32 else operations.cast(x, U32))
    high = operations.cast(x >> 32, U32) if x.elem.bits == 64 else operations.cast(0, U32)
    return low, high


def _words(seed: Any, offset: Any, n_rounds: Any, name: str) -> tuple[Any, Any, Any, Any]:
    k0, k1 = _keys(seed, name)
    c0, c1 = _counter(offset, name)
    zero = operations.cast(0, U32)
    return cast("tuple[Any, Any, Any, Any]", philox4x32(c0, c1, zero, zero, k0, k1, _rounds(n_rounds, name)))


def randint4x(seed: Any, offset: Any, n_rounds: int = N_ROUNDS) -> tuple[Any, Any, Any, Any]:
    """Four random u32 words for ``(seed, offset)``: Philox4x32 of the counter ``(offset, 0, 0, 0)`` (Triton's;
    a 64-bit offset puts its high word second)."""
    return _words(seed, offset, n_rounds, "randint4x")


def randint(seed: Any, offset: Any, n_rounds: int = N_ROUNDS) -> Any:
    """A random u32 for ``(seed, offset)``, bit for bit Triton's ``tl.randint``."""
    return _words(seed, offset, n_rounds, "randint")[0]


def rand(seed: Any, offset: Any, n_rounds: int = N_ROUNDS) -> Any:
    """A uniform f32 for ``(seed, offset)``, bit for bit Triton's ``tl.rand``, in [0, 1)."""
    return uint_to_uniform_float(_words(seed, offset, n_rounds, "rand")[0])


def rand4x(seed: Any, offset: Any, n_rounds: int = N_ROUNDS) -> tuple[Any, Any, Any, Any]:
    """Four uniform f32 for ``(seed, offset)``, Triton's ``tl.rand4x``."""
    w = _words(seed, offset, n_rounds, "rand4x")
    return (
        uint_to_uniform_float(w[0]),
        uint_to_uniform_float(w[1]),
        uint_to_uniform_float(w[2]),
        uint_to_uniform_float(w[3]),
    )


def randn(seed: Any, offset: Any, n_rounds: int = N_ROUNDS) -> Any:
    """A standard normal f32 for ``(seed, offset)``: Triton's ``tl.randn`` (Box-Muller on words 0 and 1)."""
    w = _words(seed, offset, n_rounds, "randn")
    return pair_uniform_to_normal(uint_to_uniform_float(w[0]), uint_to_uniform_float(w[1]))[0]


def randn4x(seed: Any, offset: Any, n_rounds: int = N_ROUNDS) -> tuple[Any, Any, Any, Any]:
    """Four standard normal f32 for ``(seed, offset)``, Triton's ``tl.randn4x``."""
    w = _words(seed, offset, n_rounds, "randn4x")
    u = [uint_to_uniform_float(word) for word in w]
    n0, n1 = pair_uniform_to_normal(u[0], u[1])
    n2, n3 = pair_uniform_to_normal(u[2], u[3])
    return (n0, n1, n2, n3)
