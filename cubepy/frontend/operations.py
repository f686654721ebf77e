"""Typed construction of arithmetic, comparison, cast and lane instructions from expand values.

The rules live here, once:
- Python numbers (and ``cp.runtime`` literals) adapt to the other operand's type; a Python float with
  an integer operand makes both f32 (as ``/`` does); a literal that does not fit is an ExpandError.
- Two runtime operands promote by ``cubepy.ir.promote``; a scalar with a line broadcasts.
- ``/`` is true division (integers are cast to f32 first), ``//`` floors and ``%`` takes the sign of
  the divisor (Python's meaning, IR ``floordiv``/``mod``), ``**`` is ``powi`` for integer exponents
  and ``powf`` otherwise.
- Storing into typed memory converts when ``is_lossless``, else ExpandError naming both types.
"""

from __future__ import annotations

import math
import operator
import typing
from collections.abc import Callable, Iterable
from typing import Any, overload

import numpy as np

from cubepy import ir
from cubepy.frontend import elem as elems
from cubepy.frontend import source
from cubepy.frontend.state import current_scope, require_state
from cubepy.frontend.values import ExpandBase, ExpandElement, Unbound, fail_needs_comptime
from cubepy.ir import Type, Variable, VarKind, semantics
from cubepy.ir import ops as irops

_PY_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
    "bitand": operator.and_,
    "bitor": operator.or_,
    "bitxor": operator.xor,
    "shl": operator.lshift,
    "shr": operator.rshift,
    "min": min,
    "max": max,
}
PY_COMPARE = {  # Python's comparison of two comptime values, by IR compare name
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "eq": operator.eq,
    "ne": operator.ne,
}
_SYMBOL = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "truediv": "/",
    "floordiv": "//",
    "mod": "%",
    "pow": "**",
    "bitand": "&",
    "bitor": "|",
    "bitxor": "^",
    "shl": "<<",
    "shr": ">>",
}


# -- classification ----------------------------------------------------------------------------
def float_for(elem: ir.ElemType) -> ir.ElemType:
    """The float type a float operation computes an integer (or bool) operand of ``elem`` in.

    f32, as CubeCL's kernels mostly do, but f64 for 64-bit integers: f32 keeps 24 of their 64 bits.
    """
    if elem.is_float:
        return elem
    return ir.F64 if elem.is_int and elem.bits == 64 else ir.F32


def is_number(value: object) -> bool:
    """Whether ``value`` is a plain Python/numpy number (a comptime literal)."""
    return isinstance(value, elems.PY_NUMBER)


def is_runtime(value: object) -> bool:
    """Whether ``value`` is a runtime expand value (constants included)."""
    return isinstance(value, ExpandBase)


def is_comptime(value: object) -> bool:
    """Whether ``value`` is known at expansion time: a Python value or an IR constant."""
    if isinstance(value, ExpandBase):
        return value.expand_element().var.kind is VarKind.CONSTANT
    return True


def comptime_value(value: Any) -> Any:
    """The Python value of a comptime value (an IR constant gives its literal)."""
    if isinstance(value, ExpandBase):
        element = value.expand_element()
        if element.var.kind is VarKind.CONSTANT:
            return element.var.value
        fail_needs_comptime(element, "expected a comptime value, got a runtime value")
    return value


def element(var: Variable, **kw: Any) -> ExpandElement:
    """Wrap ``var`` for the active expansion."""
    return ExpandElement(var, require_state(), **kw)


@overload
def emit(operation: irops.Operation, out_type: Type) -> ExpandElement: ...


@overload
def emit(operation: irops.Operation, out_type: None = None) -> ExpandElement | None: ...


def emit(operation: irops.Operation, out_type: Type | None = None) -> ExpandElement | None:
    """Append ``operation`` to the current scope; wrap its result (typed by the operation's record by default)."""
    if out_type is None:
        out_type = operation.result_type()
    out = current_scope().emit(operation, out_type)
    return None if out is None else element(out)


def _check_poison(value: object) -> None:
    if isinstance(value, Unbound):
        value.fail()


def as_element(value: Any, what: str = "value") -> ExpandElement:
    """A runtime value or Python number as an ``ExpandElement`` (numbers get their default type)."""
    if isinstance(value, ExpandBase):
        result = value.expand_element()
        if result.state is not require_state():
            source.fail(f"{what} belongs to another expansion (a runtime value was kept across kernels)")
        return result
    if is_number(value):
        return literal(value, elems.literal_elem(value))
    _check_poison(value)
    source.fail(f"{what}: expected a number or a runtime value, got {type(value).__name__}")


