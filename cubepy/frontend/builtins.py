"""Topology builtins, synchronization and plane (warp) operations, as CubeCL names them.

The position builtins are module-level objects; inside a kernel each use becomes the IR builtin
variable (u32).  ``ABSOLUTE_POS = ABSOLUTE_POS_Z*GX*GY + ABSOLUTE_POS_Y*GX + ABSOLUTE_POS_X`` with
``GX = CUBE_COUNT_X*CUBE_DIM_X`` (CubeCL's formulas); planes are groups of ``PLANE_DIM`` consecutive
units of a cube.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from cubepy import ir
from cubepy.frontend import operations, source
from cubepy.frontend.state import current_scope, require_state
from cubepy.frontend.values import ExpandBase, ExpandElement
from cubepy.ir import Type
from cubepy.ir import ops as irops


class BuiltinVar(ExpandBase):
    """A topology builtin such as ``ABSOLUTE_POS``: a u32 that depends on the unit running."""

    def __init__(self, name: str, doc: str) -> None:
        self.name = name
        self.__doc__ = doc

    def expand_element(self) -> ExpandElement:
        """The builtin as an IR variable of the active expansion."""
        state = require_state(self.name.upper())
        return ExpandElement(ir.builtin(self.name), state)

    def __repr__(self) -> str:
        return self.name.upper()


_DOCS = {
    "absolute_pos": "The unit's linear index in the whole grid.",
    "absolute_pos_x": "The unit's x index in the grid (CUBE_POS_X * CUBE_DIM_X + UNIT_POS_X).",
    "absolute_pos_y": "The unit's y index in the grid.",
    "absolute_pos_z": "The unit's z index in the grid.",
    "unit_pos": "The unit's linear index in its cube.",
    "unit_pos_x": "The unit's x index in its cube.",
    "unit_pos_y": "The unit's y index in its cube.",
    "unit_pos_z": "The unit's z index in its cube.",
    "cube_pos": "The cube's linear index in the grid.",
    "cube_pos_x": "The cube's x index in the grid.",
    "cube_pos_y": "The cube's y index in the grid.",
    "cube_pos_z": "The cube's z index in the grid.",
    "cube_dim": "The number of units in a cube.",
    "cube_dim_x": "The number of units of a cube along x.",
    "cube_dim_y": "The number of units of a cube along y.",
    "cube_dim_z": "The number of units of a cube along z.",
    "cube_count": "The number of cubes in the grid.",
    "cube_count_x": "The number of cubes along x.",
    "cube_count_y": "The number of cubes along y.",
    "cube_count_z": "The number of cubes along z.",
    "plane_dim": "The number of units in a plane (warp), 32.",
    "plane_pos": "The index of the unit's plane in its cube.",
    "unit_pos_plane": "The unit's lane index in its plane.",
    "cube_pos_cluster": "The cube's rank in its cluster (x fastest); 0 without clusters.",
    "cube_pos_cluster_x": "The cube's x index in its cluster.",
    "cube_pos_cluster_y": "The cube's y index in its cluster.",
    "cube_pos_cluster_z": "The cube's z index in its cluster.",
    "cube_cluster_dim": "The number of cubes in a cluster; 1 without clusters.",
    "cube_cluster_dim_x": "The number of cubes of a cluster along x.",
    "cube_cluster_dim_y": "The number of cubes of a cluster along y.",
    "cube_cluster_dim_z": "The number of cubes of a cluster along z.",
}
BUILTIN_VARS = {name.upper(): BuiltinVar(name, _DOCS[name]) for name in ir.BUILTINS}
globals().update(BUILTIN_VARS)

ABSOLUTE_POS: BuiltinVar
ABSOLUTE_POS_X: BuiltinVar
ABSOLUTE_POS_Y: BuiltinVar
ABSOLUTE_POS_Z: BuiltinVar
UNIT_POS: BuiltinVar
UNIT_POS_X: BuiltinVar
UNIT_POS_Y: BuiltinVar
UNIT_POS_Z: BuiltinVar
CUBE_POS: BuiltinVar
CUBE_POS_X: BuiltinVar
CUBE_POS_Y: BuiltinVar
CUBE_POS_Z: BuiltinVar
CUBE_DIM: BuiltinVar
CUBE_DIM_X: BuiltinVar
CUBE_DIM_Y: BuiltinVar
CUBE_DIM_Z: BuiltinVar
CUBE_COUNT: BuiltinVar
CUBE_COUNT_X: BuiltinVar
CUBE_COUNT_Y: BuiltinVar
CUBE_COUNT_Z: BuiltinVar
PLANE_DIM: BuiltinVar
PLANE_POS: BuiltinVar
UNIT_POS_PLANE: BuiltinVar
CUBE_POS_CLUSTER: BuiltinVar
CUBE_POS_CLUSTER_X: BuiltinVar
CUBE_POS_CLUSTER_Y: BuiltinVar
CUBE_POS_CLUSTER_Z: BuiltinVar
CUBE_CLUSTER_DIM: BuiltinVar
CUBE_CLUSTER_DIM_X: BuiltinVar
CUBE_CLUSTER_DIM_Y: BuiltinVar
CUBE_CLUSTER_DIM_Z: BuiltinVar


class LaneMask(ExpandBase):
    """One of CUDA's ``%lanemask_*`` values: a u32 with a bit per lane of the plane, relative to this unit's lane.

    Computed from ``UNIT_POS_PLANE`` with u32 shifts (``1 << lane``, ``(1 << lane) - 1``, ...), which the
    GPU executes in a few instructions; planes are 32 lanes.
    """

    def __init__(self, name: str, doc: str, build: Callable[[Any], Any]) -> None:
        self.name = name
        self.__doc__ = doc
        self._build = build

    def expand_element(self) -> ExpandElement:
        """The mask as a u32 value of the active expansion."""
        require_state(self.name)
        return operations.as_element(self._build(BUILTIN_VARS["UNIT_POS_PLANE"]))

    def __repr__(self) -> str:
        return self.name


LANEMASK_EQ = LaneMask("LANEMASK_EQ", "Only this unit's lane bit (CUDA's %lanemask_eq).", lambda lane: 1 << lane)
LANEMASK_LT = LaneMask(
    "LANEMASK_LT", "The bits of the lanes below this unit's (%lanemask_lt).", lambda lane: (1 << lane) - 1
)
LANEMASK_LE = LaneMask(
    "LANEMASK_LE", "The bits of this lane and the lanes below it (%lanemask_le).", lambda lane: (2 << lane) - 1
)  # lane 31: 2 << 31 wraps to 0, minus 1 is all ones
LANEMASK_GT = LaneMask(
    "LANEMASK_GT", "The bits of the lanes above this unit's (%lanemask_gt).", lambda lane: ~((2 << lane) - 1)
)
LANEMASK_GE = LaneMask(
    "LANEMASK_GE", "The bits of this lane and the lanes above it (%lanemask_ge).", lambda lane: ~((1 << lane) - 1)
)


# -- synchronization -------------------------------------------------------------------------
def sync_cube() -> None:
    """Wait until every unit of the cube gets here; shared-memory writes before it are visible after it."""
    current_scope().append(irops.SyncCube())


def sync_plane(mask: Any = None) -> None:
    """Wait until every unit of the plane gets here; with a u32 ``mask``, the lanes it names (CUDA's __syncwarp).

    Every unit that reaches a masked ``sync_plane`` must be in its mask, and all of them must pass the
    same mask (CUDA leaves anything else undefined; the interp's sanitizer reports it).
    """
    if mask is None:
        current_scope().append(irops.SyncPlane())
        return
    current_scope().append(irops.SyncPlane(operations.convert(mask, Type(ir.U32), "sync_plane mask")))


def _sync_cube_reduce(cls: Callable[[ir.Variable], irops.Operation], pred: Any) -> ExpandElement:
    return cast(ExpandElement, operations.emit(cls(operations.to_bool(pred).var)))


def sync_cube_count(pred: Any) -> ExpandElement:
    """``sync_cube`` that also gives how many units of the cube passed a true ``pred`` (u32; CUDA's __syncthreads_count)."""
    return _sync_cube_reduce(irops.SyncCubeCount, pred)


def sync_cube_and(pred: Any) -> ExpandElement:
    """``sync_cube`` that also gives whether ``pred`` holds on every unit of the cube (__syncthreads_and)."""
    return _sync_cube_reduce(irops.SyncCubeAnd, pred)


def sync_cube_or(pred: Any) -> ExpandElement:
    """``sync_cube`` that also gives whether ``pred`` holds on some unit of the cube (__syncthreads_or)."""
    return _sync_cube_reduce(irops.SyncCubeOr, pred)


def fence(scope: str = "device") -> None:
    """A memory fence: this unit's accesses before it are seen before those after it by units of ``scope``.

    ``"cube"``, ``"device"`` or ``"system"`` (CUDA's __threadfence_block, __threadfence,
    __threadfence_system). It orders; it does not wait for other units (that is ``sync_cube``).
    """
    if scope not in irops.FENCE_SCOPES:
        source.fail(f"fence scope {scope!r}: expected one of {', '.join(repr(s) for s in irops.FENCE_SCOPES)}")
    current_scope().append(irops.Fence(scope))


def sync_async_proxy_shared() -> None:
    """Make this unit's shared-memory writes visible to the async proxy (TMA stores read them).

    PTX ``fence.proxy.async.shared::cta``; ``fence_proxy_async`` is the same operation under PTX's name.
    """
    current_scope().append(irops.SyncProxyShared())


fence_proxy_async = sync_async_proxy_shared  # one operation, two names (PTX's and CubeCL's)


# -- warp specialization ---------------------------------------------------------------------
def _named_barrier_operands(barrier_id: Any, units: Any, what: str) -> tuple[ir.Variable, ir.Variable]:
    literal_id = barrier_id if operations.is_number(barrier_id) else None
    literal_units = units if operations.is_number(units) else None
    problem = irops.named_barrier_problem(literal_id, literal_units)
    if problem is not None:
        source.fail(f"{what}: {problem}")
    return operations.to_index(barrier_id, f"{what} id"), operations.to_index(units, f"{what} unit count")


def named_barrier_sync(barrier_id: Any, units: Any) -> None:
    """Wait at named barrier ``barrier_id`` (0..15) until ``units`` units have arrived (PTX ``bar.sync id, units``).

    ``units`` counts whole planes (a multiple of 32); arrivals from ``named_barrier_arrive`` count too.
    Barrier 0 is the one ``sync_cube`` uses: give producer/consumer hand-offs ids from 1 up.
    """
    current_scope().append(irops.NamedBarrierSync(*_named_barrier_operands(barrier_id, units, "named_barrier_sync")))


def sync_cluster() -> None:
    """Barrier of the cluster: every unit of every cube of the cluster arrives before any goes on, and shared
    memory written before it (in any cube of the cluster) is visible after it (PTX ``barrier.cluster.arrive``
    + ``barrier.cluster.wait``, sm_90).  Without clusters it is a barrier of the cube."""
    current_scope().append(irops.SyncCluster())


def named_barrier_arrive(barrier_id: Any, units: Any) -> None:
    """Arrive at named barrier ``barrier_id`` of ``units`` units and go on without waiting (PTX ``bar.arrive``)."""
    current_scope().append(
        irops.NamedBarrierArrive(*_named_barrier_operands(barrier_id, units, "named_barrier_arrive"))
    )


def setmaxnreg(count: Any, increase: Any) -> None:
    """Set this plane's register budget to ``count`` (PTX ``setmaxnreg.inc``/``.dec``, sm_90a).

    ``count`` is a comptime int in [24, 256], a multiple of 8; ``increase`` (comptime bool) asks for more
    registers (a consumer warpgroup), else releases them (a producer).  A no-op on the interp and cpu runtimes.
    """
    low, high = irops.SETMAXNREG_RANGE
    if isinstance(count, bool) or not isinstance(count, int):
        source.fail(f"setmaxnreg: the register count must be a comptime int, got {type(count).__name__}")
    if not low <= count <= high or count % irops.SETMAXNREG_GRANULE:
        source.fail(f"setmaxnreg: register count {count} is not a multiple of 8 in [{low}, {high}]")
    if not isinstance(increase, bool):
        source.fail(f"setmaxnreg: increase must be a comptime bool, got {type(increase).__name__}")
    current_scope().append(irops.SetMaxNReg(count, increase))


# -- plane operations ------------------------------------------------------------------------
def _plane(op: str, value: Any, out_type: Type | None = None, arg: Any = None) -> ExpandElement:
    element = operations.as_element(value, f"plane_{op} operand")
    lane = None if arg is None else operations.to_index(arg, f"plane_{op} lane")
    return operations.emit(irops.lookup(f"plane_{op}")(element.var, lane), out_type or element.type)


def plane_sum(value: Any) -> ExpandElement:
    """The sum of ``value`` over the active units of the plane."""
    return _plane("sum", value)


def plane_prod(value: Any) -> ExpandElement:
    """The product of ``value`` over the active units of the plane."""
    return _plane("prod", value)


def plane_min(value: Any) -> ExpandElement:
    """The minimum of ``value`` over the active units of the plane."""
    return _plane("min", value)


def plane_max(value: Any) -> ExpandElement:
    """The maximum of ``value`` over the active units of the plane."""
    return _plane("max", value)


def plane_inclusive_sum(value: Any) -> ExpandElement:
    """The sum of ``value`` over the plane's units up to and including this one."""
    return _plane("inclusive_sum", value)


def plane_exclusive_sum(value: Any) -> ExpandElement:
    """The sum of ``value`` over the plane's units before this one (0 for the first)."""
    return _plane("exclusive_sum", value)


def plane_inclusive_prod(value: Any) -> ExpandElement:
    """The product of ``value`` over the plane's units up to and including this one."""
    return _plane("inclusive_prod", value)


def plane_exclusive_prod(value: Any) -> ExpandElement:
    """The product of ``value`` over the plane's units before this one (1 for the first)."""
    return _plane("exclusive_prod", value)


def plane_all(value: Any) -> ExpandElement:
    """Whether ``value`` holds on every active unit of the plane."""
    return _plane("all", operations.to_bool(value))


def plane_any(value: Any) -> ExpandElement:
    """Whether ``value`` holds on some active unit of the plane."""
    return _plane("any", operations.to_bool(value))


def plane_ballot(value: Any) -> ExpandElement:
    """A 128-bit mask (a line of 4 u32) with bit ``i`` set when ``value`` holds on lane ``i``."""
    return _plane("ballot", operations.to_bool(value), Type(ir.U32, 4))


def plane_match_any(value: Any) -> ExpandElement:
    """The mask (u32) of the plane's active units whose ``value`` equals this unit's (``__match_any_sync``)."""
    return _plane("match_any", value, Type(ir.U32))


def plane_match_all(value: Any) -> ExpandElement:
    """The mask (u32) of the plane's active units when all hold the same ``value``, else 0 (``__match_all_sync``)."""
    return _plane("match_all", value, Type(ir.U32))


def plane_elect() -> ExpandElement | None:
    """True on exactly one active unit of the plane (the lowest lane): PTX ``elect.sync`` on sm_90+."""
    return operations.emit(irops.PlaneElect())


def plane_broadcast(value: Any, lane: Any) -> ExpandElement:
    """``value`` as held by unit ``lane`` of the plane."""
    return _plane("broadcast", value, arg=lane)


def plane_shuffle(value: Any, src_lane: Any) -> ExpandElement:
    """``value`` as held by unit ``src_lane`` of the plane (each unit picks its own source)."""
    return _plane("shuffle", value, arg=src_lane)


def plane_shuffle_xor(value: Any, mask: Any) -> ExpandElement:
    """``value`` as held by lane ``UNIT_POS_PLANE ^ mask``."""
    return _plane("shuffle_xor", value, arg=mask)


def plane_shuffle_up(value: Any, delta: Any) -> ExpandElement:
    """``value`` as held by lane ``UNIT_POS_PLANE - delta`` (own value when that is below 0)."""
    return _plane("shuffle_up", value, arg=delta)


def plane_shuffle_down(value: Any, delta: Any) -> ExpandElement:
    """``value`` as held by lane ``UNIT_POS_PLANE + delta`` (own value past the last lane)."""
    return _plane("shuffle_down", value, arg=delta)
