"""The IR verifier: the guard that keeps ill-typed IR away from the back ends (and LLVM's aborts).

Each check is one named rule; a violation raises ``VerifyError`` naming the rule, the instruction
and its source line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from cubepy.errors import VerifyError
from cubepy.ir.kernel import MAX_CONST_BYTES, PARAM_ROLES, ConstTable, KernelDefinition, Param, ProductFactor
from cubepy.ir.ops import branch
from cubepy.ir.ops.base import Operation
from cubepy.ir.scope import Instruction, Scope
from cubepy.ir.types import BOOL, U32, ElemType, Type
from cubepy.ir.variable import LOCAL_KINDS, Variable, VarKind

RULES = (
    "unknown-op",
    "undefined-operand",
    "const-reassigned",
    "bad-out",
    "missing-out",
    "type-mismatch",
    "elem-kind",
    "not-memory",
    "bad-index",
    "break-outside-loop",
    "bad-param",
    "bad-memory-decl",
    "bad-const-table",
    "read-only-memory",
    "bad-unroll",
)


class _Checker:
    def __init__(self, kernel: KernelDefinition | None) -> None:
        self.kernel = kernel
        self.assigned_consts: set[int] = set()
        self.const_tables = {t.var.id: t.var for t in kernel.const_tables} if kernel is not None else {}

    # -- reporting -------------------------------------------------------------------------
    def fail(self, rule: str, inst: Instruction | None, detail: str) -> NoReturn:
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

    def use(self, inst: Instruction, var: Variable, visible: set[tuple[VarKind, int]]) -> None:
        if var.kind in LOCAL_KINDS and (var.kind, var.id) not in visible:
            self.fail("undefined-operand", inst, f"{var!r} is read before any instruction defines it")
        if var.kind is VarKind.CONST_TABLE and self.kernel is not None and self.const_tables.get(var.id) != var:
            self.fail(
                "bad-const-table", inst, f"{var!r} ({var.type!r}[{var.length}]) is not a table the kernel declares"
            )

    def define(self, inst: Instruction, var: Variable, visible: set[tuple[VarKind, int]]) -> None:
        if var.kind is VarKind.CONST:
            if var.id in self.assigned_consts:
                self.fail("const-reassigned", inst, f"immutable local {var!r} is assigned a second time")
            self.assigned_consts.add(var.id)
        elif var.kind is not VarKind.MUT:
            self.fail("bad-out", inst, f"result {var!r} is a {var.kind.value}, expected a local")
        visible.add((var.kind, var.id))

    def instruction(self, inst: Instruction, visible: set[tuple[VarKind, int]], loop_depth: int) -> None:
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
        if isinstance(operation, branch.Return):
            _check_record(self, inst, operation)
            return
        if getattr(type(operation), "RECORD", None) is None:
            self.fail("unknown-op", inst, f"operation {type(operation).__name__} has no record (not declared)")
        _check_record(self, inst, operation)
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

    def check_branch(self, inst: Instruction, operation: Operation) -> None:
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
        if op.unroll is not None and (not isinstance(op.unroll, int) or op.unroll < 1):
            self.fail("bad-unroll", inst, f"a loop's unroll count must be a positive int, got {op.unroll!r}")


_KIND_TEST: dict[str, tuple[Callable[[ElemType], bool], str]] = {
    "float": (lambda elem: elem.is_float, "a float"),
    "int": (lambda elem: elem.is_int, "an integer"),
    "bool": (lambda elem: elem.is_bool, "bool"),
    "number": (lambda elem: not elem.is_bool and not elem.is_fp8, "a number (not bool or fp8)"),
}


def _check_record(c: _Checker, inst: Instruction, op: Operation) -> None:
    """The rules every operation's record implies: operand kinds, operand and result types, extra checks."""
    record = op.RECORD
    for name in record.writes:
        memory: Variable = getattr(op, name)
        if memory.kind is VarKind.CONST_TABLE:
            c.fail("read-only-memory", inst, f"{record.name} writes {memory!r}, a constant table (read-only)")
    if record.operand_kind != "any":
        accepts, expected = _KIND_TEST[record.operand_kind]
        for name in record.kind_of:
            var: Variable = getattr(op, name)
            if not accepts(var.elem):
                c.fail("elem-kind", inst, f"{record.name} needs {expected} operand, got {var.type!r}")
    if record.result is None:
        if inst.out is not None:
            c.fail("bad-out", inst, f"{record.name} has no result, got {inst.out!r}")
    else:
        c.need_out(inst)
    for check in record.checks:
        check(c, inst, op)
    if record.result is not None:
        out = c.need_out(inst)
        for name in record.same_type[1:]:
            c.same_type(inst, _WHAT.get(name, name), getattr(op, name).type, getattr(op, record.same_type[0]).type)
        expected_type = op.result_type()
        if expected_type is not None:
            c.same_type(inst, "result", out.type, expected_type)


