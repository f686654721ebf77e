"""Lowering of structured control flow to basic blocks.

``if``/``if_else``/``switch`` branch to their bodies and meet in a join block.  A ``range_loop`` keeps
its counter in an entry-block alloca (mem2reg turns it into a phi): header (test) -> body -> latch
(step) -> header.  A ``loop`` jumps back to its body's first block.  ``break`` and ``continue`` branch to
the innermost loop's exit and latch, ``return`` is ``ret void``; the code that follows them in the
same scope is lowered into a block without predecessors, which LLVM deletes.
"""

from __future__ import annotations

from collections.abc import Callable

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import KernelLowering, Loop, lowers
from cubepy.errors import CompileError
from cubepy.ir import Instruction
from cubepy.ir.ops import branch


def lower_if(lw: KernelLowering, inst: Instruction) -> None:
    """Run the body when the condition holds."""
    op = inst.operation
    then, join = lw.new_block("if.then"), lw.new_block("if.end")
    lw.builder.cbranch(lw.value(op.cond), then, join)
    lw.builder.position_at_end(then)
    lw.lower_scope(op.body)
    lw.branch_if_open(join)
    lw.builder.position_at_end(join)


def lower_if_else(lw: KernelLowering, inst: Instruction) -> None:
    """Run one of two bodies."""
    op = inst.operation
    then, other, join = lw.new_block("if.then"), lw.new_block("if.else"), lw.new_block("if.end")
    lw.builder.cbranch(lw.value(op.cond), then, other)
    for block, body in ((then, op.then_body), (other, op.else_body)):
        lw.builder.position_at_end(block)
        lw.lower_scope(body)
        lw.branch_if_open(join)
    lw.builder.position_at_end(join)


def lower_switch(lw: KernelLowering, inst: Instruction) -> None:
    """Run the case equal to the value, or the default; no fall-through."""
    op = inst.operation
    value = lw.value(op.value)
    elem = op.value.elem
    default, join = lw.new_block("switch.default"), lw.new_block("switch.end")
    switch = lw.builder.switch(value, default)
    seen: set[int] = set()
    case_blocks = []
    for case_value, body in op.cases:
        bits = lt.wrap_int(int(case_value), elem.bits, signed=False)
        if bits in seen:
            raise CompileError(f"switch has two cases for the value {case_value}")
        seen.add(bits)
        block = lw.new_block("switch.case")
        switch.add_case(lt.scalar_constant(elem, case_value), block)
        case_blocks.append((block, body))
    for block, body in case_blocks + [(default, op.default)]:
        lw.builder.position_at_end(block)
        lw.lower_scope(body)
        lw.branch_if_open(join)
    lw.builder.position_at_end(join)


def _loop_test(lw: KernelLowering, op: branch.RangeLoop, index: ir.Value, end: ir.Value, step: ir.Value) -> ir.Value:
    """Whether the loop runs another iteration: ``index < end`` going up, ``index > end`` going down."""
    b = lw.builder
    elem = op.start.elem
    icmp = b.icmp_signed if elem.kind == "int" else b.icmp_unsigned
    going_up = icmp("<=" if op.inclusive else "<", index, end)
    going_down = icmp(">=" if op.inclusive else ">", index, end)
    if op.step.is_constant:
        if op.step.value == 0:
            raise CompileError("range_loop with a step of 0 never ends")
        # A literal's sign is honored even for unsigned indices (the add then wraps downwards).
        return going_down if op.step.value < 0 else going_up
    zero = ir.Constant(step.type, 0)
    # A zero step runs zero iterations, as in the interp (Python raises; a kernel cannot).
    moving = b.icmp_unsigned("!=", step, zero)
    if elem.kind != "int":  # an unsigned step is never negative
        return b.and_(moving, going_up)
    positive = b.icmp_signed(">", step, zero)
    return b.and_(moving, b.select(positive, going_up, going_down))


def lower_range_loop(lw: KernelLowering, inst: Instruction) -> None:
    """for index in range(start, end[, inclusive], step)."""
    op = inst.operation

    def body(loop: Loop) -> None:
        lw.loops.append(loop)
        lw.lower_scope(op.body)
        lw.loops.pop()

    emit_range_loop(lw, op, body, hint=True)


