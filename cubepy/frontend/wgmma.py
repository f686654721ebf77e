"""``cp.wgmma_*``: Hopper's warpgroup MMA (``wgmma.mma_async``) with shared-memory matrix descriptors.

A warpgroup is four consecutive planes (128 units whose first unit index is a multiple of 128); every
unit of it makes each call together.  ``wgmma_descriptor`` describes a tile in shared memory;
``wgmma_mma_async`` starts ``acc = a @ b (+ acc)`` for a 64 x N x K tile; ``wgmma_commit_group`` closes
the group of started operations and ``wgmma_wait_group(n)`` waits until at most ``n`` groups are still
running; the accumulator holds the results only after that wait.  ``wgmma_fence`` must come between
ordinary writes of the accumulator or of A's registers and the ``wgmma`` that reads them.
The layouts (descriptor bits, canonical K-major tiles, swizzles, per-unit fragments) are in
docs/guide/wgmma.md; ``wgmma_accumulator_position`` and ``wgmma_a_position`` give the fragment maps.
``major_a="MN"`` / ``major_b="MN"`` read 16-bit tiles stored MN-major (the ISA's transpose bits), and
``wgmma_a_from_accumulator`` re-packs an f32 accumulator into an f16/bf16 A fragment (P of attention), and
``wgmma_store_accumulator`` writes an accumulator to shared memory with ``stmatrix`` (an epilogue's TMA store).
"""

from __future__ import annotations

from typing import Any

from cubepy import ir
from cubepy.frontend import operations, source
from cubepy.frontend.builtins import UNIT_POS
from cubepy.frontend.containers import LocalArray, MemoryExpand, SliceExpand
from cubepy.frontend.elem import to_elem
from cubepy.frontend.mma import stmatrix
from cubepy.frontend.state import current_scope
from cubepy.frontend.values import ExpandElement
from cubepy.ir import Type, VarKind
from cubepy.ir import ops as irops
from cubepy.ir.ops.wgmma import WARPGROUP
from cubepy.ir.ops.wgmma import M as WGMMA_M

__all__ = [
    "wgmma_a_from_accumulator",
    "wgmma_a_position",
    "wgmma_accumulator_position",
    "wgmma_commit_group",
    "wgmma_descriptor",
    "wgmma_fence",
    "wgmma_mma_async",
    "wgmma_store_accumulator",
    "wgmma_wait_group",
]
STORE_LAYOUTS = ("row_major", "128B")
SWIZZLE_128B_COLUMNS = 64  # 16-bit items in one 128-byte swizzle row

SWIZZLES = tuple(irops.WGMMA_SWIZZLES)
MAJORS = ("K", "MN")


def wgmma_descriptor(
    smem: Any, leading_byte_offset: Any, stride_byte_offset: Any, swizzle: str = "none"
) -> ExpandElement:
    """The u64 matrix descriptor of a tile starting at ``smem`` (shared memory or a slice of it).

    For a K-major tile: ``leading_byte_offset``: bytes between the two 16-byte K chunks of a row (no
    swizzle; ignored with a swizzle); ``stride_byte_offset``: bytes between consecutive groups of 8 rows.
    MN-major tiles (``wgmma_mma_async(..., major_b="MN")``) give the offsets other roles (see
    docs/guide/wgmma.md).  ``swizzle``: ``"none"``,
    ``"32B"``, ``"64B"`` or ``"128B"``.  Offsets must be multiples of 16 (the descriptor keeps bits 4-17).
    """
    if swizzle not in SWIZZLES:
        source.fail(f"wgmma_descriptor: swizzle {swizzle!r}; expected one of {', '.join(SWIZZLES)}")
    if isinstance(smem, SliceExpand):
        memory, offset = smem.base, smem.offset
    elif isinstance(smem, MemoryExpand):
        memory, offset = smem, 0
    else:
        source.fail(f"wgmma_descriptor: expected shared memory or a slice of it, got {type(smem).__name__}")
    if memory.var.kind is not VarKind.SHARED:
        source.fail(f"wgmma_descriptor: wgmma reads shared memory, got {memory.describe()}")
    for what, value in (("leading_byte_offset", leading_byte_offset), ("stride_byte_offset", stride_byte_offset)):
        if operations.is_number(value) and (int(value) % 16 or not 0 <= int(value) < 1 << 18):
            source.fail(f"wgmma_descriptor: {what} {value} must be a multiple of 16 below 2^18")
    op = irops.WgmmaDescriptor(
        memory.var,
        operations.to_index(offset, "wgmma_descriptor offset"),
        operations.to_index(leading_byte_offset, "wgmma_descriptor leading_byte_offset"),
        operations.to_index(stride_byte_offset, "wgmma_descriptor stride_byte_offset"),
        swizzle,
    )
    result = operations.emit(op)
    assert result is not None
    return result