_WHAT = {"rhs": "right operand", "otherwise": "else value", "then": "then value", "lo": "lo", "hi": "hi"}


def _value_fits(value: object, elem: ElemType) -> bool:
    if elem.is_bool:
        return isinstance(value, bool)
    if elem.is_float:
        return isinstance(value, float)
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    low, high = (0, 1 << elem.bits) if elem.kind == "uint" else (-(1 << (elem.bits - 1)), 1 << (elem.bits - 1))
    return low <= value < high


def _check_aliases(checker: _Checker, shared: tuple[Variable, ...], local: tuple[Variable, ...]) -> None:
    """A shared memory that views another's bytes names an earlier shared memory of its own, at an item boundary,
    and fits in it; nothing else aliases."""
    earlier: dict[int, Variable] = {}
    for var in shared:
        if var.aliases is not None:
            root_id, offset = var.aliases
            root = earlier.get(root_id)
            size = (var.length or 0) * var.type.size
            if root is None or root.aliases is not None:
                checker.fail("bad-memory-decl", None, f"{var!r} views shared[{root_id}], not an earlier shared memory")
            if offset < 0 or offset % var.type.size or offset + size > (root.length or 0) * root.type.size:
                checker.fail(
                    "bad-memory-decl",
                    None,
                    f"{var!r} ({size} bytes from byte {offset}) does not fit {root!r} at an item boundary",
                )
        earlier[var.id] = var
    for var in local:
        if var.aliases is not None:
            checker.fail("bad-memory-decl", None, f"{var!r} is a local array: only shared memory views other bytes")


def _check_const_tables(c: _Checker, tables: tuple[ConstTable, ...]) -> None:
    """Every table: a scalar CONST_TABLE variable of a unique id, non-empty, its values of its type; all in 64 KiB."""
    seen: set[int] = set()
    for table in tables:
        var = table.var
        if var.kind is not VarKind.CONST_TABLE or var.type.line != 1:
            c.fail("bad-const-table", None, f"{var!r}: {var.type!r} is not a scalar constant-table variable")
        if var.id in seen:
            c.fail("bad-const-table", None, f"{var!r} is declared twice")
        seen.add(var.id)
        if not table.values:
            c.fail("bad-const-table", None, f"{var!r} is empty")
        if var.length != len(table.values):
            c.fail("bad-const-table", None, f"{var!r} has length {var.length} but {len(table.values)} values")
        for value in table.values:
            if not _value_fits(value, var.elem):
                c.fail("bad-const-table", None, f"{var!r} holds {value!r}, not a value of {var.elem!r}")
    total = sum(t.nbytes for t in tables)
    if total > MAX_CONST_BYTES:
        c.fail(
            "bad-const-table",
            None,
            f"the constant tables hold {total} bytes, more than CUDA's {MAX_CONST_BYTES}-byte constant bank",
        )


