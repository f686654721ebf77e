"""Random expression kernels and their numpy reference, for differential fuzzing of the interp.

A ``FuzzCase`` is one kernel over element type ``elem`` and line size ``line``: it reads two input
arrays ``a`` and ``b``, computes a random expression tree (arithmetic, comparisons with ``select``,
casts through other element types, bitwise ops, math functions), optionally picks between two trees
with a comptime flag and with a runtime condition on the position, optionally folds a third tree into
an accumulator in a runtime or unrolled loop, and stores the result.  ``FuzzCase.source`` is the
kernel's Python text; ``FuzzCase.reference(a, b)`` evaluates the same program with numpy and Python
integers under cubepy's documented semantics, written independently of the interp:

- integers wrap (two's complement); ``//`` floors and ``%`` takes the divisor's sign (Python);
  ``div_trunc``/``rem_trunc`` truncate (C);
- integer division by zero gives all ones, the remainder by zero gives the dividend;
- shift amounts are read as unsigned: at or above the width ``<<`` and unsigned ``>>`` give 0 and
  signed ``>>`` the sign fill;
- float to integer truncates, saturates and maps NaN to 0; integer to float rounds through f64;
  anything to bool is ``!= 0``;
- float arithmetic is computed in f64 and rounded once to the type (exact for + - * / sqrt);
  transcendental functions compare with the tolerance (``TOLERANCE``) of the loosest type their
  results pass through (an exp of a bf16 cast to f16 keeps bf16's error: cubepy computes it in f32,
  numpy here in f64, and next to a bf16 midpoint the two round apart), and their results never feed a
  comparison, a rounding to an integer or a float-to-int cast, where one ulp could flip the answer,
  nor a ``sin``/``cos``, which keeps an argument's absolute error (``sin(exp(x))``).

Trees are drawn through a ``draw(strategy)`` callable (hypothesis's ``data.draw``), so hypothesis
shrinks failing kernels.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from cubepy.testing.fuzz_oracle import (
    ABS_ARGUMENT,
    CALL,
    COMPARE,
    ELEMS,
    FLOAT_BINARY,
    FLOAT_UNARY_EXACT,
    FLOAT_UNARY_INEXACT,
    INFIX,
    INT_BINARY,
    INT_UNARY,
    LINES,
    PERIODIC,
    ROUNDING,
    SIGNED,
    TERNARY,
    TOLERANCE,
    Node,
    evaluate,
    float_op,
    int_binary,
    is_float,
    numpy_dtype_of,
    tolerance_of,
)


def _literal(draw: Callable[..., Any], elem: str) -> Node:
    from hypothesis import strategies as st

    if is_float(elem):
        value = draw(st.sampled_from([0.5, 1.0, 2.0, -1.25, 3.0, 0.0]))
    elif elem in SIGNED:
        value = draw(st.integers(-5, 7))
    else:
        value = draw(st.integers(0, 7))
    return Node("lit", elem, value=value)


def _constant(draw: Callable[..., Any], elem: str) -> Node:
    """A typed constant ``cp.T(v)``, edge values of the type included."""
    from hypothesis import strategies as st

    if is_float(elem):
        return Node("const", elem, value=draw(st.sampled_from([0.0, -1.5, 2.0, 0.25, 100.0])))
    info = np.iinfo(numpy_dtype_of(elem))
    edges = [0, 1, 2, 7, int(info.max), int(info.min)] + ([-1, -3] if elem in SIGNED else [])
    return Node("const", elem, value=draw(st.sampled_from(edges)))


def gen_expr(draw: Callable[..., Any], elem: str, kernel_elem: str, depth: int, line: int = 1) -> Node:
    """A random expression of type ``elem`` over the kernel's inputs ``x``, ``y`` (of ``kernel_elem``)."""
    from hypothesis import strategies as st

    # A leaf when the draw is at its top, so that hypothesis's bias to small draws grows trees.
    if depth <= 0 or draw(st.integers(0, 3)) == 3:
        if line == 1 and elem != "bool" and draw(st.integers(0, 4)) == 4:
            return _constant(draw, elem)  # typed constants: operations on two of them are folded at compile
        if elem == kernel_elem:
            return Node("leaf", elem, value=draw(st.sampled_from(["x", "y"])))
        source = Node("leaf", kernel_elem, value=draw(st.sampled_from(["x", "y"])))
        return Node("cast", elem, args=(source,))
    choice = draw(st.sampled_from(["bin", "cast", "un", "select", "tern", "is_nan", "bin"]))
    sub = depth - 1
    if choice == "cast":
        other = draw(st.sampled_from(ELEMS))
        inner = gen_expr(draw, other, kernel_elem, sub, line=line)
        if is_float(other) and not is_float(elem) and not inner.exact:
            # float->int/bool of an inexact value could flip on one ulp: cast a leaf instead
            inner = gen_expr(draw, other, kernel_elem, 0, line=line)
        # a cast to a float keeps an inexact value inexact (exp of a bf16 stays a bf16 result in an f16)
        return Node("cast", elem, args=(inner,), exact=inner.exact)
    if choice == "select":
        cond = gen_compare(draw, kernel_elem, sub, line=line)
        a = gen_expr(draw, elem, kernel_elem, sub, line=line)
        b = gen_expr(draw, elem, kernel_elem, sub, line=line)
        return Node("select", elem, args=(cond, a, b), exact=a.exact and b.exact)
    if choice == "is_nan" and elem == "bool" and is_float(kernel_elem):
        inner = gen_expr(draw, kernel_elem, kernel_elem, sub, line=line)
        if not inner.exact:  # an overflow to inf in one and not the other would flip it
            inner = gen_expr(draw, kernel_elem, kernel_elem, 0, line=line)
        return Node("un", "bool", op="is_nan", args=(inner,))
    if choice == "tern" and elem != "bool":
        op = draw(st.sampled_from(TERNARY if is_float(elem) else ("clamp",)))
        args = tuple(gen_expr(draw, elem, kernel_elem, sub, line=line) for _ in range(3))
        exact = op == "clamp" and all(arg.exact for arg in args)
        return Node("tern", elem, op=op, args=args, exact=exact)
    if elem == "bool":
        op = draw(st.sampled_from(["bitand", "bitor", "bitxor", "eq", "ne"]))
        a = gen_expr(draw, elem, kernel_elem, sub, line=line)
        b = gen_expr(draw, elem, kernel_elem, sub, line=line)
        return Node("cmp" if op in COMPARE else "bin", elem, op=op, args=(a, b))
    if choice == "un":
        if is_float(elem):
            op = draw(st.sampled_from(FLOAT_UNARY_EXACT + FLOAT_UNARY_INEXACT))
            inner = gen_expr(draw, elem, kernel_elem, sub, line=line)
            # one ulp next to an integer could flip a rounding; sin/cos turn an argument's absolute error (one ulp
            # of exp(8) is 2e-4) into the result's, past the relative tolerance of a result near 0 or 1
            if op in (*ROUNDING, *PERIODIC) and not inner.exact:
                inner = gen_expr(draw, elem, kernel_elem, 0, line=line)
            return Node("un", elem, op=op, args=(inner,), exact=inner.exact and op in FLOAT_UNARY_EXACT)
        op = draw(st.sampled_from(INT_UNARY if elem in SIGNED else INT_UNARY[:1]))
        return Node("un", elem, op=op, args=(gen_expr(draw, elem, kernel_elem, sub, line=line),))
    ops = FLOAT_BINARY if is_float(elem) else INT_BINARY
    op = draw(st.sampled_from(ops))
    a = gen_expr(draw, elem, kernel_elem, sub, line=line)
    b = _literal(draw, elem) if draw(st.booleans()) else gen_expr(draw, elem, kernel_elem, sub, line=line)
    return Node("bin", elem, op=op, args=(a, b), exact=a.exact and b.exact)


