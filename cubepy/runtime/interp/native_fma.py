"""The interp's f32 and f64 ``fma`` in native code: the host's own fused multiply-add, one pass over the lanes.

``cubepy.ir.fma`` computes a correctly rounded ``a * b + c`` with numpy alone (the product exact in f64, a
round-to-odd repair where the sum lands on an f32 rounding midpoint; error-free transformations for f64).  It
is exact, but it costs 8x an unfused f32 multiply-add on 65536 lanes and 40x on 2^20, where its f64
temporaries stop fitting in cache; an fma-bound loop on the interp pays that on every round.  IEEE 754's
``fusedMultiplyAdd`` is the same single rounding wherever it is computed, so the host's ``llvm.fma`` (one
``vfmadd`` on x86-64 with FMA, ``fmaf``/``fma`` of the C library elsewhere) gives the same bits: the module's
tests check both on random, special and midpoint cases.

The helper is a small fixed LLVM module, one loop per element type and per operand shape (each of ``a``,
``b``, ``c`` either one value for every lane or one per lane, contiguous), optimized and emitted as host object
code in the compile server like every cubepy compile, and mapped in by the cpu runtime's ``load_object`` (which makes
the symbols it needs resolvable first) once per process: built by the first ``fma`` over
at least ``BUILD_MIN_LANES`` lanes (about 0.3 s, so small launches never pay it).  Where it cannot be built (no
LLVM host target) or does not apply (other types, strided or differently shaped operands), ``fma`` returns
None and the caller uses the numpy emulation.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import threading
from collections.abc import Callable

import numpy as np

__all__ = ["fma", "unavailable_reason"]

_TYPES: dict[np.dtype, tuple[str, str]] = {
    np.dtype(np.float32): ("float", "f32"),
    np.dtype(np.float64): ("double", "f64"),
}
_Shape = tuple[bool, bool, bool]  # per operand a, b, c: one value per lane (else one for every lane)
_SHAPES: list[_Shape] = [(x, y, z) for x, y, z in itertools.product((False, True), repeat=3)]
_Loop = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
BUILD_MIN_LANES = 16384  # an fma over fewer lanes than this does not build the helper (it uses it once built)


class _Helper:
    """The process's helper: tried once; its loops, or why there are none; what keeps its code alive."""

    tried = False
    loops: dict[tuple[np.dtype, _Shape], Callable[..., None]] | None = None
    reason: str | None = None
    kept: object = None
    lock = threading.Lock()


def _name(suffix: str, per_lane: _Shape) -> str:
    return f"cubepy_fma_{suffix}_" + "".join("v" if lanes else "s" for lanes in per_lane)


def _module_text() -> str:
    """One ``void f(a, b, c, out, n)`` per element type and operand shape: ``out[i] = fma(a[i], b[i], c[i])``."""
    parts = ["declare float @llvm.fma.f32(float, float, float)", "declare double @llvm.fma.f64(double, double, double)"]
    for ty, suffix in _TYPES.values():
        for per_lane in _SHAPES:
            loads = []
            for name, lanes in zip("abc", per_lane, strict=True):
                at = f"%{name}.at" if lanes else f"%{name}"
                if lanes:
                    loads.append(f"  %{name}.at = getelementptr inbounds {ty}, ptr %{name}, i64 %i")
                loads.append(f"  %{name}.v = load {ty}, ptr {at}")
            body = "\n".join(loads)
            parts.append(f"""
define void @{_name(suffix, per_lane)}(ptr noalias readonly %a, ptr noalias readonly %b, ptr noalias readonly %c,
                                       ptr noalias writeonly %out, i64 %n) nounwind {{
entry:
  %none = icmp sle i64 %n, 0
  br i1 %none, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
{body}
  %r = call {ty} @llvm.fma.{suffix}({ty} %a.v, {ty} %b.v, {ty} %c.v)
  %out.at = getelementptr inbounds {ty}, ptr %out, i64 %i
  store {ty} %r, ptr %out.at
  %next = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}}""")
    return "\n".join(parts) + "\n"


def _build() -> dict[tuple[np.dtype, _Shape], Callable[..., None]]:
    from cubepy.compiler import llvm_server
    from cubepy.compiler.emit_host import host_machine_spec, host_unavailable_reason
    from cubepy.compiler.llvm_process import LLVM_LOCK, binding, unpack_parts
    from cubepy.runtime.cpu.loader import load_object

    reason = host_unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
    text = _module_text()
    with LLVM_LOCK:
        binding().parse_assembly(text).verify()
    payload = llvm_server.run_job("object", (text, *host_machine_spec()), "cubepy_fma", emitting="host object code")
    code = bytes.fromhex(unpack_parts(payload)[2])
    names = {
        (dtype, per_lane): _name(suffix, per_lane) for dtype, (_, suffix) in _TYPES.items() for per_lane in _SHAPES
    }
    _Helper.kept, addresses = load_object("cubepy_fma", code, names.values())
    return {key: _Loop(addresses[name]) for key, name in names.items()}


def _loops() -> dict[tuple[np.dtype, _Shape], Callable[..., None]] | None:
    """The helper's loops, built on the first call (one thread builds; the others wait for it), or None."""
    if not _Helper.tried:
        with _Helper.lock:
            if not _Helper.tried:
                try:
                    _Helper.loops = _build()
                except Exception as error:  # any failure leaves the numpy emulation in charge, and says why
                    _Helper.reason = f"{type(error).__name__}: {error}"
                _Helper.tried = True
    return _Helper.loops


def unavailable_reason() -> str | None:
    """Why the native fma cannot be used in this process (building it if not tried yet), or None."""
    _loops()
    return _Helper.reason


def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray | None:
    """``a * b + c`` rounded once, lane-wise (f32 or f64, all three of one type; an operand either one value or
    one per lane, C-contiguous); None where that does not hold or the helper is unavailable."""
    dtype = a.dtype
    if dtype not in _TYPES or b.dtype != dtype or c.dtype != dtype:
        return None
    shape = a.shape
    if not shape == b.shape == c.shape:  # one value for every lane in some: numpy's broadcast (rarer, slower)
        try:
            shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
        except ValueError:
            return None
    per_lane = []
    for operand in (a, b, c):
        if operand.size == 1:
            per_lane.append(False)
        elif operand.shape == shape and operand.flags.c_contiguous:
            per_lane.append(True)
        else:
            return None
    lanes = math.prod(shape)
    if lanes < BUILD_MIN_LANES and not _Helper.tried:
        return None  # small work never pays for building the helper (about 0.3 s: llvmlite, a child, O3)
    loops = _loops()
    if loops is None:
        return None
    out = np.empty(shape, dtype)
    if lanes:
        loops[(dtype, (per_lane[0], per_lane[1], per_lane[2]))](
            a.ctypes.data, b.ctypes.data, c.ctypes.data, out.ctypes.data, lanes
        )
    return out
