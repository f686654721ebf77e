"""The operations a fuzz case draws from, and their numpy reference under cubepy's documented semantics.

``cubepy.testing.fuzz`` generates kernels from this vocabulary; ``evaluate`` computes what each expression tree
must give, written independently of the interp (see ``cubepy.testing.fuzz`` for the rules it follows).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from cubepy.ir.types import ELEM_BY_NAME

FLOATS = ("f16", "bf16", "f32", "f64")
SIGNED = ("i8", "i16", "i32", "i64")
UNSIGNED = ("u8", "u16", "u32", "u64", "usize")
ELEMS = SIGNED + UNSIGNED + FLOATS + ("bool",)  # integers first: hypothesis draws early entries more
LINES = (1, 2, 4)
TOLERANCE = {"f16": 1e-2, "bf16": 4e-2, "f32": 1e-5, "f64": 1e-12}  # relative, for inexact results

_BITS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64, "u8": 8, "u16": 16, "u32": 32, "u64": 64, "usize": 64}
INT_BINARY = (
    "add",
    "floordiv",
    "mod",
    "shr",
    "shl",
    "sub",
    "mul",
    "div_trunc",
    "rem_trunc",
    "bitand",
    "bitor",
    "bitxor",
    "min",
    "max",
)
FLOAT_BINARY = ("add", "sub", "mul", "div", "min", "max")
FLOAT_UNARY_EXACT = ("neg", "abs", "floor", "ceil", "trunc", "sqrt", "recip", "round")
FLOAT_UNARY_INEXACT = ("exp", "sin", "cos", "tanh", "erf", "log1p", "rsqrt")
PERIODIC = ("sin", "cos")  # an argument's absolute error is the result's: fed exact values only
ROUNDING = ("floor", "ceil", "trunc", "round")  # to an integer value: never of an inexact argument
INT_UNARY = ("bitnot", "abs", "neg")  # abs and neg only for signed types
TERNARY = ("clamp", "fma")  # fma only for floats (and inexact: one rounding or two)
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
INFIX = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "mod": "%",
    "bitand": "&",
    "bitor": "|",
    "bitxor": "^",
    "shl": "<<",
    "shr": ">>",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
}
CALL = {
    "min": "cp.min",
    "max": "cp.max",
    "div_trunc": "cp.div_trunc",
    "rem_trunc": "cp.rem_trunc",
    "abs": "cp.abs",
    "floor": "cp.floor",
    "ceil": "cp.ceil",
    "trunc": "cp.trunc",
    "exp": "cp.exp",
    "sin": "cp.sin",
    "cos": "cp.cos",
    "tanh": "cp.tanh",
    "recip": "cp.recip",
    "round": "cp.round",
    "erf": "cp.erf",
    "clamp": "cp.clamp",
    "fma": "cp.fma",
}
ABS_ARGUMENT = {"sqrt": "cp.sqrt", "log1p": "cp.log1p", "rsqrt": "cp.rsqrt"}  # of |x|: stay in the domain


# -- expression trees ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """One expression: ``kind`` (leaf, lit, bin, un, cast, cmp, select), its type and children."""

    kind: str
    elem: str
    op: str = ""
    args: tuple[Node, ...] = ()
    value: Any = None
    exact: bool = True  # no transcendental function below (its value is bit-exact on every back end)


def tolerance_of(node: Node) -> float:
    """The loosest ``TOLERANCE`` of the types an inexact value passes through in ``node`` (0: exact)."""
    if node.exact:
        return 0.0
    return max([TOLERANCE.get(node.elem, 0.0)] + [tolerance_of(arg) for arg in node.args])


def is_float(elem: str) -> bool:
    return elem in FLOATS


# -- the numpy reference ------------------------------------------------------------------------


def _wrap(values: np.ndarray, elem: str) -> np.ndarray:
    """Python ints (object array) reduced into ``elem``'s range, as ``elem``'s dtype."""
    bits = _BITS[elem]
    mask = (1 << bits) - 1
    wrapped = [
        (int(v) & mask) - ((1 << bits) if elem in SIGNED and (int(v) & mask) >> (bits - 1) else 0)
        for v in values.reshape(-1)
    ]
    return np.array(wrapped, dtype=object).reshape(values.shape).astype(numpy_dtype_of(elem))


def numpy_dtype_of(elem: str) -> np.dtype:
    """The numpy dtype of element type name ``elem``."""
    return ELEM_BY_NAME[elem].numpy


def _convert(values: np.ndarray, src: str, dst: str) -> np.ndarray:
    dtype = numpy_dtype_of(dst)
    if src == dst:
        return values
    if dst == "bool":
        return cast(np.ndarray, values.astype(np.float64) != 0 if is_float(src) else values.astype(object) != 0)
    if is_float(dst):
        if is_float(src):
            return values.astype(np.float64).astype(dtype)
        return (
            np.array([float(int(v)) for v in values.reshape(-1)], dtype=np.float64).reshape(values.shape).astype(dtype)
        )
    if is_float(src):
        info = np.iinfo(dtype)
        out = []
        for v in values.astype(np.float64).reshape(-1):
            out.append(
                0 if math.isnan(v) else info.max if v >= info.max else info.min if v <= info.min else math.trunc(v)
            )
        return np.array(out, dtype=object).reshape(values.shape).astype(dtype)
    return _wrap(values.astype(object), dst)


def int_binary(op: str, a: np.ndarray, b: np.ndarray, elem: str) -> np.ndarray:
    bits = _BITS[elem]
    signed = elem in SIGNED
    all_ones = -1 if signed else (1 << bits) - 1
    out = []
    for x, y in zip(a.astype(object).reshape(-1), b.astype(object).reshape(-1)):
        x, y = int(x), int(y)
        if op in ("floordiv", "div_trunc"):
            if y == 0:
                r = all_ones
            elif op == "floordiv":
                r = x // y
            else:
                r = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
        elif op in ("mod", "rem_trunc"):
            r = (
                x
                if y == 0
                else (x % y if op == "mod" else x - y * (abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)))
            )
        elif op in ("shl", "shr"):
            amount = y & ((1 << bits) - 1)
            if amount >= bits:
                r = 0 if op == "shl" or x >= 0 else -1
            else:
                r = x << amount if op == "shl" else x >> amount
        else:
            r = {
                "add": x + y,
                "sub": x - y,
                "mul": x * y,
                "bitand": x & y,
                "bitor": x | y,
                "bitxor": x ^ y,
                "min": min(x, y),
                "max": max(x, y),
            }[op]
        out.append(r)
    return _wrap(np.array(out, dtype=object).reshape(a.shape), elem)


def float_op(op: str, args: list[np.ndarray], elem: str) -> np.ndarray:
    wide = [np.asarray(v).astype(np.float64) for v in args]
    fns: dict[str, Callable[..., np.ndarray]] = {
        "add": np.add,
        "sub": np.subtract,
        "mul": np.multiply,
        "div": np.true_divide,
        "min": np.fmin,
        "max": np.fmax,
        "neg": np.negative,
        "abs": np.abs,
        "floor": np.floor,
        "ceil": np.ceil,
        "trunc": np.trunc,
        "sqrt": lambda v: np.sqrt(np.abs(v)),
        "exp": np.exp,
        "sin": np.sin,
        "cos": np.cos,
        "tanh": np.tanh,
        "recip": lambda v: 1.0 / v,
        "round": np.rint,
        "erf": _erf,
        "log1p": lambda v: np.log1p(np.abs(v)),
        "rsqrt": lambda v: 1.0 / np.sqrt(np.abs(v)),
        "clamp": lambda v, lo, hi: np.fmin(np.fmax(v, lo), hi),
        "fma": lambda a, b, c: a * b + c,
    }
    return fns[op](*wide).astype(numpy_dtype_of(elem))


def _erf(values: np.ndarray) -> np.ndarray:
    """erf from Python's math library (independent of the interp's own approximation)."""
    return cast(np.ndarray, np.vectorize(math.erf, otypes=[np.float64])(values))


def evaluate(node: Node, env: dict[str, np.ndarray]) -> np.ndarray:
    """The reference value of ``node`` for every element (``env`` maps "x"/"y" to arrays)."""
    k = node.kind
    if k == "leaf":
        return env[node.value]
    if k in ("lit", "const"):
        shape = env["x"].shape
        return np.full(shape, node.value, dtype=numpy_dtype_of(node.elem))
    if k == "cast":
        return _convert(evaluate(node.args[0], env), node.args[0].elem, node.elem)
    if k == "select":
        c, a, b = (evaluate(arg, env) for arg in node.args)
        return np.where(c, a, b)
    args = [evaluate(arg, env) for arg in node.args]
    if k == "cmp":
        fn = {
            "eq": np.equal,
            "ne": np.not_equal,
            "lt": np.less,
            "le": np.less_equal,
            "gt": np.greater,
            "ge": np.greater_equal,
        }[node.op]
        return cast(np.ndarray, fn(*args))
    elem = node.elem
    if k == "un" and node.op == "is_nan":
        return np.isnan(args[0].astype(np.float64))
    if elem == "bool":
        return cast(
            np.ndarray, {"bitand": np.logical_and, "bitor": np.logical_or, "bitxor": np.logical_xor}[node.op](*args)
        )
    if is_float(elem):
        return float_op(node.op, args, elem)
    if k == "un":  # integers: bitnot, and neg/abs of signed types
        value = args[0].astype(object)
        return _wrap({"neg": -value, "abs": np.abs(value), "bitnot": ~value}[node.op], elem)
    if k == "tern":  # clamp of integers
        return cast(np.ndarray, np.minimum(np.maximum(args[0], args[1]), args[2]))
    return int_binary(node.op, args[0], args[1], elem)
