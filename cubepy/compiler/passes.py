"""IR passes: pure functions from a ``KernelDefinition`` to a new one.

* ``checked_io``: in a checked kernel, every ``index``/``index_assign`` is bounds-checked.  The
  frontend normally marks them already (then this is a no-op); this is the documented place where
  the launch mode becomes per-access flags.
* ``fold_constants``: the cube shape (``cube_dim*``, compiled in) and ``plane_dim`` are literals; every
  operation whose record is ``foldable`` (exact ones: integer and bit operations, comparisons, casts,
  ``+ - * /``, ``sqrt``, rounding, ``fma``, ``clamp``; and ``assign``) of literal operands becomes a literal,
  evaluated by the record's semantics through ``cubepy.ir.semantics.evaluate``, the interp's own
  implementation (wrapping integers, CUDA's division by zero, saturating float -> int casts, f32 rounding).
  f16/bf16 and transcendental operations are left alone.  An ``if`` whose condition became a literal is
  replaced by the body that runs.
* ``contract``: when the kernel asks for it (the default), one-use ``a * b`` feeding an ``add``/``sub``
  becomes one ``fma`` (``cubepy.ir.contract``).
* ``dead_code``: instructions whose record is ``pure`` and whose immutable result is never read are
  removed (to a fixed point).
* ``plane_uniform``: plane collectives the whole plane always reaches together get ``uniform=True``
  (``cubepy.ir.uniformity``); the GPU lowering then drops their active-mask test.

``run_passes`` runs them in order and, when asked, returns the text after each, for numbered dumps.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import SupportsInt, cast

import attrs
import numpy as np

from cubepy.ir import (
    F32,
    F64,
    ElemType,
    Instruction,
    KernelDefinition,
    Scope,
    Variable,
    VarKind,
    constant,
    format_kernel,
    ops,
    semantics,
    verify,
    walk,
)
from cubepy.ir.bounds import bounds_pass
from cubepy.ir.contract import contract_pass
from cubepy.ir.merge_branches import merge_branches
from cubepy.ir.ops import branch
from cubepy.ir.scope import defined_once, map_child_scopes
from cubepy.ir.types import U32, Type
from cubepy.ir.uniformity import plane_uniform_pass
from cubepy.ir.variable import BUILTINS, PLANE_WIDTH

Pass = Callable[[KernelDefinition], KernelDefinition]
_Key = tuple[VarKind, int]


# -- scope rewriting ------------------------------------------------------------------------------------
def _rewrite_scope(scope: Scope, rewrite: Callable[[Instruction], Iterable[Instruction]]) -> Scope:
    """Apply ``rewrite`` to every instruction (children first), keeping scope structure."""
    out: list[Instruction] = []
    for inst in scope.instructions:
        operation = map_child_scopes(inst.operation, lambda child: _rewrite_scope(child, rewrite))
        if operation is not inst.operation:
            inst = attrs.evolve(inst, operation=operation)
        out.extend(rewrite(inst))
    return Scope(tuple(out))


def _substitute(operation: ops.Operation, mapping: dict[_Key, Variable]) -> ops.Operation:
    """``operation`` with operands found in ``mapping`` replaced (definitions such as a loop index are kept)."""
    changes: dict[str, object] = {}
    for field in attrs.fields(type(operation)):
        value = getattr(operation, field.name)
        if isinstance(value, Variable) and (value.kind, value.id) in mapping:
            if not (isinstance(operation, branch.RangeLoop) and field.name == "index"):
                changes[field.name] = mapping[(value.kind, value.id)]
        elif isinstance(value, tuple) and any(isinstance(v, Variable) and (v.kind, v.id) in mapping for v in value):
            changes[field.name] = tuple(mapping.get((v.kind, v.id), v) if isinstance(v, Variable) else v for v in value)
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
def _reads(scope: Scope) -> set[_Key]:
    return {(var.kind, var.id) for inst in walk(scope) for var in inst.operation.operands()}


def _is_dead(inst: Instruction, read: set[_Key]) -> bool:
    out = inst.out
    return (
        inst.operation.RECORD.pure and out is not None and out.kind is VarKind.CONST and (out.kind, out.id) not in read
    )


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


def _array(var: Variable) -> np.ndarray:
    """A literal as a 0-d array of its element type (integers wrap as the back ends store them)."""
    elem = var.elem
    value = var.value
    if elem.is_int:
        bits = elem.bits
        value = int(cast(SupportsInt, value)) & ((1 << bits) - 1)
        if elem.kind == "int" and value >= 1 << (bits - 1):
            value -= 1 << bits
    with np.errstate(all="ignore"):  # an f32 literal beyond f32's range is inf, as LLVM makes it
        return np.asarray(value, dtype=elem.numpy)


def _evaluate(operation: ops.Operation, out: Variable) -> np.ndarray | None:
    """The operation on its literal operands through its record's semantics, the interp's (None: not foldable)."""
    operands = list(operation.operands())
    if not all(_foldable(v.elem) for v in (*operands, out)):
        return None
    values = [_array(v) for v in operands]
    if isinstance(operation, ops.Cast) and operation.input.elem.is_int and out.elem.is_float:
        if abs(int(values[0])) >= 1 << 53:
            return None  # numpy converts through f64 (two roundings); leave it to the device's one rounding
    return cast(np.ndarray, semantics.evaluate(type(operation), operands[0].elem, *values, result=out.elem.numpy))


def _fold(inst: Instruction) -> Variable | None:
    operation, out = inst.operation, inst.out
    if out is None or not all(v.is_constant for v in operation.operands()):
        return None
    if isinstance(operation, ops.Assign):
        return operation.input
    if not operation.RECORD.foldable or operation.RECORD.semantics is None:
        return None
    with np.errstate(all="ignore"):
        result = _evaluate(operation, out)
    if result is None:
        return None
    value = result.item()
    return constant(float(value) if out.elem.is_float else value, out.type)


def _static_builtins(definition: KernelDefinition) -> dict[_Key, Variable]:
    """The builtins every unit of every launch reads the same literal for: the compiled-in cube shape and the
    plane width."""
    x, y, z = definition.cube_dim
    values = {"cube_dim": x * y * z, "cube_dim_x": x, "cube_dim_y": y, "cube_dim_z": z, "plane_dim": PLANE_WIDTH}
    return {(VarKind.BUILTIN, BUILTINS.index(name)): constant(value, Type(U32)) for name, value in values.items()}


def _identity(operation: ops.Operation, out: Variable) -> Variable | None:
    """The operand an integer ``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x`` or ``x // 1`` returns."""
    if not isinstance(operation, (ops.Add, ops.Sub, ops.Mul, ops.Floordiv)) or out.type.is_line:
        return None
    if not out.elem.is_int or operation.lhs.type != out.type or operation.rhs.type != out.type:
        return None
    unit = 0 if isinstance(operation, (ops.Add, ops.Sub)) else 1
    if operation.rhs.is_constant and int(cast(SupportsInt, operation.rhs.value)) == unit:
        return operation.lhs
    commutes = isinstance(operation, (ops.Add, ops.Mul))
    if commutes and operation.lhs.is_constant and int(cast(SupportsInt, operation.lhs.value)) == unit:
        return operation.rhs
    return None


