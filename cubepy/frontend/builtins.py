"""Topology builtins, synchronization and plane (warp) operations, as CubeCL names them.

The position builtins are module-level objects; inside a kernel each use becomes the IR builtin
variable (u32).  ``ABSOLUTE_POS = ABSOLUTE_POS_Z*GX*GY + ABSOLUTE_POS_Y*GX + ABSOLUTE_POS_X`` with
``GX = CUBE_COUNT_X*CUBE_DIM_X`` (CubeCL's formulas); planes are groups of ``PLANE_DIM`` consecutive
units of a cube.
"""

from __future__ import annotations

from cubepy import ir
from cubepy.frontend import operations
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


# -- synchronization -------------------------------------------------------------------------
def sync_cube() -> None:
    """Wait until every unit of the cube gets here; shared-memory writes before it are visible after it."""
    current_scope().append(irops.SyncCube())


def sync_plane() -> None:
    """Wait until every unit of the plane gets here."""
    current_scope().append(irops.SyncPlane())


def sync_async_proxy_shared() -> None:
    """Make this unit's shared-memory writes visible to the async proxy (TMA stores read them)."""
    current_scope().append(irops.SyncProxyShared())


# -- plane operations ------------------------------------------------------------------------
def _plane(op: str, value, out_type: Type | None = None, arg=None) -> ExpandElement:
    element = operations.as_element(value, f"plane_{op} operand")
    lane = None if arg is None else operations.to_index(arg, f"plane_{op} lane")
    return operations.emit(irops.lookup(f"plane_{op}")(element.var, lane), out_type or element.type)


def plane_sum(value):
    """The sum of ``value`` over the active units of the plane."""
    return _plane("sum", value)


def plane_prod(value):
    """The product of ``value`` over the active units of the plane."""
    return _plane("prod", value)


def plane_min(value):
    """The minimum of ``value`` over the active units of the plane."""
    return _plane("min", value)


def plane_max(value):
    """The maximum of ``value`` over the active units of the plane."""
    return _plane("max", value)


def plane_inclusive_sum(value):
    """The sum of ``value`` over the plane's units up to and including this one."""
    return _plane("inclusive_sum", value)


def plane_exclusive_sum(value):
    """The sum of ``value`` over the plane's units before this one (0 for the first)."""
    return _plane("exclusive_sum", value)


def plane_inclusive_prod(value):
    """The product of ``value`` over the plane's units up to and including this one."""
    return _plane("inclusive_prod", value)


def plane_exclusive_prod(value):
    """The product of ``value`` over the plane's units before this one (1 for the first)."""
    return _plane("exclusive_prod", value)


def plane_all(value):
    """Whether ``value`` holds on every active unit of the plane."""
    return _plane("all", operations.to_bool(value))


def plane_any(value):
    """Whether ``value`` holds on some active unit of the plane."""
    return _plane("any", operations.to_bool(value))


def plane_ballot(value):
    """A 128-bit mask (a line of 4 u32) with bit ``i`` set when ``value`` holds on lane ``i``."""
    return _plane("ballot", operations.to_bool(value), Type(ir.U32, 4))


def plane_elect():
    """True on exactly one active unit of the plane (the lowest lane)."""
    return operations.emit(irops.PlaneElect())


def plane_broadcast(value, lane):
    """``value`` as held by unit ``lane`` of the plane."""
    return _plane("broadcast", value, arg=lane)


def plane_shuffle(value, src_lane):
    """``value`` as held by unit ``src_lane`` of the plane (each unit picks its own source)."""
    return _plane("shuffle", value, arg=src_lane)


def plane_shuffle_xor(value, mask):
    """``value`` as held by lane ``UNIT_POS_PLANE ^ mask``."""
    return _plane("shuffle_xor", value, arg=mask)


def plane_shuffle_up(value, delta):
    """``value`` as held by lane ``UNIT_POS_PLANE - delta`` (own value when that is below 0)."""
    return _plane("shuffle_up", value, arg=delta)


def plane_shuffle_down(value, delta):
    """``value`` as held by lane ``UNIT_POS_PLANE + delta`` (own value past the last lane)."""
    return _plane("shuffle_down", value, arg=delta)
