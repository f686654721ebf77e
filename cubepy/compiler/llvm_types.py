"""How cubepy's IR types map to ``llvmlite.ir`` types, constants and attributes.

Registers and memory differ only for ``bool``: a bool is ``i1`` in registers and ``i8`` in memory
(buffers, shared memory, local arrays, scalar parameters).  A line of N lanes is an LLVM vector
``<N x T>`` in both.  ``usize`` is ``i64``; signedness lives in the IR type, not in LLVM's.
"""

from __future__ import annotations

import struct
from typing import Any, SupportsFloat, SupportsInt, cast

import llvmlite.ir as ir

from cubepy.ir import ElemType, Type


def _fill_llvmlite_escape_table() -> None:
    """Fill llvmlite's string-escape table now, while this module is imported under Python's import lock.

    llvmlite fills it on the first string it escapes, without a lock: a second thread printing a module
    meanwhile sees a half-filled table and fails with ``KeyError`` (seen with eight threads launching their
    first kernels at once).  Escaping an empty string fills all 256 entries.
    """
    from llvmlite.ir import values

    escape = getattr(values, "_escape_string", None)
    if escape is not None:  # a private name: a later llvmlite may not have it
        escape(b"")


_fill_llvmlite_escape_table()


class BFloatType(ir.types._BaseFloatType):  # type: ignore[misc]  # llvmlite ships no types
    """LLVM's ``bfloat`` (llvmlite 0.50 has no such type); constants print as ``0xRXXXX``."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"

    def format_constant(self, value: float) -> str:
        """The exact bf16 bit pattern, rounded to nearest even from f32 (NaN stays a quiet NaN)."""
        return f"0xR{bf16_bits(value):04X}"


BFloatType._create_instance()

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
VOID = ir.VoidType()
F32_TYPE = ir.FloatType()
GLOBAL_PTR = ir.PointerType(addrspace=1)
SHARED_PTR = ir.PointerType(addrspace=3)
CONST_PTR = ir.PointerType(addrspace=4)
GENERIC_PTR = ir.PointerType()

# ElemType.llvm (the LLVM type name, from cubepy.ir's element table) -> the llvmlite type.
_LLVM_TYPES: dict[str, ir.Type] = {
    "half": ir.HalfType(),
    "bfloat": BFloatType(),
    "float": ir.FloatType(),
    "double": ir.DoubleType(),
    "i1": I1,
    "i8": I8,
    "i16": I16,
    "i32": I32,
    "i64": I64,
}


def bf16_bits(value: float) -> int:
    """The bf16 encoding of ``value``: f32 bits rounded to nearest even on the upper 16 bits."""
    if value != value:  # NaN
        return 0x7FC0
    try:
        bits: int = struct.unpack("<I", struct.pack("<f", value))[0]
    except OverflowError:  # finite but beyond f32: rounds to infinity in bf16 as well
        bits = 0xFF800000 if value < 0 else 0x7F800000
    rounding = 0x7FFF + ((bits >> 16) & 1)
    return ((bits + rounding) >> 16) & 0xFFFF


def elem_type(elem: ElemType, *, memory: bool = False) -> ir.Type:
    """The LLVM type of one element (``bool`` is i1 in registers, i8 in memory)."""
    if elem.is_bool and memory:
        return I8
    return _LLVM_TYPES[elem.llvm]


def item_type(ty: Type, *, memory: bool = False) -> ir.Type:
    """The LLVM type of one item: the element type, or a vector of ``line`` elements."""
    scalar = elem_type(ty.elem, memory=memory)
    return ir.VectorType(scalar, ty.line) if ty.is_line else scalar


def item_align(ty: Type) -> int:
    """The alignment of one item in memory: the largest power of two dividing its size.

    A line of 4 f32 is 16-byte aligned, which lets NVPTX emit a single ``ld.global.v4``.
    """
    size = ty.size
    return size & -size


def intrinsic_suffix(llty: ir.Type) -> str:
    """The overload suffix of an LLVM intrinsic for ``llty`` (``f32``, ``v4f32``, ``i64``)."""
    if isinstance(llty, ir.VectorType):
        return f"v{llty.count}{intrinsic_suffix(llty.element)}"
    if isinstance(llty, ir.IntType):
        return f"i{llty.width}"
    return cast(str, llty.intrinsic_name)


def scalar_of(llty: ir.Type) -> ir.Type:
    """The element type of a vector type, or the type itself."""
    return llty.element if isinstance(llty, ir.VectorType) else llty


def wrap_int(value: int, bits: int, signed: bool) -> int:
    """``value`` reduced modulo 2**bits into the signed or unsigned range."""
    value &= (1 << bits) - 1
    if signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def scalar_constant(elem: ElemType, value: object, *, memory: bool = False) -> ir.Constant:
    """An LLVM constant of one element; integers are wrapped to the type's width."""
    llty = elem_type(elem, memory=memory)
    if elem.is_bool:
        return ir.Constant(llty, int(bool(value)))
    if elem.is_float:
        value = float(cast(SupportsFloat, value))
        if value == 0.0 and struct.pack("<d", value) == struct.pack("<d", 0.0):
            return ir.Constant(llty, None)  # prints "0.0" rather than llvmlite's padded hex
        return ir.Constant(llty, value)
    # Printed in the signed range so LLVM's parser never sees an out-of-range literal.
    return ir.Constant(llty, wrap_int(int(cast(SupportsInt, value)), elem.bits, signed=True))


def constant(ty: Type, value: object, *, memory: bool = False) -> ir.Constant:
    """An LLVM constant of item type ``ty``; lines splat ``value`` to every lane."""
    scalar = scalar_constant(ty.elem, value, memory=memory)
    if not ty.is_line:
        return scalar
    vector = ir.VectorType(scalar.type, ty.line)
    if scalar.constant is None or scalar.constant == 0 and not ty.elem.is_float:
        return ir.Constant(vector, None)  # zeroinitializer
    return ir.Constant(vector, [scalar] * ty.line)


def splat(llty: ir.Type, value: object) -> ir.Constant:
    """A constant of LLVM type ``llty`` (scalar or vector) with every lane equal to ``value``."""
    element = scalar_of(llty)
    if value == 0 and not (isinstance(value, float) and struct.pack("<d", value) != struct.pack("<d", 0.0)):
        return ir.Constant(llty, None)  # 0 / 0.0 / zeroinitializer
    scalar = ir.Constant(element, value)
    if isinstance(llty, ir.VectorType):
        return ir.Constant(llty, [scalar] * llty.count)
    return scalar


class RawArgumentAttributes(ir.values.ArgumentAttributes):  # type: ignore[misc]  # llvmlite ships no types
    """Parameter attributes printed verbatim (``byval([128 x i8])``, ``"nvvm.grid_constant"``).

    llvmlite only prints typed attributes for typed pointers and knows no string attributes.
    """

    def __init__(self, raw: list[str]) -> None:
        super().__init__()
        self.raw = list(raw)

    def __bool__(self) -> bool:
        return bool(self.raw)

    def _to_list(self, typ: Any) -> list[str]:
        return list(self.raw)


class RawFunctionAttributes(ir.values.FunctionAttributes):  # type: ignore[misc]  # llvmlite ships no types
    """Function attributes printed verbatim, for string attributes such as ``"nvvm.reqntid"="32,1,1"``."""

    def __init__(self, raw: list[str]) -> None:
        super().__init__()
        self.raw = list(raw)

    def __bool__(self) -> bool:
        return bool(self.raw)

    def _to_list(self, ret_type: Any) -> list[str]:
        return list(self.raw)
