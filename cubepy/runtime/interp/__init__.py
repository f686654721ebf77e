"""The interp runtime: executes a ``KernelDefinition`` for a whole grid on the CPU with numpy.

``run(kernel, cube_count, bindings, *, sanitize=False)`` is the entry point.  Execution is lockstep
SIMT (see ``executor``); each IR op family has its handler module (``arith``, ``memory``,
``atomic``, ``plane``, ``sync``, ``printing``...) registered in ``registry``.
"""

from cubepy.runtime.interp import arith, atomic, cmma, memory, plane, sync, tma_exec  # noqa: F401  (register handlers)
from cubepy.runtime.interp.executor import InterpreterError, LaneCounter, counting, run

__all__ = ["InterpreterError", "LaneCounter", "counting", "run"]