def _input_elem(elem: Any) -> ir.ElemType:
    if elem == "tf32":
        return ir.F32
    try:
        found = to_elem(elem)
    except TypeError:
        found = None
    if found not in irops.WGMMA_INPUTS:
        source.fail(
            f"wgmma_mma_async: inputs of {elem!r}; expected cp.f16, cp.bf16, 'tf32' (cp.f32), cp.e4m3 or cp.e5m2"
        )
    return found


def wgmma_mma_async(
    acc: Any,
    a: Any,
    b: Any,
    *,
    shape: tuple[int, int, int],
    elem: Any,
    scale_d: Any = True,
    major_a: str = "K",
    major_b: str = "K",
) -> None:
    """Start ``acc = a @ b + (acc if scale_d else 0)`` for the warpgroup, a 64 x N x K tile (``shape``).

    ``acc``: ``LocalArray[f32](N // 2)`` (each unit's part of the 64 x N result); ``a``: a descriptor of the
    64 x K tile or ``LocalArray[elem]`` of A's registers (8 f16/bf16, 4 tf32, 16 fp8); ``b``: a descriptor of
    the N x K tile (K-major, that is B transposed); ``elem``: the input type (``cp.f16``, ``cp.bf16``,
    ``"tf32"``, ``cp.e4m3``, ``cp.e5m2``); K is 16, 8 and 32 for them.  ``major_a`` / ``major_b``:
    ``"K"`` (default: K contiguous, B given as N x K) or ``"MN"`` (M / N contiguous, B given as K x N;
    f16 and bf16 only, descriptors only).  The results are in ``acc`` after the ``wgmma_wait_group`` that
    covers this operation's group; the shared tiles may be read any time until then.
    """
    input_elem = _input_elem(elem)
    for what, major in (("major_a", major_a), ("major_b", major_b)):
        if major not in MAJORS:
            source.fail(f"wgmma_mma_async: {what}={major!r}; expected 'K' or 'MN'")
        if major == "MN" and input_elem not in irops.TRANSPOSABLE:
            source.fail(
                f"wgmma_mma_async: {what}='MN' needs f16 or bf16 inputs (the ISA transposes only 16-bit tiles), "
                f"got {input_elem.name}"
            )
    dims = tuple(operations.comptime_value(v) if operations.is_comptime(v) else v for v in shape)
    k = irops.wgmma_k(input_elem)
    if len(dims) != 3 or dims[0] != 64 or dims[2] != k or dims[1] not in range(8, 257, 8):
        source.fail(
            f"wgmma_mma_async: shape {dims} with {input_elem.name} inputs; expected (64, N, {k}) with N a "
            "multiple of 8 from 8 to 256"
        )
    n = dims[1]
    if not isinstance(acc, MemoryExpand) or acc.var.kind is not VarKind.LOCAL_ARRAY or acc.var.type != Type(ir.F32):
        source.fail(f"wgmma_mma_async: the accumulator must be a LocalArray[f32], got {type(acc).__name__}")
    if acc.var.length != irops.accumulator_length(n):
        source.fail(
            f"wgmma_mma_async: a 64 x {n} accumulator is LocalArray[f32]({irops.accumulator_length(n)}) per unit, "
            f"got {acc.var.length} items"
        )
    if isinstance(a, MemoryExpand):
        count = irops.a_register_count(input_elem)
        if a.var.kind is not VarKind.LOCAL_ARRAY or a.var.type != Type(input_elem) or a.var.length != count:
            source.fail(
                f"wgmma_mma_async: A in registers is LocalArray[{input_elem.name}]({count}), got {a.describe()}"
            )
        a_var = a.var
        if major_a != "K":
            source.fail("wgmma_mma_async: A from registers has no major order; major_a='MN' needs A's descriptor")
    else:
        a_var = _descriptor(a, "a")
    b_var = _descriptor(b, "b")
    scale = operations.to_bool(scale_d).var
    current_scope().append(
        irops.WgmmaMmaAsync(acc.var, a_var, b_var, scale, n, input_elem, major_a == "MN", major_b == "MN")
    )


