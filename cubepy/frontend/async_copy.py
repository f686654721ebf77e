"""Asynchronous global-to-shared copies: ``cp.memcpy_async``, copy groups and ``cp.Pipeline`` (PTX ``cp.async``).

``memcpy_async(src, dst)``: the *calling unit* copies the whole slice ``src`` of a global buffer into the
slice ``dst`` of a shared memory (CubeCL's ``memcpy_async``; let every unit call it on its own part for a
cooperative copy).  The copy is split into chunks of 16, 8 or 4 bytes (the largest that divides the
destination's bytes and its comptime offsets); each chunk is one ``async_copy`` op (one PTX ``cp.async``).
``dst`` sets the size: its length must be comptime.  The source supplies its first ``min(len(src), len(dst))``
items and the rest of ``dst`` is zero-filled (a ragged edge: the last tile of a matrix whose size is not a
multiple of the tile); under ``launch`` (checked) the source is also cut at the buffer's end.  Both slices
must start at an address that is a multiple of the chunk size (the interp reports a misaligned copy).

Copies join the unit's open group: ``async_commit_group()`` closes it and ``async_wait_group(n)`` waits until
at most ``n`` (comptime, 0..7) of the unit's groups are in flight.  Only then are the bytes guaranteed to be
in shared memory for the unit that copied them; other units see them after a ``sync_cube`` that follows
the wait.

``Pipeline(stages)`` is CubeCL's pipeline on these groups: ``producer_commit`` commits a stage (one group),
``consumer_wait`` waits until the oldest committed stage has landed, and ``consumer_release`` retires it.
It counts the stages in flight at run time (a u32 per unit), so the producer may skip a commit under a
runtime condition (the last tiles of a loop) and ``consumer_wait`` still waits for the right group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from cubepy import ir
from cubepy.frontend import mutability, operations, source
from cubepy.frontend.state import ScopeBuilder, current_scope, require_state
from cubepy.ir import VarKind
from cubepy.ir import ops as irops

if TYPE_CHECKING:
    from cubepy.frontend.containers import MemoryExpand
    from cubepy.frontend.values import ExpandElement

    _Position = tuple[int, int]  # (scope depth, index): when an instruction was emitted
    _Defs = dict[ir.Variable, tuple[irops.Operation, _Position]]
    _Assigns = dict[ir.Variable, list[_Position]]

CHUNKS = (16, 8, 4)
MAX_STAGES = irops.async_copy.MAX_PENDING + 1


def _memory_slice(value: Any, what: str, kind: VarKind) -> tuple[MemoryExpand, Any, Any]:
    """(memory, item offset, item length) of a memory or a slice of one of ``kind``."""
    from cubepy.frontend.containers import MemoryExpand, SliceExpand

    if isinstance(value, SliceExpand):
        memory, offset, length = value.base, value.offset, value.length
    elif isinstance(value, MemoryExpand):
        memory, offset = value, 0
        length = value.var.length if kind is VarKind.SHARED else value.len()
    else:
        source.fail(f"{what}: expected a {_NAMES[kind]} or a slice of one, got {type(value).__name__}")
    if memory.var.kind is not kind:
        source.fail(f"{what}: expected a {_NAMES[kind]} or a slice of one, got {memory.describe()}")
    return memory, _comptime_or(offset), _comptime_or(length)


_NAMES = {VarKind.GLOBAL: "global buffer (Array/Tensor)", VarKind.SHARED: "shared memory"}


def _comptime_or(value: Any) -> Any:
    """A Python int when ``value`` is comptime (or provably constant), else the runtime value unchanged."""
    if operations.is_comptime(value):
        return operations.comptime_value(value)
    known = _constant_difference(value)
    return value if known is None else known


def _definitions() -> tuple[_Defs, _Assigns]:
    """The variables defined so far around the insertion point -> (operation, position), and each mutable's
    assignment positions; a position (scope depth, index) orders instructions by when they were emitted."""
    chain = []
    scope: ScopeBuilder | None = require_state().current
    while scope is not None:
        chain.append(scope)
        scope = scope.parent
    defs: _Defs = {}
    assigns: _Assigns = {}
    for depth, builder in enumerate(reversed(chain)):
        for index, inst in enumerate(builder.instructions):
            if inst.out is None:
                continue
            if inst.out.kind is VarKind.CONST:
                defs[inst.out] = (inst.operation, (depth, index))
            elif inst.out.kind is VarKind.MUT:
                assigns.setdefault(inst.out, []).append((depth, index))
    return defs, assigns


def _same_value(
    a: ir.Variable, b: ir.Variable, defs: _Defs, assigns: _Assigns, after: _Position, depth: int = 12
) -> bool:
    """Whether ``a`` and ``b`` (read at or after ``after``) are computed the same way from the same values."""
    if a == b:
        # A mutable read twice holds one value only if nothing assigned it since the earlier read.
        return a.kind is not VarKind.MUT or all(at <= after for at in assigns.get(a, ()))
    found_a, found_b = defs.get(a), defs.get(b)
    if depth == 0 or found_a is None or found_b is None:
        return False
    (op_a, at_a), (op_b, at_b) = found_a, found_b
    if type(op_a) is not type(op_b) or not op_a.RECORD.pure:
        return False
    for name in attrs.fields_dict(type(op_a)):
        x, y = getattr(op_a, name), getattr(op_b, name)
        if isinstance(x, ir.Variable) and isinstance(y, ir.Variable):
            if not _same_value(x, y, defs, assigns, min(at_a, at_b), depth - 1):
                return False
        elif x != y:
            return False
    return True


def _constant_difference(length: object) -> int | None:
    """``c`` when the runtime slice length ``length`` is ``(x + c) - x`` (``m[i : i + c]``), else None."""
    var = getattr(length, "var", None)
    if not isinstance(var, ir.Variable):
        return None
    defs, assigns = _definitions()
    sub = defs.get(var)
    if sub is None or not isinstance(sub[0], irops.Sub):
        return None
    add = defs.get(sub[0].lhs)
    if add is None or not isinstance(add[0], irops.Add):
        return None
    for term, other in ((add[0].rhs, add[0].lhs), (add[0].lhs, add[0].rhs)):
        if term.is_constant and _same_value(other, sub[0].rhs, defs, assigns, add[1]):
            return int(term.value)  # type: ignore[call-overload,no-any-return]
    return None


def _u32(value: Any) -> Any:
    """``value`` as a u32 element (ints stay ints, so arithmetic on them folds in Python)."""
    if isinstance(value, int):
        return value
    return operations.element(operations.to_index(value))


def _mul(a: Any, b: Any) -> Any:
    if isinstance(b, int) and b == 1:
        return a
    return a * b if isinstance(a, int) and isinstance(b, int) else operations.binary("mul", _u32(a), _u32(b))


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(b, int) and b == 0:
        return a
    return operations.binary("add", _u32(a), _u32(b))


def _min(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return operations.binary("min", _u32(a), _u32(b))


def _saturating_sub(a: Any, b: Any) -> Any:
    """``max(a - b, 0)`` in u32."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a - b, 0)
    a, b = _u32(a), _u32(b)
    return operations.select(operations.compare("gt", a, b), operations.binary("sub", a, b), _u32_literal(0))


