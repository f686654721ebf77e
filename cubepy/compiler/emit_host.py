"""Compiling a kernel for the host CPU: the one lowering with ``HostTarget``, O3, object code.

As for PTX, everything that can hit an ``LLVM ERROR`` (O3, coroutine splitting, emission) runs in the
compile server (``cubepy.compiler.llvm_server``); this process only parses and verifies (which raise).  The result,
``HostKernel``, holds relocatable object code for this machine's CPU: the cpu runtime loads it into
MCJIT, and the disk cache keeps it (keyed by ``host_target_name()``, so another CPU never loads it).
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

import attrs

from cubepy import config
from cubepy.compiler import llvm_jobs, llvm_server
from cubepy.compiler.llvm_process import LLVM_LOCK, binding, parse_verified, unpack_parts
from cubepy.compiler.lower_arith import LIBDEVICE_FUNCTIONS
from cubepy.compiler.passes import run_passes
from cubepy.compiler.targets.host import HostTarget
from cubepy.compiler.targets.host_abi import DRIVER_NAME
from cubepy.compiler.targets.host_async import HOST_OP_SYMBOL, HostCall
from cubepy.errors import CompileError
from cubepy.ir import KernelDefinition, verify
from cubepy.ir.variable import PLANE_WIDTH

# C symbols compiled host code may call; MCJIT resolves them in this process (libc/libm are loaded).
# Every libdevice function the lowering calls has a C library twin (rhypot is composed from hypot).
_LIBM = {*LIBDEVICE_FUNCTIONS.values(), "fmod", "pow", "hypot"} - {"rhypot"}
HOST_SYMBOLS = frozenset(
    {"aligned_alloc", "free", HOST_OP_SYMBOL} | {name + suffix for name in _LIBM for suffix in ("", "f")}
)


@attrs.frozen
class HostKernel:
    """A kernel compiled for the host: object code and what the runtime needs to run it."""

    name: str
    definition: KernelDefinition
    target: str  # host_target_name() it was built for
    object_code: bytes
    coroutine: bool  # units suspend at barriers / plane operations
    units: int  # units per cube
    padded_units: int  # units rounded up to whole planes (per-unit arrays' length)
    shared_bytes: int  # the cube's shared block
    llvm: str
    llvm_opt: str
    timings: dict[str, float]
    host_calls: tuple[HostCall, ...] = ()  # the TMA / mbarrier instructions the runtime emulates, by site
    # how the cube's units run: "plain" (a loop), "unit loops" (loop fission at barriers), "coroutines"
    shape: str = "plain"
    # a plain kernel whose consecutive cubes along x run as one wider row (``host_plain.merges_cubes_along_x``)
    merged_rows: bool = False


# x86's f32 -> bf16 instructions (AVX512-BF16 ``vcvtneps2bf16``, AVX-NE-CONVERT) flush subnormal inputs and
# results to zero, whatever MXCSR says; LLVM also routes bf16 values held in registers through them.  Without
# these features it calls ``__truncsfbf2``, which the cpu runtime provides exactly (cubepy/runtime/cpu/symbols.py).
_INEXACT_BF16_FEATURES = ("avx512bf16", "avxneconvert")


# LLVM tunes Intel's AVX-512 CPUs to prefer 256-bit vectors (the ``prefer-256-bit`` tuning feature): on the
# first of them 512-bit instructions lowered the core's clock, which costs short bursts of vector code in
# scalar programs.  A cubepy launch is long vector loops over units; with 512-bit vectors the 1024 x 1024
# row softmax of ``benchmarks.cpu_peers`` took 0.74-0.81 ms instead of 1.11-1.13 on a Rocket Lake, the
# memory-bound workloads the same.  ``CUBEPY_CPU_WIDE_VECTORS=0`` keeps LLVM's choice.
_WIDE_VECTORS = "-prefer-256-bit"


def host_machine_spec() -> tuple[str, str, str]:
    """The host target machine cubepy compiles for: triple, CPU name, features (what `CUBEPY_CPU_WIDE_VECTORS` picks)."""
    return _machine_spec(bool(config.get("CUBEPY_CPU_WIDE_VECTORS")))


@functools.cache
def _machine_spec(wide_vectors: bool) -> tuple[str, str, str]:
    llvm = binding()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = [
        "-" + f[1:] if f[1:] in _INEXACT_BF16_FEATURES else f for f in llvm.get_host_cpu_features().flatten().split(",")
    ]
    if wide_vectors and "+avx512f" in features:
        features.append(_WIDE_VECTORS)
    return llvm.get_process_triple(), llvm.get_host_cpu_name(), ",".join(features)


def host_target_name() -> str:
    """``<triple>/<cpu>``: the machine object code is built for (part of the disk-cache key).

    The ``exact-bf16`` tag keys out objects built before bf16 conversions kept subnormals; ``wide`` marks
    objects built with 512-bit vectors preferred (``CUBEPY_CPU_WIDE_VECTORS``)."""
    triple, cpu, features = host_machine_spec()
    wide = "/wide" if _WIDE_VECTORS in features.split(",") else ""
    return f"{triple}/{cpu}/exact-bf16{wide}"


def host_unavailable_reason() -> str | None:
    """Why llvmlite cannot compile for this machine, or None when it can."""
    try:
        triple, _, _ = host_machine_spec()
        binding().Target.from_triple(triple)
    except Exception as error:  # noqa: BLE001 - any failure means no host back end
        return f"llvmlite cannot target this machine: {error}"
    return None


def _has_vector_ldexp() -> bool:
    """Whether LLVM lowers a vector ``llvm.ldexp`` on this CPU to one instruction (x86's AVX-512 ``vscalefps``).

    Elsewhere it becomes a ``ldexpf`` call per lane, so exp scales by two multiplications instead.
    """
    triple, _, features = host_machine_spec()
    return triple.startswith("x86_64") and "+avx512f" in features.split(",")


def host_machine() -> Any:
    """An O3 target machine for this process's CPU (JIT code model)."""
    llvm = binding()
    triple, cpu, features = host_machine_spec()
    return llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=3, jit=True)


