"""``cubepy_host_op``: the compiled host code's TMA copies, mbarriers and plane matrix ops, run by the interp's emulation.

The host lowering (``cubepy.compiler.targets.host_async``) turns each TMA or mbarrier instruction into a
call ``cubepy_host_op(params, cube, unit, site, operands)``.  This module binds that symbol to one ctypes
callback, which finds the launch by its parameter block's address, the instruction by ``site`` in the
kernel's ``HostCall`` table, and calls the functions the interp calls: ``interp.tma`` (tensor-map walk,
swizzle, out-of-bounds fill, preconditions) and ``interp.mbarrier`` (arrivals, transaction bytes, phases).

* A tensor-map parameter holds a handle instead of a CUtensorMap: ``TENSOR_MAP_MAGIC`` and the map's
  slot; the launch record holds the ``TensorMapArg`` descriptions.
* A barrier's state is a row of int64 in its slot of the cube's shared block; shared memory is the cube's
  block, which the compiled code passes through its cube context.  Named barriers (``bar.sync``/
  ``bar.arrive``) have 16 rows there too (units arrived, units expected, generation), with the interp's
  rules and messages (``interp.warp_specialize``).
* Errors cannot cross the C frames: the first one is kept in the launch record, the cube context's fault
  word is set (the driver runs no more cubes there), every later call does nothing (a wait reports done),
  and ``LaunchRecord.raise_if_failed`` raises it once the compiled code returned.
"""

from __future__ import annotations

import ctypes
import struct
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from cubepy.compiler.emit_host import HostKernel
from cubepy.compiler.targets.host_abi import BARRIER_ROW_BYTES, NAMED_ROW_BYTES, CubeContext
from cubepy.compiler.targets.host_async import HOST_OP_SYMBOL, HostCall
from cubepy.errors import SanitizerError, SanitizerKind, TensorMapError, TmaMisuseError
from cubepy.ir import ops, printf
from cubepy.runtime.cpu import plane_ops, workers
from cubepy.runtime.interp import mbarrier, tma, warp_specialize
from cubepy.runtime.interp.memory import out_of_bounds_text
from cubepy.runtime.interp.printing import format_line

if TYPE_CHECKING:
    from cubepy.runtime.tensormap import TensorMapArg

TENSOR_MAP_MAGIC = b"cubepyTM"
assert BARRIER_ROW_BYTES == mbarrier.ROW_BYTES, "the host target's barrier rows must hold the emulated state"
HostOp = ctypes.CFUNCTYPE(
    ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p
)
_ONE_CUBE = np.zeros(1, dtype=np.int64)
_launches: dict[int, LaunchRecord] = {}
_launches_lock = workers.fork_safe(threading.Lock())


def tensor_map_handle(slot: int) -> bytes:
    """The 128 bytes a tensor-map parameter holds on the cpu runtime: the magic and the map's slot."""
    return (TENSOR_MAP_MAGIC + struct.pack("<I", slot)).ljust(128, b"\0")


