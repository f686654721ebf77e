"""The IR verifier: the guard that keeps ill-typed IR away from the back ends (and LLVM's aborts).

Each check is one named rule; a violation raises ``VerifyError`` naming the rule, the instruction
and its source line.
"""

from __future__ import annotations

from cubepy.errors import VerifyError
from cubepy.ir import ops
from cubepy.ir.kernel import PARAM_ROLES, KernelDefinition
from cubepy.ir.ops import arith, branch, memory, sync
from cubepy.ir.scope import Instruction, Scope
from cubepy.ir.types import BOOL, U32, Type
from cubepy.ir.variable import LOCAL_KINDS, Variable, VarKind

RULES = (
    "unknown-op", "undefined-operand", "const-reassigned", "bad-out", "missing-out", "type-mismatch",
    "elem-kind", "not-memory", "bad-index", "break-outside-loop", "bad-param", "bad-memory-decl",
)


class _Checker:
    def __init__(self, kernel: KernelDefinition | None) -> None:
        self.kernel = kernel
        self.assigned_consts: set[int] = set()

    # -- reporting -------------------------------------------------------------------------
    def fail(self, rule: str, inst: Instruction | None, detail: str) -> None:
        where = f"{inst.loc.file}:{inst.loc.line}: " if inst is not None and inst.loc is not None else ""
        text = f"{where}IR verifier [{rule}]: {detail}"
        if inst is not None:
            text += f"\n  in instruction: {inst}"
        raise VerifyError(text)

    # -- scopes ----------------------------------------------------------------------------
    def scope(self, scope: Scope, defined: set[tuple[VarKind, int]], loop_depth: int) -> None:
        visible = set(defined)
        for inst in scope.instructions:
            self.instruction(inst, visible, loop_depth)

    def use(self, inst: Instruction, var: Variable, visible: set) -> None:
        if var.kind in LOCAL_KINDS and (var.kind, var.id) not in visible:
            self.fail("undefined-operand", inst, f"{var!r} is read before any instruction defines it")

    def define(self, inst: Instruction, var: Variable, visible: set) -> None:
        if var.kind is VarKind.CONST:
            if var.id in self.assigned_consts:
                self.fail("const-reassigned", inst, f"immutable local {var!r} is assigned a second time")
            self.assigned_consts.add(var.id)
        elif var.kind is not VarKind.MUT:
            self.fail("bad-out", inst, f"result {var!r} is a {var.kind.value}, expected a local")
        visible.add((var.kind, var.id))

    def instruction(self, inst: Instruction, visible: set, loop_depth: int) -> None:
        operation = inst.operation
        for var in operation.operands():
            self.use(inst, var, visible)
        if isinstance(operation, branch.RangeLoop):
            self.check_range_loop(inst, operation)
            inner = set(visible)
            self.define(inst, operation.index, inner)
            self.scope(operation.body, inner, loop_depth + 1)
            return
        if isinstance(operation, (branch.If, branch.IfElse, branch.Switch, branch.Loop)):
            self.check_branch(inst, operation)
            depth = loop_depth + (1 if isinstance(operation, branch.Loop) else 0)
            from cubepy.ir.scope import child_scopes

            for child in child_scopes(operation):
                self.scope(child, visible, depth)
            return
        if isinstance(operation, (branch.Break, branch.Continue)):
            if loop_depth == 0:
                self.fail("break-outside-loop", inst, f"{operation.name} outside of any loop")
            return
        checker = _CHECKS.get(type(operation))
        if checker is None:
            extra = _EXTRA_CHECKS.get(type(operation))
            if extra is None:
                self.fail("unknown-op", inst, f"no verifier rule for operation {type(operation).__name__}")
            extra(self, inst, operation)
        else:
            checker(self, inst, operation)
        if inst.out is not None:
            if inst.out.kind is VarKind.MUT and (VarKind.MUT, inst.out.id) not in visible:
                visible.add((VarKind.MUT, inst.out.id))
            elif inst.out.kind is not VarKind.MUT:
                self.define(inst, inst.out, visible)

    # -- helpers ---------------------------------------------------------------------------
    def need_out(self, inst: Instruction) -> Variable:
        if inst.out is None:
            self.fail("missing-out", inst, f"{inst.op} produces a value but has no result variable")
        return inst.out

    def same_type(self, inst: Instruction, what: str, got: Type, expected: Type) -> None:
        if got != expected:
            self.fail("type-mismatch", inst, f"{what} has type {got!r}, expected {expected!r}")

    def int_scalar(self, inst: Instruction, what: str, var: Variable) -> None:
        if not var.elem.is_int or var.type.line != 1:
            self.fail("bad-index", inst, f"{what} {var!r} has type {var.type!r}, expected a scalar integer")

    def check_branch(self, inst: Instruction, operation) -> None:
        if isinstance(operation, (branch.If, branch.IfElse)):
            if operation.cond.type != Type(BOOL):
                self.fail("type-mismatch", inst, f"condition has type {operation.cond.type!r}, expected bool")
        elif isinstance(operation, branch.Switch):
            self.int_scalar(inst, "switch value", operation.value)

    def check_range_loop(self, inst: Instruction, op: branch.RangeLoop) -> None:
        self.int_scalar(inst, "loop start", op.start)
        for what, var in (("loop end", op.end), ("loop step", op.step), ("loop index", op.index)):
            self.same_type(inst, what, var.type, op.start.type)
        if op.index.kind is not VarKind.CONST:
            self.fail("bad-out", inst, f"loop index {op.index!r} must be an immutable local")


