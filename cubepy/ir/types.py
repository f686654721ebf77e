"""Element types and item (line) types of the IR."""

from __future__ import annotations

import attrs


@attrs.frozen(repr=False)
class ElemType:
    """A scalar element type: ``name``, ``size`` in bytes and ``kind`` (float, int, uint or bool)."""

    name: str
    size: int
    kind: str  # "float" | "int" | "uint" | "bool"

    @property
    def is_float(self) -> bool:
        """True for f16, bf16, f32, f64."""
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        """True for signed and unsigned integers (not bool)."""
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        """True for signed integers and floats."""
        return self.kind in ("int", "float")

    @property
    def is_bool(self) -> bool:
        """True for the boolean type."""
        return self.kind == "bool"

    @property
    def bits(self) -> int:
        """Width in bits (bool counts as 8, its storage size)."""
        return self.size * 8

    def __repr__(self) -> str:
        return self.name


F16 = ElemType("f16", 2, "float")
BF16 = ElemType("bf16", 2, "float")
F32 = ElemType("f32", 4, "float")
F64 = ElemType("f64", 8, "float")
I8 = ElemType("i8", 1, "int")
I16 = ElemType("i16", 2, "int")
I32 = ElemType("i32", 4, "int")
I64 = ElemType("i64", 8, "int")
U8 = ElemType("u8", 1, "uint")
U16 = ElemType("u16", 2, "uint")
U32 = ElemType("u32", 4, "uint")
U64 = ElemType("u64", 8, "uint")
BOOL = ElemType("bool", 1, "bool")
# usize is the address-width unsigned integer; every target here is 64-bit.
USIZE = ElemType("usize", 8, "uint")

ALL_ELEM_TYPES: tuple[ElemType, ...] = (F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL, USIZE)
ELEM_BY_NAME: dict[str, ElemType] = {e.name: e for e in ALL_ELEM_TYPES}


@attrs.frozen(repr=False)
class Type:
    """An item type: an element type and a line size (1 for scalars, N for a SIMD line of N lanes)."""

    elem: ElemType
    line: int = 1

    @property
    def is_line(self) -> bool:
        """True when this is a line of more than one lane."""
        return self.line > 1

    @property
    def size(self) -> int:
        """Bytes occupied by one item."""
        return self.elem.size * self.line

    def scalar(self) -> Type:
        """The same element type with line size 1."""
        return Type(self.elem, 1)

    def with_elem(self, elem: ElemType) -> Type:
        """The same line size with another element type."""
        return Type(elem, self.line)

    def __repr__(self) -> str:
        return self.elem.name if self.line == 1 else f"{self.elem.name}x{self.line}"


def scalar(elem: ElemType) -> Type:
    """The scalar item type of ``elem``."""
    return Type(elem, 1)


def promote(a: ElemType, b: ElemType) -> ElemType:
    """The one promotion rule for mixing two element types in arithmetic.

    Equal types stay.  A float with anything gives the float (the wider float of two floats).
    Two integers give the wider; ``usize`` with a 32-bit or narrower integer gives ``usize``;
    at equal width a signed and an unsigned integer give the unsigned one (as C and CubeCL do).
    """
    if a == b:
        return a
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            if a.size != b.size:
                return a if a.size > b.size else b
            return F32  # f16 with bf16: neither holds the other
        return a if a.is_float else b
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a is USIZE or b is USIZE:
        return USIZE
    if a.size != b.size:
        return a if a.size > b.size else b
    return a if a.kind == "uint" else b


def is_lossless(src: ElemType, dst: ElemType) -> bool:
    """Whether every value of ``src`` is exactly representable in ``dst`` (implicit conversion allowed)."""
    if src == dst:
        return True
    if src.is_bool:
        return not dst.is_bool
    if dst.is_bool:
        return False
    if src.is_float:
        return dst.is_float and (dst.size > src.size) and not (src is BF16 and dst is F16)
    if dst.is_float:
        mantissa = {F16: 11, BF16: 8, F32: 24, F64: 53}[dst]
        return src.bits - (1 if src.kind == "int" else 0) <= mantissa
    if src.kind == dst.kind:
        return dst.size >= src.size
    if src.kind == "uint":  # unsigned into signed needs one more bit
        return dst.size > src.size
    return False  # signed into unsigned loses negatives
