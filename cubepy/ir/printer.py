"""The one text form of the IR (stable: tests compare against it)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, cast

from cubepy.ir.variable import VarKind
from cubepy.ir.variable import format_variable as format_variable  # a variable's text is its repr

# ``Instruction.__str__`` prints through this module, so it knows the other IR modules by their annotations
# only: branch operations are told apart by their record's name, the name the back ends dispatch on too.
if TYPE_CHECKING:
    from cubepy.ir.kernel import ConstTable, KernelDefinition
    from cubepy.ir.ops.base import Operation
    from cubepy.ir.ops.branch import If, IfElse, Loop, RangeLoop, Switch
    from cubepy.ir.scope import Instruction, Scope
    from cubepy.ir.variable import Variable

_ONE_BODY = frozenset({"if", "loop", "range_loop"})  # branch operations that own a single ``body``


def _format_operation(operation: Operation) -> str:
    texts = [format_variable(v) for v in operation.operands()]
    element = getattr(operation, "index", None)
    if element is not None and getattr(operation, "barrier", None) is not None:
        # an element of a barrier array: the barrier (first operand) is written with its index (the last)
        texts = [f"{texts[0]}[{texts[-1]}]", *texts[1:-1]]
    operands = ", ".join(texts)
    attrs_ = operation.attributes()
    text = operation.name + (" " + operands if operands else "")
    if attrs_:
        text += " {" + ", ".join(f"{k}={v}" for k, v in attrs_.items()) + "}"
    return text


def _loc_suffix(inst: Instruction) -> str:
    if inst.loc is None:
        return ""
    return f"  ; {os.path.basename(inst.loc.file)}:{inst.loc.line}"


def format_instruction(inst: Instruction) -> str:
    """One instruction on one line (branch bodies are not included)."""
    operation = inst.operation
    if operation.name == "range_loop":
        loop = cast("RangeLoop", operation)
        head = (
            f"range_loop {format_variable(loop.index)} in {format_variable(loop.start)}"
            f"..{'=' if loop.inclusive else ''}{format_variable(loop.end)}"
            f" step {format_variable(loop.step)}" + (f" unroll {loop.unroll}" if loop.unroll is not None else "")
        )
    else:
        head = _format_operation(operation)
    if inst.out is not None:
        head = f"{format_variable(inst.out)}: {inst.out.type!r} = {head}"
    return head + _loc_suffix(inst)


def _emit_scope(scope: Scope, depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    for inst in scope.instructions:
        operation = inst.operation
        head = format_instruction(inst)
        if operation.name in _ONE_BODY:
            lines.append(f"{pad}{head.split('  ;')[0]} {{" + _loc_suffix(inst))
            _emit_scope(cast("If | Loop | RangeLoop", operation).body, depth + 1, lines)
            lines.append(f"{pad}}}")
        elif operation.name == "if_else":
            if_else = cast("IfElse", operation)
            lines.append(f"{pad}{head.split('  ;')[0]} {{" + _loc_suffix(inst))
            _emit_scope(if_else.then_body, depth + 1, lines)
            lines.append(f"{pad}}} else {{")
            _emit_scope(if_else.else_body, depth + 1, lines)
            lines.append(f"{pad}}}")
        elif operation.name == "switch":
            switch = cast("Switch", operation)
            lines.append(f"{pad}switch {format_variable(switch.value)} {{" + _loc_suffix(inst))
            for value, body in switch.cases:
                lines.append(f"{pad}case {value} {{")
                _emit_scope(body, depth + 1, lines)
                lines.append(f"{pad}}}")
            lines.append(f"{pad}default {{")
            _emit_scope(switch.default, depth + 1, lines)
            lines.append(f"{pad}}}")
            lines.append(f"{pad}}}")
        else:
            lines.append(pad + head)


def format_scope(scope: Scope, depth: int = 0) -> str:
    """A scope and its nested bodies, indented two spaces per level."""
    lines: list[str] = []
    _emit_scope(scope, depth, lines)
    return "\n".join(lines)


def _format_memory(var: Variable) -> str:
    align = f" align {var.alignment}" if var.alignment else ""
    view = f" = bytes of shared[{var.aliases[0]}] from {var.aliases[1]}" if var.aliases is not None else ""
    return f"{format_variable(var)}: {var.type!r}[{var.length}]{align}{view}"


def _format_const_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def format_const_table(table: ConstTable) -> str:
    """``const[0]: f32[3] = [0.5, 1.0, -2.0]``: a constant table's declaration with every value."""
    values = ", ".join(_format_const_value(v) for v in table.values)
    return f"{format_variable(table.var)}: {table.var.type!r}[{table.var.length}] = [{values}]"


def format_kernel(kernel: KernelDefinition) -> str:
    """The whole kernel: header, parameters, declared memories and body."""
    mode = "checked" if kernel.checked else "unchecked"
    lines = [f"kernel {kernel.name} cube_dim={kernel.cube_dim} {mode}"]
    for param in kernel.params:
        role = param.role if param.role != "tensor" or param.rank is None else f"tensor, rank {param.rank}"
        if param.multiple_of > 1:  # the launch's divisibility specialization, which the kernel relies on
            what = "len multiple of" if param.var.kind is VarKind.GLOBAL else "multiple of"
            role += f", {what} {param.multiple_of}"
        for what, multiples in (("shape", param.shape_multiple_of), ("strides", param.stride_multiple_of)):
            if any(m > 1 for m in multiples):
                role += f", {what} multiples of {'x'.join(map(str, multiples))}"
        if any(param.unit_strides):  # indexing multiplies nothing by these strides
            role += ", unit stride in dim " + ", ".join(str(d) for d, unit in enumerate(param.unit_strides) if unit)
        if param.contiguous:  # row-major strides: indexing multiplies by shape(1)
            role += ", contiguous"
        if param.address_multiple_of > 1:  # wide stores of adjacent items rely on it
            role += f", {param.address_multiple_of}-byte aligned"
        if param.same_shape is not None:  # the launch found its shape equal to an earlier tensor's
            role += f", shape = shape global[{param.same_shape}]"
        if param.len_as_shape is not None:  # the launch found its item count equal to a tensor's extent
            slot, dim = param.len_as_shape
            role += f", items = shape global[{slot}], {dim}"
        if param.len_as_product is not None:  # the launch found its len a product of two of its arguments
            outer, inner = (" = ".join(map(str, alike)) for alike in param.len_as_product)
            per_line = f" / {param.var.type.line}" if param.var.type.line > 1 else ""
            role += f", len = ({outer}) * ({inner}){per_line}"
        lines.append(f"  param {param.name}: {format_variable(param.var)}: {param.var.type!r} ({role})")
    if kernel.cube_count_as:  # the launch found these values equal to its number of cubes
        lines.append(f"  cube count = {' = '.join(map(str, kernel.cube_count_as))}")
    for var in kernel.shared_memories:
        lines.append(f"  {_format_memory(var)}")
    for var in kernel.local_arrays:
        lines.append(f"  {_format_memory(var)}")
    for var in kernel.barriers:
        count = var.length or 1
        lines.append(f"  {format_variable(var)}: barrier" + (f" x {count}" if count > 1 else ""))
    for table in kernel.const_tables:
        lines.append(f"  {format_const_table(table)}")
    lines.append("{")
    body = format_scope(kernel.body, 1)
    if body:
        lines.append(body)
    lines.append("}")
    return "\n".join(lines)
