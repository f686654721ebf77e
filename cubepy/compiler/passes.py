"""IR passes: pure functions from a ``KernelDefinition`` to a new one.

* ``checked_io``: in a checked kernel, every ``index``/``index_assign`` is bounds-checked.  The
  frontend normally marks them already (then this is a no-op); this is the documented place where
  the launch mode becomes per-access flags.
* ``fold_constants``: ``binary``/``compare``/``cast`` (and ``assign``) of literal operands become literals,
  with exactly the semantics of the back ends (wrapping integers, CUDA's division by zero, saturating
  float -> int casts, f32 rounding).  f16/bf16 and transcendental operations are left alone.
* ``contract``: when the kernel asks for it (the default), one-use ``a * b`` feeding an ``add``/``sub``
  becomes one ``fma`` (``cubepy.ir.contract``).
* ``dead_code``: pure instructions whose immutable result is never read are removed (to a fixed point).

``run_passes`` runs them in order and returns the text after each, for numbered dumps.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable

import attrs
import numpy as np

from cubepy.ir import (
    F32,
    F64,
    ElemType,
    Instruction,
    KernelDefinition,
    Scope,
    Type,
    Variable,
    VarKind,
    constant,
    format_kernel,
    ops,
    verify,
    walk,
)
from cubepy.ir.contract import contract_pass
from cubepy.ir.ops import branch

Pass = Callable[[KernelDefinition], KernelDefinition]
_Key = tuple[VarKind, int]


# -- scope rewriting ------------------------------------------------------------------------------------
def _rewrite_scope(scope: Scope, rewrite: Callable[[Instruction], Iterable[Instruction]]) -> Scope:
    """Apply ``rewrite`` to every instruction (children first), keeping scope structure."""
    out: list[Instruction] = []
    for inst in scope.instructions:
        operation = inst.operation
        changes = {}
        for field in attrs.fields(type(operation)):
            value = getattr(operation, field.name)
            if isinstance(value, Scope):
                changes[field.name] = _rewrite_scope(value, rewrite)
            elif isinstance(operation, branch.Switch) and field.name == "cases":
                changes[field.name] = tuple((case, _rewrite_scope(body, rewrite)) for case, body in value)
        if changes:
            inst = attrs.evolve(inst, operation=attrs.evolve(operation, **changes))
        out.extend(rewrite(inst))
    return Scope(tuple(out))


def _substitute(operation: ops.Operation, mapping: dict[_Key, Variable]) -> ops.Operation:
    """``operation`` with operands found in ``mapping`` replaced (definitions such as a loop index are kept)."""
    changes = {}
    for field in attrs.fields(type(operation)):
        value = getattr(operation, field.name)
        if isinstance(value, Variable) and (value.kind, value.id) in mapping:
            if not (isinstance(operation, branch.RangeLoop) and field.name == "index"):
                changes[field.name] = mapping[(value.kind, value.id)]
        elif isinstance(value, tuple) and any(isinstance(v, Variable) for v in value):
            changes[field.name] = tuple(mapping.get((v.kind, v.id), v) if isinstance(v, Variable) else v
                                        for v in value)
    return attrs.evolve(operation, **changes) if changes else operation


# -- checked_io ---------------------------------------------------------------------------------------------
def checked_io(definition: KernelDefinition) -> KernelDefinition:
    """In a checked kernel, mark every index / index_assign as bounds-checked."""
    if not definition.checked:
        return definition

    def rewrite(inst: Instruction) -> Iterable[Instruction]:
        operation = inst.operation
        if isinstance(operation, (ops.Index, ops.IndexAssign)) and not operation.checked:
            return [attrs.evolve(inst, operation=attrs.evolve(operation, checked=True))]
        return [inst]

    return attrs.evolve(definition, body=_rewrite_scope(definition.body, rewrite))


# -- dead_code ----------------------------------------------------------------------------------------------
_PURE = (ops.Unary, ops.Binary, ops.Compare, ops.Fma, ops.Clamp, ops.Select, ops.Cast, ops.Bitcast,
         ops.Assign, ops.ExtractLane, ops.Metadata, ops.Index)


def _reads(scope: Scope) -> set[_Key]:
    return {(var.kind, var.id) for inst in walk(scope) for var in inst.operation.operands()}


def _is_dead(inst: Instruction, read: set[_Key]) -> bool:
    out = inst.out
    return (isinstance(inst.operation, _PURE) and out is not None and out.kind is VarKind.CONST
            and (out.kind, out.id) not in read)


def dead_code(definition: KernelDefinition) -> KernelDefinition:
    """Remove pure instructions producing an immutable local that nothing reads (repeated to a fixed point)."""
    body = definition.body
    while True:
        read = _reads(body)
        pruned = _rewrite_scope(body, functools.partial(_keep_live, read=read))
        if pruned == body:
            return attrs.evolve(definition, body=body)
        body = pruned


def _keep_live(inst: Instruction, read: set[_Key]) -> list[Instruction]:
    return [] if _is_dead(inst, read) else [inst]


# -- fold_constants -----------------------------------------------------------------------------------------
_FOLDABLE_FLOATS = (F32, F64)


def _foldable(elem: ElemType) -> bool:
    return elem.is_int or elem.is_bool or elem in _FOLDABLE_FLOATS


def _int_value(value: object, elem: ElemType) -> int:
    bits = elem.bits
    v = int(value) & ((1 << bits) - 1)
    if elem.kind == "int" and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _float_value(value: object, elem: ElemType):
    with np.errstate(all="ignore"):  # an f32 literal beyond f32's range is inf, as LLVM makes it
        return np.float32(value) if elem is F32 else np.float64(value)


def _fold_int_binary(name: str, a: int, b: int, elem: ElemType) -> int | None:
    bits, signed = elem.bits, elem.kind == "int"
    if name in ("add", "sub", "mul", "bitand", "bitor", "bitxor", "min", "max"):
        result = {"add": a + b, "sub": a - b, "mul": a * b, "bitand": a & b, "bitor": a | b, "bitxor": a ^ b,
                  "min": min(a, b), "max": max(a, b)}[name]
        return _int_value(result, elem)
    if name in ("floordiv", "div_trunc"):
        if b == 0:
            return _int_value(-1, elem)
        if name == "floordiv":
            return _int_value(a // b, elem)
        quotient = abs(a) // abs(b)
        return _int_value(quotient if (a < 0) == (b < 0) else -quotient, elem)
    if name in ("mod", "rem_trunc"):
        if b == 0:
            return a
        if name == "mod":
            return _int_value(a % b, elem)
        remainder = abs(a) % abs(b)  # C: the remainder takes the dividend's sign
        return _int_value(remainder if a >= 0 else -remainder, elem)
    if name in ("shl", "shr"):
        amount = b & ((1 << bits) - 1)
        if name == "shl":
            return 0 if amount >= bits else _int_value(a << amount, elem)
        if amount >= bits:
            return -1 if signed and a < 0 else 0
        return a >> amount
    if name == "mul_hi":  # the high half of the double-width product (floor shift: signed or not)
        return _int_value((a * b) >> bits, elem)
    return None


def _fold_float_binary(name: str, a, b, elem: ElemType):
    with np.errstate(all="ignore"):
        if name == "add":
            return a + b
        if name == "sub":
            return a - b
        if name == "mul":
            return a * b
        if name == "div":
            return np.divide(a, b)
        if name == "min":
            return np.fmin(a, b)
        if name == "max":
            return np.fmax(a, b)
        if name == "floordiv":
            return np.floor_divide(a, b)
        if name == "mod":
            return np.remainder(a, b)
    return None


def _fold_binary(name: str, lhs: Variable, rhs: Variable, elem: ElemType):
    if elem.is_bool:
        if name in ("and", "or"):
            return (bool(lhs.value) and bool(rhs.value)) if name == "and" else (bool(lhs.value) or bool(rhs.value))
        return None
    if elem.is_int:
        return _fold_int_binary(name, _int_value(lhs.value, elem), _int_value(rhs.value, elem), elem)
    return _fold_float_binary(name, _float_value(lhs.value, elem), _float_value(rhs.value, elem), elem)


def _fold_compare(name: str, lhs: Variable, rhs: Variable, elem: ElemType) -> bool:
    if elem.is_float:
        a, b = _float_value(lhs.value, elem), _float_value(rhs.value, elem)
    elif elem.is_bool:
        a, b = bool(lhs.value), bool(rhs.value)
    else:
        a, b = _int_value(lhs.value, elem), _int_value(rhs.value, elem)
    return bool({"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[name])


def _fold_cast(value: object, src: ElemType, dst: ElemType):
    if src.is_float:
        x = float(_float_value(value, src))
        if dst.is_bool:
            return x != 0.0  # NaN is true
        if dst.is_int:  # saturating, NaN -> 0, toward zero
            if math.isnan(x):
                return 0
            low, high = (-(1 << (dst.bits - 1)), (1 << (dst.bits - 1)) - 1) if dst.kind == "int" else \
                (0, (1 << dst.bits) - 1)
            return low if x <= low else high if x >= high else int(x)
        return _float_value(x, dst)
    x = bool(value) if src.is_bool else _int_value(value, src)
    if dst.is_bool:
        return x != 0
    if dst.is_int:
        return _int_value(int(x), dst)
    if abs(int(x)) >= 1 << 53:  # numpy would round twice (via double); leave it to the device
        return None
    return _float_value(int(x), dst)


def _literal(value, ty: Type) -> Variable:
    if ty.elem.is_float:
        value = float(value)
    return constant(value, ty)


def _fold(inst: Instruction) -> Variable | None:
    operation, out = inst.operation, inst.out
    if out is None or not all(v.is_constant for v in operation.operands()):
        return None
    if isinstance(operation, ops.Assign):
        return operation.input
    if isinstance(operation, ops.Binary):
        elem = operation.lhs.elem
        if operation.op == "powi" or not _foldable(elem):
            return None
        result = _fold_binary(operation.op, operation.lhs, operation.rhs, elem)
    elif isinstance(operation, ops.Compare):
        elem = operation.lhs.elem
        result = _fold_compare(operation.op, operation.lhs, operation.rhs, elem) if _foldable(elem) else None
    elif isinstance(operation, ops.Cast):
        src, dst = operation.input.elem, out.elem
        result = _fold_cast(operation.input.value, src, dst) if _foldable(src) and _foldable(dst) else None
    else:
        return None
    return None if result is None else _literal(result, out.type)


def fold_constants(definition: KernelDefinition) -> KernelDefinition:
    """Replace binary/compare/cast/assign of literals by literals and substitute them into their readers."""
    mapping: dict[_Key, Variable] = {}

    def rewrite(inst: Instruction) -> Iterable[Instruction]:
        operation = _substitute(inst.operation, mapping) if mapping else inst.operation
        if operation is not inst.operation:
            inst = attrs.evolve(inst, operation=operation)
        folded = _fold(inst)
        if folded is None:
            return [inst]
        if inst.out.kind is VarKind.CONST:
            mapping[(VarKind.CONST, inst.out.id)] = folded
            return []
        return [attrs.evolve(inst, operation=ops.Assign(folded))]

    return attrs.evolve(definition, body=_fold_scope(definition.body, rewrite, mapping))


def _fold_scope(scope: Scope, rewrite, mapping: dict[_Key, Variable]) -> Scope:
    """Program-order folding: a branch's operands are substituted before its bodies are folded."""
    out: list[Instruction] = []
    for inst in scope.instructions:
        operation = inst.operation
        if isinstance(operation, branch.BRANCH_OPS):
            operation = _substitute(operation, mapping)
            changes = {}
            for field in attrs.fields(type(operation)):
                value = getattr(operation, field.name)
                if isinstance(value, Scope):
                    changes[field.name] = _fold_scope(value, rewrite, mapping)
                elif isinstance(operation, branch.Switch) and field.name == "cases":
                    changes[field.name] = tuple((c, _fold_scope(b, rewrite, mapping)) for c, b in value)
            out.append(attrs.evolve(inst, operation=attrs.evolve(operation, **changes)))
        else:
            out.extend(rewrite(inst))
    return Scope(tuple(out))


# -- the pipeline ---------------------------------------------------------------------------------------------
PIPELINE: tuple[tuple[str, Pass], ...] = (
    ("checked_io", checked_io), ("fold_constants", fold_constants), ("contract", contract_pass),
    ("dead_code", dead_code),
)


def run_passes(definition: KernelDefinition, *, check: bool = True) -> tuple[KernelDefinition, list[tuple[str, str]]]:
    """Run the pipeline; returns the final definition and ``(pass_name, IR text after it)`` per pass.

    With ``check`` the verifier runs after every pass, so a broken pass is named at once.
    """
    dumps: list[tuple[str, str]] = []
    for name, run in PIPELINE:
        definition = run(definition)
        if check:
            verify(definition)
        dumps.append((name, format_kernel(definition)))
    return definition, dumps
