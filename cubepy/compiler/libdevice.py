"""libdevice: NVIDIA's bitcode math library (``__nv_expf``, ``__nv_pow``, ...), found, parsed and linked.

The bitcode is parsed once per process and its definitions made ``linkonce_odr``: linking such a
module pulls in only the functions the kernel references (and what they call), so a kernel that uses
``exp`` gets ``__nv_expf`` and its helpers, not the library's ~350 functions.  Linking consumes the
module, so callers link a clone, or (``target.optimize_and_emit``) link in a forked child whose copy
of the process memory is thrown away.  ``__nvvm_reflect`` calls inside libdevice are folded by LLVM's
NVVMReflect pass, which the NVPTX target adds to the O3 pipeline.
"""

from __future__ import annotations

import functools

from cubepy.compiler.toolkit import find_libdevice
from cubepy.errors import CompileError

__all__ = ["find_libdevice", "load", "provides"]


def load():
    """The parsed libdevice module (shared; link a ``clone()`` unless in a throw-away process), or None."""
    path = find_libdevice()
    return None if path is None else _load(str(path))


@functools.cache
def _load(path: str):
    from cubepy.compiler.target import DATA_LAYOUT, TRIPLE, binding

    llvm = binding()
    try:
        with open(path, "rb") as file:
            module = llvm.parse_bitcode(file.read())
    except (OSError, RuntimeError) as error:
        raise CompileError(f"libdevice at {path} could not be read: {error}") from error
    for function in module.functions:
        if not function.is_declaration:
            function.linkage = "linkonce_odr"
    # libdevice says "nvptx64-nvidia-gpulibs" with an old layout; ours avoids linker warnings.
    module.triple = TRIPLE
    module.data_layout = DATA_LAYOUT
    return module


def provides(module, name: str) -> bool:
    """Whether the libdevice ``module`` defines the function ``name``."""
    try:
        return not module.get_function(name).is_declaration
    except NameError:
        return False
