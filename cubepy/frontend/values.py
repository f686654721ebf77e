"""Expand values: the proxies user code computes with while a kernel is expanded.

``ExpandElement`` wraps one IR ``Variable`` (a local, constant, parameter or builtin).  Every Python
operator on it appends an instruction to the current scope through ``operations``; comparisons give
bools (lines of bools for lines); Python's own truth tests, ``int()`` and iteration raise an
``ExpandError`` because a runtime value has no Python value at expansion time (``fail_needs_comptime``
names the runtime construct that made a comptime number runtime).  ``Unbound`` stands for a name
without a usable value: every use of it raises.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, cast

from cubepy import ir
from cubepy.frontend import source
from cubepy.frontend.state import require_state
from cubepy.ir import Type, Variable, VarKind

if TYPE_CHECKING:
    from cubepy.frontend.elem import ScalarType
    from cubepy.frontend.state import ExpansionState


def _binary(op: str, reflected: bool = False) -> Callable[[Any, Any], Any]:
    def method(self: Any, other: Any) -> Any:
        from cubepy.frontend import operations

        if reflected:
            return operations.binary(op, other, self)
        return operations.binary(op, self, other)

    method.__name__ = f"__{'r' if reflected else ''}{op}__"
    return method


def _compare(op: str) -> Callable[[Any, Any], Any]:
    def method(self: Any, other: Any) -> Any:
        from cubepy.frontend import operations

        return operations.compare(op, self, other)

    method.__name__ = f"__{op}__"
    return method


def _unary(op: str) -> Callable[[Any], Any]:
    def method(self: Any) -> Any:
        from cubepy.frontend import operations

        return operations.unary(op, self)

    method.__name__ = op
    method.__doc__ = f"``{op}`` of this value, lane by lane."
    return method


class ExpandBase:
    """Operators shared by every runtime value (``ExpandElement`` and the topology builtins)."""

    __slots__ = ()

    def expand_element(self) -> ExpandElement:  # pragma: no cover - overridden
        """This value as an ``ExpandElement`` of the active expansion."""
        raise NotImplementedError

    __add__, __radd__ = _binary("add"), _binary("add", True)
    __sub__, __rsub__ = _binary("sub"), _binary("sub", True)
    __mul__, __rmul__ = _binary("mul"), _binary("mul", True)
    __truediv__, __rtruediv__ = _binary("truediv"), _binary("truediv", True)
    __floordiv__, __rfloordiv__ = _binary("floordiv"), _binary("floordiv", True)
    __mod__, __rmod__ = _binary("mod"), _binary("mod", True)
    __pow__, __rpow__ = _binary("pow"), _binary("pow", True)
    __and__, __rand__ = _binary("bitand"), _binary("bitand", True)
    __or__, __ror__ = _binary("bitor"), _binary("bitor", True)
    __xor__, __rxor__ = _binary("bitxor"), _binary("bitxor", True)
    __lshift__, __rlshift__ = _binary("shl"), _binary("shl", True)
    __rshift__, __rrshift__ = _binary("shr"), _binary("shr", True)
    __lt__, __le__, __gt__, __ge__ = _compare("lt"), _compare("le"), _compare("gt"), _compare("ge")
    __eq__, __ne__ = _compare("eq"), _compare("ne")
    __hash__ = object.__hash__
    __neg__ = _unary("neg")
    __invert__ = _unary("invert")
    __abs__ = _unary("abs")
    __floor__ = _unary("floor")
    __ceil__ = _unary("ceil")
    __trunc__ = _unary("trunc")

    def __pos__(self) -> ExpandElement:
        return self.expand_element()

    def __round__(self, ndigits: int | None = None) -> Any:
        from cubepy.frontend import operations

        if ndigits is not None:
            source.fail("round(x, ndigits) is not supported on runtime values; use round(x)")
        return operations.unary("round", self)

    # Python needs a concrete value for these; a runtime value has none at expansion time.
    def __bool__(self) -> bool:
        source.fail(
            "a runtime value is used where Python needs a plain bool (an `if`/`while` outside a cube "
            "function, `assert`, a comprehension filter or a chained comparison in plain Python code); "
            "use cubepy control flow inside @cube functions or cp.select(cond, a, b)"
        )

    # numpy: binary operators with numpy scalars defer to this class's reflected methods, and a runtime
    # value used where numpy needs an array (indexing a captured numpy array) is an ExpandError.
    __array_ufunc__ = None

    def __array__(self, dtype: Any = None, copy: Any = None) -> NoReturn:
        source.fail(
            "a runtime value cannot index or become a numpy array captured from Python: numpy arrays are "
            "comptime (index them with a comptime int or cp.unroll); to index a table with runtime indices, "
            "read it through tbl = cp.const_array(TABLE) (constant memory) or pass it as an Array argument"
        )

    def __index__(self) -> int:
        element = self.expand_element()
        if element.var.kind is VarKind.CONSTANT and element.elem.is_int:
            return int(cast(int, element.var.value))
        fail_needs_comptime(
            element,
            "a runtime value is used where Python needs a plain int (for example a bound "
            "of cp.unroll(range(...)), a list index or a shared-memory size); these must be comptime",
        )

    def __int__(self) -> int:
        return self.__index__()

    def __float__(self) -> float:
        element = self.expand_element()
        if element.var.kind is VarKind.CONSTANT:
            return float(cast(float, element.var.value))
        fail_needs_comptime(element, "a runtime value is used where Python needs a plain float; it must be comptime")

    def __iter__(self) -> NoReturn:
        source.fail("cannot iterate over a runtime value; loop with `for i in range(n)` and index it")

    def __len__(self) -> int:
        source.fail("len() needs a comptime length; use `.len()` for a runtime length or `.size` for a line")

    def __getitem__(self, lane: Any) -> ExpandElement:
        from cubepy.frontend import operations

        return operations.extract_lane(self.expand_element(), lane)

    def __setitem__(self, lane: Any, value: Any) -> None:
        from cubepy.frontend import operations

        element = self.expand_element()
        if element.var.kind is not VarKind.MUT:
            source.fail("a lane can only be written on a line held by a local variable (`line[i] = v`)")
        operations.insert_lane(element, lane, value)

    # -- CubeCL-style methods ----------------------------------------------------------------
    def cast(self, elem: Any) -> ExpandElement:
        """This value converted to element type ``elem`` (lane by lane)."""
        from cubepy.frontend import elem as elem_module
        from cubepy.frontend import operations

        return operations.cast(self, elem_module.to_elem(elem))

    def min(self, other: Any) -> Any:
        """The smaller of this value and ``other``."""
        from cubepy.frontend import operations

        return operations.binary("min", self, other)

    def max(self, other: Any) -> Any:
        """The larger of this value and ``other``."""
        from cubepy.frontend import operations

        return operations.binary("max", self, other)

    def clamp(self, lo: Any, hi: Any) -> Any:
        """This value clamped to ``[lo, hi]``."""
        from cubepy.frontend import operations

        return operations.clamp(self, lo, hi)

    sqrt, exp, log, sin, cos, tanh = (_unary(n) for n in ("sqrt", "exp", "log", "sin", "cos", "tanh"))
    floor, ceil, round, recip, rsqrt = (_unary(n) for n in ("floor", "ceil", "round", "recip", "rsqrt"))
    abs = _unary("abs")


class ExpandElement(ExpandBase):
    """A runtime value: an IR variable of the active expansion.

    ``weak`` is the ordinal of a weakly typed mutable local (one that started as a Python number and
    whose type later uses may refine); ``literal`` marks a constant that still adapts its type to the
    other operand like a Python number does (``cp.runtime(3)``).
    """

    __slots__ = ("var", "state", "weak", "literal")

    def __init__(self, var: Variable, state: ExpansionState, weak: int | None = None, literal: bool = False) -> None:
        self.var = var
        self.state = state
        self.weak = weak
        self.literal = literal

    def expand_element(self) -> ExpandElement:
        """Itself."""
        return self

    @property
    def type(self) -> Type:
        """The IR item type (element type and line size)."""
        return self.var.type

    @property
    def elem(self) -> ir.ElemType:
        """The IR element type."""
        return self.var.type.elem

    @property
    def dtype(self) -> ScalarType:
        """The user-facing element type object (``cp.f32``)."""
        from cubepy.frontend.elem import scalar_type

        return scalar_type(self.var.type.elem)

    @property
    def size(self) -> int:
        """The line size (1 for scalars); comptime."""
        return self.var.type.line

    line_size = size

    @property
    def is_constant(self) -> bool:
        """Whether this is a literal (its value is known at expansion time)."""
        return self.var.kind is VarKind.CONSTANT

    @property
    def is_mutable(self) -> bool:
        """Whether this is a mutable local."""
        return self.var.kind is VarKind.MUT

    def __repr__(self) -> str:
        return f"<{self.var!r}: {self.var.type!r}>"


def fail_needs_comptime(value: object, message: str) -> NoReturn:
    """Raise ``message`` (a comptime value was needed); for a promoted comptime value, at the line that made it runtime."""
    state = require_state()
    promotion = None
    if isinstance(value, ExpandBase):
        promotion = state.promotions.get(value.expand_element().var.id)
    if promotion is None:
        source.fail(message)
    use = state.location()
    used_at = ""
    if use is not None:
        text = linecache.getline(use.file, use.line).strip()
        used_at = f" (used at {use.file}:{use.line}" + (f": `{text}`)" if text else ")")
    runtime = (
        f"the runtime {promotion.construct} at line {promotion.construct_loc.line}"
        if promotion.construct_loc is not None
        else f"a runtime {promotion.construct}"
    )
    loc: ir.SourceLoc | None
    if promotion.assigned_loc is not None:
        how, loc = f"this assignment under {runtime}", promotion.assigned_loc
    else:
        how, loc = f"{runtime}, which assigns it,", promotion.construct_loc
    source.fail(
        f"{message}{used_at}. '{promotion.name}' held the comptime value {promotion.value!r} until {how} "
        "made it a mutable runtime variable; keep a value that must stay comptime out of runtime control "
        "flow, or give the runtime value another name",
        loc,
    )


class Unbound:
    """A name without a usable value; every use raises an ExpandError explaining why."""

    __slots__ = ("name", "reason")

    def __init__(self, name: str, reason: str = "is used before it is assigned") -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "reason", reason)

    def fail(self) -> NoReturn:
        """Raise the ExpandError for a use of this name at the current user line."""
        source.fail(f"'{self.name}' {self.reason}")

    def __getattr__(self, attribute: str) -> Any:
        self.fail()

    def __repr__(self) -> str:
        return f"<unbound {self.name}>"


def _poisoned(self: Unbound, *args: Any, **kwargs: Any) -> NoReturn:
    self.fail()


for _dunder in (
    "add",
    "radd",
    "sub",
    "rsub",
    "mul",
    "rmul",
    "truediv",
    "rtruediv",
    "floordiv",
    "rfloordiv",
    "mod",
    "rmod",
    "pow",
    "rpow",
    "and",
    "rand",
    "or",
    "ror",
    "xor",
    "rxor",
    "lshift",
    "rlshift",
    "rshift",
    "rrshift",
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
    "neg",
    "pos",
    "invert",
    "abs",
    "bool",
    "index",
    "int",
    "float",
    "iter",
    "len",
    "getitem",
    "setitem",
    "call",
    "contains",
    "setattr",
    "round",
    "floor",
    "ceil",
    "trunc",
):
    setattr(Unbound, f"__{_dunder}__", _poisoned)
Unbound.__hash__ = object.__hash__  # type: ignore[method-assign]