def _elem_kind(checker: _Checker, inst: Instruction, name: str, ty: Type) -> None:
    elem = ty.elem
    groups = (
        (arith.FLOAT_UNARY | arith.FLOAT_BINARY | {"fma"}, elem.is_float, "a float"),
        (arith.INT_UNARY | arith.INT_BINARY, elem.is_int, "an integer"),
        (arith.BOOL_UNARY | arith.BOOL_BINARY, elem.is_bool, "bool"),
        (arith.NUMERIC_UNARY | arith.NUMERIC_BINARY | {"clamp"}, not elem.is_bool, "a number"),
    )
    for names, ok, expected in groups:
        if name in names and not ok:
            checker.fail("elem-kind", inst, f"{name} needs {expected} operand, got {ty!r}")


def _check_unary(c: _Checker, inst: Instruction, op: arith.Unary) -> None:
    if op.op not in arith.UNARY_OPS:
        c.fail("unknown-op", inst, f"unknown unary operation {op.op!r}")
    out = c.need_out(inst)
    _elem_kind(c, inst, op.op, op.input.type)
    expected = op.input.type.with_elem(BOOL) if op.op in ("is_nan", "is_inf") else op.input.type
    if op.op in arith.U32_RESULT_UNARY:
        expected = op.input.type.with_elem(U32)
    c.same_type(inst, "result", out.type, expected)


def _check_binary(c: _Checker, inst: Instruction, op: arith.Binary) -> None:
    if op.op not in arith.BINARY_OPS:
        c.fail("unknown-op", inst, f"unknown binary operation {op.op!r}")
    out = c.need_out(inst)
    if op.op == "powi":
        if not op.lhs.elem.is_float or not op.rhs.elem.is_int:
            c.fail("elem-kind", inst, f"powi needs a float base and an integer exponent, got "
                   f"{op.lhs.type!r} and {op.rhs.type!r}")
        if op.rhs.type.line not in (1, op.lhs.type.line):
            c.fail("type-mismatch", inst, "powi exponent line size differs from the base's")
    else:
        _elem_kind(c, inst, op.op, op.lhs.type)
        c.same_type(inst, "right operand", op.rhs.type, op.lhs.type)
    c.same_type(inst, "result", out.type, op.lhs.type)


def _check_compare(c: _Checker, inst: Instruction, op: arith.Compare) -> None:
    if op.op not in arith.COMPARE_OPS:
        c.fail("unknown-op", inst, f"unknown comparison {op.op!r}")
    out = c.need_out(inst)
    c.same_type(inst, "right operand", op.rhs.type, op.lhs.type)
    c.same_type(inst, "result", out.type, op.lhs.type.with_elem(BOOL))


def _check_same(*fields: str, kind: str):
    def check(c: _Checker, inst: Instruction, op) -> None:
        out = c.need_out(inst)
        _elem_kind(c, inst, kind, out.type)
        for name in fields:
            c.same_type(inst, name, getattr(op, name).type, out.type)
    return check


