"""Distributed shared memory in kernels: ``smem.peer(rank)``, a shared memory of another cube of the cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cubepy.frontend import operations
from cubepy.frontend.state import current_scope, require_state
from cubepy.ir import Variable
from cubepy.ir import ops as irops

if TYPE_CHECKING:
    from cubepy.frontend.containers import MemoryExpand
    from cubepy.frontend.values import ExpandElement


class PeerMemory:
    """A shared memory of another cube of the cluster (``smem.peer(rank)``): index it to read or write there."""

    __slots__ = ("memory", "rank")

    def __init__(self, memory: MemoryExpand, rank: Variable) -> None:
        self.memory = memory
        self.rank = rank

    def _index(self, index: Any) -> Variable:
        memory = self.memory
        return operations.to_index(memory.item_index(index))

    def __getitem__(self, index: Any) -> ExpandElement:
        memory = self.memory
        checked = require_state().checked
        op = irops.ClusterLoad(memory.var, self.rank, self._index(index), checked)
        return operations.emit(op, memory.var.type)

    def __setitem__(self, index: Any, value: Any) -> None:
        memory = self.memory
        converted = operations.convert(value, memory.var.type, f"store into a peer's {memory.describe()}")
        checked = require_state().checked
        current_scope().append(irops.ClusterStore(memory.var, self.rank, self._index(index), converted, checked))
