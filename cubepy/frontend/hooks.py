"""Hooks the runtime layer installs into the frontend (the frontend never imports the runtime).

``COMPILE(definition, target) -> CompiledKernel`` is set when ``cubepy`` is imported (``cubepy/__init__.py``
points it at ``cubepy.compiler.compiled.compile_definition``); ``Kernel.compile`` raises a ``CubeError``
("compiler not available") while it is None, which happens only when ``cubepy.frontend`` is used alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

COMPILE: Callable[[Any, str], Any] | None = None

# ``CACHED_COMPILE(kernel, comp_args, cube_dim, checked, target, build)``: the runtime's on-disk cache
# (``cubepy.runtime.cache``) installs it; ``Kernel.compile`` asks it first, so a hit skips expansion.
CACHED_COMPILE: Callable[..., Any] | None = None
