"""Warpgroup MMA (``cubepy.ir.ops.wgmma``) in the interp: descriptors read exactly, reads and results deferred.

* ``wgmma_descriptor`` encodes the PTX ISA's 64-bit matrix descriptor from the slice's byte address in
  the cube's shared arena (the interp's shared-memory address): bits 0-13 start address >> 4, 16-29
  leading byte offset >> 4, 32-45 stride byte offset >> 4, 49-51 base offset (0), 62-63 the swizzle mode
  (0 none, 1 128B, 2 64B, 3 32B).
* ``wgmma_mma_async`` decodes the descriptors (so descriptor arithmetic, as CUTLASS's ``desc + k``, works),
  reads the tiles byte by byte through the canonical K-major or (``trans_a`` / ``trans_b``) MN-major
  layout and the swizzle (see ``tile_addresses``), takes A from the units' registers through the ISA's
  fragment map when A is a local array, and computes ``A @ B^T (+ D)``: the exact products summed in
  f64, rounded once to f32.  When the tiles are read and the product computed is the schedule's choice,
  between issue and the covering wait (``interp.wgmma_async``); the result stays pending until that wait.
* ``wgmma_commit_group`` closes each unit's open group; ``wgmma_wait_group(n)`` delivers and writes the
  pending results of every group but the ``n`` newest into the accumulators.  Under the sanitizer a read
  of an accumulator with a pending result is a ``wgmma pending read``, a write into a tile a started wgmma
  may still read a ``wgmma operand overwrite``.
* Every ``wgmma`` instruction is a warpgroup collective (``.sync.aligned``): when the schedule runs the
  planes of a warpgroup as separate groups (``schedule="random"``, or after a branch split them), the
  units that arrive first wait until every live unit of their warpgroup is at the instruction, and the
  last arrival runs it for all of them (``_gathered``).  A warpgroup that can never gather is a deadlock.
* Misuse (part of a warpgroup, a descriptor that differs across it, a tile outside the arena, a
  non-zero base offset or a swizzled tile whose start has row-phase bits set) is ``wgmma misuse``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import F32, ElemType, Instruction, Variable, VarKind, ops
from cubepy.ir.ops.wgmma import WARPGROUP, a_position, a_register_count, accumulator_position, wgmma_k
from cubepy.runtime.interp import wgmma_async
from cubepy.runtime.interp.cmma import whole_groups
from cubepy.runtime.interp.groups import Wait
from cubepy.runtime.interp.registry import Handler, blocking, implements
from cubepy.runtime.interp.sanitizer import SELF_REPORTING
from cubepy.runtime.interp.values import Mask, numpy_dtype

if TYPE_CHECKING:
    import numpy.typing as npt

    from cubepy.runtime.interp.executor import Chunk

OP_FAMILIES = ("wgmma",)  # the IR op families handled here

SELF_REPORTING.add(ops.WgmmaDescriptor)  # it only takes an address: no shared byte is read or written
SELF_REPORTING.add(ops.WgmmaMmaAsync)  # its reads are checked here (uninitialized bytes)

ROW_BYTES = 32  # every wgmma reads 32 bytes of K per row
SWIZZLE_WIDTH = {0: 0, 1: 128, 2: 64, 3: 32}  # layout type -> bytes per swizzled row
SWIZZLE_MASK = {0: 0, 1: 7, 2: 3, 3: 1}  # bits of the 128-byte line index XORed into the 16-byte chunk
SWIZZLE_NAME = {0: "none", 1: "128B", 2: "64B", 3: "32B"}
_FIELD = 0x3FFF


def encode_descriptor(
    address: npt.ArrayLike, leading_byte_offset: npt.ArrayLike, stride_byte_offset: npt.ArrayLike, layout_type: int
) -> np.ndarray:
    """The 64-bit descriptor (uint64, lane-wise) of the PTX ISA's matrix-descriptor format."""
    start = (np.asarray(address, dtype=np.uint64) >> np.uint64(4)) & np.uint64(_FIELD)
    lbo = (np.asarray(leading_byte_offset, dtype=np.uint64) >> np.uint64(4)) & np.uint64(_FIELD)
    sbo = (np.asarray(stride_byte_offset, dtype=np.uint64) >> np.uint64(4)) & np.uint64(_FIELD)
    return cast(
        np.ndarray, start | (lbo << np.uint64(16)) | (sbo << np.uint64(32)) | (np.uint64(layout_type) << np.uint64(62))
    )


