"""Hooks the runtime layer installs into the frontend (the frontend never imports the runtime).

The layers above call :func:`install`; the frontend reads the two names:

- ``COMPILE(definition, target) -> CompiledKernel``, installed when ``cubepy`` is imported (``cubepy/__init__.py``
  points it at ``cubepy.compiler.compiled.compile_definition``); ``Kernel.compile`` raises a ``CubeError``
  ("compiler not available") while it is None, which happens only when ``cubepy.frontend`` is used alone.
- ``CACHED_COMPILE(kernel, comp_args, cube_dim, checked, target, build, contract=True, fastmath=False)``, installed by the on-disk cache
  (``cubepy.runtime.cache``); ``Kernel.compile`` asks it first, so a hit skips expansion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

COMPILE: Callable[[Any, str], Any] | None = None

CACHED_COMPILE: Callable[..., Any] | None = None


def install(
    *, compile: Callable[[Any, str], Any] | None = None, cached_compile: Callable[..., Any] | None = None
) -> None:
    """Install the compiler and/or the compile cache the frontend calls (a None argument leaves that hook)."""
    global COMPILE, CACHED_COMPILE
    if compile is not None:
        COMPILE = compile
    if cached_compile is not None:
        CACHED_COMPILE = cached_compile