def _descriptor(value: Any, what: str) -> ir.Variable:
    element = operations.as_element(value, f"wgmma_mma_async {what}")
    if element.type != Type(ir.U64):
        source.fail(
            f"wgmma_mma_async: {what} must be a u64 matrix descriptor (cp.wgmma_descriptor), got {element.type!r}"
        )
    return element.var


def wgmma_fence() -> None:
    """``wgmma.fence``: order this unit's register writes (accumulator, A) before the next ``wgmma`` reads them."""
    current_scope().append(irops.WgmmaFence())


def wgmma_commit_group() -> None:
    """``wgmma.commit_group``: close the group of ``wgmma_mma_async`` operations started since the last commit."""
    current_scope().append(irops.WgmmaCommitGroup())


def wgmma_wait_group(pending: Any) -> None:
    """``wgmma.wait_group``: wait until at most ``pending`` (0..7, comptime) committed groups are running."""
    count = operations.comptime_value(pending) if operations.is_comptime(pending) else pending
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 7:
        source.fail(f"wgmma_wait_group: pending must be a comptime integer 0..7, got {pending!r}")
    current_scope().append(irops.WgmmaWaitGroup(count))


def wgmma_accumulator_position(unit: Any, i: Any) -> tuple[Any, Any]:
    """(row, col) in the 64 x N accumulator of element ``i`` of unit ``unit``'s accumulator array.

    Works on Python integers and, inside a kernel, on runtime ones (``i`` usually comptime).
    """
    return irops.accumulator_position(unit, i)


def wgmma_a_position(elem: Any, unit: Any, i: Any) -> tuple[Any, Any]:
    """(row, k) in the 64 x K tile of A of element ``i`` of unit ``unit``'s A registers (inputs ``elem``)."""
    return irops.a_position(_input_elem(elem).size, unit, i)


def _accumulator_to_16_bits(acc: Any, elem: Any, what: str, why: str = "") -> tuple[ir.ElemType, int]:
    """``(elem, length)`` of an f32 accumulator ``acc`` to be converted to ``elem``, refusing what cannot be."""
    input_elem = _input_elem(elem)
    if input_elem not in irops.TRANSPOSABLE:
        source.fail(f"{what}: elem must be cp.f16 or cp.bf16{why}, got {input_elem.name}")
    if not isinstance(acc, MemoryExpand) or acc.var.kind is not VarKind.LOCAL_ARRAY or acc.var.type != Type(ir.F32):
        source.fail(f"{what}: acc must be a LocalArray[f32] accumulator, got {type(acc).__name__}")
    return input_elem, acc.var.length or 0


