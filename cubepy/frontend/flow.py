"""Control flow at expansion time: what the rewritten ``if``/``for``/``while``/``break``/``return`` call.

Each construct first classifies its condition or iterable.  *Comptime* (a Python value or an IR
constant): the construct runs as plain Python (one arm inline, a Python loop: unrolling).
*Runtime*: the names the construct assigns that are used after it become mutable locals before it
(``enter``), each body is expanded once into a child scope, and the IR branch (``If``/``IfElse``,
``RangeLoop``, ``Loop``) is appended when the construct ends (``finish``).

``break``/``continue``/``return`` look at the control stack: inside a runtime loop (or under a
runtime branch) they emit IR ``Break``/``Continue``/``Return`` and stop expanding the rest of the body
by raising ``ArmExit``, which the innermost runtime body catches; otherwise they are Python's own.
A cube function's ``return value`` under runtime control flow is rejected (CubeCL has no early
return either): assign the result to a variable and return it at the end of the function.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

from cubepy import ir
from cubepy.errors import ArmExit
from cubepy.frontend import mutability, operations, source
from cubepy.frontend.state import ControlEntry, ScopeBuilder, require_state
from cubepy.frontend.values import ExpandBase, ExpandElement, Unbound
from cubepy.ir import VarKind
from cubepy.ir import ops as irops
from cubepy.ir.ops import branch

if TYPE_CHECKING:
    from types import TracebackType

    from cubepy.frontend.mutability import FrameVars
    from cubepy.frontend.state import ExpansionState


class RangeHint:
    """``cp.range(start, stop, step, unroll=N)``: a runtime ``range`` loop with an unroll hint for the compiler."""

    __slots__ = ("args", "unroll")

    def __init__(self, args: tuple[Any, ...], unroll: int | None) -> None:
        self.args = args
        self.unroll = unroll

    def __iter__(self) -> Iterator[int]:
        return iter(builtins.range(*self.args))  # outside a kernel: a plain range


class Unroll:
    """``cp.unroll(iterable)``: iterate at expansion time, emitting the body once per value."""

    __slots__ = ("iterable",)

    def __init__(self, iterable: Iterable[Any]) -> None:
        self.iterable = iterable

    def __iter__(self) -> Iterator[Any]:
        return iter(self.iterable)


def _classify(cond: Any) -> tuple[bool, ExpandElement | bool]:
    """(is_runtime, comptime truth value or runtime bool element)."""
    mutability.check_bound(cond)
    if operations.is_comptime(cond):
        return False, bool(operations.comptime_value(cond))
    value = operations.to_bool(cond)
    if value.type.line != 1:
        source.fail(f"a line of {value.type.line} bools cannot be a branch condition; reduce it or use cp.select")
    return True, value


class _Body:
    """The context of one runtime body: a child scope plus a control-stack entry; swallows ArmExit."""

    __slots__ = ("region", "kind", "scope", "exited", "_saved", "_depth")

    def __init__(self, region: _Region, kind: str) -> None:
        self.region = region
        self.kind = kind
        self.scope: ScopeBuilder | None = None  # set on entry
        self.exited = False

    def __enter__(self) -> _Body:
        state = self.region.state
        self.scope = self.region.parent.child()
        self._saved = state.current
        self._depth = len(state.control)
        state.current = self.scope
        state.control.append(_entry(self.kind, self.region.loc))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        state = self.region.state
        state.current = self._saved
        del state.control[self._depth :]
        if exc_type is ArmExit:
            self.exited = True
            return True
        return False


def _frozen(body: _Body) -> ir.Scope:
    """The IR scope ``body`` built (it has been entered)."""
    assert body.scope is not None, "the body was never entered"
    return body.scope.freeze()


class _NoBody:
    """The context of a comptime arm or iteration (``unrolled`` pushes a control entry)."""

    __slots__ = ("state", "kind", "_depth")

    def __init__(self, state: ExpansionState, kind: str | None) -> None:
        self.state = state
        self.kind = kind

    def __enter__(self) -> _NoBody:
        self._depth = len(self.state.control)
        if self.kind is not None:
            self.state.control.append(_entry(self.kind, None))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        del self.state.control[self._depth :]


def _entry(kind: str, loc: ir.SourceLoc | None) -> ControlEntry:
    return ControlEntry(kind, None, loc)


class _Region:
    """What if and loops share: promotion of names before a runtime construct and their values after."""

    WHAT = "construct"

    def __init__(self) -> None:
        self.state = require_state()
        self.loc = self.state.location()
        self.parent = self.state.current
        self.depth = len(self.state.control)
        self.runtime = False
        self.names: tuple[str, ...] = ()
        self.kinds: list[str] = []
        self.pre: list[object] = []
        self.live: frozenset[str] = frozenset()
        self.muts: FrameVars | None = None

    @property
    def line(self) -> int | str:
        """The construct's source line, for messages ("?" when unknown)."""
        return self.loc.line if self.loc is not None else "?"

    def __enter__(self) -> _Region:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.state.current = self.parent
            del self.state.control[self.depth :]

    def enter(
        self, muts: FrameVars | None, names: tuple[str, ...], values: tuple[Any, ...], live: tuple[str, ...]
    ) -> tuple[Any, ...]:
        """Before a runtime construct: names assigned in it and used after become mutable locals."""
        self.muts, self.names, self.live = muts, names, frozenset(live)
        for name, value in zip(names, values):
            if isinstance(value, Unbound):
                kind = "local"
            elif name not in self.live:
                kind = "dead"
            elif mutability.can_be_mutable(value):
                before, value = value, mutability.into_mut(value, muts)
                mutability.record_promotion(name, before, value, self.WHAT, self.loc)
                kind = "mutable"
            else:
                kind = "frozen"
            self.kinds.append(kind)
            self.pre.append(value)
        return tuple(self.pre)

    def check_body_end(self, values: tuple[Any, ...]) -> None:
        """At the normal end of a runtime body: mutables must still be themselves."""
        for name, kind, pre, current in zip(self.names, self.kinds, self.pre, values):
            if kind in ("mutable", "frozen") and current is not pre:
                what = f"a comptime {type(pre).__name__}" if kind == "frozen" else "a value that cannot change"
                source.fail(
                    f"'{name}' holds {what} and is rebound inside the runtime {self.WHAT} at line "
                    f"{self.line}; only numbers, runtime values, tuples of them and cube types can "
                    "change under a runtime condition"
                )

    def after_value(self, index: int) -> object:
        """The value of a promoted/dead name after the construct."""
        name, kind, pre = self.names[index], self.kinds[index], self.pre[index]
        if kind in ("mutable", "frozen"):
            return pre
        if kind == "dead":
            return Unbound(
                name,
                f"was reassigned inside the runtime {self.WHAT} at line {self.line}, and "
                "cubepy did not see it read afterwards (it is not a mutable variable)",
            )
        return Unbound(
            name,
            f"is assigned inside the runtime {self.WHAT} at line {self.line} and used after "
            "it; assign it before the construct so it becomes a mutable variable",
        )


