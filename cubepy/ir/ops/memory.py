"""Memory operations: indexing, lanes of lines, buffer metadata and atomics."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from cubepy.ir.ops.base import Operation, fixed, same_as, scalar_of
from cubepy.ir.ops.record import Checker, OpRecord, declare, derive
from cubepy.ir.types import U32, Type
from cubepy.ir.variable import Variable, VarKind

if TYPE_CHECKING:
    from cubepy.ir.scope import Instruction


def _memory(c: Checker, inst: Instruction, var: Variable) -> None:
    if not var.is_memory:
        c.fail(
            "not-memory",
            inst,
            f"{var!r} is a {var.kind.value}, expected a buffer, shared memory, local array or constant table",
        )


def _indexed(c: Checker, inst: Instruction, op: Operation) -> None:
    memory: Variable = getattr(op, "memory")
    _memory(c, inst, memory)
    c.int_scalar(inst, "index", getattr(op, "index"))


@declare(
    OpRecord(
        "index",
        "memory",
        result=same_as("memory"),
        pure=True,
        reads=("memory",),
        checks=(_indexed,),
        no_semantics="a read of memory, not a function of lane values",
        doc="memory[index].",
    )
)
@attrs.frozen(repr=False)
class Index(Operation):
    """out = memory[index]; ``checked`` reads give 0 out of bounds (launch), unchecked ones are raw.

    ``speculative``: the frontend hoisted this checked read out of a short-circuit (``i < n and a[i] > 0``),
    so it also runs on lanes Python would not have evaluated it on; out of bounds there is not a bug (the
    interp's sanitizer does not report it).  Code generation ignores it.
    """

    memory: Variable
    index: Variable
    checked: bool = False
    speculative: bool = False


def _check_store(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, IndexAssign)
    c.same_type(inst, "stored value", op.value.type, op.memory.type)


@declare(
    OpRecord(
        "index_assign", "memory", writes=("memory",), checks=(_indexed, _check_store), doc="memory[index] = value."
    )
)
@attrs.frozen(repr=False)
class IndexAssign(Operation):
    """memory[index] = value; ``checked`` writes out of bounds are dropped.

    ``pair``: a hint of ``cubepy.ir.store_pairs``, which proved that the next instruction of this scope stores
    ``memory[index + 1]`` alike (same memory, same ``checked``), that ``index`` is even, that the buffer starts
    aligned to both items' bytes and, when checked, that its length is even: the GPU back end may write the
    two items as one aligned word.  Every other runtime runs the two stores as they are.
    """

    memory: Variable
    index: Variable
    value: Variable
    checked: bool = False
    pair: bool = False


def _check_lane(c: Checker, inst: Instruction, op: Operation) -> None:
    c.int_scalar(inst, "lane", getattr(op, "lane"))


@declare(
    OpRecord(
        "extract_lane",
        "memory",
        result=scalar_of("line"),
        pure=True,
        checks=(_check_lane,),
        no_semantics="moves a lane of a line: the back ends index their line representation",
        doc="line[lane].",
    )
)
@attrs.frozen(repr=False)
class ExtractLane(Operation):
    """out = line[lane]."""

    line: Variable
    lane: Variable


def _check_insert(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, InsertLane)
    if op.target.kind is not VarKind.MUT:
        c.fail("bad-out", inst, f"insert_lane target {op.target!r} must be a mutable local")
    c.same_type(inst, "lane value", op.value.type, op.target.type.scalar())


@declare(OpRecord("insert_lane", "memory", checks=(_check_lane, _check_insert), doc="target[lane] = value."))
@attrs.frozen(repr=False)
class InsertLane(Operation):
    """target[lane] = value, where target is a mutable line local (no result)."""

    target: Variable
    lane: Variable
    value: Variable


# -- buffer metadata -----------------------------------------------------------------------------------
@attrs.frozen(repr=False)
class Metadata(Operation):
    """out = a buffer's len, buffer_len, rank, or shape/stride of dimension ``dim`` (u32)."""

    memory: Variable
    dim: Variable | None = None


def _check_metadata(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, Metadata)
    if op.memory.kind is not VarKind.GLOBAL:
        c.fail("not-memory", inst, f"metadata of {op.memory!r}, expected a buffer parameter")
    if op.RECORD.name in ("shape", "stride"):
        if op.dim is None:
            c.fail("bad-index", inst, f"{op.name} needs a dimension")
        c.int_scalar(inst, "dimension", op.dim)


def _metadata(name: str, class_name: str, doc: str) -> type[Metadata]:
    record = OpRecord(
        name,
        "memory",
        result=fixed(Type(U32)),
        pure=True,
        checks=(_check_metadata,),
        no_semantics="a launch argument's metadata, not a function of lane values",
        doc=doc,
    )
    cls = derive(Metadata, class_name, record, __name__)
    assert issubclass(cls, Metadata)
    return cls


Len = _metadata("len", "Len", "The number of items (lines) of a buffer.")
BufferLen = _metadata("buffer_len", "BufferLen", "The number of items the buffer's allocation holds.")
Shape = _metadata("shape", "Shape", "A tensor's extent in dimension dim.")
Stride = _metadata("stride", "Stride", "A tensor's stride (in items) in dimension dim.")
Rank = _metadata("rank", "Rank", "A tensor's number of dimensions.")
METADATA_OPS: tuple[type[Metadata], ...] = (Len, BufferLen, Shape, Stride, Rank)


# -- atomics -------------------------------------------------------------------------------------------
@attrs.frozen(repr=False)
class AtomicOp(Operation):
    """out = old memory[index]; memory[index] = old op value (load/store/exchange as named)."""

    memory: Variable
    index: Variable
    value: Variable | None = None


def _check_atomic(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, AtomicOp)
    if op.memory.kind is VarKind.CONST_TABLE:
        c.fail("read-only-memory", inst, f"{op.name} on {op.memory!r}: a constant table has no atomics")
    if op.RECORD.name != "atomic_load":
        if op.value is None:
            c.fail("type-mismatch", inst, f"{op.name} needs a value")
        c.same_type(inst, "value", op.value.type, op.memory.type)


def _check_wrapping_counter(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, AtomicOp)
    if op.memory.type.elem is not U32:
        c.fail("type-mismatch", inst, f"{op.name} counts in u32 (CUDA's atomicInc/atomicDec), got {op.memory.type!r}")


def _atomic(kind: str, doc: str) -> type[AtomicOp]:
    name = f"atomic_{kind}"
    has_result = kind != "store"
    checks = (_indexed, _check_atomic) + ((_check_wrapping_counter,) if kind in ("inc", "dec") else ())
    record = OpRecord(
        name,
        "memory",
        result=same_as("memory") if has_result else None,
        reads=() if kind == "store" else ("memory",),
        writes=() if kind == "load" else ("memory",),
        checks=checks,
        doc=doc,
    )
    cls = derive(AtomicOp, "Atomic" + kind.capitalize(), record, __name__)
    assert issubclass(cls, AtomicOp)
    return cls


AtomicAdd = _atomic("add", "Atomic add; gives the old value.")
AtomicSub = _atomic("sub", "Atomic subtract; gives the old value.")
AtomicMax = _atomic("max", "Atomic maximum; gives the old value.")
AtomicMin = _atomic("min", "Atomic minimum; gives the old value.")
AtomicAnd = _atomic("and", "Atomic bitwise and; gives the old value.")
AtomicOr = _atomic("or", "Atomic bitwise or; gives the old value.")
AtomicXor = _atomic("xor", "Atomic bitwise xor; gives the old value.")
AtomicExchange = _atomic("exchange", "Atomic exchange; gives the old value.")
AtomicLoad = _atomic("load", "Atomic load.")
AtomicStore = _atomic("store", "Atomic store.")
AtomicInc = _atomic(
    "inc", "CUDA's atomicInc (u32): old >= limit ? 0 : old + 1, where value is the limit; gives the old value."
)
AtomicDec = _atomic(
    "dec",
    "CUDA's atomicDec (u32): old == 0 or old > limit ? limit : old - 1, where value is the limit; gives the old value.",
)
ATOMIC_OPS: tuple[type[AtomicOp], ...] = (
    AtomicAdd,
    AtomicSub,
    AtomicMax,
    AtomicMin,
    AtomicAnd,
    AtomicOr,
    AtomicXor,
    AtomicExchange,
    AtomicLoad,
    AtomicStore,
    AtomicInc,
    AtomicDec,
)


def _check_cas(c: Checker, inst: Instruction, op: Operation) -> None:
    assert isinstance(op, AtomicCompareExchange)
    for name in ("cmp", "new"):
        c.same_type(inst, name, getattr(op, name).type, op.memory.type)


@declare(
    OpRecord(
        "atomic_compare_exchange",
        "memory",
        result=same_as("memory"),
        reads=("memory",),
        writes=("memory",),
        checks=(_indexed, _check_cas),
        doc="Atomic compare-and-exchange.",
    )
)
@attrs.frozen(repr=False)
class AtomicCompareExchange(Operation):
    """out = old memory[index]; if old == cmp: memory[index] = new."""

    memory: Variable
    index: Variable
    cmp: Variable
    new: Variable


__all__ = [
    "ATOMIC_OPS",
    "METADATA_OPS",
    "AtomicAdd",
    "AtomicAnd",
    "AtomicCompareExchange",
    "AtomicDec",
    "AtomicExchange",
    "AtomicInc",
    "AtomicLoad",
    "AtomicMax",
    "AtomicMin",
    "AtomicOp",
    "AtomicOr",
    "AtomicStore",
    "AtomicSub",
    "AtomicXor",
    "BufferLen",
    "ExtractLane",
    "Index",
    "IndexAssign",
    "InsertLane",
    "Len",
    "Metadata",
    "Rank",
    "Shape",
    "Stride",
]