def emit_range_loop(lw: KernelLowering, op: branch.RangeLoop, body: Callable[[Loop], None], *, hint: bool) -> None:
    """The blocks of ``op`` (its bounds read once, the index defined per iteration) around ``body(loop)``, which
    emits the body and may branch to ``loop.latch``/``loop.exit``; ``hint``: attach the op's unroll hint."""
    b = lw.builder
    start, end, step = lw.value(op.start), lw.value(op.end), lw.value(op.step)
    counter = lw.alloca(lt.item_type(op.start.type), f"i{op.index.id}")
    b.store(start, counter)
    header, entry, latch, exit_ = (lw.new_block(h) for h in ("for.header", "for.body", "for.latch", "for.end"))
    b.branch(header)
    b.position_at_end(header)
    index = b.load(counter, typ=lt.item_type(op.start.type))
    b.cbranch(_loop_test(lw, op, index, end, step), entry, exit_)
    b.position_at_end(entry)
    lw.define(op.index, index)
    body(Loop(latch, exit_))
    lw.branch_if_open(latch)
    b.position_at_end(latch)
    b.store(b.add(index, step), counter)
    back_edge = b.branch(header)
    if hint and op.unroll is not None:
        hint_unroll(lw, back_edge, op.unroll)
    b.position_at_end(exit_)


def hint_unroll(lw: KernelLowering, back_edge: ir.Instruction, unroll: int) -> None:
    """Attach the loop ID asking LLVM to unroll the loop of ``back_edge`` ``unroll`` times (1: not at all)."""
    module = lw.module
    if unroll == 1:
        hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    else:
        hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.count"), ir.Constant(lt.I32, unroll)])
    back_edge.set_metadata("llvm.loop", _LoopID(module, hint))


def hint_vectorize(lw: KernelLowering, back_edge: ir.Instruction) -> None:
    """Attach the loop ID asking LLVM to vectorize the loop of ``back_edge`` (it is then not unrolled whole
    before the vectorizer sees it)."""
    module = lw.module
    hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"), ir.Constant(lt.I1, 1)])
    back_edge.set_metadata("llvm.loop", _LoopID(module, hint))


class _LoopID(ir.MDValue):
    """A loop's ``llvm.loop`` ID: ``distinct !{self, hint}``, the self reference LLVM requires of a loop ID.

    Unroll 1 is ``llvm.loop.unroll.disable`` (NVPTX then prints ``.pragma "nounroll"`` for ptxas), N > 1
    ``llvm.loop.unroll.count N``."""

    def __init__(self, module: ir.Module, hint: ir.MDValue) -> None:
        super().__init__(module, [hint], name=str(len(module.metadata)))

    def descr(self, buf: list[str]) -> None:
        """``distinct !{ !self, !hint }``."""
        buf += (f"distinct !{{ {self.get_reference()}, {self.operands[0].get_reference()} }}", "\n")

    __eq__ = object.__eq__  # each loop has its own ID
    __hash__ = object.__hash__


def lower_loop(lw: KernelLowering, inst: Instruction) -> None:
    """Run the body until a break."""
    emit_loop(lw, lambda: lw.lower_scope(inst.operation.body))


def emit_loop(lw: KernelLowering, body: Callable[[], None], name: str = "loop") -> None:
    """The blocks of a loop left only by ``break`` around ``body()``, which it emits (its breaks and continues
    find this loop innermost in ``lw.loops``)."""
    entry, exit_ = lw.new_block(f"{name}.body"), lw.new_block(f"{name}.end")
    lw.builder.branch(entry)
    lw.builder.position_at_end(entry)
    lw.loops.append(Loop(entry, exit_))
    body()
    lw.loops.pop()
    poll = getattr(lw.target, "poll_cancel", None)  # the host target: a runaway loop stops on Ctrl-C
    if poll is not None and lw.builder.block.terminator is None:
        poll(lw)
    lw.branch_if_open(entry)
    lw.builder.position_at_end(exit_)


def _innermost(lw: KernelLowering, what: str) -> Loop:
    if not lw.loops:
        raise CompileError(f"{what} outside of any loop")
    return lw.loops[-1]


def lower_break(lw: KernelLowering, inst: Instruction) -> None:
    """Leave the innermost loop."""
    lw.builder.branch(_innermost(lw, "break").exit)
    lw.start_dead_block()


def lower_continue(lw: KernelLowering, inst: Instruction) -> None:
    """Go to the innermost loop's next iteration."""
    lw.builder.branch(_innermost(lw, "continue").latch)
    lw.start_dead_block()


def lower_return(lw: KernelLowering, inst: Instruction) -> None:
    """End this unit's execution."""
    lw.target.emit_return(lw)
    lw.start_dead_block()


for _op_type, _lowering in {
    branch.If: lower_if,
    branch.IfElse: lower_if_else,
    branch.Switch: lower_switch,
    branch.RangeLoop: lower_range_loop,
    branch.Loop: lower_loop,
    branch.Break: lower_break,
    branch.Continue: lower_continue,
    branch.Return: lower_return,
}.items():
    lowers(_op_type)(_lowering)