def literal(value: Any, elem: ir.ElemType, line: int = 1) -> ExpandElement:
    """A constant of ``elem`` (and line size ``line``); ExpandError when ``value`` does not fit."""
    if elem.is_float and is_number(value) and not isinstance(value, bool) and elems.overflows(value, elem):
        source.fail(
            f"the constant {value!r} overflows {elem.name} (it would become inf); use a smaller value, "
            f"compute in a wider type, or write float('inf') if infinity is meant"
        )
    if not elems.fits(value, elem):
        kind = "a float" if isinstance(value, float) else repr(value)
        source.fail(
            f"the literal {value!r} does not fit in {elem.name} ({kind} cannot be stored without loss); "
            f"cast it explicitly, e.g. {elem.name}({value!r})"
        )
    return element(ir.constant(elems.convert_literal(value, elem), Type(elem, line)))


def _operand(value: Any) -> Any:
    """An operand: an ExpandElement, or a Python number for literals (None when unsupported)."""
    if isinstance(value, ExpandBase):
        result = as_element(value)
        if result.literal:
            return result.var.value
        return result
    if is_number(value):
        return value.item() if hasattr(value, "item") else value
    _check_poison(value)
    return None


# -- casts and broadcasting ----------------------------------------------------------------
def cast(value: Any, elem: ir.ElemType, line: int | None = None) -> ExpandElement:
    """``value`` converted to ``elem`` (lane by lane); numbers give a constant; ``line`` broadcasts."""
    if is_number(value):
        number = value.item() if hasattr(value, "item") else value
        if elem.is_int and isinstance(number, int) and not elems.fits(number, elem):
            source.fail(f"{number!r} is not representable in {elem.name}")
        if _folds(number, elem):
            return element(ir.constant(elems.cast_literal(number, elem), Type(elem, line or 1)))
        value = literal(number, elems.literal_elem(number))
    source_value = as_element(value, "cast operand")
    target = Type(elem, line or source_value.type.line)
    if line is not None and source_value.type.line not in (1, line):
        source.fail(f"cannot cast a line of {source_value.type.line} lanes to a line of {line}")
    if source_value.type == target:
        return source_value
    if source_value.var.kind is VarKind.CONSTANT and _folds(source_value.var.value, elem):
        return element(ir.constant(elems.cast_literal(source_value.var.value, elem), target))
    return emit(irops.Cast(source_value.var), target)


def _folds(value: object, elem: ir.ElemType) -> bool:
    """Whether casting the literal ``value`` to ``elem`` can be done here with the back ends' result.

    Integer wrapping and in-range float truncation agree everywhere; a float outside the integer range
    (or NaN) is left to the back end's cast, whose saturation numpy does not reproduce.
    """
    if elem.is_fp8:  # the back ends' saturating fp8 rounding, not a constant of the IR
        return False
    if not elem.is_int or not isinstance(value, float):
        return True
    if not math.isfinite(value):
        return False
    low, high = elems.SCALAR_TYPES[elem.name].min_value(), elems.SCALAR_TYPES[elem.name].max_value()
    return low <= math.trunc(value) <= high


def broadcast(value: Any, size: int | None) -> Any:
    """``Line(value)``: a scalar broadcast to ``size`` lanes (without a size it broadcasts on use)."""
    if size is None:
        return value
    element_value = as_element(value, "Line operand")
    return cast(element_value, element_value.elem, line=size)


def _to_type(value: ExpandElement, target: Type) -> Variable:
    if value.type == target:
        return value.var
    return cast(value, target.elem, line=target.line).var


def _common_line(la: int, lb: int, what: str) -> int:
    if la == lb or lb == 1:
        return la
    if la == 1:
        return lb
    source.fail(f"{what}: lines of {la} and {lb} lanes cannot be combined")