def wgmma_a_from_accumulator(acc: Any, step: Any, elem: Any) -> MemoryExpand:
    """A new ``LocalArray[elem](8)``: columns ``16 step .. 16 step + 15`` of the 64 x N f32 accumulator ``acc``
    as an A fragment of f16/bf16 (``elem``), for a ``wgmma`` whose A is that slice (P @ V in attention).

    The accumulator's elements ``8 step .. 8 step + 7`` sit in the A fragment's places (same rows, k = column
    - 16 step), so each unit converts its own registers; no data moves between units.
    """
    input_elem, length = _accumulator_to_16_bits(acc, elem, "wgmma_a_from_accumulator")
    index = operations.comptime_value(step) if operations.is_comptime(step) else step
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= 8 * index < length:
        source.fail(
            f"wgmma_a_from_accumulator: step must be a comptime integer 0..{length // 8 - 1} (16 columns each of a "
            f"{length * 2}-column accumulator), got {step!r}"
        )
    fragment: MemoryExpand = LocalArray[input_elem](8)  # type: ignore[misc]
    for i in range(8):
        fragment[i] = operations.cast(acc[8 * index + i], input_elem)
    return fragment


def wgmma_store_accumulator(
    acc: Any, tile: Any, elem: Any, row_items: int = 0, layout: str = "row_major", box_items: int = 0
) -> None:
    """Write the warpgroup's 64 x N f32 accumulator ``acc`` into shared memory ``tile`` as ``elem`` (f16/bf16),
    16 columns per ``stmatrix.x4``: the layout a TMA store of the tile reads.

    ``layout="row_major"``: item (row, col) at ``row * row_items + col``.  ``layout="128B"``: TMA's 128-byte
    swizzle in boxes of 64 columns: box ``col // 64`` starts ``box_items`` items after the previous one and
    holds rows of 64 items whose 16-byte chunk ``c`` lies at chunk ``c ^ (row % 8)`` (``tile`` must start on
    a 1024-byte boundary, as TMA's swizzle needs).  Every unit of the warpgroup calls it together; with
    ``stmatrix``, unit ``8j + r`` of a plane addresses row ``r`` of its plane's ``j``-th 8 x 8 matrix.
    """
    what = "wgmma_store_accumulator"
    input_elem, length = _accumulator_to_16_bits(acc, elem, what, " (stmatrix moves 16-bit items)")
    columns = 2 * length
    if columns % 16:
        source.fail(f"{what}: a {columns}-column accumulator; stmatrix stores 16 columns at a time")
    if layout not in STORE_LAYOUTS:
        source.fail(f"{what}: layout {layout!r}; expected one of {', '.join(STORE_LAYOUTS)}")
    if layout == "row_major" and (row_items < columns or row_items % 8):
        source.fail(
            f"{what}: row_items must be a multiple of 8 of at least the {columns} columns "
            f"(stmatrix rows are 16-byte aligned), got {row_items}"
        )
    if (
        layout == "128B"
        and columns > SWIZZLE_128B_COLUMNS
        and (box_items < WGMMA_M * SWIZZLE_128B_COLUMNS or box_items % 512)
    ):
        source.fail(
            f"{what}: box_items must be a multiple of 512 (1024 bytes) holding {WGMMA_M} rows of "
            f"{SWIZZLE_128B_COLUMNS} items, got {box_items}"
        )
    unit = UNIT_POS % WARPGROUP
    lane = unit % 32
    # lane 8j + r gives row r of matrix j; matrices 0..3 are (rows 0-7, cols 0-7), (rows 8-15, cols 0-7),
    # (rows 0-7, cols 8-15), (rows 8-15, cols 8-15) of this plane's 16 rows: the order of the fragment below.
    row = (unit // 32) * 16 + lane % 8 + (lane // 8) % 2 * 8
    column_half = (lane // 16) * 8
    for step in range(columns // 16):
        fragment = wgmma_a_from_accumulator(acc, step, input_elem)
        if layout == "row_major":
            at = row * row_items + (16 * step + column_half)
        else:
            box, within = divmod(16 * step, SWIZZLE_128B_COLUMNS)
            chunk = (within + column_half) // 8
            at = box * box_items + row * SWIZZLE_128B_COLUMNS + (chunk ^ row % 8) * 8
        stmatrix(tile, at, fragment, 4)
