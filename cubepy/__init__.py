"""cubepy: CubeCL's expand/launch model in Python.

Kernels are decorated Python (``@cube``); running a kernel's expand twin with proxy values builds a
typed IR (``cubepy.ir``) that the interp runtime executes (``cp.client("interp")``, the default) and the
compiler lowers to PTX through llvmlite (``kernel.compile(...)``).  The API reference (docs/reference/cubepy.md) lists the public names.
"""

import typing as _typing

from cubepy import frontend as _frontend
from cubepy import testing
from cubepy.autotune import autotune
from cubepy.errors import CompileError, CubeError, ExpandError, LaunchError, SanitizerError, TensorMapError, VerifyError
from cubepy.frontend import *  # noqa: F403  (the kernel language: cube, f32, Array, builtins, math...)
from cubepy.frontend.intrinsics import runtime as _intrinsics_runtime
from cubepy.runtime.args import ArrayArg, ClusterDim, CubeCount, CubeDim, ScalarArg, TensorArg
from cubepy.runtime.client import ComputeClient, client, runtimes
from cubepy.runtime.client import client as _client_factory
from cubepy.runtime.handle import Handle
from cubepy.runtime.tensormap import TensorMapArg
from cubepy.version import __version__ as __version__

if _typing.TYPE_CHECKING:
    import os

    from cubepy.compiler.compiled import CompiledKernel
    from cubepy.ir import KernelDefinition
    from cubepy.viz.coverage import Coverage
    from cubepy.viz.picture import Picture


def _compile_hook(definition: "KernelDefinition", target: str) -> "CompiledKernel":
    from cubepy import config
    from cubepy.compiler.compiled import compile_definition
    from cubepy.runtime.cache import libdevice_cache_dir

    return compile_definition(
        definition,
        target,
        dump=config.get("CUBEPY_DUMP"),
        dump_dir=config.get("CUBEPY_DUMP_DIR"),
        libdevice_cache=libdevice_cache_dir(),
    )


_frontend.hooks.install(compile=_compile_hook)


def show(
    obj: _typing.Any,
    path: "str | os.PathLike[str] | None" = None,
    *,
    color: bool | None = None,
    **coords: _typing.Any,
) -> "Picture":
    """Draw a ``TensorMapArg`` copy (``coords=``, ``offsets=``) or a swizzle mode to ``path`` (.svg/.png) or the
    terminal; returns the picture's data.  ``cubepy_layouts.show`` also draws layouts and views."""
    from cubepy.viz import show as _show

    return _show(obj, path, color=color, **coords)


def from_dlpack(obj: _typing.Any, client: ComputeClient | None = None) -> Handle:
    """A handle on ``obj``'s memory without a copy (any ``__dlpack__`` exporter: torch, jax, cupy, numpy).

    ``client`` defaults to ``cp.client()``.  Kernels that write the handle write ``obj``; the handle keeps ``obj``
    alive.  The interp and cpu runtimes borrow host memory, the cuda runtime device memory; anything else (another
    device, read-only or non-contiguous memory, an element type cubepy lacks) is a ``LaunchError`` naming it.
    """
    return (client if client is not None else _client_factory()).from_dlpack(obj)


def __getattr__(name: str) -> _typing.Any:
    # ``cp.torch`` imports PyTorch, so only on first use.
    if name == "torch":
        import importlib

        return importlib.import_module("cubepy.torch")
    raise AttributeError(f"module 'cubepy' has no attribute {name!r}")


def coverage(client: _typing.Any) -> "Coverage":
    """``with cp.coverage(client) as cov:`` records which global elements each cube of an interp launch reads
    and writes; ``cov.show(handle, path)`` draws it as a heat map."""
    from cubepy.viz.coverage import Coverage

    return Coverage(client)


# `import cubepy.runtime...` above bound the subpackage to the name `runtime`; the public `cp.runtime(x)`
# (make a Python value a runtime variable) owns that name.  Submodules stay importable by path.
runtime = _intrinsics_runtime

__all__: list[str] = []
__all__ += _frontend.__all__
__all__ += [
    "ArrayArg",
    "CompileError",
    "ComputeClient",
    "ClusterDim",
    "CubeCount",
    "CubeDim",
    "CubeError",
    "ExpandError",
    "Handle",
    "LaunchError",
    "SanitizerError",
    "ScalarArg",
    "TensorArg",
    "TensorMapArg",
    "TensorMapError",
    "VerifyError",
    "autotune",
    "client",
    "coverage",
    "from_dlpack",
    "runtimes",
    "show",
    "testing",
]
