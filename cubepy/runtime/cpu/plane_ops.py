"""The cpu runtime's plane collectives (``mma_sync``, ``ldmatrix``, ``stmatrix``, cmma tiles), run by the interp's emulation.

The host lowering (``cubepy.compiler.targets.host_mma``) makes each unit publish its operands (fragment
addresses in its coroutine frame, a row offset) and then suspend until the plane resumes together.  The
32 publishes of one plane form a *batch*; the last one runs the emulation on the whole plane
(``cubepy.runtime.interp.mma``, ``cubepy.runtime.interp.cmma``) and writes every unit's fragment, the
cube's shared block or a global buffer, while the other 31 units are suspended.  After the plane resumes, each unit's ``plane_done`` call checks that its
batch was run: one that was not means only part of the plane made the call (``partial plane``).

``HostCall`` fields these calls use: ``mode`` is the ``mma`` shape (``"trans"`` or ``""`` for the matrix
moves, the layout for cmma tiles), ``rank`` the number of 8x8 matrices, ``smem``/``smem_offset``/
``smem_capacity``/``item`` the shared memory, ``memory`` a cmma tile's memory as reports name it.  A cmma
tile's offset, stride and memory are the plane's first unit's (wmma requires them uniform), as on the
interp.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np

from cubepy.errors import SanitizerKind
from cubepy.ir import VarKind, ops, walk
from cubepy.ir.ops.wgmma import WARPGROUP
from cubepy.ir.variable import PLANE_WIDTH
from cubepy.runtime.interp import cmma, wgmma
from cubepy.runtime.interp.mma import ROWS, lane_elements, mma_result
from cubepy.runtime.interp.values import numpy_dtype

if TYPE_CHECKING:
    from cubepy.compiler.targets.host_async import HostCall
    from cubepy.ir import Variable
    from cubepy.ir.types import ElemType
    from cubepy.runtime.cpu.emulation import LaunchRecord

OPERAND_COUNTS = {
    "mma": 4,
    "ldmatrix": 2,
    "stmatrix": 2,
    "cmma_load": 5,
    "cmma_store": 5,
    "cmma_execute": 4,
    "cmma_together": 0,  # fill and cast: the fragment work is per unit; the batch checks the whole plane
    "wgmma": 4,  # a warpgroup collective: its units then wait ("wgmma_wait") until the batch ran
    "wgmma_wait": 1,
    "plane_done": 0,
}


class PlaneBatches:
    """A launch's pending and finished batches, per (cube context, plane)."""

    def __init__(self) -> None:
        self.pending: dict[tuple[int, int, int], dict[int, list[int]]] = {}
        self.unit_batch: dict[tuple[int, int], int] = {}  # (cube, unit) -> the batch its last publish joined
        self.finished: set[int] = set()
        self.next_id = 0
        self.batch_ids: dict[tuple[int, int, int], int] = {}


def _items_at(address: int, count: int, dtype: np.dtype) -> np.ndarray:
    """``count`` items of ``dtype`` at ``address`` as a writable numpy array (no copy)."""
    raw = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(address)
    return np.ctypeslib.as_array(raw).view(dtype)


def _fragment(address: int, var: Variable) -> np.ndarray:
    """The local array at ``address`` as a writable numpy array of its element type."""
    return _items_at(address, var.length or 0, np.dtype(numpy_dtype(var.elem)))


def _shared_items(record: LaunchRecord, cube: int, call: HostCall, dtype: np.dtype) -> np.ndarray:
    block = record.shared(cube)
    return block[call.smem_offset : call.smem_offset + call.smem_capacity * call.item].view(dtype)


def _error(record: LaunchRecord, cube: int, unit: int, call: HostCall, kind: SanitizerKind, text: str) -> None:
    record.fail(cube, record.report(cube, unit, call, kind, text))


def operation_of(record: LaunchRecord, call: HostCall) -> Any:  # the operation class of the call's kind
    """The IR operation of ``call`` (its fragments' types and lengths), found by the instruction's text."""
    found = record.operations.get(call.text)
    if found is not None:
        return found
    for inst in walk(record.kernel.definition.body):
        if str(inst) == call.text:
            record.operations[call.text] = inst.operation
            return inst.operation
    raise AssertionError(f"no instruction {call.text!r} in the kernel")


def _plane_fragments(
    operands: dict[int, list[int]], position: int, var: Variable, units: int = PLANE_WIDTH
) -> np.ndarray:
    """The ``units`` fragments of ``var`` (published at ``position``) of a plane or warpgroup, ``(units, slots)``."""
    return np.stack([_fragment(operands[lane][position], var) for lane in range(units)])


