"""The interp's table of operation handlers, keyed by operation class.

A handler is ``handler(ctx, inst, mask) -> None``: ``ctx`` is the executing chunk
(:class:`cubepy.runtime.interp.executor.Chunk`), ``inst`` the instruction and ``mask`` the
:class:`cubepy.runtime.interp.values.Mask` of lanes that execute it.  Handlers read operands with
``ctx.read(var)`` and write their result with ``ctx.write(var, value, mask)``.  The family modules
listed in ``INTERP`` register with ``@implements(OpClass, ...)``; the table imports them on first use.
A handler that may suspend lanes until another group acts (a barrier wait) or that enters nested
regions is also decorated with ``@blocking`` and calls ``ctx.block(lanes, wait)`` / ``ctx.enter``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from cubepy.ir.ops import OpTable

if TYPE_CHECKING:
    from cubepy.ir import Instruction
    from cubepy.runtime.interp.executor import Chunk
    from cubepy.runtime.interp.values import Mask

Handler = Callable[["Chunk", "Instruction", "Mask"], None]

# op family -> the modules that implement it: a lookup imports its family's modules first (a vector add's
# first launch need not import the TMA, mma or cluster handlers); tests check every handler is listed here.
_BY_FAMILY = {
    "arith": ("arith",),
    "memory": ("memory", "atomic"),
    "branch": ("control",),
    "sync": ("sync", "warp_specialize"),
    "plane": ("plane",),
    "tma": ("tma_exec", "warp_specialize"),
    "cluster": ("cluster",),
    "cmma": ("cmma",),
    "mma": ("mma",),
    "wgmma": ("wgmma",),
    "debug": ("printing",),
    "async_copy": ("async_copy",),
}
_PACKAGE = "cubepy.runtime.interp"

INTERP = OpTable(
    "interp",
    modules=tuple(dict.fromkeys(f"{_PACKAGE}.{name}" for names in _BY_FAMILY.values() for name in names)),
    by_family={family: tuple(f"{_PACKAGE}.{name}" for name in names) for family, names in _BY_FAMILY.items()},
)
implements = INTERP.implements


def blocking(handler: Handler) -> Handler:
    """Mark ``handler`` as one that may suspend lanes (``ctx.block``) or push regions (``ctx.enter``).

    The executor looks at the chunk's pending block and frame stack only after such steps (and after
    break/continue/return), so the other handlers cost nothing extra.
    """
    handler.interp_control = True  # type: ignore[attr-defined]
    return handler
