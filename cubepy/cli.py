"""The ``cubepy`` command: ``demo``, ``compile FILE.py:KERNEL``, ``show FILE.py:NAME``, ``info``."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import sys
import time
import types
from collections.abc import Callable
from typing import Any, NoReturn, cast


class _LaunchReached(BaseException):
    """Raised by the first kernel launch while ``cubepy compile`` imports a file (a BaseException, so that the
    file's own ``except Exception`` does not swallow it)."""

    def __init__(self, kernel: str, line: str) -> None:
        super().__init__(kernel, line)
        self.kernel, self.line = kernel, line


def _import_without_launches(run: Callable[[], object], path: str) -> str | None:
    """``run()`` (the import), stopped at the first kernel launch; where it stopped, or None."""
    from cubepy.runtime.client import ComputeClient

    original = ComputeClient.launch

    def refuse(self: Any, kernel: Any, *args: Any, **kwargs: Any) -> NoReturn:
        frame: types.FrameType | None = sys._getframe(1)
        while frame is not None and os.path.abspath(frame.f_code.co_filename) != os.path.abspath(path):
            frame = frame.f_back
        raise _LaunchReached(getattr(kernel, "name", "?"), f"{path}:{frame.f_lineno}" if frame else path)

    ComputeClient.launch = refuse  # type: ignore[method-assign]
    try:
        run()
    except _LaunchReached as stop:
        return f"{stop.line} (a launch of {stop.kernel})"
    finally:
        ComputeClient.launch = original  # type: ignore[method-assign]
    return None


def _load_kernel(spec: str, command: str = "compile", what: str = "kernel") -> Any:
    """The object named by ``FILE.py:NAME`` (or ``module:NAME``).

    The file is imported under its own name (not ``__main__``, so an ``if __name__ == "__main__":`` block does
    not run), and the import stops at the first kernel launch its top-level code makes: nothing is launched,
    and what the file defines before that launch is available.
    """
    if ":" not in spec:
        raise SystemExit(f"cubepy {command}: expected FILE.py:{'KERNEL' if what == 'kernel' else 'NAME'}, got {spec!r}")
    path, name = spec.rsplit(":", 1)
    if path.endswith(".py") or os.path.sep in path:
        if not os.path.exists(path):
            raise SystemExit(f"cubepy {command}: no such file {path!r}")
        module_spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
        if module_spec is None or module_spec.loader is None:
            raise SystemExit(f"cubepy {command}: {path!r} cannot be imported as a Python module")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module
        loader = module_spec.loader
        stopped = _import_without_launches(lambda: loader.exec_module(module), path)
    else:
        holder: list[types.ModuleType] = []
        where = getattr(importlib.util.find_spec(path), "origin", None) or path
        stopped = _import_without_launches(lambda: holder.append(importlib.import_module(path)), where)
        module = holder[0] if holder else sys.modules[path]
    if stopped is not None:
        print(f"cubepy {command}: stopped importing {path} at {stopped}: it runs no launch", file=sys.stderr)
    kernel = getattr(module, name, None)
    if kernel is None:
        before = f" before its first launch, at {stopped}" if stopped is not None else ""
        raise SystemExit(
            f"cubepy {command}: {path} has no {what} named {name!r}{before}"
            + ('; define it above that line, or put the launch under `if __name__ == "__main__":`' if before else "")
        )
    return kernel


DEFAULT_CUBE_DIM = "256"  # cubepy compile's cube_dim when --cube-dim is not given


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def default_compilation_args(kernel: Any, comptime: dict[str, Any], rank: int = 2) -> list[Any]:
    """Compilation args from the kernel's annotations (line size 1, tensors of ``rank`` dimensions), comptime
    values from ``comptime``.

    A generic kernel's type parameters come from ``comptime`` too (``--comptime F=f32``).
    """
    import attrs

    from cubepy.frontend import BufferCompilationArg, elem, generics

    out = []
    bound_names = set()
    for param in kernel.params:
        var = generics.type_var_of(param.annotation)
        if var is not None:
            if var.name not in comptime:
                raise SystemExit(
                    f"cubepy compile: generic kernel {kernel.name} needs --comptime {var.name}=TYPE "
                    f"(one of {', '.join(e.name for e in var.allowed)})"
                )
            scalar = elem.SCALAR_TYPES.get(str(comptime[var.name]))
            if scalar is None:
                raise SystemExit(f"cubepy compile: --comptime {var.name}={comptime[var.name]} is not an element type")
            bound_names.add(var.name)
            out.append(scalar if isinstance(param.annotation, generics.TypeVar) else param.annotation.factory[scalar])
            continue
        if param.is_comptime:
            if param.name not in comptime:
                raise SystemExit(f"cubepy compile: kernel {kernel.name} needs --comptime {param.name}=VALUE")
            out.append(comptime.pop(param.name))
        else:
            default = param.launch.default_compilation_arg()
            if isinstance(default, BufferCompilationArg) and getattr(param.launch, "role", None) == "tensor":
                default = attrs.evolve(default, rank=rank)
            out.append(default)
    for name in bound_names:
        comptime.pop(name)
    if comptime:
        raise SystemExit(f"cubepy compile: kernel {kernel.name} has no comptime parameter(s) {sorted(comptime)}")
    return out


def cmd_compile(args: argparse.Namespace) -> int:
    """Compile one kernel and print the requested stages."""
    import cubepy as cp

    kernel = _load_kernel(args.kernel)
    comptime = dict(item.split("=", 1) for item in args.comptime)
    comptime = {k: _parse_value(v) for k, v in comptime.items()}
    try:
        dims = tuple(int(d) for d in args.cube_dim.split(","))
        if not 1 <= len(dims) <= 3 or min(dims) < 1:
            raise ValueError
    except ValueError:
        raise SystemExit(f"cubepy compile: --cube-dim {args.cube_dim!r}: expected x[,y[,z]], positive ints") from None
    full = (*dims, *(1,) * (3 - len(dims)))
    given = "" if args.cube_dim_given else " (the default; --cube-dim x[,y[,z]] sets it)"
    print(f"cubepy compile: {kernel.name} with cube_dim={full}{given}", file=sys.stderr)
    compiled = kernel.compile(
        cp.CubeDim(*dims),
        *default_compilation_args(kernel, comptime, args.rank),
        target=args.target,
        unchecked=args.unchecked,
    )
    for stage in args.emit:
        if stage == "ir":
            print(compiled.ir)
        elif stage == "llvm":
            print(compiled.llvm)
        elif stage == "ptx":
            print(compiled.ptx)
        elif stage == "resources":
            if compiled.resources is None:
                print(f"resources: unavailable ({compiled.ptxas_status})")
            else:
                print(compiled.resources)
    for note in compiled.performance_notes:
        print(f"cubepy compile: ptxas: {note}", file=sys.stderr)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Draw the layout, view, tensor map or swizzle mode that ``FILE.py:NAME`` is (or that calling it returns)."""
    value = _load_kernel(args.name, "show", "object")
    if callable(value) and not isinstance(value, type):
        value = value()
    coords: dict[str, Any] = {}
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict):
        value, coords = value  # (object, keyword arguments of show), e.g. (tensor_map, {"coords": (0, 8)})
    try:
        from cubepy_layouts import show
    except ImportError:
        from cubepy import show
    show(value, args.out, **coords)
    if args.out:
        print(f"wrote {args.out}")
    return 0


def cmd_info(_: argparse.Namespace) -> int:
    """Versions, ptxas, runtimes, the cache folder and every setting."""
    import numpy

    import cubepy as cp
    from cubepy import config
    from cubepy.compiler import ptxas
    from cubepy.runtime.client import RUNTIMES

    print(f"cubepy {cp.__version__} on Python {platform.python_version()} ({sys.executable})")
    try:
        import llvmlite
        import llvmlite.binding as llvm

        print(f"llvmlite {llvmlite.__version__} (LLVM {'.'.join(map(str, llvm.llvm_version_info))})")
    except ImportError as exc:
        print(f"llvmlite: not importable ({exc})")
    print(f"numpy {numpy.__version__}")
    found = ptxas.find_ptxas()
    print(f"ptxas: {found} ({ptxas.version()})" if found else "ptxas: not found (kernels compile to PTX only)")
    from cubepy.compiler import libdevice

    print(f"libdevice: {libdevice.find_libdevice() or 'not found (transcendental math unavailable in PTX)'}")
    print(f"runtimes: {', '.join(cp.runtimes())}")
    for name, runtime in RUNTIMES.items():
        reason = runtime.unavailable_reason()
        if reason:
            print(f"{name}: unavailable: {reason}")
    print("settings:")
    for env, value, doc in config.describe():
        print(f"  {env}={value}  # {doc}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the example kernels on the default runtime and print their IR and results."""
    import cubepy as cp

    conv_demo: types.ModuleType | None
    try:
        from cubepy_layouts import demo as conv_demo
    except ImportError:
        conv_demo = None
    client = cp.client(args.runtime)
    if conv_demo is not None:
        return cast(int, conv_demo.main(client, args))
    examples_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(cp.__file__))), "examples")
    if not os.path.isdir(examples_dir):
        raise SystemExit(
            "cubepy demo: the examples/ folder is not next to the package; run it from a checkout "
            "installed with `pip install -e .`"
        )
    sys.path.insert(0, os.path.dirname(examples_dir))
    from examples import matmul_tiled, reduce_sum, softmax, vector_add

    print(f"cubepy demo on runtime '{client.name}' (the TMA weight-gradient demo arrives with cubepy_layouts)\n")
    print("IR of vector_add (checked launch, cube_dim 256):")
    from cubepy.ir import format_kernel

    kernel = vector_add.vector_add
    print(format_kernel(kernel.define(tuple(default_compilation_args(kernel, {})), (256, 1, 1), True)))
    failures = 0
    for module in (vector_add, reduce_sum, matmul_tiled, softmax):
        start = time.perf_counter()
        results = module.run(client)
        took = (time.perf_counter() - start) * 1e3
        for what, err in results.items():
            ok = err < 1e-3
            failures += not ok
            print(f"  {what:28s} {err:.2e}  {'ok' if ok else 'MISMATCH'}")
        print(f"  ({module.__name__.split('.')[-1]}: {took:.0f} ms incl. expansion)")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``cubepy`` command."""
    parser = argparse.ArgumentParser(prog="cubepy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the flagship demo on the default runtime")
    demo.add_argument("--runtime", default=None, help="interp (default) or cuda")
    demo.add_argument("--out", default="cubepy_demo", help="folder for the PTX and resource report")
    comp = sub.add_parser(
        "compile",
        help="compile FILE.py:KERNEL and print its stages",
        description='Imports FILE under its own name (an `if __name__ == "__main__":` block does not run) and '
        "stops the import at the first kernel launch its top-level code makes: nothing is launched, and KERNEL "
        "must be defined before that launch.",
    )
    comp.add_argument("kernel", help="FILE.py:KERNEL or module:KERNEL")
    comp.add_argument("--emit", nargs="+", default=["ptx"], choices=["ir", "llvm", "ptx", "resources"])
    comp.add_argument("--target", default="sm_90a")
    comp.add_argument(
        "--cube-dim",
        default=None,
        help=f"units per cube, x[,y[,z]] (default {DEFAULT_CUBE_DIM}: a kernel is compiled for one cube_dim; "
        "the one used is printed)",
    )
    comp.add_argument(
        "--comptime",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="value of a Comptime parameter (JSON or a string)",
    )
    comp.add_argument("--unchecked", action="store_true", help="compile the launch_unchecked variant")
    comp.add_argument(
        "--rank", type=int, default=2, help="dimensions of every Tensor parameter (part of the compilation; default 2)"
    )
    show = sub.add_parser(
        "show",
        help="draw a layout, view, tensor map copy or swizzle mode named by FILE.py:NAME",
        description="NAME is a layout's Launch value, a View, a TensorMapArg, a swizzle mode "
        "('32B', '64B', '128B'), or a zero-argument function returning one, or returning "
        "(object, {keyword arguments of show}) such as (tensor_map, {'coords': (0, 8)}).",
    )
    show.add_argument("name", help="FILE.py:NAME or module:NAME")
    show.add_argument(
        "--out",
        default=None,
        help="write PATH (.svg or .png, needs matplotlib; .txt: plain text) instead of printing to the terminal",
    )
    sub.add_parser("info", help="versions, ptxas, runtimes, cache dir and settings")
    args = parser.parse_args(argv)
    if args.command == "compile":
        args.cube_dim_given = args.cube_dim is not None
        args.cube_dim = args.cube_dim or DEFAULT_CUBE_DIM
    handler = {"demo": cmd_demo, "compile": cmd_compile, "show": cmd_show, "info": cmd_info}[args.command]
    from cubepy.errors import CubeError

    try:
        return handler(args)
    except CubeError as exc:
        print(f"cubepy {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