class LaunchRecord:
    """One running launch: its kernel, tensor maps, the cube contexts' shared views and the first error."""

    def __init__(
        self, kernel: HostKernel, tensor_maps: list[TensorMapArg], counts: tuple[int, int, int] = (1, 1, 1)
    ) -> None:
        self.kernel = kernel
        self.counts = counts  # the launch's cube count
        self.tensor_maps = tensor_maps
        self.error: BaseException | None = None
        self.plane_batches = plane_ops.PlaneBatches()
        self.operations: dict[str, object] = {}  # instruction text -> its operation (plane collectives)
        self.prints: list[tuple[int, int, int, str]] = []  # (the unit's n-th print, cube, unit, line)
        self.printed: dict[tuple[int, int], int] = {}  # (cube, unit) -> prints so far
        self._views: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()
        self.waiting_at: dict[tuple[int, int], int] = {}  # (cube, unit) -> the array element its wait tested

    def shared(self, cube: int) -> np.ndarray:
        """The shared block of the cube context at ``cube`` as uint8."""
        address = CubeContext.from_address(cube).shared
        view = self._views.get(address)
        if view is None:
            size = max(self.kernel.shared_bytes, 1)
            view = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(address))
            self._views[address] = view
        return view

    def cube_index(self, cube: int) -> tuple[int, int, int]:
        """The ``ctaid`` of the cube the context at ``cube`` runs now."""
        x, y, z = CubeContext.from_address(cube).ctaid
        return x, y, z

    def write_prints(self) -> None:
        """Write the launch's ``debug_print`` lines: by each unit's n-th print, then cube, then unit (the
        interp's order when every unit prints as often before)."""
        if self.prints:
            sys.stdout.write("".join(line for *_, line in sorted(self.prints)))
            self.prints.clear()

    def unit_position(self, unit: int) -> tuple[int, int, int]:
        """The (x, y, z) position of the linear ``unit`` in its cube."""
        dx, dy, _ = self.kernel.definition.cube_dim
        return unit % dx, (unit // dx) % dy, unit // (dx * dy)

    def describe_unit(self, cube: int, unit: int) -> str:
        """``unit (x, y, z) of cube (x, y, z)``, as the interp names a lane."""
        return f"unit {self.unit_position(unit)} of cube {self.cube_index(cube)}"

    def report(
        self,
        cube: int,
        unit: int,
        call: HostCall,
        kind: SanitizerKind,
        text: str,
        error: type[SanitizerError] = SanitizerError,
    ) -> SanitizerError:
        """The error ``call`` made on ``unit``: ``text`` (after the kind's name unless it starts with it), the unit
        and cube, and the instruction, in the interp's words."""
        message = text if text.startswith(kind.value) else f"{kind.value}: {text}"
        return error(f"{call.where}{message}, by {self.describe_unit(cube, unit)}\n  in instruction: {call.text}", kind)

    def fail(self, cube: int, error: BaseException) -> None:
        """Keep the first error and stop the cube context's remaining cubes."""
        with self._lock:
            if self.error is None:
                self.error = error
        CubeContext.from_address(cube).fault = -1

    def barrier_state(self, cube: int, call: HostCall, index: int = 0) -> mbarrier.BarrierState:
        """The state row of ``call``'s barrier (element ``index`` of an array) in the cube's shared block."""
        if not 0 <= index < call.barrier_count:
            problem = mbarrier.index_problem(call.barrier, index, call.barrier_count)
            raise mbarrier.BarrierFault(SanitizerKind.OUT_OF_BOUNDS, problem, 0)
        return mbarrier.BarrierState(self.all_barrier_states(cube, call).table[index : index + 1])

    def all_barrier_states(self, cube: int, call: HostCall) -> mbarrier.BarrierState:
        """The state rows of every element of ``call``'s barrier (one for a single barrier)."""
        end = call.barrier_offset + call.barrier_count * BARRIER_ROW_BYTES
        rows = self.shared(cube)[call.barrier_offset : end].view(np.int64)
        return mbarrier.BarrierState(rows.reshape(call.barrier_count, mbarrier.FIELDS))

    def named_rows(self, cube: int, call: HostCall) -> np.ndarray:
        """The cube's named-barrier rows (units arrived, units expected, generation), one per barrier id."""
        size = ops.NAMED_BARRIERS * NAMED_ROW_BYTES
        return self.shared(cube)[call.barrier_offset : call.barrier_offset + size].view(np.int64).reshape(-1, 3)

    def deadlock(self, cube: int, unit: int, call: HostCall) -> SanitizerError:
        """The error of a wait the driver found can never complete."""
        kind = SanitizerKind.BARRIER_DEADLOCK
        if call.kind == "wgmma_wait":
            text = "wgmma is cooperative: every unit of the warpgroup must execute it (its warpgroup never gathered)"
            return self.report(cube, unit, call, SanitizerKind.WGMMA_MISUSE, text)
        if call.kind == "named_wait":
            rows = self.named_rows(cube, call)
            barrier_id = int(np.argmax(rows[:, 1] > 0))  # the first barrier units wait at
            arrived, expected, _ = rows[barrier_id].tolist()
            return self.report(
                cube, unit, call, kind, warp_specialize.never_completes_text(barrier_id, expected, arrived)
            )
        index = self.waiting_at.get((cube, unit), 0)
        state = self.barrier_state(cube, call, index)
        name = mbarrier.element_name(call.barrier, index, call.indexed)
        wrong = mbarrier.stuck_parity_wait(state, name, 0) if call.kind == "wait_parity" else None
        if wrong is not None:
            return self.report(cube, unit, call, SanitizerKind.WRONG_PARITY, f"{wrong}; {state.describe(0)}")
        text = (
            f"wait on {name} can never complete: every live unit of the cube waits (at an mbarrier or "
            f"sync_cube) and no copy is in flight; {state.describe(0)}"
        )
        return self.report(cube, unit, call, kind, text)


@contextmanager
def launch(
    params: int, kernel: HostKernel, tensor_maps: list[TensorMapArg], counts: tuple[int, int, int] = (1, 1, 1)
) -> Iterator[LaunchRecord]:
    """Make the launch whose parameter block is at ``params`` known to ``cubepy_host_op`` while it runs; then
    write its ``debug_print`` lines (those made before a failure too, as the interp does)."""
    record = LaunchRecord(kernel, tensor_maps, counts)
    with _launches_lock:
        _launches[params] = record
    try:
        yield record
    finally:
        with _launches_lock:
            del _launches[params]
        record.write_prints()


def _operands(address: int, count: int) -> list[int]:
    return list((ctypes.c_int64 * count).from_address(address)) if count else []


def _tensor_map(record: LaunchRecord, address: int) -> Any:
    raw = ctypes.string_at(address, len(TENSOR_MAP_MAGIC) + 4)
    if raw[: len(TENSOR_MAP_MAGIC)] != TENSOR_MAP_MAGIC:
        raise TensorMapError("the tensor-map parameter does not hold a cpu runtime handle")
    (slot,) = struct.unpack_from("<I", raw, len(TENSOR_MAP_MAGIC))
    return record.tensor_maps[slot]


def _copy(record: LaunchRecord, cube: int, call: HostCall, operands: int) -> int:
    """A TMA load (returns 0; the barrier is credited) or store."""
    spatial = call.rank - 2 if call.kind == "load_im2col" else 0
    count = 3 + call.rank + spatial
    values = _operands(operands, count + call.indexed)
    tm = _tensor_map(record, values[0])
    offset, length = values[1], values[2]
    coords, offsets = values[3 : 3 + call.rank], values[3 + call.rank : count]
    state = None
    name = call.barrier
    if call.kind != "store":
        index = values[count] if call.indexed else 0
        state = record.barrier_state(cube, call, index)
        name = mbarrier.element_name(call.barrier, index, call.indexed)
        mbarrier.require_initialized(state, name, _ONE_CUBE)
    nbytes = tma.box_bytes(tm, call.name, call.mode, call.rank)
    address = tma.slice_address(
        call.name, call.smem, call.smem_capacity, call.item, call.smem_offset, offset, length, nbytes
    )
    smem = record.shared(cube)
    if call.kind == "store":
        tma.tiled_store(tm, coords, smem, address)
        return 0
    if call.kind == "load":
        delivered = tma.tiled_load(tm, coords, smem, address)
    else:
        delivered = tma.im2col_load(tm, coords, offsets, smem, address)
    assert state is not None
    mbarrier.complete_tx(state, name, _ONE_CUBE, np.array([delivered], dtype=np.int64))
    return 0


def _barrier(record: LaunchRecord, cube: int, unit: int, call: HostCall, operands: int) -> int:
    """An mbarrier operation on the cube's row: a token, 1/0 for a wait, else 0."""
    kind = call.kind
    count = {"arrive": 0, "arrive_expect_tx": 2}.get(kind, 1)
    raw = _operands(operands, count + call.indexed)
    if kind == "init":  # every element of an array
        rows = np.arange(call.barrier_count, dtype=np.int64)
        counts = np.full(call.barrier_count, raw[0], dtype=np.int64)
        mbarrier.initialize(record.all_barrier_states(cube, call), call.barrier, rows, counts)
        return 0
    index = raw[count] if call.indexed else 0
    state = record.barrier_state(cube, call, index)
    name = mbarrier.element_name(call.barrier, index, call.indexed)
    values = np.array(raw[:count], dtype=np.int64)
    one = np.ones(1, dtype=np.int64)
    if kind == "arrive":
        return int(mbarrier.arrive(state, name, _ONE_CUBE, one, np.zeros(1, dtype=np.int64))[0])
    if kind == "arrive_expect_tx":
        return int(mbarrier.arrive(state, name, _ONE_CUBE, values[:1], values[1:])[0])
    if kind == "expect_tx":
        mbarrier.expect_tx(state, name, _ONE_CUBE, values)
        return 0
    if call.indexed:
        record.waiting_at[(cube, unit)] = index  # for the deadlock report, should the wait never pass
    if kind == "wait":
        return int(mbarrier.token_done(state, name, _ONE_CUBE, values)[0])
    if kind == "wait_parity":
        return int(mbarrier.parity_done(state, name, _ONE_CUBE, values)[0])
    raise AssertionError(f"unknown host call kind {kind!r}")


def _named(record: LaunchRecord, cube: int, call: HostCall, operands: int) -> int:
    """A named barrier: an arrival (returns the generation it joins) or a wait's test (1 when that one ended).

    Each unit counts one arrival (the interp counts 32 per plane: the same when whole planes arrive)."""
    barrier_id, value = _operands(operands, 2)
    rows = record.named_rows(cube, call)
    if call.kind == "named_wait":
        return int(rows[barrier_id, 2] > value)
    problem = ops.named_barrier_problem(barrier_id, value, record.kernel.padded_units)
    arrived, expected, generation = rows[barrier_id].tolist() if problem is None else (0, 0, 0)
    problem = problem or warp_specialize.arrival_problem(barrier_id, value, expected, arrived + 1)
    if problem is not None:
        raise mbarrier.BarrierFault(SanitizerKind.NAMED_BARRIER_MISUSE, problem, 0)
    rows[barrier_id] = (0, 0, generation + 1) if arrived + 1 == value else (arrived + 1, value, generation)
    return generation


def _print(record: LaunchRecord, cube: int, unit: int, call: HostCall, operands: int) -> int:
    """One unit's ``debug_print`` line, kept until the launch ends (``LaunchRecord.write_prints``)."""
    op = plane_ops.operation_of(record, call)
    values, bits = [], []
    for var, raw in zip(op.args, _operands(operands, len(op.args))):
        promoted = printf.promoted(var.elem)
        if promoted.is_float:
            values.append(np.float64(struct.unpack("<d", struct.pack("<q", raw))[0]))
            bits.append(64)
        else:
            values.append(np.int64(raw))
            bits.append(promoted.bits)
    text = format_line(op.format, values, bits)
    x, y, z = record.cube_index(cube)
    nx, ny, _ = record.counts
    key = (x + y * nx + z * nx * ny, unit)
    seq = record.printed.get(key, 0)
    record.printed[key] = seq + 1
    line = f"[cube {(x, y, z)} unit {record.unit_position(unit)}] {text if text.endswith(chr(10)) else text + chr(10)}"
    record.prints.append((seq, key[0], unit, line))
    return 0


def _host_op(params: int, cube: int, unit: int, site: int, operands: int) -> int:
    record = _launches.get(params)
    if record is None or record.error is not None:
        return 1  # after an error every call does nothing; a wait is done so the cube can end
    call = record.kernel.host_calls[site]
    try:
        if call.kind in ("oob_read", "oob_write"):
            index, length = _operands(operands, 2)
            text = out_of_bounds_text(call.kind[4:], call.memory, index, length, checked=True)
            record.fail(cube, record.report(cube, unit, call, SanitizerKind.OUT_OF_BOUNDS, text))
            return 0
        if call.kind in ("load", "load_im2col", "store"):
            return _copy(record, cube, call, operands)
        if call.kind == "print":
            return _print(record, cube, unit, call, operands)
        if call.kind in ("named_arrive", "named_wait"):
            return _named(record, cube, call, operands)
        if call.kind in plane_ops.OPERAND_COUNTS:
            values = _operands(operands, plane_ops.OPERAND_COUNTS[call.kind])
            return plane_ops.host_plane_op(record, cube, unit, call, values)
        return _barrier(record, cube, unit, call, operands)
    except mbarrier.BarrierFault as fault:
        error: BaseException = record.report(cube, unit, call, fault.kind, fault.message)
    except TensorMapError as exc:
        error = record.report(cube, unit, call, SanitizerKind.TMA_MISUSE, str(exc), TmaMisuseError)
        error.__cause__ = exc
    except BaseException as exc:  # noqa: BLE001 - must not unwind through the compiled code's frames
        error = exc
    record.fail(cube, error)
    return 1


_callback = HostOp(_host_op)  # kept alive for as long as compiled code may call it
_registered = False


def register() -> None:
    """Make ``cubepy_host_op`` resolvable for the host object code (once per process)."""
    global _registered
    if not _registered:
        from cubepy.compiler.llvm_process import binding

        binding().add_symbol(HOST_OP_SYMBOL, ctypes.cast(_callback, ctypes.c_void_p).value)
        _registered = True