class IfControl(_Region):
    """A rewritten ``if``/``elif``/``else`` statement."""

    WHAT = "if"

    def __init__(self, cond: Any, has_else: bool) -> None:
        super().__init__()
        self.runtime, value = _classify(cond)
        self.cond = value
        self.has_else = has_else
        self.take_then = self.runtime or bool(value)
        self.take_else = self.runtime or not bool(value)
        self.arms: dict[str, _Body] = {}
        self.completed: dict[str, bool] = {}
        self.merged: dict[str, object] = {}
        self.partial: set[str] = set()

    def _arm(self, which: str) -> _Body | _NoBody:
        if not self.runtime:
            return _NoBody(self.state, None)
        body = _Body(self, "arm")
        self.arms[which] = body
        return body

    def then_(self) -> _Body | _NoBody:
        """The context of the then-arm."""
        return self._arm("then")

    def else_(self) -> _Body | _NoBody:
        """The context of the else-arm."""
        return self._arm("else")

    def arm_done(self, which: str, values: tuple[Any, ...]) -> None:
        """At the normal end of an arm: record the values of names first bound inside it."""
        if not self.runtime:
            return
        self.check_body_end(values)
        self.completed[which] = True
        for name, kind, value in zip(self.names, self.kinds, values):
            if kind != "local" or name not in self.live:
                continue
            if isinstance(value, Unbound) or not mutability.can_be_mutable(value):
                self.partial.add(name)
                continue
            target = self.merged.get(name)
            if target is None:
                target = mutability.declare_like(value, self.muts, self.parent)
                self.merged[name] = target
            mutability.assign_into(target, value, f"assignment to '{name}'")

    def then_done(self, values: tuple[Any, ...]) -> None:
        """End of the then-arm."""
        self.arm_done("then", values)

    def else_done(self, values: tuple[Any, ...]) -> None:
        """End of the else-arm."""
        self.arm_done("else", values)

    def reset(self) -> tuple[Any, ...]:
        """The names' values before the branch, for the else-arm."""
        return tuple(self.pre)

    def finish(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        """Emit the branch; the names' values after it."""
        if not self.runtime:
            return values
        assert isinstance(self.cond, ExpandElement)  # a runtime if has a runtime condition
        then_scope = _frozen(self.arms["then"])
        operation: branch.If | branch.IfElse
        if self.has_else:
            operation = branch.IfElse(self.cond.var, then_scope, _frozen(self.arms["else"]))
        else:
            operation = branch.If(self.cond.var, then_scope)
        self.parent.append(operation, None, self.loc)
        result = []
        for index, (name, kind) in enumerate(zip(self.names, self.kinds)):
            if kind == "local" and name in self.merged and name not in self.partial and self.has_else:
                result.append(self.merged[name])
            elif kind == "local" and name in self.live:
                result.append(
                    Unbound(
                        name,
                        f"is assigned only on some paths of the runtime if at line "
                        f"{self.line} and used after it; assign it before the if "
                        "(or in every branch) so it becomes a mutable variable",
                    )
                )
            else:
                result.append(self.after_value(index))
        return tuple(result)


def if_(cond: Any, has_else: bool = False) -> IfControl:
    """Classify an ``if`` condition."""
    return IfControl(cond, has_else)


class _RuntimeOnce:
    """The iterator of a runtime loop: the body is expanded once inside the loop's child scope."""

    def __init__(self, loop: LoopControl) -> None:
        self.loop = loop
        self.step = 0

    def __iter__(self) -> _RuntimeOnce:
        return self

    def __next__(self) -> ExpandElement | None:
        self.step += 1
        if self.step == 1:
            return self.loop.open_body()
        if self.step == 2:
            self.loop.close_body()
        raise StopIteration


class LoopControl(_Region):
    """A rewritten ``for`` or ``while`` loop (used as a ``with`` block around the Python loop)."""

    WHAT = "loop"

    def __init__(self) -> None:
        super().__init__()
        self.body: _Body | None = None
        self.body_closed = False
        self.comptime_values: Iterable[Any] | None = None
        self.cond_fn: Callable[[], Any] | None = None
        self.range_vars: tuple[ir.Variable, ...] | None = None
        self.index: ir.Variable | None = None
        self.index_weak: int | None = None
        self.unroll: int | None = None  # a RangeLoop's hint (cp.range(..., unroll=N))

    def items(self) -> Iterator[Any]:
        """What the Python ``for`` iterates: once (runtime) or every comptime value."""
        if self.runtime:
            return _RuntimeOnce(self)
        if self.cond_fn is not None:
            return self._comptime_while()
        # set by for_; a user's `for x in None` leaves None, and iter() raises its TypeError as before
        return iter(cast(Iterable[Any], self.comptime_values))

    def _comptime_while(self) -> Iterator[None]:
        assert self.cond_fn is not None  # set by while_ before items() chose this
        iteration = 0
        while True:
            is_runtime, truth = _classify(self.cond_fn())
            if is_runtime:
                source.fail(
                    f"the condition of the while loop at line {self.line} was comptime and became "
                    f"runtime in iteration {iteration + 1}; make its variables runtime before the loop "
                    "(cp.runtime(x)) so the loop is a runtime loop"
                )
            if not truth:
                return
            iteration += 1
            yield None

    def open_body(self) -> ExpandElement | None:
        """Enter the body scope; the loop index (range), or None after emitting the exit test (while)."""
        self.body = _Body(self, "loop")
        self.body.__enter__()
        if self.range_vars is not None:
            self.index = self.state.new_local(self.range_vars[0].type)
            # the body's scope: set by __enter__ above
            self.state.defined_in[(self.index.kind, self.index.id)] = cast(ScopeBuilder, self.body.scope)
            return ExpandElement(self.index, self.state, weak=self.index_weak)
        if self.cond_fn is not None:
            is_runtime, cond = _classify(self.cond_fn())
            if not is_runtime:
                cond = operations.literal(bool(cond), ir.BOOL)
            stop = operations.unary("not", cond)
            body_scope = self.state.current
            exit_scope = body_scope.child()
            exit_scope.append(branch.Break())
            body_scope.append(branch.If(stop.var, exit_scope.freeze()))
        return None

    def close_body(self) -> None:
        """Leave the body scope (once)."""
        if self.body is not None and not self.body_closed:
            self.body_closed = True
            self.body.__exit__(None, None, None)

    def iteration(self) -> _Catch | _NoBody:
        """The context of one expansion of the body."""
        if self.runtime:
            return _Catch()
        return _NoBody(self.state, "unrolled")

    def finish(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        """Emit the loop; the names' values after it."""
        if not self.runtime:
            return values
        self.close_body()
        assert self.body is not None, "a runtime loop expanded its body once"
        body = _frozen(self.body)
        operation: branch.RangeLoop | branch.Loop
        if self.range_vars is not None:
            start, end, step = self.range_vars
            assert self.index is not None, "a runtime range loop has an index"
            operation = branch.RangeLoop(self.index, start, end, step, False, body, self.unroll)
        else:
            operation = branch.Loop(body)
        self.parent.append(operation, None, self.loc)
        return tuple(self.after_value(i) for i in range(len(self.names)))


class _Catch:
    """Swallows ArmExit at the end of a runtime loop body."""

    __slots__ = ()

    def __enter__(self) -> _Catch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        return exc_type is ArmExit


def for_(iterable: Any) -> LoopControl:
    """Classify a ``for`` over anything but ``range``: comptime iterables unroll."""
    if isinstance(iterable, RangeHint):
        loop = for_range(builtins.range, *iterable.args)
        loop.unroll = iterable.unroll
        return loop
    mutability.check_bound(iterable)
    loop = LoopControl()
    if isinstance(iterable, ExpandBase):
        source.fail("cannot iterate over a runtime value; loop with `for i in range(n)` and index it")
    loop.comptime_values = iterable.iterable if isinstance(iterable, Unroll) else iterable
    return loop


def for_range(range_fn: Callable[..., Any], *args: Any) -> LoopControl:
    """Classify ``for i in range(...)``: a runtime ``RangeLoop`` (use ``cp.unroll(range(...))`` to unroll)."""
    if range_fn is not builtins.range:
        return for_(range_fn(*args))
    if not 1 <= len(args) <= 3:
        source.fail(f"range expected 1 to 3 arguments, got {len(args)}")
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
    for value in (start, end, step):
        mutability.check_bound(value)
    loop = LoopControl()
    loop.runtime = True
    step_value = operations.comptime_value(step) if operations.is_comptime(step) else None
    if step_value == 0:
        source.fail("range() step must not be zero")
    operands = (start, end, step)
    if all(operations.is_number(v) for v in operands):
        default = ir.U32 if min(start, end) >= 0 and step > 0 else ir.I32
        loop.index_weak, elem = loop.state.weak_type(default)
        if elem.kind == "uint" and min(start, end, step) < 0:
            elem = ir.I32
        vars_ = [operations.literal(v, elem).var for v in operands]
    else:
        runtime = [operations.as_element(v) for v in operands if isinstance(v, ExpandBase)]
        elem = runtime[0].elem
        for other in runtime[1:]:
            elem = ir.promote(elem, other.elem)
        if not elem.is_int or any(r.type.line != 1 for r in runtime):
            source.fail(f"range() bounds must be scalar integers, got {', '.join(repr(r.type) for r in runtime)}")
        # A negative literal step, or a signed runtime step, keeps its sign: the index becomes the signed
        # type of the same width (an unsigned step would count up by 2**32 - 1 and run zero times).
        signed_step = isinstance(step, ExpandBase) and operations.as_element(step).elem.kind == "int"
        if elem.kind == "uint" and ((step_value is not None and step_value < 0) or signed_step):
            elem = {1: ir.I8, 2: ir.I16, 4: ir.I32, 8: ir.I64}[elem.size]
        vars_ = [
            operations.cast(v, elem).var if isinstance(v, ExpandBase) else operations.literal(v, elem).var
            for v in operands
        ]
    # Python evaluates range() once: a mutable bound is read once, before the loop.
    vars_ = [loop.state.current.emit(irops.Assign(v), v.type) if v.kind is VarKind.MUT else v for v in vars_]
    loop.range_vars = tuple(vars_)
    return loop


def while_(cond_fn: Callable[[], Any], always: bool = False) -> LoopControl:
    """Classify a ``while``: ``while True`` and runtime conditions give an IR ``Loop``."""
    loop = LoopControl()
    if always:
        loop.runtime = True
        return loop
    loop.cond_fn = cond_fn
    scratch = loop.state.current.child()
    with loop.state.in_scope(scratch):
        cond = cond_fn()
        # A proxy constant (``cp.runtime(False)``, ``not`` of one) asks for a runtime loop: the body may
        # assign it, which a comptime (unrolled) loop could not follow.
        loop.runtime = _classify(cond)[0] or isinstance(cond, ExpandBase)
    return loop


# -- break, continue, return -----------------------------------------------------------------
def _innermost_loop(state: ExpansionState, what: str) -> tuple[str, bool]:
    arm_seen = False
    for entry in reversed(state.control):
        if entry.kind == "arm":
            arm_seen = True
        elif entry.kind in ("loop", "unrolled"):
            return entry.kind, arm_seen
        else:
            break
    source.fail(f"`{what}` outside of a loop")


def _jump(what: str, operation: irops.Operation) -> bool:
    state = require_state()
    kind, arm_seen = _innermost_loop(state, what)
    if kind == "unrolled":
        if arm_seen:
            source.fail(
                f"`{what}` under a runtime condition inside a comptime (unrolled) loop; the unrolled "
                "loop has no runtime loop to leave: use a runtime `for i in range(n)` loop instead"
            )
        return True
    state.current.append(operation)
    raise ArmExit()


def brk() -> bool:
    """``break``: True for Python's break (comptime loop); in a runtime loop emit IR Break."""
    return _jump("break", branch.Break())


def cont() -> bool:
    """``continue``: True for Python's continue (comptime loop); in a runtime loop emit IR Continue."""
    return _jump("continue", branch.Continue())


def ret(value: Any = None) -> Any:
    """``return value``: Python's return, or IR Return in a kernel under runtime control flow."""
    state = require_state()
    runtime = False
    for entry in reversed(state.control):
        if entry.kind in ("arm", "loop"):
            runtime = True
        elif entry.kind in ("kernel", "function"):
            if entry.kind == "kernel" and value is not None:
                source.fail("a kernel cannot return a value; write results into an output parameter")
            if not runtime:
                return value
            if entry.kind == "function":
                source.fail(
                    "`return` inside runtime control flow of a cube function is not supported; assign "
                    "the result to a variable and return it at the end of the function"
                )
            state.current.append(branch.Return())
            raise ArmExit()
    return value
