"""The interp's table of operation handlers, keyed by operation class.

A handler is ``handler(ctx, inst, mask) -> None``: ``ctx`` is the executing chunk
(:class:`cubepy.runtime.interp.executor.Chunk`), ``inst`` the instruction and ``mask`` the
:class:`cubepy.runtime.interp.values.Mask` of lanes that execute it.  Handlers read operands with
``ctx.read(var)`` and write their result with ``ctx.write(var, value, mask)``.  A handler module
declares the op families it implements (``OP_FAMILIES``) and registers with ``@implements(OpClass, ...)``;
the table imports it on the first lookup of one of its families.
A handler that may suspend lanes until another group acts (a barrier wait) or that enters nested
regions is also decorated with ``@blocking`` and calls ``ctx.block(lanes, wait)`` / ``ctx.enter``.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from cubepy.ir.ops import OpTable

if TYPE_CHECKING:
    from cubepy.ir import Instruction
    from cubepy.runtime.interp.executor import Chunk
    from cubepy.runtime.interp.values import Mask

Handler = Callable[["Chunk", "Instruction", "Mask"], None]

# A handler module declares the IR op families it implements on one line of its own, e.g.
# ``OP_FAMILIES = ("sync", "tma")``; tests check it names exactly the families of its handlers.
_DECLARATION = "\nOP_FAMILIES = "


def declared_families(folder: str, package: str) -> dict[str, tuple[str, ...]]:
    """Op family -> the modules of ``package`` (in ``folder``) that declare it, read from their source.

    Read, not imported: a lookup imports its family's modules first (a vector add's first launch need not
    import the TMA, mma or cluster handlers), and a new handler module is found without being listed.
    """
    by_family: dict[str, tuple[str, ...]] = {}
    for file_name in sorted(os.listdir(folder)):
        if not file_name.endswith(".py"):
            continue
        with open(os.path.join(folder, file_name), encoding="utf-8") as source:
            text = "\n" + source.read()  # a declaration on the first line starts a line too
        start = text.find(_DECLARATION)
        if start < 0:
            continue
        end = text.find("\n", start + 1)
        line = text[start + len(_DECLARATION) : end if end >= 0 else None]
        module = f"{package}.{file_name[:-3]}"
        for family in ast.literal_eval(line.partition("#")[0].strip()):
            by_family[family] = (*by_family.get(family, ()), module)
    return by_family


_BY_FAMILY = declared_families(os.path.dirname(__file__), __name__.rpartition(".")[0])
INTERP = OpTable(
    "interp",
    modules=tuple(dict.fromkeys(module for modules in _BY_FAMILY.values() for module in modules)),
    by_family=_BY_FAMILY,
)
implements = INTERP.implements


def blocking(handler: Handler) -> Handler:
    """Mark ``handler`` as one that may suspend lanes (``ctx.block``) or push regions (``ctx.enter``).

    The executor looks at the chunk's pending block and frame stack only after such steps (and after
    break/continue/return), so the other handlers cost nothing extra.
    """
    handler.interp_control = True  # type: ignore[attr-defined]
    return handler