def decode_descriptor(desc: int) -> tuple[int, int, int, int, int]:
    """(start address, leading byte offset, stride byte offset, base offset, layout type) of a descriptor."""
    return (
        (desc & _FIELD) << 4,
        ((desc >> 16) & _FIELD) << 4,
        ((desc >> 32) & _FIELD) << 4,
        (desc >> 49) & 7,
        (desc >> 62) & 3,
    )


def tile_addresses(desc: int, rows: int, size: int = 2, mn_major: bool = False) -> np.ndarray:
    """Byte addresses ``(rows, 32)`` of a tile: row r (M or N), byte b of its 32 bytes of K.

    Canonical K-major layouts (PTX ISA; CUTLASS ``make_gmma_desc``), core matrices of 8 rows x 16 bytes:
    no swizzle: ``start + (r // 8) * SBO + (r % 8) * 16 + (b // 16) * LBO + b % 16``; a swizzle of W bytes
    (32, 64, 128): ``start + (r // 8) * SBO + (r % 8) * W + b``, then the address's 16-byte chunk bits 4-6
    are XORed with its bits 7-9 (1, 2 or 3 of them), as a TMA copy with that swizzle writes them.
    ``mn_major`` (16-bit inputs, ``size`` bytes each): see ``mn_major_address``.
    """
    start, lbo, sbo, _base, layout = decode_descriptor(desc)
    r = np.arange(rows, dtype=np.int64)[:, None]
    b = np.arange(ROW_BYTES, dtype=np.int64)[None, :]
    if mn_major:
        k, byte = b // size, b % size
        logical = mn_major_address(start, lbo, sbo, layout, r, k, size) + byte
    elif layout == 0:
        return cast(np.ndarray, start + (r // 8) * sbo + (r % 8) * 16 + (b // 16) * lbo + b % 16)
    else:
        logical = start + (r // 8) * sbo + (r % 8) * SWIZZLE_WIDTH[layout] + b
    if layout == 0:
        return cast(np.ndarray, logical)
    return cast(np.ndarray, logical ^ (((logical >> 7) & SWIZZLE_MASK[layout]) << 4))


def mn_major_address(
    start: int, lbo: int, sbo: int, layout: int, mn: np.ndarray, k: np.ndarray, size: int
) -> np.ndarray:
    """The (unswizzled) byte address of element (mn, k) of an MN-major tile (PTX ISA canonical layouts).

    T = 16 // size elements fill 16 bytes.  No swizzle: ``((T, m), (8, k)) : ((1, SBO), (T, LBO))``, i.e.
    ``start + (mn // T) * SBO + (k // 8) * LBO + (k % 8) * 16 + (mn % T) * size``; a swizzle of W bytes:
    ``((W / size, m), (8, k)) : ((1, LBO), (W / size, SBO))``, i.e. rows of W bytes hold W / size
    consecutive MN elements of one k, 8 k rows W apart, ``k // 8`` groups SBO apart, further MN blocks
    LBO apart.
    """
    if layout == 0:
        per = 16 // size
        return cast(np.ndarray, start + (mn // per) * sbo + (k // 8) * lbo + (k % 8) * 16 + (mn % per) * size)
    width = SWIZZLE_WIDTH[layout]
    per = width // size
    return cast(np.ndarray, start + (mn // per) * lbo + (k // 8) * sbo + (k % 8) * width + (mn % per) * size)


# -- warpgroup gathering -----------------------------------------------------------------------------------
class WarpgroupArrivals:
    """Units of each warpgroup that reached a ``wgmma`` instruction and wait for the rest of it."""

    def __init__(self, ctx: Chunk) -> None:
        self.arrived = np.zeros(ctx.lanes, dtype=bool)
        self.at = np.zeros(ctx.lanes, dtype=np.int64)  # id of the instruction each arrived lane is at
        self.generation = np.zeros(ctx.lanes // WARPGROUP, dtype=np.int64)


class _WarpgroupWait(Wait):
    """Lanes waiting at a ``wgmma`` instruction until the last unit of their warpgroup arrives."""

    def __init__(self, inst: Instruction, state: WarpgroupArrivals, body: Handler) -> None:
        self.inst = inst
        self.state = state
        self.body = body
        self.generation = np.repeat(state.generation, WARPGROUP)

    def poll(self, ctx: Chunk, bits: np.ndarray) -> np.ndarray:
        """The waiting lanes whose warpgroup ran the instruction (or could run it now: units returned)."""
        if (bits & (np.repeat(self.state.generation, WARPGROUP) <= self.generation)).any():
            _run_complete(ctx, self.inst, self.state, self.body)
        return bits & (np.repeat(self.state.generation, WARPGROUP) > self.generation)

    def describe(self, ctx: Chunk, bits: np.ndarray) -> str:
        """How many units of the first waiting warpgroup arrived."""
        group = int(np.argmax(bits)) // WARPGROUP
        arrived = int(self.state.arrived[group * WARPGROUP : (group + 1) * WARPGROUP].sum())
        return f"wgmma can never complete: {arrived} of the warpgroup's {WARPGROUP} units arrived, the others wait elsewhere"


def _run_complete(ctx: Chunk, inst: Instruction, state: WarpgroupArrivals, body: Handler) -> np.ndarray:
    """Run ``inst`` for every warpgroup whose live units have all arrived; their lanes."""
    live = ~(ctx.returned | ctx.finished)
    arrived = state.arrived.reshape(-1, WARPGROUP)
    complete = arrived.any(axis=1) & ~(live.reshape(-1, WARPGROUP) & ~arrived).any(axis=1)
    if not complete.any():
        return np.zeros(ctx.lanes, dtype=bool)
    lanes = np.repeat(complete, WARPGROUP) & state.arrived
    at = state.at[lanes]
    if (at != at[0]).any():
        lane = int(np.argmax(lanes & (state.at != at[0])))
        ctx.fail(
            inst, "the units of a warpgroup wait at different wgmma instructions", lane, kind=SanitizerKind.WGMMA_MISUSE
        )
    state.arrived[lanes] = False
    state.generation[complete] += 1
    body(ctx, inst, Mask(lanes))
    return lanes


def _gathered(body: Handler) -> Handler:
    """Run ``body`` once per warpgroup, with every live unit of it, however the schedule splits its planes."""

    @blocking
    def handler(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
        if ctx.frees:  # one group holds every lane: the mask is the whole story
            body(ctx, inst, mask)
            return
        state = ctx.state.wgmma_arrivals
        if state is None:
            state = ctx.state.wgmma_arrivals = WarpgroupArrivals(ctx)
        if ctx.topology.units % WARPGROUP:
            _warpgroups(ctx, inst, mask)  # reports the cube shape
        state.arrived |= mask.bits
        state.at[mask.bits] = id(inst)
        wait = _WarpgroupWait(inst, state, body)
        ran = _run_complete(ctx, inst, state, body)
        ctx.block(mask.bits & ~ran, wait)

    return functools.wraps(body)(handler)


# -- checks ---------------------------------------------------------------------------------------------
def _warpgroups(ctx: Chunk, inst: Instruction, mask: Mask) -> np.ndarray:
    """The indices of the chunk's warpgroups that run ``inst``; every unit of each must."""
    return np.flatnonzero(whole_groups(ctx, inst, mask, WARPGROUP, "warpgroup", SanitizerKind.WGMMA_MISUSE))


def _uniform(ctx: Chunk, inst: Instruction, var: Variable, group: int, what: str) -> int:
    """The value of ``var`` in warpgroup ``group``, which must be the same on all its units."""
    value = np.asarray(ctx.read(var))
    if value.ndim == 0:
        return int(value)
    part = value[group * WARPGROUP : (group + 1) * WARPGROUP]
    if (part != part[0]).any():
        lane = group * WARPGROUP + int(np.argmax(part != part[0]))
        ctx.fail(inst, f"the {what} differs across the warpgroup", lane, kind=SanitizerKind.WGMMA_MISUSE)
    return int(part[0])


def descriptor_problem(
    desc: int, rows: int, shared_bytes: int, size: int = 2, mn_major: bool = False
) -> tuple[SanitizerKind, str] | None:
    """What is wrong with reading a ``rows``-row tile through ``desc`` from ``shared_bytes`` of shared memory."""
    start, _lbo, _sbo, base, layout = decode_descriptor(desc)
    if base:
        return SanitizerKind.WGMMA_MISUSE, f"descriptor base offset {base} is not emulated (use 0)"
    if layout and (start >> 7) & SWIZZLE_MASK[layout]:
        return SanitizerKind.WGMMA_MISUSE, (
            f"a {SWIZZLE_NAME[layout]}-swizzled tile starts at shared byte {start}, not at row 0 of its swizzle "
            "pattern: the ISA then needs the descriptor's base offset, which this emulation does not model"
        )
    addresses = tile_addresses(desc, rows, size, mn_major)
    if addresses.min() < 0 or addresses.max() >= shared_bytes:
        return SanitizerKind.OUT_OF_BOUNDS, (
            f"the descriptor's {rows}-row tile reaches shared byte {int(addresses.max())}, past the "
            f"{shared_bytes} bytes of shared memory"
        )
    return None


def tile_values(shared: np.ndarray, desc: int, rows: int, elem: ElemType, mn_major: bool = False) -> np.ndarray:
    """The ``(rows, K)`` tile ``desc`` describes in one cube's shared bytes (checked by ``descriptor_problem``)."""
    raw = np.ascontiguousarray(shared[tile_addresses(desc, rows, elem.size, mn_major)])
    return raw.view(numpy_dtype(elem)).reshape(rows, wgmma_k(elem))


def a_from_registers(op: ops.WgmmaMmaAsync, registers: np.ndarray) -> np.ndarray:
    """The ``(64, K)`` A tile held in a warpgroup's registers ``(128, registers)``, by the ISA's fragment map."""
    units = np.arange(WARPGROUP)
    rows, cols = a_position(op.elem.size, units[:, None], np.arange(a_register_count(op.elem))[None, :])
    a = np.zeros((64, wgmma_k(op.elem)), dtype=registers.dtype)
    a[rows, cols] = registers
    return a


def warpgroup_product(op: ops.WgmmaMmaAsync, a: np.ndarray, b: np.ndarray, previous: np.ndarray | None) -> np.ndarray:
    """Each unit's accumulator values ``(128, N / 2)`` of ``A @ B^T (+ previous)``: exact products summed in f64
    and rounded once to f32 (tf32 operands first lose their 13 low mantissa bits)."""
    if op.elem == F32:
        a, b = _as_tf32(a), _as_tf32(b)
    product = a.astype(np.float64) @ b.astype(np.float64).T
    d_rows, d_cols = accumulator_position(np.arange(WARPGROUP)[:, None], np.arange(op.n // 2)[None, :])
    if previous is not None:
        accumulator = np.zeros((64, op.n), dtype=np.float64)
        accumulator[d_rows, d_cols] = previous
        product += accumulator
    return cast(np.ndarray, product.astype(np.float32)[d_rows, d_cols])


def _read_tile(
    ctx: Chunk, inst: Instruction, desc: int, rows: int, elem: ElemType, lane: int, mn_major: bool
) -> np.ndarray:
    """The ``(rows, K)`` tile a descriptor describes, from the shared arena of the cube of ``lane``."""
    arena = ctx.shared_arena()
    addresses = tile_addresses(desc, rows, elem.size, mn_major)
    cube = lane // ctx.topology.units
    if ctx.sanitizer is not None:
        written = ctx.sanitizer.written[cube, addresses]
        if not written.all():
            byte = int(addresses.reshape(-1)[np.argmax(~written.reshape(-1))])
            kind = SanitizerKind.UNINITIALIZED_READ
            ctx.fail(inst, f"wgmma reads shared byte {byte} that no unit wrote", lane, kind=kind)
    return tile_values(arena[cube], desc, rows, elem, mn_major)


def _as_tf32(values: np.ndarray) -> np.ndarray:
    """f32 values with the 13 low mantissa bits cleared: the tf32 value wgmma uses."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return cast(np.ndarray, bits.view(np.float32))


# -- handlers ---------------------------------------------------------------------------------------------
@implements(ops.WgmmaDescriptor)
def wgmma_descriptor(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """out = the descriptor of ``smem[offset..]`` (its byte address in the cube's shared arena)."""
    op = cast(ops.WgmmaDescriptor, inst.operation)
    offset = np.asarray(ctx.read(op.offset)).astype(np.int64)
    address = ctx.shared_offset(op.smem) + offset * op.smem.type.size
    misaligned = (np.broadcast_to(address, (ctx.lanes,)) % 16 != 0) & mask.bits
    if misaligned.any():
        lane = int(np.argmax(misaligned))
        ctx.fail(
            inst,
            f"a matrix descriptor's start must be 16-byte aligned, got shared byte "
            f"{int(np.broadcast_to(address, (ctx.lanes,))[lane])}",
            lane,
            kind=SanitizerKind.WGMMA_MISUSE,
        )
    lbo = np.asarray(ctx.read(op.leading_byte_offset)).astype(np.int64)
    sbo = np.asarray(ctx.read(op.stride_byte_offset)).astype(np.int64)
    code = ops.WGMMA_SWIZZLES[op.swizzle]
    assert inst.out is not None  # the record gives it a result
    ctx.write(inst.out, encode_descriptor(address, lbo, sbo, code), mask)


@implements(ops.WgmmaFence)
@_gathered
def wgmma_fence(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Nothing to do: the lockstep interp's register writes are visible at once."""
    _warpgroups(ctx, inst, mask)


@implements(ops.WgmmaCommitGroup)
@_gathered
def wgmma_commit_group(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Close each active unit's open group."""
    _warpgroups(ctx, inst, mask)
    wgmma_async.state(ctx).committed[mask.bits] += 1


@implements(ops.WgmmaWaitGroup)
@_gathered
def wgmma_wait_group(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Deliver and make visible the results of every committed group but the ``pending`` newest."""
    op = cast(ops.WgmmaWaitGroup, inst.operation)
    _warpgroups(ctx, inst, mask)
    wgmma_async.wait(ctx, mask.bits, op.pending, inst)


@implements(ops.WgmmaMmaAsync)
@_gathered
def wgmma_mma_async(ctx: Chunk, inst: Instruction, mask: Mask) -> None:
    """Start ``d = a @ b (+ d)`` for each active warpgroup; the tiles are read when the schedule delivers it."""
    op = cast(ops.WgmmaMmaAsync, inst.operation)
    groups = _warpgroups(ctx, inst, mask)
    state = wgmma_async.state(ctx)
    from_registers = op.a.kind is VarKind.LOCAL_ARRAY
    a_items = ctx.memory(op.a).items if from_registers else None
    d_items = ctx.memory(op.d).items
    for group in groups:
        lanes = np.arange(group * WARPGROUP, (group + 1) * WARPGROUP)
        lane = int(lanes[0])
        tiles: list[tuple[int, int, bool]] = []  # (descriptor, rows, MN-major) of each shared operand
        a_regs = None
        if a_items is not None:
            a_regs = a_from_registers(op, a_items[lanes])
        else:
            tiles.append((_uniform(ctx, inst, op.a, group, "descriptor of A"), 64, op.trans_a))
        tiles.append((_uniform(ctx, inst, op.b, group, "descriptor of B"), op.n, op.trans_b))
        scale = bool(_uniform(ctx, inst, op.scale_d, group, "scale_d"))
        reads = [_tile_bytes(ctx, inst, desc, rows, op.elem.size, mn, lane) for desc, rows, mn in tiles]
        entry = wgmma_async.Started(
            inst,
            op.d,
            lanes,
            int(state.committed[lane]),
            lane // ctx.topology.units,
            np.unique(np.concatenate([r.reshape(-1) for r in reads])),
            _computation(ctx, inst, op, tiles, a_regs, scale, lane),
            d_items[lanes].astype(np.float32),
        )
        wgmma_async.start(ctx, entry)


def _tile_bytes(
    ctx: Chunk, inst: Instruction, desc: int, rows: int, size: int, mn_major: bool, lane: int
) -> np.ndarray:
    """The shared bytes of a descriptor's tile, checked against the descriptor rules and the arena at issue."""
    problem = descriptor_problem(desc, rows, ctx.shared_arena().shape[1], size, mn_major)
    if problem is not None:
        ctx.fail(inst, problem[1], lane, kind=problem[0])
    return tile_addresses(desc, rows, size, mn_major)


def _computation(
    ctx: Chunk,
    inst: Instruction,
    op: ops.WgmmaMmaAsync,
    tiles: list[tuple[int, int, bool]],
    a_regs: np.ndarray | None,
    scale: bool,
    lane: int,
) -> Callable[[np.ndarray], np.ndarray]:
    """The delivery of one warpgroup's wgmma: read its tiles now, return its accumulator values."""

    def compute(previous: np.ndarray) -> np.ndarray:
        values = [_read_tile(ctx, inst, desc, rows, op.elem, lane, mn) for desc, rows, mn in tiles]
        a = a_regs if a_regs is not None else values[0]
        return warpgroup_product(op, a, values[-1], previous if scale else None)

    return compute