def gen_compare(draw: Callable[..., Any], kernel_elem: str, depth: int, line: int = 1) -> Node:
    """A bool comparison of two exact expressions of the kernel's type."""
    from hypothesis import strategies as st

    op = draw(st.sampled_from(COMPARE if kernel_elem != "bool" else ("eq", "ne")))
    a = gen_expr(draw, kernel_elem, kernel_elem, depth, line=line)
    b = gen_expr(draw, kernel_elem, kernel_elem, depth, line=line)
    if not (a.exact and b.exact):
        a = gen_expr(draw, kernel_elem, kernel_elem, 0, line=line)
        b = gen_expr(draw, kernel_elem, kernel_elem, 0, line=line)
    return Node("cmp", "bool", op=op, args=(a, b))


def render(node: Node, line: int) -> str:
    """The kernel-source text of ``node`` (lines of ``line`` lanes)."""
    k = node.kind
    if k == "leaf":
        return cast(str, node.value)
    if k == "lit":
        return repr(node.value)
    if k == "const":
        return f"cp.{node.elem}({node.value!r})"
    if k == "cast":
        ctor = "boolean" if node.elem == "bool" else node.elem
        inner = render(node.args[0], line)
        return f"Line[cp.{ctor}]({inner})" if line > 1 else f"cp.{ctor}({inner})"
    if k == "select":
        c, a, b = (render(arg, line) for arg in node.args)
        return f"cp.select({c}, {a}, {b})"
    if k == "un":
        inner = render(node.args[0], line)
        if node.op == "neg":
            return f"(-{inner})"
        if node.op == "bitnot":
            return f"(~{inner})"
        if node.op == "is_nan":
            return f"cp.is_nan({inner})"
        if node.op in ABS_ARGUMENT:
            return f"{ABS_ARGUMENT[node.op]}(cp.abs({inner}))"
        return f"{CALL[node.op]}({inner})"
    if k == "tern":
        return f"{CALL[node.op]}({', '.join(render(arg, line) for arg in node.args)})"
    a, b = (render(arg, line) for arg in node.args)
    if node.op in INFIX:
        return f"({a} {INFIX[node.op]} {b})"
    return f"{CALL[node.op]}({a}, {b})"


