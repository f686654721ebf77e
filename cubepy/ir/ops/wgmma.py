"""Hopper's warpgroup MMA (``wgmma``): shared-memory matrix descriptors and asynchronous multiply-adds.

A warpgroup is four consecutive planes (128 units, the first unit's index a multiple of 128).
``WgmmaMmaAsync`` computes ``D = A @ B (+ D)`` for a 64 x N x K tile, with K = 32 bytes of input
(16 f16/bf16, 8 tf32, 32 e4m3/e5m2): ``d`` is each unit's LOCAL_ARRAY of N/2 f32 (its part of the
64 x N accumulator), ``a`` a matrix descriptor (a ``u64``) or each unit's LOCAL_ARRAY of A registers
(8 f16/bf16, 4 tf32 as f32, or 16 fp8), ``b`` a matrix descriptor.  The descriptor's layout is in
``docs/guide/wgmma.md``; its swizzle mode is a descriptor field, the operation has none of its own.
``trans_a`` / ``trans_b`` (the PTX ``imm-trans-a`` / ``imm-trans-b``, 16-bit inputs only) say a
descriptor's tile is MN-major (M or N contiguous) instead of K-major.
The results land in ``d`` asynchronously: after the ``WgmmaWaitGroup`` that covers the operation's
commit group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from cubepy.ir.ops.base import Operation
from cubepy.ir.ops.record import Checker, OpRecord, declare
from cubepy.ir.types import BF16, BOOL, E4M3, E5M2, F16, F32, U32, U64, ElemType, Type
from cubepy.ir.variable import Variable, VarKind

if TYPE_CHECKING:
    from cubepy.ir.scope import Instruction

__all__ = [
    "WGMMA_INPUTS",
    "WGMMA_RULES",
    "WGMMA_SWIZZLES",
    "WgmmaCommitGroup",
    "WgmmaDescriptor",
    "WgmmaFence",
    "WgmmaMmaAsync",
    "WgmmaWaitGroup",
    "TRANSPOSABLE",
    "a_position",
    "a_register_count",
    "accumulator_length",
    "accumulator_position",
    "wgmma_k",
]

WARPGROUP = 128
M = 64
# Input element type -> K of one instruction (32 bytes of K).  tf32 inputs are f32 values in memory.
WGMMA_INPUTS: dict[ElemType, int] = {F16: 16, BF16: 16, F32: 8, E4M3: 32, E5M2: 32}
# Swizzle mode name -> the descriptor's layout-type field (bits 62-63).
WGMMA_SWIZZLES: dict[str, int] = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
N_VALUES = range(8, 257, 8)
# Input types whose shared-memory tiles may be MN-major (the ISA's transpose immediates).
TRANSPOSABLE = (F16, BF16)
# Rules this family adds to the verifier.
WGMMA_RULES = ("wgmma-shape", "wgmma-type", "wgmma-operand", "bad-immediate")


def wgmma_k(elem: ElemType) -> int:
    """K of one ``wgmma`` with inputs of ``elem`` (32 bytes of K)."""
    return WGMMA_INPUTS[elem]


def accumulator_length(n: int) -> int:
    """f32 elements each of the 128 units holds of a 64 x ``n`` accumulator."""
    return M * n // WARPGROUP


def a_register_count(elem: ElemType) -> int:
    """Elements of A each unit holds when A comes from registers (64 x K over 128 units)."""
    return M * wgmma_k(elem) // WARPGROUP


def accumulator_position(unit: Any, i: Any) -> tuple[Any, Any]:
    """(row, col) in the 64 x N accumulator of element ``i`` of unit ``unit``'s accumulator registers.

    The PTX ISA's wgmma D fragment (as CUTLASS's ``CLayout_64xN``): warp w of the warpgroup holds rows
    16w..16w+15; lane l = 4g + t holds, for each 8-column block j = i // 4, elements (16w + g, 8j + 2t) and
    (.., 8j + 2t + 1) in i % 4 = 0, 1 and the same columns of row 16w + g + 8 in i % 4 = 2, 3.  Works on
    Python ints, numpy arrays and kernel values alike.
    """
    warp, lane = (unit % WARPGROUP) // 32, unit % 32
    return 16 * warp + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2


def a_position(size: int, unit: Any, i: Any) -> tuple[Any, Any]:
    """(row, k) in the 64 x K tile of A of element ``i`` of unit ``unit``'s A registers, inputs of ``size`` bytes.

    16-bit inputs (8 per unit): as the accumulator's first 8 (K = 16 instead of N).  tf32 (4 per unit):
    rows 16w + g (i even) and + 8 (i odd), k = t + 4 * (i // 2).  8-bit (16 per unit): 4 consecutive k per
    register, k = 4t + i % 4 + 16 * (i // 8), rows 16w + g and + 8 alternating every 4 elements.
    """
    warp, lane = (unit % WARPGROUP) // 32, unit % 32
    group, thread = lane // 4, lane % 4
    if size == 2:
        return 16 * warp + group + 8 * ((i // 2) % 2), 2 * thread + i % 2 + 8 * (i // 4)
    if size == 4:
        return 16 * warp + group + 8 * (i % 2), thread + 4 * (i // 2)
    return 16 * warp + group + 8 * ((i // 4) % 2), 4 * thread + i % 4 + 16 * (i // 8)


@attrs.frozen(repr=False)
class WgmmaDescriptor(Operation):
    """out (u64) = the matrix descriptor of ``smem[offset..]`` with the given byte offsets and swizzle mode."""

    smem: Variable
    offset: Variable
    leading_byte_offset: Variable
    stride_byte_offset: Variable
    swizzle: str = "none"


@attrs.frozen(repr=False)
class WgmmaFence(Operation):
    """Order this unit's earlier register writes before the following ``wgmma`` reads them."""


@attrs.frozen(repr=False)
class WgmmaCommitGroup(Operation):
    """Close the open group of this warpgroup's ``wgmma`` operations."""


@attrs.frozen(repr=False)
class WgmmaWaitGroup(Operation):
    """Wait until at most ``pending`` committed ``wgmma`` groups are outstanding; their results are then visible."""

    pending: int = 0


@attrs.frozen(repr=False)
class WgmmaMmaAsync(Operation):
    """``d = a @ b + (d if scale_d else 0)`` for the warpgroup, 64 x ``n`` x K, results visible after the wait.

    ``trans_a`` / ``trans_b``: A's (B's) descriptor describes an MN-major tile (16-bit inputs only).
    """

    d: Variable
    a: Variable
    b: Variable
    scale_d: Variable
    n: int = 8
    elem: ElemType = F16
    trans_a: bool = False
    trans_b: bool = False


def _check_descriptor(c: Checker, inst: Instruction, op: WgmmaDescriptor) -> None:
    out = c.need_out(inst)
    if out.type != Type(U64):
        c.fail("wgmma-type", inst, f"a matrix descriptor is a u64, got {out.type!r}")
    if op.smem.kind is not VarKind.SHARED:
        c.fail("wgmma-operand", inst, f"a matrix descriptor describes shared memory, got {op.smem!r}")
    c.int_scalar(inst, "offset", op.offset)
    for what, var in (("leading byte offset", op.leading_byte_offset), ("stride byte offset", op.stride_byte_offset)):
        if var.type != Type(U32):
            c.fail("wgmma-type", inst, f"the {what} {var!r} must be u32")
    if op.swizzle not in WGMMA_SWIZZLES:
        c.fail("wgmma-operand", inst, f"swizzle {op.swizzle!r}; expected one of {tuple(WGMMA_SWIZZLES)}")


def _check_wait(c: Checker, inst: Instruction, op: WgmmaWaitGroup) -> None:
    if not 0 <= op.pending <= 7:
        c.fail("bad-immediate", inst, f"wgmma_wait_group takes 0..7 pending groups, got {op.pending}")


def _check_mma(c: Checker, inst: Instruction, op: WgmmaMmaAsync) -> None:
    if op.elem not in WGMMA_INPUTS:
        c.fail("wgmma-type", inst, f"wgmma inputs of {op.elem!r}; expected one of {tuple(WGMMA_INPUTS)}")
    if op.n not in N_VALUES:
        c.fail("wgmma-shape", inst, f"wgmma N = {op.n}; expected a multiple of 8 from 8 to 256")
    d = op.d
    if d.kind is not VarKind.LOCAL_ARRAY or d.type != Type(F32) or d.length != accumulator_length(op.n):
        c.fail(
            "wgmma-operand",
            inst,
            f"the accumulator {d!r} must be a local array of {accumulator_length(op.n)} f32 for N = {op.n}",
        )
    if op.a.kind is VarKind.LOCAL_ARRAY:
        if op.a.type != Type(op.elem) or op.a.length != a_register_count(op.elem):
            c.fail(
                "wgmma-operand",
                inst,
                f"A in registers must be a local array of {a_register_count(op.elem)} {op.elem!r}, got {op.a!r}",
            )
    elif op.a.type != Type(U64):
        c.fail("wgmma-operand", inst, f"A must be a u64 matrix descriptor or a local array, got {op.a!r}")
    if op.b.type != Type(U64) or op.b.kind is VarKind.LOCAL_ARRAY:
        c.fail("wgmma-operand", inst, f"B must be a u64 matrix descriptor, got {op.b!r}")
    if op.scale_d.type != Type(BOOL):
        c.fail("wgmma-type", inst, f"scale_d {op.scale_d!r} must be a bool")
    if (op.trans_a or op.trans_b) and op.elem not in TRANSPOSABLE:
        c.fail("wgmma-operand", inst, f"MN-major (transposed) tiles need f16 or bf16 inputs, got {op.elem!r}")
    if op.trans_a and op.a.kind is VarKind.LOCAL_ARRAY:
        c.fail("wgmma-operand", inst, "A from registers has no major order; trans_a needs A's descriptor")


for _cls, _record in (
    (WgmmaDescriptor, OpRecord("wgmma_descriptor", "wgmma", result=lambda op: Type(U64), checks=(_check_descriptor,))),
    (WgmmaFence, OpRecord("wgmma_fence", "wgmma")),
    (WgmmaCommitGroup, OpRecord("wgmma_commit_group", "wgmma")),
    (WgmmaWaitGroup, OpRecord("wgmma_wait_group", "wgmma", checks=(_check_wait,))),
    (WgmmaMmaAsync, OpRecord("wgmma_mma_async", "wgmma", writes=("d",), checks=(_check_mma,))),
):
    declare(_record)(_cls)