def compile_host(
    definition: KernelDefinition, *, isolate: bool = True, report_out_of_bounds: bool = False
) -> HostKernel:
    """Verify, run the IR passes, lower for the host and build object code (the LLVM work in the compile server).

    ``report_out_of_bounds``: a checked access that misses calls the runtime, which reports it.
    """
    from cubepy.compiler.lower import lower_kernel

    if isolate:
        llvm_server.warm()  # starting while this process lowers
    timings: dict[str, float] = {}
    start = time.perf_counter()
    verify(definition)
    definition, _ = run_passes(definition)
    timings["passes"] = time.perf_counter() - start
    start = time.perf_counter()
    machine = host_machine()
    target = HostTarget(
        machine.triple, str(machine.target_data), definition, report_out_of_bounds, vector_ldexp=_has_vector_ldexp()
    )
    lowered = lower_kernel(definition, target)
    text = str(lowered.module)
    timings["lower"] = time.perf_counter() - start
    name = lowered.entry_name
    with LLVM_LOCK:
        module = parse_verified(text, f"kernel {name}: LLVM rejected the lowered host IR")
        for function in module.functions:
            if function.is_declaration and not function.name.startswith("llvm.") and function.name not in HOST_SYMBOLS:
                raise CompileError(f"kernel {name}: host code calls unknown external function {function.name!r}")

    args = (text, *host_machine_spec())
    start = time.perf_counter()
    if isolate:
        payload = llvm_server.run_job("object", args, name, emitting="host object code")
    else:
        with LLVM_LOCK:
            payload = llvm_jobs.emit_object(*args)
    stage_text, optimized, obj_hex = unpack_parts(payload)
    timings["llvm_opt+emit"] = time.perf_counter() - start
    timings.update({f"child_{k}": v for k, v in json.loads(stage_text).items()})
    if DRIVER_NAME not in optimized:
        raise CompileError(f"kernel {name}: the host driver {DRIVER_NAME} was optimized away")
    x, y, z = definition.cube_dim
    units = x * y * z
    return HostKernel(
        name=name,
        definition=definition,
        target=host_target_name(),
        object_code=bytes.fromhex(obj_hex),
        coroutine=target.coroutine,
        units=units,
        padded_units=-(-units // PLANE_WIDTH) * PLANE_WIDTH,
        shared_bytes=target.shared_bytes,
        llvm=text,
        llvm_opt=optimized,
        timings=timings,
        host_calls=tuple(target.host_calls),
        shape="unit loops" if target.fission is not None else "coroutines" if target.coroutine else "plain",
        merged_rows=target.merge_x,
    )