def _u32_literal(value: int) -> ExpandElement:
    return operations.literal(value, ir.U32)


def _whole_chunk_step(src_mem: Any, chunk: int) -> int | None:
    """Source items (lines, for a buffer of lines) per chunk when a checked copy may test each chunk whole
    instead of clamping to the buffer's end; None when it may not.

    The launch found the buffer's ``len()`` a multiple of a chunk's items, and a chunk's source must start at a
    multiple of its size (the interp reports any other start as a misuse; the GPU faults): so a chunk is wholly
    inside the buffer or wholly past its end, and one comparison per chunk (``offset + (k + 1) * step <= len``,
    against a bound the compiler hoists) gives the clamp's bytes.  A misaligned chunk that crosses the end reads
    nothing instead of its inside part: still never past the end.  (A line wider than a chunk is clamped.)
    """
    item = src_mem.var.type.size
    if chunk % item:
        return None
    step = chunk // item
    multiple = require_state().len_multiple_of.get(src_mem.var.id, 1)
    return step if multiple % step == 0 else None


def _chunk_size(total_bytes: int, offsets_bytes: list[int]) -> int:
    for chunk in CHUNKS:
        if total_bytes % chunk == 0 and all(offset % chunk == 0 for offset in offsets_bytes):
            return chunk
    source.fail(
        f"memcpy_async: cp.async copies 4, 8 or 16 bytes; a destination of {total_bytes} bytes"
        + (f" at byte offsets {offsets_bytes}" if offsets_bytes else "")
        + " cannot be split into such copies (use a slice whose size and offset are multiples of 4 bytes)"
    )