def _buffer_param(kernel: KernelDefinition, slot: int) -> Param | None:
    """The buffer parameter at binding slot ``slot`` (a launch fact names an earlier buffer this way)."""
    return next((p for p in kernel.params if p.var.kind is VarKind.GLOBAL and p.var.id == slot), None)


def _product_ok(kernel: KernelDefinition, param: Param) -> bool:
    """Whether ``param.len_as_product`` names two factors that exist, on an array whose len is its buffer's."""
    if param.role not in ("array", "tensor") or not param.len_is_buffer_len or param.len_as_product is None:
        return False
    if not all(param.len_as_product):  # each factor names at least one value
        return False
    return _factors_ok(kernel, tuple(f for alike in param.len_as_product for f in alike))


def _factors_ok(kernel: KernelDefinition, factors: tuple[ProductFactor, ...]) -> bool:
    """Whether each factor names a u32 scalar parameter, a dimension of a tensor of known rank or a buffer."""
    for factor in factors:
        if factor.kind == "scalar":
            scalar = next((p for p in kernel.params if p.var.kind is VarKind.SCALAR and p.var.id == factor.slot), None)
            if scalar is None or scalar.var.type != Type(U32):
                return False
        elif factor.kind == "shape":
            tensor = _buffer_param(kernel, factor.slot)
            if tensor is None or tensor.role != "tensor" or tensor.rank is None or not 0 <= factor.dim < tensor.rank:
                return False
        elif factor.kind != "len" or _buffer_param(kernel, factor.slot) is None:
            return False
    return True


def verify_scope(scope: Scope, defined: set[tuple[VarKind, int]] | None = None) -> None:
    """Verify a scope on its own (``defined`` lists locals visible from outside)."""
    _Checker(None).scope(scope, set(defined or ()), 0)


