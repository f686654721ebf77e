"""The NVPTX target: architecture validation, libdevice linking, LLVM's O3 pipeline and PTX emission.

The cubepy IR verifier runs before lowering; here ``parse_assembly`` and ``verify`` run in-process (they raise),
unknown ``llvm.*`` intrinsics and unresolved calls are rejected (LLVM would accept them and ptxas fail later),
and linking, O3 and emission run in the compile server (``cubepy.compiler.llvm_server``).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import attrs

from cubepy.compiler import libdevice, llvm_jobs, llvm_server
from cubepy.compiler.abi import TRIPLE
from cubepy.compiler.llvm_process import LLVM_LOCK, parse_verified, unpack_parts
from cubepy.errors import CompileError

DEFAULT_ARCH = "sm_90a"
MIN_PTX = 80  # PTX 8.0: fence.proxy.async, elect.sync and the TMA forms
# Every NVPTX architecture LLVM 22 knows from sm_70 on, with the minimum PTX ISA version it needs (x10).
ARCH_MIN_PTX = {
    "sm_70": 60,
    "sm_72": 61,
    "sm_75": 63,
    "sm_80": 70,
    "sm_86": 71,
    "sm_87": 74,
    "sm_88": 90,
    "sm_89": 78,
    "sm_90": 78,
    "sm_90a": 80,
    "sm_100": 86,
    "sm_100a": 86,
    "sm_100f": 88,
    "sm_101": 86,
    "sm_101a": 86,
    "sm_101f": 88,
    "sm_103": 88,
    "sm_103a": 88,
    "sm_103f": 88,
    "sm_110": 90,
    "sm_110a": 90,
    "sm_110f": 90,
    "sm_120": 87,
    "sm_120a": 87,
    "sm_120f": 88,
    "sm_121": 88,
    "sm_121a": 88,
    "sm_121f": 88,
}
# The data-centre parts whose f64 multiply runs at half the f32 rate (V100, A100, H100/H200, B200): there an
# f32 division by a shared divisor is cheaper as an f64 multiply by its reciprocal (cubepy.ir.reciprocal).
# The others (and sm_100f, whose family includes B300) run f64 at 1/32-1/64 of f32 and keep div.rn.f32.
FAST_F64_ARCHS = frozenset({"sm_70", "sm_80", "sm_90", "sm_90a", "sm_100", "sm_100a"})


@attrs.frozen
class Target:
    """A GPU architecture (``sm_90a``), its compute capability number (90) and LLVM feature string."""

    arch: str
    sm: int
    features: str


def parse_target(name: str) -> Target:
    """Validate ``sm_XX[a|f]`` (XX >= 70, known to LLVM 22) before LLVM ever sees it."""
    match = re.fullmatch(r"sm_(\d+)([af]?)", name or "")
    if match is None or int(match.group(1)) < 70:
        raise CompileError(
            f"target {name!r} is not supported: expected sm_XX with XX >= 70 (for example {DEFAULT_ARCH!r})"
        )
    if name not in ARCH_MIN_PTX:
        raise CompileError(f"target {name!r} is unknown to LLVM 22's NVPTX back end; known: {', '.join(ARCH_MIN_PTX)}")
    ptx = max(MIN_PTX, ARCH_MIN_PTX[name])
    return Target(name, int(match.group(1)), f"+ptx{ptx}")


@attrs.frozen
class EmitResult:
    """What the LLVM stage produced: optimized IR text, PTX and the child's own stage timings."""

    llvm_opt: str
    ptx: str
    timings: dict[str, float]


def check_module(
    text: str,
    kernel_name: str,
    libdevice_calls: frozenset[str] = frozenset(),
    libdevice_cache: str | os.PathLike[str] | None = None,
) -> Any:
    """Parse and verify LLVM IR in-process and reject calls LLVM would pass through to ptxas.

    ``libdevice_cache`` is the folder of libdevice subsets (``cubepy.compiler.libdevice``), or None.
    """
    with LLVM_LOCK:
        return _check_module(text, kernel_name, libdevice_calls, libdevice_cache)


# Functions the CUDA driver provides to every module (ptxas leaves them to the linker): debug_print's vprintf.
DEVICE_RUNTIME_FUNCTIONS = frozenset({"vprintf"})


def libdevice_names(module: Any, libdevice_calls: frozenset[str] = frozenset()) -> frozenset[str]:
    """The libdevice functions a parsed kernel ``module`` declares, with those its lowering recorded."""
    return frozenset(f.name for f in module.functions if f.is_declaration and f.name.startswith("__nv_")) | set(
        libdevice_calls
    )


def _libdevice_subset(
    names: frozenset[str], kernel_name: str, cache: str | os.PathLike[str] | None
) -> libdevice.Subset | None:
    """The libdevice subset defining ``names`` (None when there are none); raises when libdevice lacks one."""
    if not names:
        return None
    found = libdevice.subset(names, cache)
    if found is None:
        raise CompileError(
            f"kernel {kernel_name}: needs libdevice ({', '.join(sorted(names))}) but no "
            "CUDA toolkit with nvvm/libdevice/libdevice.10.bc was found (set CUDA_HOME)"
        )
    if found.missing:
        raise CompileError(f"kernel {kernel_name}: libdevice has no function {min(found.missing)!r}")
    return found


def _check_module(
    text: str, kernel_name: str, libdevice_calls: frozenset[str], libdevice_cache: str | os.PathLike[str] | None
) -> Any:
    module = parse_verified(text, f"kernel {kernel_name}: LLVM rejected the lowered IR")
    _libdevice_subset(libdevice_names(module, libdevice_calls), kernel_name, libdevice_cache)
    for function in module.functions:
        if not function.is_declaration:
            continue
        name = function.name
        if name.startswith("llvm."):
            # A recognized intrinsic gets attributes when parsed; an unknown name gets none
            # (an LLVM quirk) and would become a call ptxas cannot parse.
            if not list(function.attributes):
                raise CompileError(f"kernel {kernel_name}: unknown LLVM intrinsic {name!r}")
        elif not name.startswith("__nv_") and name not in DEVICE_RUNTIME_FUNCTIONS:
            raise CompileError(f"kernel {kernel_name}: call to unresolved external function {name!r}")
    return module


def optimize_and_emit(
    module: Any,
    target: Target,
    kernel_name: str,
    libdevice_calls: frozenset[str] = frozenset(),
    *,
    isolate: bool = True,
    libdevice_cache: str | os.PathLike[str] | None = None,
) -> EmitResult:
    """Link libdevice, run O3 and emit PTX for a checked module; in the compile server unless ``isolate=False``."""

    lib = _libdevice_subset(libdevice_names(module, libdevice_calls), kernel_name, libdevice_cache)
    with LLVM_LOCK:
        text = str(module)
    args = (text, None if lib is None else lib.bitcode, kernel_name, TRIPLE, target.arch, target.features)
    if isolate:
        payload = llvm_server.run_job("ptx", args, kernel_name)
    else:
        with LLVM_LOCK:
            payload = llvm_jobs.emit_ptx(*args)
    timings_text, optimized, ptx = unpack_parts(payload)
    return EmitResult(optimized, ptx, json.loads(timings_text))