# -- whole kernels ------------------------------------------------------------------------------


@dataclass
class FuzzCase:
    """One generated kernel: its expression trees, control flow, and what it is launched with."""

    elem: str
    line: int
    main: Node
    alternative: Node | None = None  # picked when the comptime flag is false
    runtime_branch: Node | None = None  # replaces the value on even positions
    loop_body: Node | None = None  # acc = acc + body, ``trips`` times
    loop_unrolled: bool = False
    trips: int = 0
    flag: bool = True
    cube_dim: int = 8
    seed: int = 0
    _counter: Any = field(default_factory=lambda: itertools.count())

    @property
    def source(self) -> str:
        """The kernel's Python source (a module defining ``fuzz_kernel``)."""
        ty = "boolean" if self.elem == "bool" else self.elem
        arr = f"Array[Line[cp.{ty}]]" if self.line > 1 else f"Array[cp.{ty}]"
        lines = [
            "import cubepy as cp",
            "from cubepy import ABSOLUTE_POS, Array, Comptime, Line, boolean, cube",
            "",
            "",
            # numpy, the reference, rounds every product and sum; contraction has its own oracle tests
            "@cube(launch=True, contract=False)",
            f"def fuzz_kernel(a: {arr}, b: {arr}, out: {arr}, trips: cp.u32, flag: Comptime[bool]):",
            "    i = ABSOLUTE_POS",
            "    x = a[i]",
            "    y = b[i]",
            f"    acc = {render(self.main, self.line)}",
        ]
        if self.alternative is not None:
            lines += ["    if not flag:", f"        acc = {render(self.alternative, self.line)}"]
        if self.runtime_branch is not None:
            lines += ["    if i % 2 == 0:", f"        acc = {render(self.runtime_branch, self.line)}"]
        if self.loop_body is not None:
            header = f"cp.unroll(range({self.trips}))" if self.loop_unrolled else "range(trips)"
            combine = "acc ^ " if self.elem == "bool" else "acc + "
            lines += [f"    for _k in {header}:", f"        acc = {combine}{render(self.loop_body, self.line)}"]
        lines += ["    out[i] = acc", ""]
        return "\n".join(lines)

    def reference(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """What the kernel must store, computed with numpy and Python integers; ``a``, ``b`` are (n, line)."""
        with np.errstate(all="ignore"):  # inf and NaN are expected values here, not problems
            return self._reference(a, b)

    def _reference(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        env = {"x": a, "y": b}
        acc = evaluate(self.main if self.flag or self.alternative is None else self.alternative, env)
        if self.runtime_branch is not None:
            even = (np.arange(a.shape[0]) % 2 == 0)[:, None]
            acc = np.where(even, evaluate(self.runtime_branch, env), acc)
        if self.loop_body is not None:
            body = evaluate(self.loop_body, env)
            for _ in range(self.trips):
                if self.elem == "bool":
                    acc = np.logical_xor(acc, body)
                elif is_float(self.elem):
                    acc = float_op("add", [acc, body], self.elem)
                else:
                    acc = int_binary("add", acc, body, self.elem)
        return acc

    @property
    def exact(self) -> bool:
        """Whether every tree is bit-exact (no transcendental function): compare without tolerance."""
        trees = [self.main, self.alternative, self.runtime_branch, self.loop_body]
        return all(tree is None or tree.exact for tree in trees)

    @property
    def tolerance(self) -> float:
        """The relative tolerance of the comparison: that of the loosest inexact type on the way to ``elem``."""
        trees = [self.main, self.alternative, self.runtime_branch, self.loop_body]
        return max([TOLERANCE[self.elem]] + [tolerance_of(tree) for tree in trees if tree is not None])


def gen_case(draw: Callable[..., Any], elems: tuple[str, ...] = ELEMS) -> FuzzCase:
    """A random ``FuzzCase`` over one of ``elems``."""
    from hypothesis import strategies as st

    elem = draw(st.sampled_from(elems))
    line = draw(st.sampled_from(LINES))
    depth = draw(st.integers(2, 3))
    case = FuzzCase(elem, line, gen_expr(draw, elem, elem, depth, line=line))
    if draw(st.booleans()):
        case.alternative = gen_expr(draw, elem, elem, depth, line=line)
        case.flag = draw(st.booleans())
    if draw(st.booleans()):
        case.runtime_branch = gen_expr(draw, elem, elem, depth, line=line)
    if draw(st.booleans()):
        case.loop_body = gen_expr(draw, elem, elem, 1, line=line)
        case.trips = draw(st.integers(0, 3))
        case.loop_unrolled = draw(st.booleans())
    case.seed = draw(st.integers(0, 2**32 - 1))
    return case


def inputs(case: FuzzCase, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Two input arrays (count, line) with edge values of the type mixed into random ones."""
    rng = np.random.default_rng(case.seed)
    dtype = numpy_dtype_of(case.elem)
    shape = (count, case.line)
    if case.elem == "bool":
        return rng.random(shape) < 0.5, rng.random(shape) < 0.5
    if is_float(case.elem):
        edges = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -3.5, 7.0])

        def one() -> np.ndarray:
            values = rng.uniform(-8, 8, shape)
            pick = rng.random(shape) < 0.3
            return np.where(pick, rng.choice(edges, shape), values).astype(dtype)

        return one(), one()
    info = np.iinfo(dtype)
    edges = np.array([0, 1, 2, 3, info.max, info.min, info.max - 1, info.min + 1, 7, 8], dtype=object)
    if case.elem in SIGNED:
        edges = np.concatenate([edges, np.array([-1, -2, -8], dtype=object)])

    def one_int() -> np.ndarray:
        small = rng.integers(max(info.min, -40), min(info.max, 40), shape, endpoint=True).astype(object)
        pick = rng.random(shape) < 0.3
        return np.where(pick, rng.choice(edges, shape), small).astype(dtype)

    return one_int(), one_int()


def load_kernel(case: FuzzCase, directory: str | None = None) -> tuple[Any, str]:
    """Write ``case.source`` to a file (kernels are expanded from their source) and import it."""
    directory = directory or tempfile.mkdtemp(prefix="cubepy_fuzz_")
    name = f"cubepy_fuzz_{os.getpid()}_{abs(hash(case.source))}"
    path = os.path.join(directory, name + ".py")
    with open(path, "w") as handle:
        handle.write(case.source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.fuzz_kernel, path


def mismatch(case: FuzzCase, got: np.ndarray, want: np.ndarray) -> str | None:
    """None when ``got`` equals ``want`` (floats within ``TOLERANCE`` unless exact), else a description."""
    if is_float(case.elem):
        return _float_mismatch(case, got, want)
    ok = got == want
    if ok.all():
        return None
    return _describe(case, got, want, ok)


def _float_mismatch(case: FuzzCase, got: np.ndarray, want: np.ndarray) -> str | None:
    with np.errstate(all="ignore"):  # inf - inf is NaN here, and not equal: that is the intent
        g, w = got.astype(np.float64), want.astype(np.float64)
        same_nan = np.isnan(g) & np.isnan(w)
        if case.exact:
            ok = same_nan | (g == w)
        else:
            tol = case.tolerance
            ok = same_nan | (g == w) | (np.abs(g - w) <= tol * np.maximum(1.0, np.abs(w)))
    if ok.all():
        return None
    return _describe(case, got, want, ok)


def _describe(case: FuzzCase, got: np.ndarray, want: np.ndarray, ok: np.ndarray) -> str:
    where = np.argwhere(~ok)[0]
    return (
        f"element {tuple(int(i) for i in where)}: interp gave {got[tuple(where)]!r}, numpy "
        f"{want[tuple(where)]!r}\n{case.source}"
    )