def _check_select(c: _Checker, inst: Instruction, op: arith.Select) -> None:
    out = c.need_out(inst)
    if not op.cond.elem.is_bool or op.cond.type.line not in (1, out.type.line):
        c.fail("type-mismatch", inst, f"select condition has type {op.cond.type!r}, expected bool")
    c.same_type(inst, "then value", op.then.type, out.type)
    c.same_type(inst, "else value", op.otherwise.type, out.type)


def _check_cast(c: _Checker, inst: Instruction, op: arith.Cast) -> None:
    out = c.need_out(inst)
    if op.input.type.line not in (1, out.type.line):
        c.fail("type-mismatch", inst, f"cast from {op.input.type!r} to {out.type!r} changes the line size")


def _check_bitcast(c: _Checker, inst: Instruction, op: arith.Bitcast) -> None:
    out = c.need_out(inst)
    if op.input.type.size != out.type.size:
        c.fail("type-mismatch", inst, f"bitcast from {op.input.type!r} ({op.input.type.size} bytes) to "
               f"{out.type!r} ({out.type.size} bytes)")


def _check_assign(c: _Checker, inst: Instruction, op: arith.Assign) -> None:
    out = c.need_out(inst)
    c.same_type(inst, "assigned value", op.input.type, out.type)


def _memory(c: _Checker, inst: Instruction, var: Variable) -> None:
    if not var.is_memory:
        c.fail("not-memory", inst, f"{var!r} is a {var.kind.value}, expected a buffer, shared memory or local array")


def _check_index(c: _Checker, inst: Instruction, op: memory.Index) -> None:
    _memory(c, inst, op.memory)
    c.int_scalar(inst, "index", op.index)
    c.same_type(inst, "result", c.need_out(inst).type, op.memory.type)


def _check_index_assign(c: _Checker, inst: Instruction, op: memory.IndexAssign) -> None:
    _memory(c, inst, op.memory)
    c.int_scalar(inst, "index", op.index)
    c.same_type(inst, "stored value", op.value.type, op.memory.type)


def _check_extract(c: _Checker, inst: Instruction, op: memory.ExtractLane) -> None:
    c.int_scalar(inst, "lane", op.lane)
    c.same_type(inst, "result", c.need_out(inst).type, op.line.type.scalar())


def _check_insert(c: _Checker, inst: Instruction, op: memory.InsertLane) -> None:
    c.int_scalar(inst, "lane", op.lane)
    if op.target.kind is not VarKind.MUT:
        c.fail("bad-out", inst, f"insert_lane target {op.target!r} must be a mutable local")
    c.same_type(inst, "lane value", op.value.type, op.target.type.scalar())


def _check_metadata(c: _Checker, inst: Instruction, op: memory.Metadata) -> None:
    if op.op not in memory.METADATA_KINDS:
        c.fail("unknown-op", inst, f"unknown metadata {op.op!r}")
    if op.memory.kind is not VarKind.GLOBAL:
        c.fail("not-memory", inst, f"metadata of {op.memory!r}, expected a buffer parameter")
    if op.op in ("shape", "stride"):
        if op.dim is None:
            c.fail("bad-index", inst, f"{op.op} needs a dimension")
        c.int_scalar(inst, "dimension", op.dim)
    c.same_type(inst, "result", c.need_out(inst).type, Type(U32))


def _check_atomic(c: _Checker, inst: Instruction, op: memory.AtomicOp) -> None:
    if op.op not in memory.ATOMIC_OPS:
        c.fail("unknown-op", inst, f"unknown atomic operation {op.op!r}")
    _memory(c, inst, op.memory)
    c.int_scalar(inst, "index", op.index)
    if op.op != "load":
        if op.value is None:
            c.fail("type-mismatch", inst, f"atomic {op.op} needs a value")
        c.same_type(inst, "value", op.value.type, op.memory.type)
    if op.op != "store":
        c.same_type(inst, "result", c.need_out(inst).type, op.memory.type)


def _check_cas(c: _Checker, inst: Instruction, op: memory.AtomicCompareExchange) -> None:
    _memory(c, inst, op.memory)
    c.int_scalar(inst, "index", op.index)
    for name in ("cmp", "new"):
        c.same_type(inst, name, getattr(op, name).type, op.memory.type)
    c.same_type(inst, "result", c.need_out(inst).type, op.memory.type)


