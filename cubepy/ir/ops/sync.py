"""Synchronization: barriers of the cube and the plane, and the async-proxy fence."""

from __future__ import annotations

import attrs

from cubepy.ir.ops.base import Operation
from cubepy.ir.ops.record import OpRecord, declare


@declare(OpRecord("sync_cube", "sync", doc="Barrier for every unit of the cube."))
@attrs.frozen
class SyncCube(Operation):
    """Barrier for every unit of the cube, with shared-memory visibility."""


@declare(OpRecord("sync_plane", "sync", doc="Barrier for the units of one plane."))
@attrs.frozen
class SyncPlane(Operation):
    """Barrier for the units of one plane."""


@declare(OpRecord("sync_async_proxy_shared", "sync", doc="Generic-proxy shared writes made visible to TMA."))
@attrs.frozen
class SyncProxyShared(Operation):
    """Make generic-proxy shared-memory writes visible to the async proxy (TMA)."""
