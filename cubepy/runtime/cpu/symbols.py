"""The C symbols host object code needs beyond its own: checked before a kernel runs, never resolved to null.

LLVM's x86 code generator turns some operations into calls to compiler-runtime helpers (``fminf`` for a
half ``minnum``, ``__truncsfbf2`` for f32 -> bf16).  libc/libm ones resolve in this process; the bf16
rounding helpers (f32 -> bf16, f64 -> f16/bf16) are provided here (compiled once, registered with ``llvm.add_symbol``); anything else
missing is a ``CompileError`` naming the symbol, instead of a call through a null address.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from typing import Any

from cubepy.compiler.targets.host_async import HOST_OP_SYMBOL
from cubepy.errors import CompileError

# f32 -> bf16, round to nearest even, NaN kept quiet (the same rounding numpy's ml_dtypes.bfloat16 does).
_SUPPORT_IR = r"""
define bfloat @cubepy_truncsfbf2(float %x) {
  %bits = bitcast float %x to i32
  %abs = and i32 %bits, 2147483647
  %nan = icmp ugt i32 %abs, 2139095040
  %lsb = lshr i32 %bits, 16
  %odd = and i32 %lsb, 1
  %bias = add i32 %odd, 32767
  %rounded = add i32 %bits, %bias
  %top = lshr i32 %rounded, 16
  %quiet = or i32 %lsb, 64
  %pick = select i1 %nan, i32 %quiet, i32 %top
  %half = trunc i32 %pick to i16
  %out = bitcast i16 %half to bfloat
  ret bfloat %out
}

; f64 -> f32 rounded to odd (truncate, then set the last bit when inexact): rounding that once more to
; f16 or bf16 (at least 2 bits narrower) equals rounding the f64 directly, as numpy does.
define float @cubepy_round_odd(double %d) {
  %t = fptrunc double %d to float
  %back = fpext float %t to double
  %ad = call double @llvm.fabs.f64(double %d)
  %ab = call double @llvm.fabs.f64(double %back)
  %over = fcmp ogt double %ab, %ad
  %bits = bitcast float %t to i32
  %down = sub i32 %bits, 1
  %toward_zero = select i1 %over, i32 %down, i32 %bits
  %inexact = fcmp one double %back, %d
  %odd = or i32 %toward_zero, 1
  %r = select i1 %inexact, i32 %odd, i32 %toward_zero
  %f = bitcast i32 %r to float
  ret float %f
}

define half @cubepy_truncdfhf2(double %d) {
  %f = call float @cubepy_round_odd(double %d)
  %h = fptrunc float %f to half
  ret half %h
}

define bfloat @cubepy_truncdfbf2(double %d) {
  %f = call float @cubepy_round_odd(double %d)
  %h = call bfloat @cubepy_truncsfbf2(float %f)
  ret bfloat %h
}

declare double @llvm.fabs.f64(double)
"""
_PROVIDED = {
    "__truncsfbf2": "cubepy_truncsfbf2",
    "__truncdfhf2": "cubepy_truncdfhf2",
    "__truncdfbf2": "cubepy_truncdfbf2",
}


def undefined_symbols(elf: bytes) -> list[str]:
    """Names the ELF64 relocatable object ``elf`` references but does not define."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        return []
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strtab_offset = sections[link][4]
        for start in range(offset + entsize, offset + size, entsize):
            name_at, _, _, shndx = struct.unpack_from("<IBBH", elf, start)
            if shndx == 0 and name_at:
                end = elf.index(b"\0", strtab_offset + name_at)
                names.append(elf[strtab_offset + name_at : end].decode())
    return names


@functools.cache
def _support_engine() -> Any:  # an llvmlite execution engine
    from cubepy.compiler.emit_host import host_machine
    from cubepy.compiler.llvm_process import binding

    llvm = binding()
    module = llvm.parse_assembly(_SUPPORT_IR)
    engine = llvm.create_mcjit_compiler(module, host_machine())
    engine.finalize_object()
    for symbol, provider in _PROVIDED.items():
        llvm.add_symbol(symbol, engine.get_function_address(provider))
    return engine


def ensure_resolvable(kernel_name: str, object_code: bytes) -> None:
    """Make every symbol the object needs resolvable, or raise CompileError naming the missing one."""
    process = ctypes.CDLL(None)
    for name in undefined_symbols(object_code):
        if name in _PROVIDED:
            _support_engine()
            continue
        if name == HOST_OP_SYMBOL:  # TMA copies and mbarriers, run by the interp's emulation
            from cubepy.runtime.cpu import emulation

            emulation.register()
            continue
        if not hasattr(process, name):
            raise CompileError(
                f"kernel {kernel_name}: host code needs the runtime function {name!r}, which this "
                "process does not provide"
            )