def _check_plane(c: _Checker, inst: Instruction, op: sync.PlaneOp) -> None:
    if op.op not in sync.PLANE_OPS:
        c.fail("unknown-op", inst, f"unknown plane operation {op.op!r}")
    out = c.need_out(inst)
    if op.op == "elect":
        c.same_type(inst, "result", out.type, Type(BOOL))
        return
    if op.value is None:
        c.fail("type-mismatch", inst, f"plane_{op.op} needs a value")
    if op.op in ("all", "any"):
        if not op.value.elem.is_bool:
            c.fail("elem-kind", inst, f"plane_{op.op} needs bool, got {op.value.type!r}")
        c.same_type(inst, "result", out.type, op.value.type)
    elif op.op == "ballot":
        if op.value.type != Type(BOOL) or out.type.elem != U32:
            c.fail("type-mismatch", inst, "plane_ballot takes a bool and gives u32 (line 1 or 4)")
    else:
        c.same_type(inst, "result", out.type, op.value.type)
        if op.op in sync.PLANE_MOVE:
            if op.arg is None:
                c.fail("bad-index", inst, f"plane_{op.op} needs a lane or offset")
            c.int_scalar(inst, "lane", op.arg)


def _check_none(c: _Checker, inst: Instruction, op) -> None:
    if inst.out is not None:
        c.fail("bad-out", inst, f"{op.name} has no result, got {inst.out!r}")


_CHECKS = {
    ops.Unary: _check_unary, ops.Binary: _check_binary, ops.Compare: _check_compare,
    ops.Fma: _check_same("a", "b", "c", kind="fma"), ops.Clamp: _check_same("input", "lo", "hi", kind="clamp"),
    ops.Select: _check_select, ops.Cast: _check_cast, ops.Bitcast: _check_bitcast, ops.Assign: _check_assign,
    ops.Index: _check_index, ops.IndexAssign: _check_index_assign, ops.ExtractLane: _check_extract,
    ops.InsertLane: _check_insert, ops.Metadata: _check_metadata, ops.AtomicOp: _check_atomic,
    ops.AtomicCompareExchange: _check_cas, ops.PlaneOp: _check_plane,
    ops.SyncCube: _check_none, ops.SyncPlane: _check_none, ops.SyncProxyShared: _check_none,
    branch.Return: _check_none,
}

# Other op families (TMA, barriers, cmma) register their checks here from their own modules.
_EXTRA_CHECKS: dict[type, object] = {}


def register_check(op_type: type, check) -> None:
    """Add the verifier rule of an operation family defined outside this module."""
    _EXTRA_CHECKS[op_type] = check


def verify_scope(scope: Scope, defined: set[tuple[VarKind, int]] | None = None) -> None:
    """Verify a scope on its own (``defined`` lists locals visible from outside)."""
    _Checker(None).scope(scope, set(defined or ()), 0)


def verify(kernel: KernelDefinition) -> None:
    """Verify a whole kernel; raise ``VerifyError`` at the first broken rule."""
    checker = _Checker(kernel)
    slots: dict[VarKind, set[int]] = {}
    for param in kernel.params:
        expected = {"array": VarKind.GLOBAL, "tensor": VarKind.GLOBAL, "scalar": VarKind.SCALAR,
                    "tensor_map": VarKind.TENSOR_MAP}.get(param.role)
        if param.role not in PARAM_ROLES or param.var.kind is not expected:
            checker.fail("bad-param", None, f"parameter {param.name!r} has role {param.role!r} "
                         f"but variable {param.var!r}")
        used = slots.setdefault(param.var.kind, set())
        if param.var.id in used:
            checker.fail("bad-param", None, f"parameter {param.name!r} reuses slot {param.var.id}")
        used.add(param.var.id)
    for var in kernel.shared_memories + kernel.local_arrays:
        if not var.length or var.length < 0:
            checker.fail("bad-memory-decl", None, f"{var!r} has length {var.length}, expected a positive size")
        if var.alignment is not None and var.alignment & (var.alignment - 1):
            checker.fail("bad-memory-decl", None, f"{var!r} alignment {var.alignment} is not a power of two")
    if any(d < 1 for d in kernel.cube_dim):
        checker.fail("bad-param", None, f"cube_dim {kernel.cube_dim} has a zero dimension")
    checker.scope(kernel.body, set(), 0)
