"""The plain kernel's loops over units: rows of ``tid.x`` (x innermost), row guards, and merged rows of cubes.

A plain kernel (no waits) is a unit function the driver (``host_driver``) calls for every unit.  Its cubes may
also run *merged*: consecutive cubes of one x-row as one cube (``merges_cubes_along_x``), so a row of units is
one loop as long as the run rather than one loop of ``cube_dim_x`` per cube.

A *streaming* kernel (``streaming_vector_width``: loop-free, at most one float operation per two global reads
and writes, such as a vector add) has its rows vectorized with 256-bit vectors: it waits on memory, not on
arithmetic, and on CPUs that split 512-bit operations in two (AMD's Zen 4) 512-bit rows ran it slower (a 2^20
vector add on two threads: 97-98 us with 512-bit vectors, 91 with 256-bit ones; one thread 192 against 170).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.ir import KernelDefinition, ops, walk
from cubepy.ir.variable import VarKind

if TYPE_CHECKING:
    from cubepy.compiler.targets.host_driver import _Emitter

I32 = lt.I32


def _const(value: int) -> ir.Constant:
    return ir.Constant(I32, value)


def plain_units(
    e: _Emitter,
    unit: ir.Function,
    args: tuple[ir.Value, ir.Value, list[ir.Value], list[ir.Value]],
    dims: tuple[int, int, int],
    row_guard: bool = False,
    width: ir.Value | None = None,
    vector_width: int | None = None,
) -> None:
    """Call a plain unit function for every unit of the cube: loops over z, y and x, x innermost, each call given
    its linear index and ``tid``.  An address built from ``tid.x`` is then affine in the innermost loop's
    counter, which the loop vectorizer needs (one loop over the linear index makes ``tid.x`` and ``tid.y`` a
    remainder and a quotient of it, and a 32x8 cube's loads gathers).

    ``row_guard``: per row, a probe call, then the units the guard admits with it known (``host_row_guard``).
    ``width``: the units of a row (``tid.x`` from 0 to it) when cubes along x run merged; else ``cube_dim_x``.
    ``vector_width``: the items per vector LLVM should use for a row (``streaming_vector_width``), or its choice."""
    from cubepy.compiler.targets.host_row_guard import AS_WRITTEN, PROBE_WORDS, run_guarded_row

    b = e.b
    params, cube, ctaid, buffers = args
    dim_x, dim_y, dim_z = dims
    probe = e.entry.alloca(ir.ArrayType(I32, PROBE_WORDS), name="probe") if row_guard else None

    def row(tid_y: ir.Value, tid_z: ir.Value) -> None:
        base = b.mul(b.add(b.mul(tid_z, _const(dim_y), flags=["nuw"]), tid_y, flags=["nuw"]), _const(dim_x))

        def call(tid_x: ir.Value, mode: int) -> None:
            linear = b.add(base, tid_x, flags=["nuw"])
            guard_args = [_const(mode), probe] if probe is not None else []
            b.call(unit, [params, cube, linear, *ctaid, tid_x, tid_y, tid_z, *buffers, *guard_args])

        row_width = _const(dim_x) if width is None else width
        if probe is None:
            vectorize = width is not None or dim_x > 1
            e.loop(_const(0), row_width, lambda tid_x: call(tid_x, AS_WRITTEN), vectorize=vectorize, width=vector_width)
        else:
            run_guarded_row(e, call, probe, row_width, vector_width)

    def plane(tid_z: ir.Value) -> None:
        if dim_y == 1:
            row(_const(0), tid_z)
        else:
            e.loop(_const(0), _const(dim_y), lambda tid_y: row(tid_y, tid_z))

    if dim_z == 1:
        plane(_const(0))
    else:
        e.loop(_const(0), _const(dim_z), plane)


def umin(b: ir.IRBuilder, lhs: ir.Value, rhs: ir.Value) -> ir.Value:
    """The unsigned minimum of two i32 values."""
    return b.select(b.icmp_unsigned("<", lhs, rhs), lhs, rhs)


MERGED_UNITS = 1 << 16  # the most units one merged row of cubes takes (a run of cubes is cut there)
# The builtins a kernel may read and still run consecutive cubes along x as one: none tells the cubes apart
# along x but through ``absolute_pos`` (``merges_cubes_along_x``).
_MERGE_SAFE_BUILTINS = frozenset(
    ["absolute_pos", "cube_dim", "cube_count", "plane_dim"]
    + [f"{base}_{axis}" for base in ("absolute_pos", "cube_dim", "cube_count") for axis in "xyz"]
    + [f"{base}_{axis}" for base in ("unit_pos", "cube_pos") for axis in "yz"]
)


def merges_cubes_along_x(definition: KernelDefinition) -> bool:
    """Whether consecutive cubes of an x-row of a plain kernel may run as one wider cube: the kernel declares no
    shared memory, prints nothing and reads no builtin that differs between them but ``absolute_pos`` (whose
    value each unit keeps: ``ctaid.x * cube_dim_x + tid.x`` is the same sum with the first cube's ``ctaid.x``)."""
    if definition.shared_memories or definition.barriers:
        return False
    for inst in walk(definition.body):
        operation = inst.operation
        if isinstance(operation, ops.DebugPrint):
            return False
        for var in operation.operands():
            if var.kind is VarKind.BUILTIN and var.name not in _MERGE_SAFE_BUILTINS:
                return False
    return True


STREAM_VECTOR_BYTES = 32  # a streaming kernel's vectors: 256 bits


def streaming_vector_width(definition: KernelDefinition) -> int | None:
    """Items per 256-bit vector for a kernel that mostly moves memory (no loop, no plane operation, scalar global
    reads and writes, at most one float operation per two of them), or None for any other kernel."""
    accesses = arithmetic = widest = 0
    for inst in walk(definition.body):
        operation = inst.operation
        if isinstance(operation, (ops.RangeLoop, ops.Loop, ops.PlaneOp)):
            return None
        if isinstance(operation, (ops.Index, ops.IndexAssign)) and operation.memory.kind is VarKind.GLOBAL:
            if operation.memory.type.is_line:
                return None
            accesses += 1
            widest = max(widest, operation.memory.elem.size)
        elif inst.out is not None and inst.out.elem.is_float:
            arithmetic += 1
    if not accesses or 2 * arithmetic > accesses:
        return None
    return max(1, STREAM_VECTOR_BYTES // widest)
