"""The cpu runtime's plane collectives ``mma_sync``, ``ldmatrix``, ``stmatrix``, run by the interp's per-unit emulation.

The host lowering (``cubepy.compiler.targets.host_mma``) makes each unit publish its operands (fragment
addresses in its coroutine frame, a row offset) and then suspend until the plane resumes together.  The
32 publishes of one plane form a *batch*; the last one runs the emulation on the whole plane
(``cubepy.runtime.interp.mma``) and writes every unit's fragment, or the cube's shared block, while the
other 31 units are suspended.  After the plane resumes, each unit's ``plane_done`` call checks that its
batch was run: one that was not means only part of the plane made the call (``partial plane``).

``HostCall`` fields these calls use: ``mode`` is the ``mma`` shape (``"trans"`` or ``""`` for the matrix
moves), ``rank`` the number of 8x8 matrices, ``smem``/``smem_offset``/``smem_capacity``/``item`` the
shared memory.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import numpy as np

from cubepy.errors import SanitizerError, SanitizerKind
from cubepy.ir import ops, walk
from cubepy.runtime.interp.mma import ROWS, lane_elements, mma_result
from cubepy.runtime.interp.values import numpy_dtype

if TYPE_CHECKING:
    from cubepy.compiler.targets.host_async import HostCall
    from cubepy.ir import Variable
    from cubepy.runtime.cpu.emulation import LaunchRecord

PLANE = 32
OPERAND_COUNTS = {"mma": 4, "ldmatrix": 2, "stmatrix": 2, "plane_done": 0}


class PlaneBatches:
    """A launch's pending and finished batches, per (cube context, plane)."""

    def __init__(self) -> None:
        self.pending: dict[tuple[int, int], dict[int, list[int]]] = {}
        self.unit_batch: dict[tuple[int, int], int] = {}  # (cube, unit) -> the batch its last publish joined
        self.finished: set[int] = set()
        self.next_id = 0
        self.batch_ids: dict[tuple[int, int], int] = {}


def _fragment(address: int, var: Variable) -> np.ndarray:
    """The local array at ``address`` as a writable numpy array of its element type."""
    dtype = np.dtype(numpy_dtype(var.elem))
    length = var.length or 0
    raw = (ctypes.c_uint8 * (length * dtype.itemsize)).from_address(address)
    return np.ctypeslib.as_array(raw).view(dtype)


def _shared_items(record: LaunchRecord, cube: int, call: HostCall, dtype: np.dtype) -> np.ndarray:
    block = record.shared(cube)
    return block[call.smem_offset : call.smem_offset + call.smem_capacity * call.item].view(dtype)


def _error(record: LaunchRecord, cube: int, unit: int, call: HostCall, kind: SanitizerKind, text: str) -> None:
    record.fail(
        cube,
        SanitizerError(
            f"{call.where}{kind.value}: {text}, by {record.describe_unit(cube, unit)}\n  in instruction: {call.text}",
            kind,
        ),
    )


def _operation(record: LaunchRecord, call: HostCall):
    """The IR operation of ``call`` (its fragments' types and lengths), found by the instruction's text."""
    for inst in walk(record.kernel.definition.body):
        if str(inst) == call.text:
            return inst.operation
    raise AssertionError(f"no instruction {call.text!r} in the kernel")


def _run_mma(operation: ops.MmaSync, operands: dict[int, list[int]]) -> None:
    shape = ops.mma_shape(operation.shape)
    lanes = range(PLANE)
    a, b, c = (
        np.stack([_fragment(operands[lane][i], var) for lane in lanes])
        for i, var in enumerate((operation.a, operation.b, operation.c))
    )
    d = mma_result(shape, a, b, c)
    for lane in lanes:
        _fragment(operands[lane][3], operation.d)[:] = d[lane].astype(numpy_dtype(operation.d.elem))


def _run_matrix_move(
    record: LaunchRecord, cube: int, unit: int, call: HostCall, operation, operands: dict[int, list[int]]
) -> bool:
    count, trans = call.rank, call.mode == "trans"
    offsets = np.array([operands[lane][0] for lane in range(PLANE)], dtype=np.int64)
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
    for lane in range(PLANE):
        fragment = _fragment(operands[lane][1], fragment_var)
        if call.kind == "ldmatrix":
            fragment[:] = items[index[lane]]
        else:
            items[index[lane]] = fragment
    return True


def host_plane_op(record: LaunchRecord, cube: int, unit: int, call: HostCall, operands: list[int]) -> int:
    """One unit's publish (``mma``, ``ldmatrix``, ``stmatrix``) or its ``plane_done`` check; returns 0."""
    batches: PlaneBatches = record.plane_batches
    key = (cube, unit // PLANE)
    if call.kind == "plane_done":
        if batches.unit_batch.get((cube, unit)) not in batches.finished:
            text = f"{call.name} is cooperative: every unit of the plane must execute it"
            _error(record, cube, unit, call, SanitizerKind.PARTIAL_PLANE, text)
        return 0
    pending = batches.pending.setdefault(key, {})
    batch_id = batches.batch_ids.setdefault(key, batches.next_id)
    if batch_id == batches.next_id:
        batches.next_id += 1
    pending[unit % PLANE] = operands
    batches.unit_batch[(cube, unit)] = batch_id
    if len(pending) < PLANE:
        return 0
    operation = _operation(record, call)
    del batches.pending[key], batches.batch_ids[key]
    if call.kind == "mma":
        _run_mma(operation, pending)
    elif not _run_matrix_move(record, cube, unit, call, operation, pending):
        return 0
    batches.finished.add(batch_id)
    return 0
