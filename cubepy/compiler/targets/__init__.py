"""The target layer: what the one LLVM lowering emits differently for the GPU (NVPTX) and the host CPU.

``cubepy.compiler.lower`` and its op-family modules lower every IR operation the same way for every
target; where an operation needs something only a target can provide (which unit and cube am I, a
barrier, a plane shuffle, the math library, where shared memory lives, how a unit ends) they call the
``TargetLayer`` of the ``KernelLowering``.  ``nvptx.NvptxTarget`` emits PTX special registers, ``bar.sync``,
``shfl.sync`` and libdevice calls; ``host.HostTarget`` emits the same operations for the cpu runtime
(units as LLVM coroutines that suspend at barriers and plane collectives, the C math library).

The protocol is the one way a target changes the lowering: its methods (what only a target provides), its
flags (what code shape suits it), and its ``op_table`` (the operations it lowers in its own way, such as the
host's emulated TMA copies and mbarriers; every other entry is the shared lowering's).  Lowering code never
tests which target it runs for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    import llvmlite.ir as ir

    from cubepy.compiler.lower import KernelLowering
    from cubepy.ir import ElemType, Instruction, Scope, Variable
    from cubepy.ir.ops.record import OpTable


class PerUnitStorage(Protocol):
    """Where a target that lowers the units of a cube in loops keeps the variables each unit owns."""

    def holds(self, var: Variable) -> bool:
        """Whether ``var`` (a local or a local array) is kept per unit."""

    def pointer(self, var: Variable) -> ir.Value:
        """The address of ``var`` for the unit being lowered."""

    def recomputes(self, var: Variable) -> bool:
        """Whether ``var`` is computed again where it is read instead of being kept per unit."""

    def recompute(self, var: Variable) -> ir.Value:
        """``var`` computed again at the builder's position, for the unit being lowered."""


class TargetLayer(Protocol):
    """What differs between targets; every method emits at ``lw.builder``'s position."""

    name: str
    # The compute capability the code is for (90 for sm_90a); 0 for the host.
    sm: int
    triple: str
    data_layout: str
    # Whether a checked access that misses calls ``report_out_of_bounds`` (the cpu runtime's
    # ``sanitize=True``); the GPU target never does, so its code is the same either way.
    reports_out_of_bounds: bool
    # Whether a checked global read is a predicated load that leaves 0 where it misses (or reads a zero-filled
    # constant there) instead of branching around the load (``lower_memory.zero_fill_read``): straight-line
    # code the GPU's scheduler can overlap.
    branch_free_global_reads: bool

    @property
    def op_table(self) -> OpTable:
        """The lowering of each operation for this target: the shared LLVM table, or one replacing some entries."""

    def report_out_of_bounds(
        self, lw: KernelLowering, inst: Instruction, memory: Variable, index: ir.Value, length: ir.Value, access: str
    ) -> None:
        """Emit the report of a checked ``access`` ("read"/"write") of ``memory`` that missed (i64 operands)."""

    def declare_entry(self, lw: KernelLowering) -> ir.Function:
        """Create the entry function; bind ``lw.params`` for every kernel parameter (``lw.metadata`` may wait for the prologue)."""

    def prologue(self, lw: KernelLowering) -> None:
        """Emit what must precede the kernel body in the entry block (after the entry exists)."""

    def lower_body(self, lw: KernelLowering, body: Scope) -> None:
        """Lower the kernel's body (``lw.lower_scope``, or the target's own arrangement of it)."""

    def declare_memories(self, lw: KernelLowering) -> None:
        """Place every shared memory, barrier and local array of the kernel into ``lw.memories``."""

    def special_register(self, lw: KernelLowering, name: str) -> ir.Value:
        """A PTX-style special register as i32: ``tid.x``, ``ctaid.y``, ``nctaid.z``, ``laneid``."""

    def sync_cube(self, lw: KernelLowering) -> None:
        """Wait until every unit of the cube arrives; shared memory written before is visible after."""

    def shared_address(self, lw: KernelLowering, pointer: ir.Value) -> ir.Value:
        """The i64 shared-memory address of ``pointer`` (into the cube's shared memory), as descriptors hold it."""

    def sync_plane(self, lw: KernelLowering, mask: ir.Value | None = None) -> None:
        """Reconverge the plane (or the lanes of the i32 ``mask``); shared memory written before is visible after."""

    def fence_proxy_shared(self, lw: KernelLowering) -> None:
        """Make generic shared-memory writes visible to the TMA unit."""

    def set_max_registers(self, lw: KernelLowering, count: int, increase: bool) -> None:
        """``setmaxnreg.inc``/``.dec`` to ``count`` registers per unit (a no-op where registers are not split)."""

    def active_mask(self, lw: KernelLowering) -> ir.Value:
        """The i32 mask of the plane's units executing this point together."""

    def shuffle_word(self, lw: KernelLowering, mode: str, word: ir.Value, arg: ir.Value, mask: ir.Value) -> ir.Value:
        """``shfl.sync.<mode>`` (``idx``, ``up``, ``down``, ``bfly``) of one i32 word among ``mask``'s units."""

    def vote(self, lw: KernelLowering, kind: str, predicate: ir.Value, mask: ir.Value) -> ir.Value:
        """``vote.sync.<kind>`` (``all``, ``any`` -> i1; ``ballot`` -> i32) over ``mask``'s units."""

    def elect(self, lw: KernelLowering, mask: ir.Value) -> ir.Value:
        """True (i1) on exactly one unit of ``mask``."""

    def match(self, lw: KernelLowering, kind: str, bits: ir.Value, mask: ir.Value) -> ir.Value:
        """``match.any``/``match.all`` of the integer ``bits`` over ``mask``'s units: an i32 lane mask."""

    def sync_cube_reduce(self, lw: KernelLowering, kind: str, predicate: ir.Value) -> ir.Value:
        """A cube barrier that reduces the i32 0/1 ``predicate``: ``popc`` (a count), ``and``, ``or`` (0 or not)."""

    def math_call(self, lw: KernelLowering, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
        """Call the math library's ``name`` (libdevice's spelling, ``__nv_expf``)."""

    def emit_return(self, lw: KernelLowering) -> None:
        """End this unit's execution (terminates the current block)."""

    def finish(self, lw: KernelLowering) -> None:
        """Complete the function once the body is lowered."""

    def poll_cancel(self, lw: KernelLowering) -> None:
        """At a ``loop`` back-edge: leave the unit if the runtime asked the launch to stop (or emit nothing)."""

    def convert_fp8(
        self,
        lw: KernelLowering,
        value: ir.Value,
        src: ElemType,
        dst: ElemType,
        other: Callable[[ir.Value, ElemType, ElemType], ir.Value],
    ) -> ir.Value:
        """Convert one scalar where ``src`` or ``dst`` is fp8; ``other`` converts between non-fp8 types."""