def memcpy_async(src: Any, dst: Any, cache: str | None = None) -> None:
    """The calling unit starts copying global slice ``src`` into shared slice ``dst`` (joins its open group).

    ``dst``'s length (comptime) is the size; items past the end of ``src`` are zero-filled.  ``cache`` is the
    PTX hint, ``"ca"`` or ``"cg"`` (16-byte chunks only); by default ``"cg"`` for 16-byte chunks, else ``"ca"``.
    """
    src_mem, src_offset, src_length = _memory_slice(src, "memcpy_async source", VarKind.GLOBAL)
    dst_mem, dst_offset, dst_length = _memory_slice(dst, "memcpy_async destination", VarKind.SHARED)
    if src_mem.var.elem != dst_mem.var.elem:
        source.fail(
            f"memcpy_async: a buffer of {src_mem.var.elem!r} copied into shared memory of {dst_mem.var.elem!r} "
            "(the bytes are copied unchanged: the element types must match)"
        )
    if not isinstance(dst_length, int):
        source.fail("memcpy_async: the destination slice's length must be comptime (it sets the size of the copy)")
    elem_bytes = dst_mem.var.elem.size
    if dst_mem.var.elem.bits < 8 or elem_bytes > 16:
        source.fail(f"memcpy_async: cannot copy elements of {dst_mem.var.elem!r}")
    src_line, dst_line = src_mem.var.type.line, dst_mem.var.type.line
    total = dst_length * dst_mem.var.type.size
    if total == 0:
        return
    known = [o * m.var.type.size for o, m in ((src_offset, src_mem), (dst_offset, dst_mem)) if isinstance(o, int)]
    chunk = _chunk_size(total, known)
    if cache is None:
        cache = "cg" if chunk == 16 else "ca"
    if cache not in irops.async_copy.CACHE_HINTS or (cache == "cg" and chunk != 16):
        source.fail(
            f"memcpy_async: cache={cache!r}: expected 'ca', or 'cg' for 16-byte chunks (this copy uses {chunk})"
        )
    # The source items available: the slice, cut at the destination's size (and, checked, the buffer's end).
    valid = _min(src_length, dst_length)
    whole_step = _whole_chunk_step(src_mem, chunk) if src_mem.checked else None
    if src_mem.checked and whole_step is None:
        valid = _min(valid, _saturating_sub(src_mem.len(), src_offset))
    valid_bytes = _mul(valid, src_mem.var.type.size)
    src_first = _mul(src_offset, src_line)
    dst_first = _mul(dst_offset, dst_line)
    step = chunk // elem_bytes
    length = src_mem.len() if whole_step is not None else None
    for k in range(total // chunk):
        here = _min(_saturating_sub(valid_bytes, k * chunk), chunk)
        if whole_step is not None:
            # chunk k ([offset + k * step, offset + (k + 1) * step) in source items) inside the buffer, or nothing
            last = (k + 1) * whole_step - 1
            inside = operations.compare("lt", _u32(src_offset), _u32(_saturating_sub(length, last)))
            here = operations.select(inside, _u32(here), _u32_literal(0))
        current_scope().append(
            irops.AsyncCopy(
                src_mem.var,
                operations.to_index(_add(src_first, k * step), "memcpy_async source offset"),
                dst_mem.var,
                operations.to_index(_add(dst_first, k * step), "memcpy_async destination offset"),
                operations.to_index(here, "memcpy_async source bytes"),
                chunk,
                cache,
            )
        )


def async_commit_group() -> None:
    """Close this unit's open group of asynchronous copies (PTX ``cp.async.commit_group``)."""
    current_scope().append(irops.AsyncCommitGroup())


def _pending(n: Any) -> int:
    value = operations.comptime_value(n) if operations.is_comptime(n) else None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_STAGES:
        source.fail(
            f"async_wait_group: the number of groups left in flight must be a comptime int in [0, 7], got {n!r}"
        )
    return value


def async_wait_group(n: Any) -> None:
    """Wait until at most ``n`` (comptime, 0..7) of this unit's committed copy groups are in flight."""
    current_scope().append(irops.AsyncWaitGroup(_pending(n)))


def _runtime_if_else(cond: Any, then: Callable[..., object], otherwise: Callable[..., object]) -> None:
    """Emit ``if cond: then() else: otherwise()`` as an IR branch (``cond`` a runtime bool)."""
    state = require_state()
    bodies = []
    for emit in (then, otherwise):
        with state.in_scope(state.current.child()) as child:
            emit()
        bodies.append(child.freeze())
    state.current.append(irops.IfElse(operations.to_bool(cond).var, bodies[0], bodies[1]))


class Pipeline:
    """``cp.Pipeline(stages)``: a multi-stage copy pipeline of one unit (CubeCL's ``Pipeline``, cp.async groups).

    Each stage is one commit group.  ``producer_acquire`` opens a stage, ``memcpy_async`` copies into it,
    ``producer_commit`` commits it; ``consumer_wait`` waits until the oldest committed stage has landed and
    ``consumer_release`` retires it.  Copies reach other units only through a ``sync_cube`` after the wait.
    """

    __slots__ = ("stages", "_in_flight")

    def __init__(self, stages: Any) -> None:
        count = operations.comptime_value(stages) if operations.is_comptime(stages) else None
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_STAGES:
            source.fail(f"Pipeline(stages): expected a comptime int in [1, {MAX_STAGES}], got {stages!r}")
        require_state("cp.Pipeline")
        self.stages = count
        # committed, not yet released stages: a strongly typed u32 mutable (a weak literal could be retyped)
        self._in_flight = operations.element(current_scope().create_local_mut(ir.Type(ir.U32), _u32_literal(0).var))

    def producer_acquire(self) -> None:
        """Open a stage for the producer (the copies of a unit need no wait for a free slot: no-op)."""

    def memcpy_async(self, src: Any, dst: Any, cache: str | None = None) -> None:
        """Copy global slice ``src`` into shared slice ``dst`` in the open stage (see ``cp.memcpy_async``)."""
        memcpy_async(src, dst, cache)

    def producer_commit(self) -> None:
        """Commit the open stage (one copy group)."""
        async_commit_group()
        mutability.assign_into(self._in_flight, operations.binary("add", self._in_flight, _u32_literal(1)))

    def consumer_wait(self) -> None:
        """Wait until the oldest committed stage has landed (a ``cp.async.wait_group`` of the stages after it).

        With ``n`` stages in flight all but the newest ``n - 1`` must have landed.  A loop's steady state has
        ``stages - 1`` or ``stages`` in flight (the wait before or after the commit), and those two wait exactly;
        the fewer of a loop's last tiles share one ``wait_group 0`` (waiting for more is always correct, and with
        nothing in flight it returns at once), so the dispatch is one if/else chain of at most two compares for
        any number of stages."""
        top = self.stages - 1
        if top == 0:  # one stage: wait for it (nothing in flight: a wait that returns at once)
            async_wait_group(0)
            return

        def rest() -> None:  # fewer than ``stages`` in flight
            if top == 1:
                async_wait_group(0)
                return
            exactly_top = operations.compare("eq", self._in_flight, _u32_literal(top))
            _runtime_if_else(exactly_top, lambda: async_wait_group(top - 1), lambda: async_wait_group(0))

        full = operations.compare("ge", self._in_flight, _u32_literal(self.stages))
        _runtime_if_else(full, lambda: async_wait_group(top), rest)

    def consumer_release(self) -> None:
        """Retire the oldest stage: its shared memory may be refilled (after a ``sync_cube`` when others read it)."""
        left = self._in_flight
        mutability.assign_into(
            left,
            operations.select(
                operations.compare("gt", left, _u32_literal(0)),
                operations.binary("sub", left, _u32_literal(1)),
                _u32_literal(0),
            ),
        )

    def __repr__(self) -> str:
        return f"<cp.Pipeline of {self.stages} stages>"


__all__ = ["Pipeline", "async_commit_group", "async_wait_group", "memcpy_async"]