def unify(values: Iterable[Any], what: str) -> list[ExpandElement] | None:
    """Operands as ExpandElements of one item type, or None when one is not a number.

    Runtime operands promote together (lines broadcast scalars); literals adapt to their type; a
    float literal with integer operands makes the type f32; a non-bool literal with bools makes i32.
    """
    operands = [_operand(v) for v in values]
    if any(o is None for o in operands):
        return None
    runtime = [o for o in operands if isinstance(o, ExpandElement)]
    if not runtime:
        return [as_element(o) for o in operands]
    elem = runtime[0].elem
    line = runtime[0].type.line
    for other in runtime[1:]:
        elem = ir.promote(elem, other.elem)
        line = _common_line(line, other.type.line, what)
    literals = [o for o in operands if not isinstance(o, ExpandElement)]
    if any(isinstance(o, float) for o in literals) and not elem.is_float:
        elem = float_for(elem)
    if elem.is_bool and any(not isinstance(o, bool) for o in literals):
        elem = ir.I32
    target = Type(elem, line)
    return [element(_to_type(o, target)) if isinstance(o, ExpandElement) else literal(o, elem, line) for o in operands]


def coerce(lhs: Any, rhs: Any, what: str) -> tuple[ExpandElement, ExpandElement] | None:
    """Both operands as ExpandElements of one item type, or None when an operand is not a number."""
    a, b = _operand(lhs), _operand(rhs)
    if isinstance(a, ExpandElement) and isinstance(b, ExpandElement):
        _note_weak(a, b)
    result = unify((lhs, rhs), what)
    if result is not None:
        _no_fp8_arithmetic(result[0], what)
    return None if result is None else (result[0], result[1])


def _no_fp8_arithmetic(operand: ExpandElement, what: str) -> None:
    """fp8 is stored, converted and fed to tensor cores; arithmetic needs an explicit conversion first."""
    if operand.elem.is_fp8:
        name = operand.elem.name
        source.fail(f"`{what}` on {name} values: fp8 is not computed with; convert first, e.g. f32(x) or f16(x)")


def _note_weak(a: ExpandElement, b: ExpandElement) -> None:
    """A weakly typed integer local used with another integer type should have had that type."""
    for weak, other in ((a, b), (b, a)):
        if (
            weak.weak is not None
            and other.weak is None
            and weak.elem != other.elem
            and weak.elem.is_int
            and other.elem.is_int
        ):
            weak.state.hint_weak(weak.weak, other.elem)


# -- arithmetic ----------------------------------------------------------------------------
def binary(op: str, lhs: Any, rhs: Any) -> Any:
    """``lhs op rhs`` with Python's meaning; NotImplemented when an operand is not a number."""
    if not isinstance(lhs, ExpandBase) and not isinstance(rhs, ExpandBase):
        return _PY_BINARY[op](lhs, rhs)
    if op == "pow":
        return _power(lhs, rhs)
    pair = coerce(lhs, rhs, _SYMBOL.get(op, op))
    if pair is None:
        return NotImplemented
    a, b = pair
    elem = a.elem
    if op == "truediv":
        if not elem.is_float:
            a, b = cast(a, float_for(elem)), cast(b, float_for(elem))
        op = "div"
    elif op in ("bitand", "bitor", "bitxor") and elem.is_bool:
        if op == "bitxor":
            return emit(irops.Ne(a.var, b.var))
        op = {"bitand": "and", "bitor": "or"}[op]
    elif op in ("bitand", "bitor", "bitxor", "shl", "shr", "div_trunc", "rem_trunc") and not elem.is_int:
        source.fail(f"`{_SYMBOL.get(op, op)}` needs integer operands, got {a.type!r}")
    elif elem.is_bool and op in ("add", "sub", "mul", "floordiv", "mod", "min", "max"):
        a, b = cast(a, ir.I32), cast(b, ir.I32)
    return emit(irops.lookup(op)(a.var, b.var))


def _power(base: Any, exponent: Any) -> Any:
    base_op, exp_op = _operand(base), _operand(exponent)
    if base_op is None or exp_op is None:
        return NotImplemented
    if not isinstance(base_op, ExpandElement):
        # A Python base with a runtime exponent: the base takes a float type.
        exp_el = as_element(exponent)
        elem = float_for(exp_el.elem)
        base_op = literal(base_op, elem, exp_el.type.line)
    if base_op.elem.is_float:
        if isinstance(exp_op, (bool, int)) or (isinstance(exp_op, ExpandElement) and exp_op.elem.is_int):
            exp_var = exp_op.var if isinstance(exp_op, ExpandElement) else literal(exp_op, ir.I32).var
            # ir types Powi (made by `derive`) as type[Operation]; it is a Binary (lhs, rhs)
            return emit(irops.Powi(base_op.var, exp_var))  # type: ignore[call-arg]
        pair = coerce(base_op, exp_op, "**")
        assert pair is not None
        return emit(irops.Powf(pair[0].var, pair[1].var))
    if isinstance(exp_op, int) and not isinstance(exp_op, bool) and exp_op >= 0:
        return _int_power(base_op, exp_op)
    source.fail(
        f"`**` on an integer base ({base_op.type!r}) needs a comptime non-negative integer "
        "exponent; cast the base to a float type for powf"
    )


