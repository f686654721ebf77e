"""Random control-flow kernels and their Python reference, for differential fuzzing of runtime loops.

A ``ControlCase`` is one kernel whose units each run ``for i in range(starts[u], ends[u], steps[u])``
with bounds and steps read per unit from arrays (so trip counts diverge), of a bound type and a step
type drawn from signed/unsigned mixes; steps include zero and negative values.  The loop body is a
random list of statements: accumulate, ``continue`` and ``break`` under per-unit conditions, nested
``if`` under divergence, an inner runtime loop, and an atomic counter.  ``ControlCase.reference``
runs the same program in plain Python under cubepy's documented rules (written independently of the
interp):

- a zero step runs zero iterations;
- unsigned bounds with a signed step count with the signed index type of the same width (a negative
  step counts down); signed bounds take signed steps;
- the accumulator is i32 and wraps; values are kept small, so the index never wraps.

``time_limit(seconds)`` turns a hang into a failure: each fuzz example runs under it.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from cubepy.testing.fuzz_oracle import SIGNED, UNSIGNED, numpy_dtype_of

if TYPE_CHECKING:
    from types import FrameType

UNITS = 16  # two cubes of 8


@contextlib.contextmanager
def time_limit(seconds: float, what: str = "fuzz example") -> Iterator[None]:
    """Raise ``TimeoutError`` in the main thread when the block runs longer than ``seconds`` (Unix)."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def expire(_signum: int, _frame: FrameType | None) -> NoReturn:
        raise TimeoutError(f"{what} ran longer than {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Stmt:
    """One loop-body statement: ``kind`` and its small integer parameters."""

    kind: str  # add | continue_if | break_if | nested | inner | atomic
    a: int = 0
    b: int = 0
    c: int = 0


def render_stmt(stmt: Stmt, indent: str) -> list[str]:
    """The kernel-source lines of ``stmt`` (``k`` is the index as i32, ``uu`` the unit as i32)."""
    k = stmt.kind
    if k == "add":
        return [f"{indent}acc += k * {stmt.a} + uu"]
    if k == "continue_if":
        return [f"{indent}if (k + uu) % {stmt.a} == {stmt.b}:", f"{indent}    continue"]
    if k == "break_if":
        return [f"{indent}if acc > {stmt.a}:", f"{indent}    break"]
    if k == "nested":
        return [
            f"{indent}if uu % {stmt.a} == 0:",
            f"{indent}    if k % {stmt.b} == 1:",
            f"{indent}        acc += {stmt.c}",
            f"{indent}    else:",
            f"{indent}        acc -= 1",
        ]
    if k == "inner":
        return [
            f"{indent}for j in range(uu % {stmt.a}):",
            f"{indent}    if j == {stmt.b}:",
            f"{indent}        break",
            f"{indent}    acc += cp.i32(j)",
        ]
    if k == "atomic":
        return [f"{indent}total[0].fetch_add(cp.u32(1))"]
    raise ValueError(f"unknown statement {k!r}")


def _wrap_i32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


@dataclass
class ControlCase:
    """One generated control-flow kernel and its per-unit bounds."""

    bound: str
    step_type: str
    body: tuple[Stmt, ...]
    starts: list[int]
    ends: list[int]
    steps: list[int]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> str:
        """The kernel's Python source (a module defining ``fuzz_kernel``)."""
        lines = [
            "import cubepy as cp",
            "from cubepy import ABSOLUTE_POS, Array, Atomic, cube",
            "",
            "",
            "@cube(launch=True)",
            f"def fuzz_kernel(out: Array[cp.i32], total: Array[Atomic[cp.u32]], starts: Array[cp.{self.bound}], "
            f"ends: Array[cp.{self.bound}], steps: Array[cp.{self.step_type}]):",
            "    u = ABSOLUTE_POS",
            "    uu = cp.i32(u)",
            "    acc = cp.i32(0)",
            "    for i in range(starts[u], ends[u], steps[u]):",
            "        k = cp.i32(i)",
        ]
        for stmt in self.body:
            lines += render_stmt(stmt, "        ")
        lines += ["    out[u] = acc", ""]
        return "\n".join(lines)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The per-unit starts, ends and steps as arrays of the bound and step types."""
        bound, step = numpy_dtype_of(self.bound), numpy_dtype_of(self.step_type)
        return np.array(self.starts, bound), np.array(self.ends, bound), np.array(self.steps, step)

    def reference(self) -> tuple[np.ndarray, int]:
        """(out per unit, the atomic total) computed in plain Python."""
        out, total = [], 0
        for unit in range(UNITS):
            start, end, step = self.starts[unit], self.ends[unit], self.steps[unit]
            acc = 0
            indices = range(start, end, step) if step != 0 else range(0)
            for index in indices:
                acc, stop, counted = self._body(acc, index, unit)
                total += counted
                if stop:
                    break
            out.append(acc)
        return np.array(out, np.int32), total

    def _body(self, acc: int, k: int, u: int) -> tuple[int, bool, int]:
        """One iteration: (acc, whether it broke out, atomics run)."""
        counted = 0
        for stmt in self.body:
            kind = stmt.kind
            if kind == "add":
                acc = _wrap_i32(acc + k * stmt.a + u)
            elif kind == "continue_if":
                if (k + u) % stmt.a == stmt.b:  # the kernel's `%` on i32 is Python's floor mod too
                    return acc, False, counted
            elif kind == "break_if":
                if acc > stmt.a:
                    return acc, True, counted
            elif kind == "nested":
                if u % stmt.a == 0:
                    acc = _wrap_i32(acc + stmt.c) if k % stmt.b == 1 else _wrap_i32(acc - 1)
            elif kind == "inner":
                for j in range(u % stmt.a):
                    if j == stmt.b:
                        break
                    acc = _wrap_i32(acc + j)
            elif kind == "atomic":
                counted += 1
        return acc, False, counted


def gen_control_case(draw: Callable[..., Any]) -> ControlCase:
    """A random ``ControlCase``: bound/step types, per-unit bounds with zero and negative steps, a body."""
    from hypothesis import strategies as st

    bound = draw(st.sampled_from(SIGNED + UNSIGNED))
    if bound in SIGNED:
        step_type = draw(st.sampled_from(SIGNED))
        low = 0 if draw(st.booleans()) else -12
    else:
        step_type = draw(st.sampled_from(SIGNED + UNSIGNED))
        low = 0
    negative_steps = step_type in SIGNED
    starts = [draw(st.integers(low, 12)) for _ in range(UNITS)]
    ends = [draw(st.integers(low, 12)) for _ in range(UNITS)]
    steps = [draw(st.integers(-3 if negative_steps else 0, 3)) for _ in range(UNITS)]
    kinds = st.sampled_from(["add", "continue_if", "break_if", "nested", "inner", "atomic", "add"])
    body = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(kinds)
        if kind == "add":
            body.append(Stmt(kind, draw(st.integers(-3, 3))))
        elif kind == "continue_if":
            modulus = draw(st.integers(2, 4))
            body.append(Stmt(kind, modulus, draw(st.integers(0, modulus - 1))))
        elif kind == "break_if":
            body.append(Stmt(kind, draw(st.integers(-5, 40))))
        elif kind == "nested":
            body.append(Stmt(kind, draw(st.integers(1, 3)), draw(st.integers(2, 3)), draw(st.integers(-4, 4))))
        elif kind == "inner":
            body.append(Stmt(kind, draw(st.integers(1, 4)), draw(st.integers(0, 3))))
        else:
            body.append(Stmt(kind))
    return ControlCase(bound, step_type, tuple(body), starts, ends, steps)
