"""Lowering of memory operations: indexing (checked and raw), lanes, buffer metadata and atomics.

* Buffers are ``addrspace(1)``, shared memories ``addrspace(3)``, local arrays allocas, constant tables
  ``addrspace(4)`` constant globals (PTX ``.const``, read with ``ld.const``).  An item is
  loaded and stored whole, aligned to its size, so a line of 4 f32 is one ``ld.global.v4``.
* A checked index compares against the memory's length (a buffer's ``buffer_len`` metadata word, a
  by-value entry parameter; a shared memory's, local array's or constant table's declared length) and branches around the access: an
  out-of-bounds read gives 0 and an out-of-bounds write is skipped.  A checked read of shared memory or a local
  array needs no branch: it reads item 0 instead and selects 0 (unless the target reports misses).  Indices are widened to 64 bits
  with their own signedness, so a negative index is out of bounds too.
* Atomics are ``atomicrmw``/``cmpxchg`` with relaxed (``monotonic``) ordering at device scope, the
  ordering of CUDA's ``atomicAdd`` and friends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import llvmlite.ir as ir

from cubepy.compiler import abi
from cubepy.compiler import llvm_types as lt
from cubepy.compiler.lower import KernelLowering, as_u32, lowers, unsigned_index
from cubepy.errors import CompileError
from cubepy.ir import Instruction, Variable, VarKind, ops

# Relaxed at GPU scope, like CUDA's atomicAdd (LLVM's default scope would be the whole system).
ATOMIC_ORDERING = 'syncscope("device") monotonic'


def element_pointer(lw: KernelLowering, memory: Variable, index: ir.Value) -> ir.Value:
    """The address of item ``index`` (already i64) of a memory: a raw GEP, no bounds assumed."""
    return lw.builder.gep(lw.memory_base(memory), [index], source_etype=lt.item_type(memory.type, memory=True))


def memory_length(lw: KernelLowering, memory: Variable) -> ir.Value:
    """The number of items a checked access may touch, as i64.

    A buffer's ``buffer_len``; read from the ``len`` word when the launch guarantees the two are equal
    (``Param.len_is_buffer_len``), so LLVM sees the same value as the kernel's ``i < a.len()`` guard.
    """
    if memory.kind is VarKind.GLOBAL:
        field = "len" if _len_is_buffer_len(lw, memory) else "buffer_len"
        return lw.builder.zext(lw.metadata_word(memory.id, field), lt.I64)
    return ir.Constant(lt.I64, memory.length)


def in_bounds(lw: KernelLowering, memory: Variable, index: ir.Value) -> ir.Value:
    """The i1 test ``index < length`` of a checked access of ``memory`` (``index`` already i64)."""
    return lw.builder.icmp_unsigned("<", index, memory_length(lw, memory), name="in_bounds")


def _len_is_buffer_len(lw: KernelLowering, memory: Variable) -> bool:
    return any(p.len_is_buffer_len and p.var == memory for p in lw.definition.buffers)


def _checked_region(
    lw: KernelLowering, inst: Instruction, memory: Variable, index: ir.Value, access: str
) -> tuple[ir.Block, ir.Block, ir.Block]:
    """Branch on ``index < length``: (in-bounds block, join block, the block a miss reaches the join from).

    A target that reports misses (the cpu runtime under ``sanitize=True``) gets a block that calls its
    report first; reads the frontend evaluated ahead of a guard (``speculative``) are never reported.
    """
    b = lw.builder
    length = memory_length(lw, memory)
    in_bounds = b.icmp_unsigned("<", index, length, name="in_bounds")
    hint = "load" if access == "read" else "store"
    hit, join = lw.new_block(f"{hint}.in_bounds"), lw.new_block(f"{hint}.join")
    if not lw.target.reports_out_of_bounds or getattr(inst.operation, "speculative", False):
        miss_from = b.block
        b.cbranch(in_bounds, hit, join)
        return hit, join, miss_from
    miss = lw.new_block(f"{hint}.out_of_bounds")
    b.cbranch(in_bounds, hit, miss)
    b.position_at_end(miss)
    lw.target.report_out_of_bounds(lw, inst, memory, index, length, access)
    miss_from = b.block
    b.branch(join)
    return hit, join, miss_from


def load_item(lw: KernelLowering, memory: Variable, index: ir.Value) -> ir.Value:
    """Load one item (register form) at an i64 index, without bounds checks."""
    ptr = element_pointer(lw, memory, index)
    raw = lw.builder.load(ptr, typ=lt.item_type(memory.type, memory=True), align=lt.item_align(memory.type))
    return lw.from_memory(raw, memory.type)


def checked_read(
    lw: KernelLowering,
    inst: Instruction,
    memory: Variable,
    index: ir.Value,
    checked: bool,
    read: Callable[[], ir.Value],
) -> ir.Value:
    """``read()``; checked: only where ``index`` is in bounds of ``memory``, 0 elsewhere."""
    if not checked:
        return read()
    b = lw.builder
    access, join, check_block = _checked_region(lw, inst, memory, index, "read")
    b.position_at_end(access)
    loaded = read()
    loaded_block = b.block
    b.branch(join)
    b.position_at_end(join)
    merged = b.phi(loaded.type)
    merged.add_incoming(loaded, loaded_block)
    merged.add_incoming(lt.constant(memory.type, 0), check_block)
    return merged


# Shared memory and local arrays are read branch-free; a constant table keeps the branch, so a miss
# issues no ld.const at all.
_SELECT_READ_KINDS = frozenset({VarKind.SHARED, VarKind.LOCAL_ARRAY})


def _select_read(lw: KernelLowering, memory: Variable, index: ir.Value) -> ir.Value:
    """A branch-free checked read of a memory of declared length: item 0 is read in place of a miss (always
    there, no side effect) and the result is 0 there, so LLVM and ptxas may schedule and vectorize it."""
    b = lw.builder
    ok = in_bounds(lw, memory, index)
    loaded = load_item(lw, memory, b.select(ok, index, ir.Constant(lt.I64, 0)))
    return b.select(ok, loaded, lt.constant(memory.type, 0))


def zero_item(lw: KernelLowering, memory: Variable) -> ir.Value:
    """A zero-filled global constant of one item of ``memory`` (all-zero bytes are 0 of every item type)."""
    size = memory.type.size
    name = f"cubepy_zero_{size}"
    zero = lw.module.globals.get(name)
    if zero is None:
        array = ir.ArrayType(lt.I8, size)
        zero = ir.GlobalVariable(lw.module, array, name, addrspace=1)
        zero.initializer = ir.Constant(array, None)
        zero.global_constant = True
        zero.linkage = "internal"
        zero.align = max(16, lt.item_align(memory.type))
    return zero


def zero_fill_read(lw: KernelLowering, memory: Variable, index: ir.Value, ok: ir.Value, zero: bool = True) -> ir.Value:
    """Read item ``index`` of a global buffer where ``ok``, without a branch; elsewhere 0 (``zero``) or a value
    the caller never uses.

    Items of 2 to 16 bytes are one ``@ok ld.global`` (after a zeroing move), as Triton's masked loads: no
    address select, no register for a fallback address.  Other sizes read a zero-filled constant where ``ok``
    is false, so the load issues on every path.
    """
    loaded = _predicated_load(lw, memory, index, ok, zero)
    if loaded is not None:
        return loaded
    b = lw.builder
    address = b.select(ok, element_pointer(lw, memory, index), zero_item(lw, memory))
    raw = b.load(address, typ=lt.item_type(memory.type, memory=True), align=lt.item_align(memory.type))
    return lw.from_memory(raw, memory.type)


# ld.global of an item by its size: (words, PTX suffix, inline-asm constraint, bits per word).
_LOAD_SHAPES = {2: (1, "b16", "h", 16), 4: (1, "b32", "r", 32), 8: (1, "b64", "l", 64), 16: (4, "v4.b32", "r", 32)}


def _predicated_load(
    lw: KernelLowering, memory: Variable, index: ir.Value, ok: ir.Value, zero: bool
) -> ir.Value | None:
    """``@ok ld.global`` of an item, preceded by a zeroing move when ``zero``, through the non-coherent path
    when the buffer is read-only (as LLVM would choose); None for item sizes it does not cover."""
    shape = _LOAD_SHAPES.get(memory.type.size)
    if shape is None:
        return None
    count, suffix, constraint, bits = shape
    b = lw.builder
    arg = lw.params.get((memory.kind, memory.id))
    space = "global.nc" if "readonly" in getattr(getattr(arg, "attributes", None), "raw", ()) else "global"
    address = element_pointer(lw, memory, index)
    outs = [f"${k}" for k in range(count)]
    target = f"{{{', '.join(outs)}}}" if count > 1 else "$0"
    clear = "".join(f"mov.b{bits} {out}, 0; " for out in outs) if zero else ""
    text = f"{clear}@${count + 1} ld.{space}.{suffix} {target}, [${count}];"
    constraints = ",".join([f"={constraint}"] * count + ["l", "b"])
    word = ir.IntType(bits)
    ret = word if count == 1 else ir.LiteralStructType([word] * count)
    # A read-only buffer cannot change under the kernel: LLVM may move or merge such reads.  Any other read
    # keeps its place among the kernel's writes and barriers (an inline asm with effects).
    volatile = space != "global.nc"
    asm = ir.InlineAsm(ir.FunctionType(ret, [address.type, lt.I1]), text, constraints, side_effect=volatile)
    result = b.call(asm, [address, ok])
    if count == 1:
        raw = result
    else:
        raw = ir.Constant(ir.VectorType(word, count), None)
        for k in range(count):
            raw = b.insert_element(raw, b.extract_value(result, k), ir.Constant(lt.I32, k))
    return lw.from_memory(b.bitcast(raw, lt.item_type(memory.type, memory=True)), memory.type)


def _zero_fill_read(lw: KernelLowering, memory: Variable, index: ir.Value) -> ir.Value:
    """A branch-free checked read of a global buffer: a miss reads the zero-filled constant."""
    return zero_fill_read(lw, memory, index, in_bounds(lw, memory, index))


def checked_write(
    lw: KernelLowering, inst: Instruction, memory: Variable, index: ir.Value, checked: bool, write: Callable[[], None]
) -> None:
    """``write()``; checked: only where ``index`` is in bounds of ``memory``."""
    if not checked:
        write()
        return
    b = lw.builder
    access, join, _ = _checked_region(lw, inst, memory, index, "write")
    b.position_at_end(access)
    write()
    b.branch(join)
    b.position_at_end(join)


def lower_index(lw: KernelLowering, inst: Instruction) -> None:
    """out = memory[index]; checked: 0 when out of bounds."""
    op = cast(ops.Index, inst.operation)
    index = unsigned_index(lw, lw.value(op.index), op.index)
    if op.checked and op.memory.kind in _SELECT_READ_KINDS and not lw.target.reports_out_of_bounds:
        lw.define(inst.out, _select_read(lw, op.memory, index))
        return
    if op.checked and op.memory.kind is VarKind.GLOBAL and lw.target.branch_free_global_reads:
        lw.define(inst.out, _zero_fill_read(lw, op.memory, index))
        return
    lw.define(inst.out, checked_read(lw, inst, op.memory, index, op.checked, lambda: load_item(lw, op.memory, index)))


def lower_index_assign(lw: KernelLowering, inst: Instruction) -> None:
    """memory[index] = value; checked: skipped when out of bounds."""
    op = cast(ops.IndexAssign, inst.operation)
    index = unsigned_index(lw, lw.value(op.index), op.index)
    value = lw.to_memory(lw.value(op.value), op.value.type)

    def store() -> None:
        lw.builder.store(value, element_pointer(lw, op.memory, index), align=lt.item_align(op.memory.type))

    checked_write(lw, inst, op.memory, index, op.checked, store)


def lower_extract_lane(lw: KernelLowering, inst: Instruction) -> None:
    """out = line[lane] (a scalar is its own lane 0)."""
    op = cast(ops.ExtractLane, inst.operation)
    line = lw.value(op.line)
    if not op.line.type.is_line:
        lw.define(inst.out, line)
        return
    lane = as_u32(lw, lw.value(op.lane), op.lane)
    lw.define(inst.out, lw.builder.extract_element(line, lane))


def lower_insert_lane(lw: KernelLowering, inst: Instruction) -> None:
    """target[lane] = value, on a mutable line local."""
    op = cast(ops.InsertLane, inst.operation)
    value = lw.value(op.value)
    if not op.target.type.is_line:
        lw.define(op.target, value)
        return
    lane = as_u32(lw, lw.value(op.lane), op.lane)
    lw.define(op.target, lw.builder.insert_element(lw.value(op.target), value, lane))


def lower_metadata(lw: KernelLowering, inst: Instruction) -> None:
    """out = len / buffer_len / rank / shape(dim) / stride(dim) of a buffer, from its by-value metadata words.

    The rank is the compiled one (a constant); ``shape(dim)``/``stride(dim)`` pick among the words of the
    buffer, folded by LLVM to one parameter read when ``dim`` is constant.  A ``dim`` outside
    ``[0, rank)`` reads the nearest dimension, as the interp does (its sanitizer reports it).
    """
    op = cast(ops.Metadata, inst.operation)
    b = lw.builder
    slot = op.memory.id
    if op.name in abi.LENGTH_FIELDS:
        lw.define(inst.out, lw.metadata_word(slot, op.name))
        return
    rank = abi.static_rank(lw.definition, lw.definition.buffers[slot])
    if op.name == "rank" or rank == 0:
        lw.define(inst.out, ir.Constant(lt.I32, rank if op.name == "rank" else 0))
        return
    assert op.dim is not None  # shape/stride carry a dim (verified)
    dim = unsigned_index(lw, lw.value(op.dim), op.dim)
    value = lw.metadata_word(slot, op.name, rank - 1)
    for below in range(rank - 2, -1, -1):
        at_most = b.icmp_signed("<=", dim, ir.Constant(lt.I64, below))
        value = b.select(at_most, lw.metadata_word(slot, op.name, below), value)
    lw.define(inst.out, value)


# uinc_wrap/udec_wrap are exactly CUDA's atomicInc/atomicDec (NVPTX: atom.inc.u32/atom.dec.u32).
_INT_RMW = {
    "add": "add",
    "sub": "sub",
    "and": "and",
    "or": "or",
    "xor": "xor",
    "exchange": "xchg",
    "inc": "uinc_wrap",
    "dec": "udec_wrap",
}
_FLOAT_RMW = {"add": "fadd", "sub": "fsub", "max": "fmax", "min": "fmin", "exchange": "xchg"}


def lower_atomic(lw: KernelLowering, inst: Instruction) -> None:
    """out = old memory[index]; memory[index] = old op value (load / store / exchange as named)."""
    op = cast(ops.AtomicOp, inst.operation)
    kind = op.name.removeprefix("atomic_")
    b = lw.builder
    mem_ty = op.memory.type
    if mem_ty.is_line:
        raise CompileError(f"{op.name} on a line ({mem_ty!r}) has no hardware form")
    elem = mem_ty.elem
    ptr = element_pointer(lw, op.memory, unsigned_index(lw, lw.value(op.index), op.index))
    llty = lt.item_type(mem_ty, memory=True)
    align = lt.item_align(mem_ty)
    if kind == "load":
        raw = b.load_atomic(ptr, ATOMIC_ORDERING, align, typ=llty)
        lw.define(inst.out, lw.from_memory(raw, mem_ty))
        return
    assert op.value is not None  # every atomic but atomic_load carries a value (verified)
    value = lw.to_memory(lw.value(op.value), mem_ty)
    if kind == "store":
        b._insert(ir.instructions.StoreAtomicInstr(b.block, value, ptr, ATOMIC_ORDERING, align))
        if inst.out is not None:  # the IR allows reading the stored value back as the "old" value
            lw.define(inst.out, lw.from_memory(value, mem_ty))
        return
    if elem.is_float:
        rmw = _FLOAT_RMW.get(kind)
    elif kind in ("max", "min"):
        rmw = ("" if elem.kind == "int" else "u") + kind
    else:
        rmw = _INT_RMW.get(kind)
    if rmw is None:
        raise CompileError(f"{op.name} is not defined for {mem_ty!r}")
    old = b.atomic_rmw(rmw, ptr, value, ATOMIC_ORDERING)
    lw.define(inst.out, lw.from_memory(old, mem_ty))


def lower_compare_exchange(lw: KernelLowering, inst: Instruction) -> None:
    """out = old memory[index]; if old == cmp: memory[index] = new (floats compare their bits)."""
    op = cast(ops.AtomicCompareExchange, inst.operation)
    b = lw.builder
    mem_ty = op.memory.type
    if mem_ty.is_line:
        raise CompileError(f"atomic_compare_exchange on a line ({mem_ty!r}) has no hardware form")
    ptr = element_pointer(lw, op.memory, unsigned_index(lw, lw.value(op.index), op.index))
    cmp = lw.to_memory(lw.value(op.cmp), mem_ty)
    new = lw.to_memory(lw.value(op.new), mem_ty)
    if mem_ty.elem.is_float:  # cmpxchg takes integers only
        bits_t = ir.IntType(mem_ty.elem.bits)
        cmp, new = b.bitcast(cmp, bits_t), b.bitcast(new, bits_t)
    pair = b.cmpxchg(ptr, cmp, new, ATOMIC_ORDERING, "monotonic")
    old = b.extract_value(pair, 0)
    if mem_ty.elem.is_float:
        old = b.bitcast(old, lt.item_type(mem_ty))
    lw.define(inst.out, lw.from_memory(old, mem_ty))


for _op_type, _lowering in {
    ops.Index: lower_index,
    ops.IndexAssign: lower_index_assign,
    ops.ExtractLane: lower_extract_lane,
    ops.InsertLane: lower_insert_lane,
    ops.AtomicCompareExchange: lower_compare_exchange,
}.items():
    lowers(_op_type)(_lowering)
lowers(*ops.METADATA_OPS)(lower_metadata)
lowers(*ops.ATOMIC_OPS)(lower_atomic)