def _int_power(base: ExpandElement, exponent: int) -> ExpandElement:
    """Integer power by squaring, unrolled at expansion time."""
    result: ExpandElement | None = None
    square = base
    while exponent:
        if exponent & 1:
            result = square if result is None else binary("mul", result, square)
        exponent >>= 1
        if exponent:
            square = binary("mul", square, square)
    return result if result is not None else literal(1, base.elem, base.type.line)


def compare(op: str, lhs: Any, rhs: Any) -> Any:
    """``lhs op rhs`` as a bool (a line of bools for lines)."""
    if not isinstance(lhs, ExpandBase) and not isinstance(rhs, ExpandBase):
        return PY_COMPARE[op](lhs, rhs)
    pair = coerce(lhs, rhs, op)
    if pair is None:
        return NotImplemented
    a, b = pair
    return emit(irops.lookup(op)(a.var, b.var))


# Python's own meaning on Python numbers, kept for these: integers stay unbounded, floor & co. give an int.
_PY_OPERATORS: dict[str, Callable[[Any], Any]] = {
    "neg": operator.neg,
    "abs": abs,
    "invert": operator.invert,
    "not": operator.not_,
    "floor": math.floor,
    "ceil": math.ceil,
    "trunc": math.trunc,
    "round": round,
}


def fold_comptime(op: str, *values: Any) -> Any:
    """What the IR operation ``op`` computes on comptime numbers: its record's semantics in f64.

    The same function the interp runs and ``fold_constants`` calls (``cubepy.ir.semantics.evaluate``), so
    ``cp.lgamma(2.5)`` outside a kernel is the interp's f64 ``lgamma``.  Returns a Python float (or bool).
    """
    cls = irops.lookup(op)
    with np.errstate(all="ignore"):
        result = semantics.evaluate(cls, ir.F64, *(np.float64(v) for v in values))
    return np.asarray(result).item()


def unary(op: str, value: Any) -> Any:
    """``op(value)`` lane by lane; Python numbers fold on the host."""
    if not isinstance(value, ExpandBase):
        if is_number(value):
            folded = _PY_OPERATORS.get(op)
            return folded(value) if folded is not None else fold_comptime(op, value)
        _check_poison(value)
        source.fail(f"{op} expects a number or a runtime value, got {type(value).__name__}")
    x = as_element(value)
    elem = x.elem
    _no_fp8_arithmetic(x, op)
    if op == "invert":
        op = "not" if elem.is_bool else "bitnot"
        if elem.is_float:
            source.fail(f"`~` needs an integer or bool operand, got {x.type!r}")
    if op == "neg" and elem.kind == "uint":
        source.fail(f"cannot negate an unsigned value ({x.type!r}); cast it to a signed type first")
    if op in ("abs", "floor", "ceil", "round", "trunc") and elem.is_int:
        if op != "abs" or elem.kind == "uint":
            return x
    cls = irops.lookup(op)
    kind = cls.RECORD.operand_kind
    if kind == "float" and not elem.is_float:
        x = cast(x, float_for(elem))
    if kind == "int" and not elem.is_int:
        source.fail(f"{op} needs an integer operand, got {x.type!r}")
    if kind == "bool" and not x.elem.is_bool:
        x = to_bool(x)
    return emit(cls(x.var))


def to_bool(value: Any) -> ExpandElement:
    """A runtime value as a bool: numbers compare ``!= 0``."""
    x = as_element(value)
    if x.elem.is_bool:
        return x
    return typing.cast(ExpandElement, compare("ne", x, 0))


def select(cond: Any, then: Any, otherwise: Any) -> Any:
    """``then if cond else otherwise`` lane by lane, both sides evaluated."""
    if is_comptime(cond):
        return then if comptime_value(cond) else otherwise
    c = to_bool(cond)
    pair = unify((then, otherwise), "select")
    if pair is None:
        source.fail(
            "select needs numbers or runtime values on both sides, got "
            f"{type(then).__name__} and {type(otherwise).__name__}"
        )
    a, b = pair
    line = _common_line(a.type.line, c.type.line, "select")
    if a.type.line != line:
        a, b = cast(a, a.elem, line=line), cast(b, b.elem, line=line)
    return emit(irops.Select(c.var, a.var, b.var))


