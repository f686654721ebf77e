"""Element types and item (line) types of the IR.

``ElemType`` is the one table of what every layer needs to know about an element type: its size,
kind, numpy dtype, LLVM type name and TMA (tensor-map) data type code.  Nothing else keeps a copy.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

# Element name -> numpy dtype, filled on first use (bf16's needs ml_dtypes, ~1 s to import).
_NUMPY_DTYPES: dict[str, np.dtype[Any]] = {}


@attrs.frozen(repr=False)
class ElemType:
    """A scalar element type and everything the layers need to know about it.

    ``name``; ``size`` in bytes (the ABI size in memory; bool is one byte); ``kind`` (float, int, uint
    bool, or fp8: an 8-bit float that is only stored, converted and fed to tensor cores, never computed
    with); ``numpy_name``, the name of the numpy dtype that stores it (``"bfloat16"`` is
    ``ml_dtypes.bfloat16``); ``llvm``, the LLVM type name in registers (bool is ``i1`` there and ``i8``
    in memory); ``tma_code``, the ``CUtensorMapDataType`` value a TMA descriptor uses for it, or None
    when tensor maps cannot hold it.
    """

    name: str
    size: int
    kind: str  # "float" | "int" | "uint" | "bool" | "fp8"
    numpy_name: str
    llvm: str
    tma_code: int | None = None

    @property
    def is_float(self) -> bool:
        """True for f16, bf16, f32, f64."""
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        """True for signed and unsigned integers (not bool)."""
        return self.kind in ("int", "uint")

    @property
    def is_fp8(self) -> bool:
        """True for the 8-bit floats e4m3 and e5m2 (storage and tensor-core inputs; no arithmetic)."""
        return self.kind == "fp8"

    @property
    def is_bool(self) -> bool:
        """True for the boolean type."""
        return self.kind == "bool"

    @property
    def bits(self) -> int:
        """Width in bits (bool counts as 8, its storage size)."""
        return self.size * 8

    @property
    def numpy(self) -> np.dtype[Any]:
        """The numpy dtype that stores this type (bf16 imports ``ml_dtypes`` on first use only)."""
        dtype = _NUMPY_DTYPES.get(self.name)
        if dtype is None:
            dtype = _NUMPY_DTYPES[self.name] = _load_numpy_dtype(self.numpy_name)
        return dtype

    def __repr__(self) -> str:
        return self.name


_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def _load_numpy_dtype(numpy_name: str) -> np.dtype[Any]:
    if numpy_name in _ML_DTYPES:
        import ml_dtypes  # imported here only: it takes ~1 s and most kernels never use bf16 or fp8

        found: np.dtype[Any] = np.dtype(getattr(ml_dtypes, numpy_name))
        return found
    return np.dtype(numpy_name)


# CUtensorMapDataType values are those of cuda.h (CU_TENSOR_MAP_DATA_TYPE_*).  The driver has no
# signed 8/16-bit codes: i8 and i16 move as UINT8 and UINT16 (TMA copies bytes, it never converts).
F16 = ElemType("f16", 2, "float", "float16", "half", tma_code=6)
BF16 = ElemType("bf16", 2, "float", "bfloat16", "bfloat", tma_code=9)
F32 = ElemType("f32", 4, "float", "float32", "float", tma_code=7)
F64 = ElemType("f64", 8, "float", "float64", "double", tma_code=8)
I8 = ElemType("i8", 1, "int", "int8", "i8", tma_code=0)
I16 = ElemType("i16", 2, "int", "int16", "i16", tma_code=1)
I32 = ElemType("i32", 4, "int", "int32", "i32", tma_code=3)
I64 = ElemType("i64", 8, "int", "int64", "i64", tma_code=5)
U8 = ElemType("u8", 1, "uint", "uint8", "i8", tma_code=0)
U16 = ElemType("u16", 2, "uint", "uint16", "i16", tma_code=1)
U32 = ElemType("u32", 4, "uint", "uint32", "i32", tma_code=2)
U64 = ElemType("u64", 8, "uint", "uint64", "i64", tma_code=4)
BOOL = ElemType("bool", 1, "bool", "bool", "i1")
# fp8 (OCP FP8: e4m3 with no infinity, max 448; e5m2 IEEE-like, max 57344) is stored as one byte (i8 in
# LLVM).  CUtensorMapDataType has no fp8 code: a tensor map moves fp8 as UINT8 (TMA copies bytes).
E4M3 = ElemType("e4m3", 1, "fp8", "float8_e4m3fn", "i8", tma_code=0)
E5M2 = ElemType("e5m2", 1, "fp8", "float8_e5m2", "i8", tma_code=0)
# usize is the address-width unsigned integer; every target here is 64-bit.
USIZE = ElemType("usize", 8, "uint", "uint64", "i64")

ALL_ELEM_TYPES: tuple[ElemType, ...] = (
    F16,
    BF16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    BOOL,
    USIZE,
    E4M3,
    E5M2,
)
ELEM_BY_NAME: dict[str, ElemType] = {e.name: e for e in ALL_ELEM_TYPES}
# numpy dtype name -> element type; usize shares uint64 with u64, which keeps it.
_ELEM_BY_NUMPY_NAME: dict[str, ElemType] = {e.numpy_name: e for e in reversed(ALL_ELEM_TYPES)}


def elem_of_numpy(dtype: np.dtype[Any]) -> ElemType | None:
    """The element type a numpy dtype stores (u64 for uint64), or None; never imports ml_dtypes itself."""
    elem = _ELEM_BY_NUMPY_NAME.get(dtype.name)
    if elem is None or dtype != elem.numpy:  # the name matched but not the dtype (byte order, ...)
        return None
    return elem


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
    if src.is_fp8 or dst.is_fp8:  # fp8 converts only by an explicit cast (it is not computed with)
        return False
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
