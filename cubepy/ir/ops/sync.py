"""Synchronization and plane (warp) operations."""

from __future__ import annotations

import attrs

from cubepy.ir.ops.base import NamedOperation, Operation
from cubepy.ir.variable import Variable

PLANE_REDUCE = frozenset({"sum", "prod", "min", "max", "inclusive_sum", "exclusive_sum",
                          "inclusive_prod", "exclusive_prod"})
PLANE_VOTE = frozenset({"all", "any", "ballot", "elect"})
PLANE_MOVE = frozenset({"broadcast", "shuffle", "shuffle_xor", "shuffle_up", "shuffle_down"})
PLANE_OPS = PLANE_REDUCE | PLANE_VOTE | PLANE_MOVE


@attrs.frozen
class SyncCube(Operation):
    """Barrier for every unit of the cube, with shared-memory visibility."""

    NAME = "sync_cube"


@attrs.frozen
class SyncPlane(Operation):
    """Barrier for the units of one plane."""

    NAME = "sync_plane"


@attrs.frozen
class SyncProxyShared(Operation):
    """Make generic-proxy shared-memory writes visible to the async proxy (TMA)."""

    NAME = "sync_async_proxy_shared"


@attrs.frozen
class PlaneOp(NamedOperation):
    """A plane (warp) collective; ``arg`` is the lane/offset of moves, unused otherwise."""

    value: Variable | None = None
    arg: Variable | None = None

    @property
    def name(self) -> str:
        """``plane_<op>``."""
        return f"plane_{self.op}"