def clamp(value: Any, lo: Any, hi: Any) -> Any:
    """``min(max(value, lo), hi)``."""
    if not any(isinstance(v, ExpandBase) for v in (value, lo, hi)):
        return min(max(value, lo), hi)
    x, low, high = unify((value, lo, hi), "clamp") or source.fail("clamp expects numbers")
    return emit(irops.Clamp(x.var, low.var, high.var))


def fma(a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` with one rounding (floats; integers are computed in f32, 64-bit ones in f64)."""
    if not any(isinstance(v, ExpandBase) for v in (a, b, c)):
        if any(isinstance(v, (float, np.floating)) for v in (a, b, c)):
            return fold_comptime("fma", a, b, c)  # one rounding, as in a kernel
        return a * b + c
    operands = unify((a, b, c), "fma") or source.fail("fma expects numbers")
    if not operands[0].elem.is_float:
        operands = [cast(o, float_for(operands[0].elem)) for o in operands]
    return emit(irops.Fma(*(o.var for o in operands)))


# -- conversions for stores and indices -------------------------------------------------------
def convert(value: Any, target: Type, what: str) -> Variable:
    """``value`` converted for a store into ``target`` (lossless only; scalars broadcast to lines)."""
    operand = _operand(value)
    if operand is None:
        source.fail(f"{what}: expected a number or a runtime value of type {target!r}, got {type(value).__name__}")
    if not isinstance(operand, ExpandElement):
        if not elems.fits(operand, target.elem):
            kind = "a float" if isinstance(operand, float) else f"{operand!r}"
            source.fail(f"{what}: cannot store {kind} into {target.elem.name} without loss; cast it explicitly")
        return literal(operand, target.elem, target.line).var
    if operand.type.line not in (1, target.line):
        source.fail(f"{what}: a line of {operand.type.line} lanes does not match {target!r}")
    if operand.elem != target.elem:
        if operand.weak is not None:
            operand.state.hint_weak(operand.weak, target.elem)
        if not ir.is_lossless(operand.elem, target.elem) and not operand.state.needs_rerun():
            source.fail(
                f"{what}: storing {operand.elem.name} into {target.elem.name} loses information; "
                f"convert explicitly, e.g. {target.elem.name}(value)"
            )
    return _to_type(operand, target)


def to_index(value: Any, what: str = "index") -> Variable:
    """An index as a u32 variable (other integer types are cast; negative literals are errors)."""
    operand = _operand(value)
    if operand is None:
        source.fail(f"{what}: expected an integer, got {type(value).__name__}")
    if not isinstance(operand, ExpandElement):
        if isinstance(operand, bool) or not isinstance(operand, int):
            source.fail(f"{what}: expected an integer, got {operand!r}")
        if operand < 0:
            source.fail(f"{what}: negative index {operand} (indices are u32)")
        return literal(operand, ir.U32).var
    if not operand.elem.is_int or operand.type.line != 1:
        source.fail(f"{what}: expected a scalar integer, got {operand.type!r}")
    if operand.elem is ir.U32:
        return operand.var
    if operand.weak is not None:
        operand.state.hint_weak(operand.weak, ir.U32)
    return cast(operand, ir.U32).var


def extract_lane(line: ExpandElement, lane: Any) -> ExpandElement:
    """``line[lane]``."""
    if isinstance(lane, int) and not isinstance(lane, bool) and not 0 <= lane < line.type.line:
        source.fail(f"lane {lane} out of range for a line of {line.type.line} lanes")
    if line.type.line == 1 and isinstance(lane, int):
        return line
    return typing.cast(ExpandElement, emit(irops.ExtractLane(line.var, to_index(lane, "lane"))))


def insert_lane(line: ExpandElement, lane: Any, value: Any) -> None:
    """``line[lane] = value`` on a mutable line local."""
    if isinstance(lane, int) and not isinstance(lane, bool) and not 0 <= lane < line.type.line:
        source.fail(f"lane {lane} out of range for a line of {line.type.line} lanes")
    converted = convert(value, line.type.scalar(), "line lane")
    if line.type.line == 1:
        current_scope().append(irops.Assign(converted), line.var)
        return
    current_scope().append(irops.InsertLane(line.var, to_index(lane, "lane"), converted))
