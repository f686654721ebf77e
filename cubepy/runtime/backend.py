"""The ``Backend`` protocol: what ``ComputeClient`` asks of a runtime to compile and launch kernels.

A runtime is a ``ComputeClient`` (buffers, reads, the kernel cache; a runtime with device memory
subclasses it, as ``cuda`` does) over one back end.  The interp back end is
``cubepy.runtime.interp.backend.InterpBackend``, the cuda one ``cubepy.runtime.cuda.backend.CudaBackend``.
"""

from __future__ import annotations

from typing import Any, Protocol

from cubepy.ir import KernelDefinition
from cubepy.runtime.bindings import Bindings

# Hopper's largest opt-in shared memory per block (227 KiB); the interp and cpu runtimes enforce the same limit.
MAX_SHARED_BYTES = 227 * 1024


class Backend(Protocol):
    """Compile a kernel once (``prepare``), then check and run each launch of the prepared artifact.

    ``name`` is the runtime's name.  ``disk_cache_kind`` names the on-disk cache its artifacts go to
    (None: artifacts are not cached on disk) and ``disk_cache_target`` what they were built for.
    """

    name: str

    @property
    def disk_cache_kind(self) -> str | None:
        """The on-disk cache kind of this back end's artifacts, or None when they are not cached on disk."""
        ...

    @property
    def disk_cache_target(self) -> str:
        """What the artifacts were built for (part of the on-disk cache key)."""
        ...

    def prepare(self, definition: KernelDefinition) -> Any:
        """The launchable artifact of one kernel specialization (compiled, or passes run)."""
        ...

    def check_launch(self, artifact: Any, cube_count: tuple[int, int, int]) -> None:
        """Raise ``LaunchError`` for a launch the hardware would refuse."""
        ...

    def run(
        self,
        artifact: Any,
        cube_count: tuple[int, int, int],
        bindings: Bindings,
        *,
        sanitize: bool,
        cluster: tuple[int, int, int] = (1, 1, 1),
    ) -> None:
        """Launch ``artifact`` over ``cube_count`` cubes (grouped in clusters of ``cluster``) with the bound
        buffers and scalars."""
        ...
