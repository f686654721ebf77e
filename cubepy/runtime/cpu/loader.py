"""Loading host object code: one MCJIT engine per kernel (every object defines ``cubepy_run_cubes``).

``load_object`` is the one way host object code is mapped into this process (kernels here, the interp's
native fma helper too): the symbols the object needs are made resolvable first, since MCJIT aborts the process
on one it cannot resolve."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterable

from cubepy.compiler.emit_host import HostKernel, host_machine
from cubepy.compiler.llvm_process import LLVM_LOCK, binding
from cubepy.compiler.targets.host_abi import DRIVER_NAME
from cubepy.runtime.cpu.symbols import ensure_resolvable
from cubepy.runtime.cpu.workers import fork_safe

RunCubes = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)
_loaded: dict[int, tuple[HostKernel, object, Callable[..., None], int]] = {}
_lock = fork_safe(threading.Lock())


def entry(kernel: HostKernel) -> Callable[..., None]:
    """The kernel's ``cubepy_run_cubes(params, cube, first, last)`` as a ctypes function (GIL released)."""
    return _load(kernel)[2]


def entry_address(kernel: HostKernel) -> int:
    """The address of the kernel's ``cubepy_run_cubes`` (for the native pool, which calls it itself)."""
    return _load(kernel)[3]


def _load(kernel: HostKernel) -> tuple[HostKernel, object, Callable[..., None], int]:
    found = _loaded.get(id(kernel))
    if found is not None and found[0] is kernel:
        return found
    with _lock, LLVM_LOCK:
        # Again under the lock: a thread that missed while another loaded must take that engine, not replace
        # it (the replaced engine's code would be freed under the launch still running it).
        found = _loaded.get(id(kernel))
        if found is not None and found[0] is kernel:
            return found
        keep, addresses = load_object(kernel.name, kernel.object_code, [DRIVER_NAME])
        address = addresses[DRIVER_NAME]
        found = _loaded[id(kernel)] = (kernel, keep, RunCubes(address), address)
    return found


def load_object(name: str, object_code: bytes, symbols: Iterable[str]) -> tuple[object, dict[str, int]]:
    """Map host object code into a new MCJIT engine: (what must stay alive while its code runs, the address of
    each of ``symbols``).  A symbol the object needs that this process cannot provide is a CompileError naming
    ``name`` and the symbol."""
    with LLVM_LOCK:
        ensure_resolvable(name, object_code)
        llvm = binding()
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), host_machine())
        # The object file refers to these bytes without copying them: both stay alive with the engine.
        code = bytes(object_code)
        obj = llvm.ObjectFileRef.from_data(code)
        engine.add_object_file(obj)
        engine.finalize_object()
        return (engine, obj, code), {symbol: engine.get_function_address(symbol) for symbol in symbols}
