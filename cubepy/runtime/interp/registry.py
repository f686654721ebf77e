"""The interp's dispatch table: one handler per IR operation class.

A handler is ``handler(ctx, inst, mask) -> None``: ``ctx`` is the executing chunk
(:class:`cubepy.runtime.interp.executor.Chunk`), ``inst`` the instruction and ``mask`` the
:class:`cubepy.runtime.interp.values.Mask` of lanes that execute it.  Handlers read operands with
``ctx.read(var)`` and write their result with ``ctx.write(var, value, mask)``.  Op families defined
outside the IR core (TMA, barriers) register their handlers here from their own modules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cubepy.ir import Instruction
    from cubepy.runtime.interp.executor import Chunk
    from cubepy.runtime.interp.values import Mask

Handler = Callable[["Chunk", "Instruction", "Mask"], None]

IMPLEMENTATIONS: dict[type, Handler] = {}


def implements(*op_types: type) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of every operation class in ``op_types``."""

    def register(handler: Handler) -> Handler:
        for op_type in op_types:
            IMPLEMENTATIONS[op_type] = handler
        return handler

    return register


def lookup(op_type: type) -> Handler | None:
    """The handler of ``op_type``, or None when the interp does not implement it."""
    return IMPLEMENTATIONS.get(op_type)