def _run_cmma_execute(operation: ops.CmmaExecute, operands: dict[int, list[int]]) -> None:
    a, b, c = (
        cmma.plane_matrices(_plane_fragments(operands, i, var))
        for i, var in enumerate((operation.a, operation.b, operation.c))
    )
    _store_matrix(operands, 3, operation.d, cmma.matrix_product(a, b, c)[0])


def _store_matrix(operands: dict[int, list[int]], position: int, var: Variable, matrix: np.ndarray) -> None:
    """Write a plane's 16x16 ``matrix`` into its 32 fragments of ``var``, in the emulation's element order."""
    slots = matrix.reshape(PLANE_WIDTH, cmma.SLOTS).astype(numpy_dtype(var.elem))
    for lane in range(PLANE_WIDTH):
        _fragment(operands[lane][position], var)[: cmma.SLOTS] = slots[lane]


def _run_cmma_tile(
    record: LaunchRecord,
    cube: int,
    unit: int,
    call: HostCall,
    operation: ops.CmmaLoad | ops.CmmaStore,
    operands: dict[int, list[int]],
) -> bool:
    """Load or store one plane's 16x16 tile through the first unit's base, length, offset and stride."""
    base, length, offset, stride, _ = operands[0]
    index = cmma.tile_index(np.array([offset], np.int64), np.array([stride], np.int64), call.mode)[0]
    if ((index < 0) | (index >= length)).any():
        first = unit - unit % PLANE_WIDTH  # the plane's first unit speaks for it, as on the interp
        _error(
            record,
            cube,
            first,
            call,
            SanitizerKind.OUT_OF_BOUNDS,
            cmma.out_of_bounds_text(call.memory, offset, stride, length),
        )
        return False
    dtype = np.dtype(numpy_dtype(operation.memory.elem))
    items = _items_at(base, length, dtype)
    if call.kind == "cmma_load":
        _store_matrix(operands, 4, operation.fragment, items[index])
    else:
        fragments = _plane_fragments(operands, 4, operation.fragment)
        items[index] = cmma.plane_matrices(fragments)[0].astype(dtype)
    return True


def _run_mma(operation: ops.MmaSync, operands: dict[int, list[int]]) -> None:
    shape = ops.mma_shape(operation.shape)
    lanes = range(PLANE_WIDTH)
    a, b, c = (_plane_fragments(operands, i, var) for i, var in enumerate((operation.a, operation.b, operation.c)))
    d = mma_result(shape, a, b, c)
    for lane in lanes:
        _fragment(operands[lane][3], operation.d)[:] = d[lane].astype(numpy_dtype(operation.d.elem))


def _run_matrix_move(
    record: LaunchRecord,
    cube: int,
    unit: int,
    call: HostCall,
    operation: ops.Ldmatrix | ops.Stmatrix,
    operands: dict[int, list[int]],
) -> bool:
    count, trans = call.rank, call.mode == "trans"
    offsets = np.array([operands[lane][0] for lane in range(PLANE_WIDTH)], dtype=np.int64)
    used = offsets[: ROWS * count]
    start = call.smem_offset
    if ((used < 0) | (used + ROWS > call.smem_capacity)).any():
        lane = int(np.argmax((used < 0) | (used + ROWS > call.smem_capacity)))
        text = f"{call.name} row {used[lane]}..{used[lane] + ROWS - 1} of {call.smem} (length {call.smem_capacity})"
        _error(record, cube, unit, call, SanitizerKind.OUT_OF_BOUNDS, text)
        return False
    if ((start + used * call.item) % 16 != 0).any():
        lane = int(np.argmax((start + used * call.item) % 16 != 0))
        text = f"{call.name} row address {used[lane]} of {call.smem} is not 16-byte aligned"
        _error(record, cube, unit, call, SanitizerKind.OUT_OF_BOUNDS, text)
        return False
    fragment_var = operation.fragment
    dtype = np.dtype(numpy_dtype(fragment_var.elem))
    items = _shared_items(record, cube, call, dtype)
    matrix, row, col = lane_elements(count, trans)
    index = offsets[matrix * ROWS + row] + col  # (32, 2 count)
    for lane in range(PLANE_WIDTH):
        fragment = _fragment(operands[lane][1], fragment_var)
        if call.kind == "ldmatrix":
            fragment[:] = items[index[lane]]
        else:
            items[index[lane]] = fragment
    return True


_U64 = (1 << 64) - 1


