"""Lowering of structured control flow to basic blocks.

``if``/``if_else``/``switch`` branch to their bodies and meet in a join block, except an ``if`` whose body
only computes, reads and stores (``speculates``): on a target that allows it (NVPTX) its body runs on every
unit, as Triton's masked blocks do, and only its effects are guarded; see ``lower_guarded``.  A ``range_loop`` keeps
its counter in an entry-block alloca (mem2reg turns it into a phi): header (test) -> body -> latch
(step) -> header.  A ``loop`` jumps back to its body's first block.  ``break`` and ``continue`` branch to
the innermost loop's exit and latch, ``return`` is ``ret void``; the code that follows them in the
same scope is lowered into a block without predecessors, which LLVM deletes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import cast

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import KernelLowering, Loop, lowers, unsigned_index
from cubepy.errors import CompileError
from cubepy.ir import Instruction, Scope, Variable, VarKind, ops, walk
from cubepy.ir.ops import branch
from cubepy.ir.store_pairs import PAIR_ITEM_BYTES

# -- if-conversion ---------------------------------------------------------------------------------------
# ``if i < n: y[i] = f(x[i])`` as a branch per guard costs, per element, the branch and its reconvergence
# (BSSY/BSYNC), and keeps ptxas and LLVM from sharing work between the guarded bodies (an unrolled loop's
# key schedule, a reloaded base address).  Triton computes its whole block and masks only the loads and
# stores.  A body of pure arithmetic, loads, stores and nested such ``if``s is lowered that way: arithmetic
# unconditionally, a predicated read (global) or a read of item 0 (shared, local) where the guard is
# false, a mutable local keeps its old value there (a select), and each store (or other write) predicated
# or in a block of its own that ptxas predicates; a checked access's bounds test joins the guard.  Integer
# division and remainder stay guarded (LLVM's are undefined by 0), and so does anything with other effects
# (atomics, barriers, plane collectives, loops).
_INT_DIVISIONS = frozenset({"div", "div_trunc", "floordiv", "mod", "rem_trunc", "remainder", "fmod"})
_GUARDED_WRITES = (ops.IndexAssign,)
_READ_KINDS = frozenset({VarKind.GLOBAL, VarKind.SHARED, VarKind.LOCAL_ARRAY})
# Bodies past this many instructions keep their branch: running them where the guard is false would cost
# more than the branch saves.
SPECULATE = True  # False: every ``if`` branches (for comparisons)
SPECULATE_LIMIT = 512
SPECULATE_ALONE = 16
SPECULATE_STORE = 5  # a body with a store and this many instructions


def speculates(lw: KernelLowering, body: Scope) -> bool:
    """Whether ``body`` (an ``if``'s) is lowered guard-free by ``lower_guarded``."""
    # The targets whose checked reads are branch-free are those whose scheduler overlaps straight-line code.
    target = lw.target
    if not SPECULATE or not target.branch_free_global_reads or target.reports_out_of_bounds or lw.per_unit is not None:
        return False
    count = _speculable(body, SPECULATE_LIMIT)
    if count is None or count == 0:
        return False
    # A body that only reads and computes is a small block ptxas predicates well by itself (a masked read
    # then costs a zeroing move and a select more); a store is what keeps LLVM from doing anything else.
    # With a store, a short body of loads and plain arithmetic (a vector add) is still cheaper as one branch;
    # a call-sized operation (asin, a division) or a longer body pays for the predication.
    # A checked access folds its bounds test into the guard: one predicate in place of a branch around a
    # predicated access.
    if count >= SPECULATE_ALONE or _checked(body):
        return True
    return _writes(body) and (count >= SPECULATE_STORE or _heavy(body))


def _checked(body: Scope) -> bool:
    return any(
        isinstance(inst.operation, (ops.Index, ops.IndexAssign)) and inst.operation.checked for inst in walk(body)
    )


# Besides every operation whose record names a libdevice function: the IEEE-rounded sequences PTX expands.
_LONG_SEQUENCES = frozenset({"div", "sqrt", "rsqrt", "recip"})


def _heavy(body: Scope) -> bool:
    """Whether ``body`` calls the math library or a long instruction sequence (worth predicating)."""
    return any(
        bool(inst.operation.RECORD.libdevice) or inst.operation.RECORD.name in _LONG_SEQUENCES for inst in walk(body)
    )


def _writes(body: Scope) -> bool:
    return any(isinstance(inst.operation, _GUARDED_WRITES) for inst in walk(body))


def _speculable(scope: Scope, budget: int) -> int | None:
    """The instruction count of ``scope`` when every instruction may run unguarded (None otherwise)."""
    count = 0
    for inst in scope.instructions:
        operation = inst.operation
        if isinstance(operation, branch.If):
            inner = _speculable(operation.body, budget - count)
        elif isinstance(operation, branch.IfElse):
            inner = _speculable(operation.then_body, budget - count)
            if inner is not None:
                other = _speculable(operation.else_body, budget - count - inner)
                inner = None if other is None else inner + other
        else:
            inner = 1 if _speculable_op(inst) else None
        if inner is None:
            return None
        count += inner
        if count > budget:
            return None
    return count


def _speculable_op(inst: Instruction) -> bool:
    operation = inst.operation
    if isinstance(operation, _GUARDED_WRITES):  # what ``_predicated_store`` covers
        size = operation.memory.type.size
        return operation.memory.kind is VarKind.GLOBAL and (size in _STORE_SHAPES or size in (16, 32))
    if isinstance(operation, ops.Index):  # a checked read folds its bounds test into the guard
        return operation.memory.kind in _READ_KINDS
    if isinstance(operation, ops.InsertLane):
        return True
    record = operation.RECORD
    if not record.pure or record.reads or record.writes or record.family not in ("arith", "memory"):
        return False
    if record.name in _INT_DIVISIONS and any(v.elem.is_int for v in operation.operands()):
        return False
    return True


def lower_guarded(lw: KernelLowering, body: Scope, guard: ir.Value) -> None:
    """Lower ``body`` as if each of its effects were under ``if guard`` (``speculates`` said it may be)."""
    b = lw.builder
    instructions = body.instructions
    skip = False
    for position, inst in enumerate(instructions):
        if skip:  # the second store of a pair, written with the first
            skip = False
            continue
        operation = inst.operation
        if isinstance(operation, ops.IndexAssign) and operation.pair:
            following = instructions[position + 1] if position + 1 < len(instructions) else None
            if following is not None and _pair_store(lw, inst, following, guard):
                skip = True
                continue
        if isinstance(operation, branch.If):
            inner = b.select(guard, lw.value(operation.cond), ir.Constant(lt.I1, 0))  # never poison
            if _writes(operation.body):
                lower_guarded(lw, operation.body, inner)
                continue
            # Reads and arithmetic only: a branch, whose small body ptxas predicates (no selects, no guarded
            # reads) and where it stays whole LLVM may run it unguarded anyway.
            then, join = lw.new_block("if.then"), lw.new_block("if.end")
            b.cbranch(inner, then, join)
            b.position_at_end(then)
            lw.lower_scope(operation.body)
            lw.branch_if_open(join)
            b.position_at_end(join)
        elif isinstance(operation, branch.IfElse):
            cond = lw.value(operation.cond)
            lower_guarded(lw, operation.then_body, b.select(guard, cond, ir.Constant(lt.I1, 0)))
            lower_guarded(lw, operation.else_body, b.select(guard, b.not_(cond), ir.Constant(lt.I1, 0)))
        elif isinstance(operation, _GUARDED_WRITES) and _predicated_store(lw, inst, guard):
            continue
        elif isinstance(operation, _GUARDED_WRITES):
            then, join = lw.new_block("if.then"), lw.new_block("if.end")
            b.cbranch(guard, then, join)
            b.position_at_end(then)
            lw.lower_instruction(inst)
            lw.branch_if_open(join)
            b.position_at_end(join)
        else:
            _keep_where_false(lw, inst, guard)


# st.global of an item by its size: the vector shape in 32-bit words (or one narrower register).
_STORE_SHAPES = {1: ("b8", "h", 16, 1), 2: ("b16", "h", 16, 1), 4: ("b32", "r", 32, 1), 8: ("b64", "l", 64, 1)}


def _predicated_store(lw: KernelLowering, inst: Instruction, guard: ir.Value) -> bool:
    """A global store as ``@guard st.global`` (a checked one's bounds test joins ``guard``; inline PTX, so
    LLVM cannot sink the body it reads back under a branch); False for what it does not cover (the caller
    branches instead)."""
    op = inst.operation
    assert isinstance(op, ops.IndexAssign)
    memory = op.memory
    size = memory.type.size
    if memory.kind is not VarKind.GLOBAL or (size not in _STORE_SHAPES and size not in (16, 32)):
        return False
    b = lw.builder
    guard, address = _store_target(lw, inst, guard)
    value = lw.to_memory(lw.value(op.value), op.value.type)
    if size in _STORE_SHAPES:
        suffix, constraint, bits, _ = _STORE_SHAPES[size]
        word = b.bitcast(value, ir.IntType(size * 8))
        if size == 1:
            word = b.zext(word, lt.I16)
        _asm_store(b, f"st.global.{suffix} [$0], $1;", f"l,{constraint},b", address, [word], guard, bits)
        return True
    words = b.bitcast(value, ir.VectorType(lt.I32, size // 4))
    for half in range(size // 16):
        part = [b.extract_element(words, ir.Constant(lt.I32, 4 * half + k)) for k in range(4)]
        where = b.gep(address, [ir.Constant(lt.I64, 16 * half)], source_etype=lt.I8)
        _asm_store(b, "st.global.v4.b32 [$0], {$1, $2, $3, $4};", "l,r,r,r,r,b", where, part, guard, 32)
    return True


def _pair_store(lw: KernelLowering, inst: Instruction, following: Instruction, guard: ir.Value) -> bool:
    """``m[i] = a; m[i + 1] = b`` (``IndexAssign.pair``, proven by ``cubepy.ir.store_pairs``) as one aligned
    ``@guard st.global.b32``/``b64`` of both items; False where ``following`` is not the pair's second store."""
    first, second = inst.operation, following.operation
    assert isinstance(first, ops.IndexAssign)
    if not isinstance(second, ops.IndexAssign) or second.memory != first.memory or second.checked != first.checked:
        return False
    memory = first.memory
    size = memory.type.size
    if memory.kind is not VarKind.GLOBAL or size not in PAIR_ITEM_BYTES or memory.type.line != 1:
        return False
    b = lw.builder
    # checked: the index is even and the length too, so the first item's bounds test covers the second's
    guard, address = _store_target(lw, inst, guard)
    # a two-lane vector (item i in lane 0, the low half): ptxas packs two f32 -> f16 conversions into one
    # instruction, and the word is the vector's bits
    items = [lw.to_memory(lw.value(op.value), op.value.type) for op in (first, second)]
    pair: ir.Value = ir.Constant(ir.VectorType(items[0].type, 2), None)
    for lane, item in enumerate(items):
        pair = b.insert_element(pair, item, ir.Constant(lt.I32, lane))
    suffix, constraint, bits, _ = _STORE_SHAPES[2 * size]
    packed = b.bitcast(pair, ir.IntType(bits))
    _asm_store(b, f"st.global.{suffix} [$0], $1;", f"l,{constraint},b", address, [packed], guard, bits)
    return True


def _store_target(lw: KernelLowering, inst: Instruction, guard: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(``guard`` with a checked store's bounds test joined, the address) of the global store ``inst``."""
    from cubepy.compiler import lower_memory as lm

    op = inst.operation
    assert isinstance(op, ops.IndexAssign)
    b = lw.builder
    if lw.debug is not None:
        b.debug_metadata = lw.debug.location(inst.loc)
    index = unsigned_index(lw, lw.value(op.index), op.index)
    if op.checked:  # a miss is skipped as the guard's false is
        guard = b.select(guard, lm.in_bounds(lw, op.memory, index), ir.Constant(lt.I1, 0))
    return guard, lm.element_pointer(lw, op.memory, index)


def _asm_store(
    b: ir.IRBuilder, text: str, constraints: str, address: ir.Value, values: list[ir.Value], guard: ir.Value, bits: int
) -> None:
    predicate = f"${len(values) + 1}"
    types = [address.type] + [ir.IntType(bits)] * len(values) + [lt.I1]
    asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), types), f"@{predicate} {text}", constraints, side_effect=True)
    b.call(asm, [address, *values, guard])


def _keep_where_false(lw: KernelLowering, inst: Instruction, guard: ir.Value) -> None:
    """Lower ``inst`` unguarded; a mutable local it sets keeps its old value where ``guard`` is false."""
    b = lw.builder
    operation = inst.operation
    written = [v for v in inst.outputs if v.kind is VarKind.MUT]
    if isinstance(operation, ops.InsertLane):
        written.append(operation.target)
    old = [lw.value(v) for v in written]
    if isinstance(operation, ops.Index):
        if lw.debug is not None:
            b.debug_metadata = lw.debug.location(inst.loc)
        lw.define(inst.out, _guarded_read(lw, operation, guard))
    else:
        lw.lower_instruction(inst)
    for var, before in zip(written, old):
        b.store(b.select(guard, lw.value(var), before), lw.slot(var))


def _guarded_read(lw: KernelLowering, op: ops.Index, guard: ir.Value) -> ir.Value:
    """``op``'s read where ``guard`` holds; elsewhere a harmless read (its value is never used)."""
    from cubepy.compiler import lower_memory as lm

    b = lw.builder
    memory: Variable = op.memory
    index = unsigned_index(lw, lw.value(op.index), op.index)
    ok = guard
    in_bounds = None
    if op.checked:
        in_bounds = lm.in_bounds(lw, memory, index)
        ok = b.select(guard, in_bounds, ir.Constant(lt.I1, 0))
    if memory.kind is VarKind.GLOBAL:
        # Unchecked, the value where the guard is false is never used: no zeroing move.
        return lm.zero_fill_read(lw, memory, index, ok, zero=op.checked)
    if not _constant_in_range(op.index, memory):  # item 0 is always there
        index = b.select(ok, index, ir.Constant(lt.I64, 0))
    loaded = lm.load_item(lw, memory, index)
    if in_bounds is None:
        return loaded
    return b.select(in_bounds, loaded, lt.constant(memory.type, 0))


def _constant_in_range(index: Variable, memory: Variable) -> bool:
    """Whether ``index`` is a literal inside ``memory``'s static length: a read there is harmless unguarded (an
    accumulator fragment's element in an unrolled epilogue), so it needs no select."""
    if not index.is_constant or memory.length is None:
        return False
    value = index.value
    return isinstance(value, int) and 0 <= value < memory.length


def lower_if(lw: KernelLowering, inst: Instruction) -> None:
    """Run the body when the condition holds."""
    op = cast(branch.If, inst.operation)
    if speculates(lw, op.body):
        lower_guarded(lw, op.body, lw.value(op.cond))
        return
    with frame_locals_in_registers(lw, (op.body,)):
        then, join = lw.new_block("if.then"), lw.new_block("if.end")
        lw.builder.cbranch(lw.value(op.cond), then, join)
        lw.builder.position_at_end(then)
        lw.lower_scope(op.body)
        lw.branch_if_open(join)
        lw.builder.position_at_end(join)


def lower_if_else(lw: KernelLowering, inst: Instruction) -> None:
    """Run one of two bodies."""
    op = cast(branch.IfElse, inst.operation)
    with frame_locals_in_registers(lw, (op.then_body, op.else_body)):
        then, other, join = lw.new_block("if.then"), lw.new_block("if.else"), lw.new_block("if.end")
        lw.builder.cbranch(lw.value(op.cond), then, other)
        for block, body in ((then, op.then_body), (other, op.else_body)):
            lw.builder.position_at_end(block)
            lw.lower_scope(body)
            lw.branch_if_open(join)
        lw.builder.position_at_end(join)


@contextlib.contextmanager
def frame_locals_in_registers(lw: KernelLowering, bodies: tuple[Scope, ...]) -> Iterator[None]:
    """Lower a branch whose bodies assign mutable locals kept in the unit's frame (the host's loop fission)
    through a private alloca per local, loaded from the frame before the branch and stored back after it.

    Assigned in place, the frame slot is written only where the branch is taken, and LLVM vectorizes the loop
    over units with a masked store per assignment (microcoded on AMD's AVX2: a sum's ``if i < n: acc += x[i]``
    ran at a quarter of its speed); written back, the store is unconditional and the alloca becomes a phi.
    The frame slot is the unit's own, so writing its unchanged value back is invisible.  Bodies that leave
    (``break``, ``continue``, ``return``) keep the frame slots: the write-back would be skipped."""
    written = _frame_locals_written(lw, bodies)
    b = lw.builder
    moved = []
    for var in written:
        frame = lw.slot(var)
        register = lw.alloca(lt.item_type(var.type), f"m{var.id}.reg")
        b.store(b.load(frame, typ=lt.item_type(var.type)), register)
        lw.slot_overrides[var.id] = register
        moved.append((var, frame, register))
    try:
        yield
    finally:
        for var, frame, register in moved:
            del lw.slot_overrides[var.id]
            if not lw.builder.block.is_terminated:
                lw.builder.store(lw.builder.load(register, typ=lt.item_type(var.type)), frame)


def _frame_locals_written(lw: KernelLowering, bodies: tuple[Scope, ...]) -> list[Variable]:
    """The per-unit-frame MUT locals ``bodies`` assign (none when a body leaves the branch early)."""
    if lw.per_unit is None:
        return []
    found: dict[int, Variable] = {}
    for body in bodies:
        for inst in walk(body):
            operation = inst.operation
            if isinstance(operation, (branch.Break, branch.Continue, branch.Return)):
                return []
            targets = list(inst.outputs)
            if isinstance(operation, ops.InsertLane):
                targets.append(operation.target)
            for var in targets:
                if var.kind is VarKind.MUT and var.id not in lw.slot_overrides and lw.per_unit.holds(var):
                    found.setdefault(var.id, var)
    return list(found.values())


def lower_switch(lw: KernelLowering, inst: Instruction) -> None:
    """Run the case equal to the value, or the default; no fall-through."""
    op = cast(branch.Switch, inst.operation)
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
        return going_down if cast(int, op.step.value) < 0 else going_up
    zero = ir.Constant(step.type, 0)
    # A zero step runs zero iterations, as in the interp (Python raises; a kernel cannot).
    moving = b.icmp_unsigned("!=", step, zero)
    if elem.kind != "int":  # an unsigned step is never negative
        return b.and_(moving, going_up)
    positive = b.icmp_signed(">", step, zero)
    return b.and_(moving, b.select(positive, going_up, going_down))


def lower_range_loop(lw: KernelLowering, inst: Instruction) -> None:
    """for index in range(start, end[, inclusive], step)."""
    op = cast(branch.RangeLoop, inst.operation)

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


def hint_vectorize(lw: KernelLowering, back_edge: ir.Instruction, enable: bool = True, whole: bool = False) -> None:
    """Attach the loop ID asking LLVM to vectorize the loop of ``back_edge``, or, ``enable=False``, not to: its
    body's own vector code is better.  ``whole``: and not to unroll it (a short loop LLVM's full unrolling would
    take apart before the vectorizer sees it, which then vectorizes the loop around it instead)."""
    vectorize_hints(lw.module, back_edge, enable=enable, whole=whole)


def vectorize_hints(
    module: ir.Module, back_edge: ir.Instruction, *, enable: bool = True, whole: bool = False, width: int | None = None
) -> None:
    """``hint_vectorize`` for code built without a ``KernelLowering`` (the host driver's loops); ``width``: items
    per vector (``llvm.loop.vectorize.width``), else LLVM's choice."""
    flag = ir.Constant(lt.I1, int(enable))
    hints = [module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"), flag])]
    if whole:
        hints.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")]))
    if width is not None:
        hints.append(
            module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.width"), ir.Constant(lt.I32, width)])
        )
    back_edge.set_metadata("llvm.loop", _LoopID(module, *hints))


class _LoopID(ir.MDValue):  # type: ignore[misc]  # llvmlite ships no types
    """A loop's ``llvm.loop`` ID: ``distinct !{self, hint}``, the self reference LLVM requires of a loop ID.

    Unroll 1 is ``llvm.loop.unroll.disable`` (NVPTX then prints ``.pragma "nounroll"`` for ptxas), N > 1
    ``llvm.loop.unroll.count N``."""

    def __init__(self, module: ir.Module, *hints: ir.MDValue) -> None:
        super().__init__(module, list(hints), name=str(len(module.metadata)))

    def descr(self, buf: list[str]) -> None:
        """``distinct !{ !self, !hint, ... }``."""
        refs = ", ".join(hint.get_reference() for hint in self.operands)
        buf += (f"distinct !{{ {self.get_reference()}, {refs} }}", "\n")

    __eq__ = object.__eq__  # each loop has its own ID
    __hash__ = object.__hash__


def lower_loop(lw: KernelLowering, inst: Instruction) -> None:
    """Run the body until a break."""
    emit_loop(lw, lambda: lw.lower_scope(cast(branch.Loop, inst.operation).body))


def emit_loop(lw: KernelLowering, body: Callable[[], None], name: str = "loop") -> None:
    """The blocks of a loop left only by ``break`` around ``body()``, which it emits (its breaks and continues
    find this loop innermost in ``lw.loops``)."""
    entry, exit_ = lw.new_block(f"{name}.body"), lw.new_block(f"{name}.end")
    lw.builder.branch(entry)
    lw.builder.position_at_end(entry)
    lw.loops.append(Loop(entry, exit_))
    body()
    lw.loops.pop()
    if lw.builder.block.terminator is None:
        lw.target.poll_cancel(lw)  # the host target: a runaway loop stops on Ctrl-C
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
