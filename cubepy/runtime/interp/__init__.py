"""The interp runtime: executes a ``KernelDefinition`` for a whole grid on the CPU with numpy.

``run(kernel, cube_count, bindings, *, sanitize=False, schedule=None)`` is the entry point.  Units run
in groups, one numpy operation per instruction over a group (``executor``, ``groups``, ``control``); the
schedule (``schedule``: lockstep by default, random or adversarial) decides how groups interleave and
when TMA copies land.  Each IR op family has its handler module (``arith``, ``memory``, ``atomic``,
``plane``, ``sync``, ``tma_exec``, ``printing``...), found by ``registry`` (each declares its ``OP_FAMILIES``)
and imported on the first lookup of one of its families.
"""

from cubepy.errors import InterpreterError
from cubepy.runtime.interp.executor import LaneCounter, counting, run

__all__ = ["InterpreterError", "LaneCounter", "counting", "run"]
