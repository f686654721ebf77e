"""``@cube``: the decorator that makes a cube function or, with ``launch=True``, a kernel.

It sits above both: a ``CubeFunction`` (``cubepy.frontend.function``) is what a kernel calls and what a
``Kernel`` (``cubepy.frontend.kernel``) wraps.  Annotations kept as text (``from __future__ import
annotations``) are evaluated here, in the frame that ran the ``def``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from cubepy.frontend.function import CubeFunction
from cubepy.frontend.kernel import Kernel


def cube(
    fn: Any = None,
    *,
    launch: bool = False,
    launch_unchecked: bool = False,
    contract: bool | None = None,
    fastmath: bool | None = None,
) -> Any:
    """Make a cube function (``@cube``) or a kernel (``@cube(launch=True)``, ``launch_unchecked=True``).

    ``contract`` (kernels): fuse one-use ``a * b + c`` into ``fma``; None follows ``CUBEPY_CONTRACT`` (on).
    ``fastmath`` (kernels): let f32 ``exp2``, ``exp``, ``log2``, ``log``, ``sin``, ``cos``, ``rsqrt`` and ``/``
    use the GPU's approximate instructions (docs/semantics/math-accuracy.md); None follows ``CUBEPY_FASTMATH``
    (off).  A cube function ignores both: the kernel that calls it decides.
    """

    def wrap(function: Any, frame: types.FrameType | None = None) -> Any:
        _resolve_text_annotations(function, frame if frame is not None else sys._getframe(1))
        if launch or launch_unchecked:
            return Kernel(
                function, launch=launch, launch_unchecked=launch_unchecked, contract=contract, fastmath=fastmath
            )
        return CubeFunction(function)

    return wrap(fn, sys._getframe(1)) if fn is not None else wrap


def _resolve_text_annotations(function: Any, frame: types.FrameType) -> None:
    """Evaluate annotations kept as text (``from __future__ import annotations``) where the ``def`` ran.

    Python does not close over a name used only in an annotation (``Array[T]`` in a factory taking ``T``), so
    the defining frame's locals are the only place it can be found; the function's globals and closure come
    next.  An annotation that cannot be evaluated yet (a class defined further down) stays text and is read
    at first use, as before.
    """
    fn = function.__func__ if isinstance(function, staticmethod) else function
    annotations = getattr(fn, "__annotations__", None)
    if not annotations or not any(isinstance(a, str) for a in annotations.values()):
        return
    namespace = dict(frame.f_locals) if frame.f_locals is not frame.f_globals else {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            namespace[name] = cell.cell_contents
        except ValueError:  # a cell not yet bound
            pass
    for name, text in list(annotations.items()):
        if isinstance(text, str):
            try:
                annotations[name] = eval(text, fn.__globals__, namespace)  # noqa: S307 - the user's own annotation
            except Exception:  # noqa: BLE001 - left as text: read at first use, where a failure is reported
                pass