def _uniform_descriptor(
    record: LaunchRecord, cube: int, unit: int, call: HostCall, operands: dict[int, list[int]], position: int, what: str
) -> int | None:
    """The warpgroup's descriptor at ``position`` (the same on every unit, else a ``wgmma misuse``)."""
    values = {operands[lane][position] & _U64 for lane in range(WARPGROUP)}
    if len(values) > 1:
        _error(record, cube, unit, call, SanitizerKind.WGMMA_MISUSE, f"the {what} differs across the warpgroup")
        return None
    return values.pop()


def _tile(
    record: LaunchRecord, cube: int, unit: int, call: HostCall, desc: int, rows: int, elem: ElemType, mn_major: bool
) -> np.ndarray | None:
    shared = record.shared(cube)
    problem = wgmma.descriptor_problem(desc, rows, shared.size, elem.size, mn_major)
    if problem is not None:
        _error(record, cube, unit - unit % WARPGROUP, call, problem[0], problem[1])
        return None
    return wgmma.tile_values(shared, desc, rows, elem, mn_major)


def _run_wgmma(
    record: LaunchRecord,
    cube: int,
    unit: int,
    call: HostCall,
    operation: ops.WgmmaMmaAsync,
    operands: dict[int, list[int]],
) -> bool:
    """Every unit's accumulator of one warpgroup's ``wgmma_mma_async``, by the interp's arithmetic."""
    op: ops.WgmmaMmaAsync = operation
    lanes = range(WARPGROUP)
    a: np.ndarray | None
    if op.a.kind is VarKind.LOCAL_ARRAY:
        a = wgmma.a_from_registers(op, _plane_fragments(operands, 0, op.a, WARPGROUP))
    else:
        desc = _uniform_descriptor(record, cube, unit, call, operands, 0, "descriptor of A")
        a = None if desc is None else _tile(record, cube, unit, call, desc, 64, op.elem, op.trans_a)
    desc_b = _uniform_descriptor(record, cube, unit, call, operands, 1, "descriptor of B")
    b = None if desc_b is None else _tile(record, cube, unit, call, desc_b, op.n, op.elem, op.trans_b)
    if a is None or b is None:
        return False
    half = op.n // 2
    d = [_fragment(operands[lane][2], op.d) for lane in lanes]
    previous = np.stack([fragment[:half] for fragment in d]) if operands[0][3] else None
    values = wgmma.warpgroup_product(op, a, b, previous)
    for lane in lanes:
        d[lane][:half] = values[lane]
    return True


def host_plane_op(record: LaunchRecord, cube: int, unit: int, call: HostCall, operands: list[int]) -> int:
    """One unit's publish (``mma``, ``ldmatrix``, ``stmatrix``, ``cmma_*``, ``wgmma``) or its ``plane_done`` /
    ``wgmma_wait`` check: the batch id a publish joined, whether a waited batch has run (1/0), else 0."""
    batches: PlaneBatches = record.plane_batches
    if call.kind == "wgmma_wait":
        return int(operands[0] in batches.finished)
    size = WARPGROUP if call.kind == "wgmma" else PLANE_WIDTH
    key = (cube, unit // size, id(call))  # one batch per call site: a diverged plane never mixes two
    if call.kind == "plane_done":
        if batches.unit_batch.get((cube, unit)) not in batches.finished:
            text = f"{call.name} is cooperative: every unit of the plane must execute it"
            _error(record, cube, unit, call, SanitizerKind.PARTIAL_PLANE, text)
        return 0
    pending = batches.pending.setdefault(key, {})
    batch_id = batches.batch_ids.setdefault(key, batches.next_id)
    if batch_id == batches.next_id:
        batches.next_id += 1
    pending[unit % size] = operands
    batches.unit_batch[(cube, unit)] = batch_id
    if len(pending) < size:
        return batch_id
    operation = operation_of(record, call)
    del batches.pending[key], batches.batch_ids[key]
    if call.kind == "mma":
        _run_mma(operation, pending)
    elif call.kind == "cmma_together":
        pass
    elif call.kind == "wgmma":
        if not _run_wgmma(record, cube, unit, call, operation, pending):
            return batch_id
    elif call.kind == "cmma_execute":
        _run_cmma_execute(operation, pending)
    elif call.kind in ("cmma_load", "cmma_store"):
        if not _run_cmma_tile(record, cube, unit, call, operation, pending):
            return 0
    elif not _run_matrix_move(record, cube, unit, call, operation, pending):
        return 0
    batches.finished.add(batch_id)
    return batch_id
