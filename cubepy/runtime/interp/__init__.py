"""The interp runtime: executes a ``KernelDefinition`` for a whole grid on the CPU with numpy.

``run(kernel, cube_count, bindings, *, sanitize=False, schedule=None)`` is the entry point.  Units run
in groups, one numpy operation per instruction over a group (``executor``, ``groups``, ``control``); the
schedule (``schedule``: lockstep by default, random or adversarial) decides how groups interleave and
when TMA copies land.  Each IR op family has its handler module (``arith``, ``memory``, ``atomic``,
``plane``, ``sync``, ``tma_exec``, ``printing``...) registered in ``registry``.
"""

from cubepy.errors import InterpreterError
from cubepy.runtime.interp import arith, atomic, cmma, memory, plane, sync, tma_exec  # noqa: F401  (register handlers)
from cubepy.runtime.interp.executor import LaneCounter, counting, run

__all__ = ["InterpreterError", "LaneCounter", "counting", "run"]
