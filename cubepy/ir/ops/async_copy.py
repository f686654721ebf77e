"""Asynchronous global-to-shared copies (PTX ``cp.async``, CubeCL's ``memcpy_async``), with their verifier rules.

An ``async_copy`` moves ``size`` (4, 8 or 16) bytes from a global buffer to a shared memory for the unit
that issues it.  Offsets count *elements* (not items: a line of 4 f32 is 4 elements) so a copy may start
inside a line; both byte addresses must be multiples of ``size``.  ``src_bytes`` (u32, at most ``size``)
bytes are read from the source and the rest of the ``size`` destination bytes are zero-filled (PTX's
``src-size`` operand: a ragged edge reads nothing past the source's end).  ``cache`` is the PTX hint:
``"ca"`` (cache at all levels) or ``"cg"`` (L2 only, 16-byte copies only).

Copies join the unit's open group; ``async_commit_group`` closes it; ``async_wait_group {pending=n}``
(``n`` comptime in [0, 7]) waits until at most ``n`` of the unit's committed groups are still in flight.
The destination bytes are guaranteed visible to the issuing unit only after the wait that covers them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from cubepy.ir.ops.base import Operation
from cubepy.ir.ops.record import Checker, OpRecord, declare
from cubepy.ir.types import U32, Type
from cubepy.ir.variable import Variable, VarKind

if TYPE_CHECKING:
    from cubepy.ir.scope import Instruction

__all__ = ["ASYNC_COPY_RULES", "AsyncCommitGroup", "AsyncCopy", "AsyncWaitGroup"]

COPY_SIZES = (4, 8, 16)
CACHE_HINTS = ("ca", "cg")
MAX_PENDING = 7
# Rules this family adds to the verifier (each has a negative test in tests/ir/test_async_copy_ops.py).
ASYNC_COPY_RULES = ("async-copy-memory", "async-copy-size", "async-copy-type", "async-wait-count")


@attrs.frozen(repr=False)
class AsyncCopy(Operation):
    """Copy ``size`` bytes from ``src[src_offset..]`` to ``dst[dst_offset..]`` (element offsets) asynchronously.

    Only the first ``src_bytes`` bytes are read; the rest of the destination bytes become zero.
    ``all_or_nothing``: ``src_bytes`` is proven to be 0 or ``size`` (set by the ``bounds`` pass), so the
    GPU copy takes a predicate instead of a byte count.
    """

    src: Variable
    src_offset: Variable
    dst: Variable
    dst_offset: Variable
    src_bytes: Variable
    size: int = 16
    cache: str = "ca"
    all_or_nothing: bool = False


@attrs.frozen(repr=False)
class AsyncCommitGroup(Operation):
    """Close this unit's open group of asynchronous copies (PTX ``cp.async.commit_group``)."""


@attrs.frozen(repr=False)
class AsyncWaitGroup(Operation):
    """Wait until at most ``pending`` committed copy groups of this unit are in flight (``cp.async.wait_group``)."""

    pending: int


def _no_out(c: Checker, inst: Instruction) -> None:
    if inst.out is not None:
        c.fail("bad-out", inst, f"{inst.op} has no result, got {inst.out!r}")


def _check_copy(c: Checker, inst: Instruction, op: AsyncCopy) -> None:
    _no_out(c, inst)
    if op.src.kind is not VarKind.GLOBAL:
        c.fail("async-copy-memory", inst, f"the source {op.src!r} is a {op.src.kind.value}, expected a global buffer")
    if op.dst.kind is not VarKind.SHARED:
        c.fail(
            "async-copy-memory", inst, f"the destination {op.dst!r} is a {op.dst.kind.value}, expected shared memory"
        )
    size = op.size
    if isinstance(size, bool) or size not in COPY_SIZES:
        c.fail("async-copy-size", inst, f"a copy moves 4, 8 or 16 bytes, got size={size!r}")
    if op.cache not in CACHE_HINTS:
        c.fail("async-copy-size", inst, f"cache hint {op.cache!r}: expected 'ca' or 'cg'")
    if op.cache == "cg" and size != 16:
        c.fail("async-copy-size", inst, f"the 'cg' cache hint copies 16 bytes only, got size={size}")
    if op.src.elem != op.dst.elem:
        c.fail("async-copy-type", inst, f"a buffer of {op.src.elem!r} copied into shared memory of {op.dst.elem!r}")
    if op.src.elem.size > size or size % op.src.elem.size:
        c.fail("async-copy-type", inst, f"a {size}-byte copy does not hold whole {op.src.elem!r} elements")
    for what, var in (("source offset", op.src_offset), ("destination offset", op.dst_offset)):
        c.int_scalar(inst, what, var)
    if op.src_bytes.type != Type(U32):
        c.fail(
            "async-copy-type", inst, f"source byte count {op.src_bytes!r} has type {op.src_bytes.type!r}, expected u32"
        )
    if op.src_bytes.is_constant and not 0 <= _int(op.src_bytes.value) <= size:
        c.fail("async-copy-size", inst, f"source byte count {op.src_bytes.value} is outside [0, {size}]")


def _int(value: object) -> int:
    """A literal's value as an int (integer literals are Python or numpy ints)."""
    result: int = int(value)  # type: ignore[call-overload]
    return result


def _check_commit(c: Checker, inst: Instruction, op: AsyncCommitGroup) -> None:
    _no_out(c, inst)


def _check_wait(c: Checker, inst: Instruction, op: AsyncWaitGroup) -> None:
    _no_out(c, inst)
    pending = op.pending
    if isinstance(pending, bool) or not isinstance(pending, int) or not 0 <= pending <= MAX_PENDING:
        c.fail(
            "async-wait-count",
            inst,
            f"async_wait_group needs a compile-time group count in [0, {MAX_PENDING}], got {pending!r}",
        )


declare(OpRecord("async_copy", "async_copy", reads=("src",), writes=("dst",), checks=(_check_copy,)))(AsyncCopy)
declare(OpRecord("async_commit_group", "async_copy", checks=(_check_commit,)))(AsyncCommitGroup)
declare(OpRecord("async_wait_group", "async_copy", checks=(_check_wait,)))(AsyncWaitGroup)