def fold_constants(definition: KernelDefinition) -> KernelDefinition:
    """Replace foldable operations and assigns of literals by literals and substitute them into their readers;
    the cube shape and plane width are literals; an ``if`` on a literal keeps only the body that runs.  An
    integer ``x + 0``, ``x * 1`` or ``x // 1`` of an immutable ``x`` (a tile base of 0, a line size of 1) is
    ``x`` in its readers, so the range analysis sees ``r * x.shape(1) + c`` as written without them."""
    mapping: dict[_Key, Variable] = _static_builtins(definition)
    once = {key for key in defined_once(definition.body) if key[0] is VarKind.CONST}

    def rewrite(inst: Instruction) -> Iterable[Instruction]:
        operation = _substitute(inst.operation, mapping) if mapping else inst.operation
        if operation is not inst.operation:
            inst = attrs.evolve(inst, operation=operation)
        folded = _fold(inst)
        if folded is None and inst.out is not None and (inst.out.kind, inst.out.id) in once:
            same = _identity(inst.operation, inst.out)
            if same is not None and (same.kind in (VarKind.BUILTIN, VarKind.SCALAR) or (same.kind, same.id) in once):
                mapping[(VarKind.CONST, inst.out.id)] = same
                return []
        if folded is None:
            return [inst]
        assert inst.out is not None  # _fold folds only instructions with an out
        if inst.out.kind is VarKind.CONST:
            mapping[(VarKind.CONST, inst.out.id)] = folded
            return []
        return [attrs.evolve(inst, operation=ops.Assign(folded))]

    return attrs.evolve(definition, body=_fold_scope(definition.body, rewrite, mapping))


def _fold_scope(
    scope: Scope, rewrite: Callable[[Instruction], Iterable[Instruction]], mapping: dict[_Key, Variable]
) -> Scope:
    """Program-order folding: a branch's operands are substituted before its bodies are folded."""
    out: list[Instruction] = []
    for inst in scope.instructions:
        operation = inst.operation
        if isinstance(operation, branch.BRANCH_OPS):
            operation = _substitute(operation, mapping)
            taken = _taken_body(operation)
            if taken is not None:  # the body runs in place of the branch (its variables stay unique)
                out.extend(_fold_scope(taken, rewrite, mapping).instructions)
                continue
            operation = map_child_scopes(operation, lambda child: _fold_scope(child, rewrite, mapping))
            out.append(attrs.evolve(inst, operation=operation))
        else:
            out.extend(rewrite(inst))
    return Scope(tuple(out))


def _taken_body(operation: ops.Operation) -> Scope | None:
    """The body an ``if``/``if-else`` on a literal condition runs (an empty scope when none), else None."""
    if isinstance(operation, branch.If) and operation.cond.is_constant:
        return operation.body if operation.cond.value else Scope(())
    if isinstance(operation, branch.IfElse) and operation.cond.is_constant:
        return operation.then_body if operation.cond.value else operation.else_body
    return None


# -- the pipeline ---------------------------------------------------------------------------------------------
PIPELINE: tuple[tuple[str, Pass], ...] = (
    ("checked_io", checked_io),
    ("fold_constants", fold_constants),
    ("contract", contract_pass),
    ("dead_code", dead_code),
    ("merge_branches", merge_branches),  # adjacent branches on one condition join (cubepy.ir.merge_branches)
    ("plane_uniform", plane_uniform_pass),
    ("bounds", bounds_pass),  # checks and values the range analysis proves (cubepy.ir.bounds)
)


def run_passes(
    definition: KernelDefinition, *, check: bool = True, dumps: bool = False
) -> tuple[KernelDefinition, list[tuple[str, str]]]:
    """Run the pipeline; returns the final definition and, with ``dumps``, ``(pass_name, IR text after it)`` per
    pass (an empty list otherwise: printing a large kernel six times costs more than the passes).

    With ``check`` the verifier runs on the result; with ``dumps`` too after every pass, so a broken pass is
    named at once (the PTX path, which keeps the dumps, does).
    """
    texts: list[tuple[str, str]] = []
    for name, run in PIPELINE:
        definition = run(definition)
        if dumps:
            if check:
                verify(definition)
            texts.append((name, format_kernel(definition)))
    if check and not dumps:
        verify(definition)
    return definition, texts