def verify(kernel: KernelDefinition) -> None:
    """Verify a whole kernel; raise ``VerifyError`` at the first broken rule."""
    checker = _Checker(kernel)
    slots: dict[VarKind, set[int]] = {}
    for param in kernel.params:
        expected = {
            "array": VarKind.GLOBAL,
            "tensor": VarKind.GLOBAL,
            "scalar": VarKind.SCALAR,
            "tensor_map": VarKind.TENSOR_MAP,
        }.get(param.role)
        if param.role not in PARAM_ROLES or param.var.kind is not expected:
            checker.fail(
                "bad-param", None, f"parameter {param.name!r} has role {param.role!r} but variable {param.var!r}"
            )
        used = slots.setdefault(param.var.kind, set())
        if param.var.id in used:
            checker.fail("bad-param", None, f"parameter {param.name!r} reuses slot {param.var.id}")
        used.add(param.var.id)
        if param.same_len is not None and (
            param.var.kind is not VarKind.GLOBAL or param.same_len not in used - {param.var.id}
        ):
            checker.fail(
                "bad-param",
                None,
                f"parameter {param.name!r} has same_len {param.same_len}, not an earlier buffer's slot",
            )
        if param.len_as_shape is not None:
            tensor = _buffer_param(kernel, param.len_as_shape[0])
            if (
                param.role != "array"
                or not param.len_is_buffer_len
                or tensor is None
                or param.len_as_shape[0] not in used - {param.var.id}
                or tensor.rank is None
                or not 0 <= param.len_as_shape[1] < tensor.rank
            ):
                checker.fail(
                    "bad-param",
                    None,
                    f"parameter {param.name!r} has len_as_shape {param.len_as_shape}: expected an array whose "
                    "len is its buffer's, and the slot and a dimension of an earlier tensor of known rank",
                )
        if param.same_shape is not None:
            tensor = _buffer_param(kernel, param.same_shape)
            if (
                param.role != "tensor"
                or param.rank is None
                or tensor is None
                or tensor.role != "tensor"
                or tensor.rank != param.rank
                or param.same_shape not in used - {param.var.id}
            ):
                checker.fail(
                    "bad-param",
                    None,
                    f"parameter {param.name!r} has same_shape {param.same_shape}: expected a tensor of known rank "
                    "and the slot of an earlier tensor of the same rank",
                )
        if param.len_as_product is not None and not _product_ok(kernel, param):
            outer, inner = (" = ".join(map(str, alike)) for alike in param.len_as_product)
            checker.fail(
                "bad-param",
                None,
                f"parameter {param.name!r} has len_as_product ({outer}) * ({inner}): expected a buffer whose len "
                "is its buffer's, each factor a u32 scalar parameter, a dimension of a tensor of known rank or a buffer's len",
            )
        multiple = param.multiple_of
        if (
            multiple < 1
            or multiple & (multiple - 1)
            or (
                multiple > 1
                and not (param.var.kind is VarKind.SCALAR and param.var.elem.is_int)
                and param.var.kind is not VarKind.GLOBAL
            )
        ):
            checker.fail(
                "bad-param",
                None,
                f"parameter {param.name!r} has multiple_of {multiple}: expected a power of two, above 1 only on "
                "an integer scalar or a buffer (its len())",
            )
        address = param.address_multiple_of
        if address < 1 or address & (address - 1) or (address > 1 and param.var.kind is not VarKind.GLOBAL):
            checker.fail(
                "bad-param",
                None,
                f"parameter {param.name!r} has address_multiple_of {address}: expected a power of two, above 1 "
                "only on a buffer",
            )
        for what, multiples in (("shape", param.shape_multiple_of), ("stride", param.stride_multiple_of)):
            if multiples and (
                param.role != "tensor" or len(multiples) != param.rank or any(m < 1 or m & (m - 1) for m in multiples)
            ):
                checker.fail(
                    "bad-param",
                    None,
                    f"parameter {param.name!r} has {what}_multiple_of {multiples}: expected one power of two per "
                    f"dimension of a tensor of known rank (rank {param.rank})",
                )
        if param.unit_strides and (param.role != "tensor" or len(param.unit_strides) != param.rank):
            checker.fail(
                "bad-param",
                None,
                f"parameter {param.name!r} has unit_strides {param.unit_strides}: expected one flag per dimension "
                f"of a tensor of known rank (rank {param.rank})",
            )
        if param.contiguous and (param.role != "tensor" or param.rank != 2 or param.var.type.is_line):
            checker.fail(
                "bad-param",
                None,
                f"parameter {param.name!r} is marked contiguous: only a rank-2 tensor of single items can be "
                f"(role {param.role}, rank {param.rank}, {param.var.type!r})",
            )
    for var in kernel.shared_memories + kernel.local_arrays:
        if not var.length or var.length < 0:
            checker.fail("bad-memory-decl", None, f"{var!r} has length {var.length}, expected a positive size")
        if var.alignment is not None and var.alignment & (var.alignment - 1):
            checker.fail("bad-memory-decl", None, f"{var!r} alignment {var.alignment} is not a power of two")
    _check_aliases(checker, kernel.shared_memories, kernel.local_arrays)
    for var in kernel.barriers:
        if var.length is not None and var.length < 1:
            checker.fail("bad-memory-decl", None, f"{var!r} is an array of {var.length} barriers, expected at least 1")
    _check_const_tables(checker, kernel.const_tables)
    if any(d < 1 for d in kernel.cube_dim):
        checker.fail("bad-param", None, f"cube_dim {kernel.cube_dim} has a zero dimension")
    if kernel.cube_count_as and not _factors_ok(kernel, kernel.cube_count_as):
        named = ", ".join(map(str, kernel.cube_count_as))
        checker.fail(
            "bad-param",
            None,
            f"cube_count_as ({named}): expected u32 scalar parameters, dimensions of tensors of known rank or buffers",
        )
    checker.scope(kernel.body, set(), 0)
