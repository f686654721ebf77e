"""Host-side TMA tensor maps: one checked `cuTensorMapEncodeTiled/Im2col` call, kept in driver order.

Users give shapes, tiles, element strides and corners in numpy order (outermost first); the map stores
them the way the driver takes them (dimension 0 innermost, byte strides for dimensions 1..rank-1,
im2col corners W first).  Every encoder rule (rules 1-22 of docs/semantics/tma.md, "What the encoder checks") is checked
here, on every runtime, and a broken one raises `TensorMapError` naming the parameter, its value and
the rule.  The descriptor is runtime data: only `compilation_arg()` enters a kernel cache key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from cubepy.errors import TensorMapError
from cubepy.ir.types import ALL_ELEM_TYPES, ElemType, elem_of_numpy

__all__ = [
    "CU_ENUM_VALUES",
    "TMA_ELEM_TYPES",
    "TensorMapArg",
    "TensorMapCompilationArg",
]

# The element types a tensor map can hold: those with a CUtensorMapDataType code in cubepy.ir's table
# (i8/i16 move as UINT8/UINT16: TMA copies bits).  TFLOAT32 and the packed sm_100 types are out of scope.
TMA_ELEM_TYPES: dict[str, ElemType] = {e.name: e for e in ALL_ELEM_TYPES if e.tma_code is not None}

# Values of the driver enums (cuda.h), so a CUDA runtime can turn `encode_params()` into a call.
CU_ENUM_VALUES: dict[str, int] = {
    "CU_TENSOR_MAP_DATA_TYPE_UINT8": 0,
    "CU_TENSOR_MAP_DATA_TYPE_UINT16": 1,
    "CU_TENSOR_MAP_DATA_TYPE_UINT32": 2,
    "CU_TENSOR_MAP_DATA_TYPE_INT32": 3,
    "CU_TENSOR_MAP_DATA_TYPE_UINT64": 4,
    "CU_TENSOR_MAP_DATA_TYPE_INT64": 5,
    "CU_TENSOR_MAP_DATA_TYPE_FLOAT16": 6,
    "CU_TENSOR_MAP_DATA_TYPE_FLOAT32": 7,
    "CU_TENSOR_MAP_DATA_TYPE_FLOAT64": 8,
    "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16": 9,
    "CU_TENSOR_MAP_INTERLEAVE_NONE": 0,
    "CU_TENSOR_MAP_INTERLEAVE_16B": 1,
    "CU_TENSOR_MAP_INTERLEAVE_32B": 2,
    "CU_TENSOR_MAP_SWIZZLE_NONE": 0,
    "CU_TENSOR_MAP_SWIZZLE_32B": 1,
    "CU_TENSOR_MAP_SWIZZLE_64B": 2,
    "CU_TENSOR_MAP_SWIZZLE_128B": 3,
    "CU_TENSOR_MAP_L2_PROMOTION_NONE": 0,
    "CU_TENSOR_MAP_L2_PROMOTION_L2_64B": 1,
    "CU_TENSOR_MAP_L2_PROMOTION_L2_128B": 2,
    "CU_TENSOR_MAP_L2_PROMOTION_L2_256B": 3,
    "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE": 0,
    "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA": 1,
}
_DATA_TYPE_ENUM_NAME: dict[int, str] = {
    value: name for name, value in CU_ENUM_VALUES.items() if name.startswith("CU_TENSOR_MAP_DATA_TYPE_")
}

# user spelling -> driver enum name, per option
_INTERLEAVE = {
    "none": "CU_TENSOR_MAP_INTERLEAVE_NONE",
    "16B": "CU_TENSOR_MAP_INTERLEAVE_16B",
    "32B": "CU_TENSOR_MAP_INTERLEAVE_32B",
}
_SWIZZLE = {
    "none": "CU_TENSOR_MAP_SWIZZLE_NONE",
    "32B": "CU_TENSOR_MAP_SWIZZLE_32B",
    "64B": "CU_TENSOR_MAP_SWIZZLE_64B",
    "128B": "CU_TENSOR_MAP_SWIZZLE_128B",
}
_SWIZZLE_SM100 = ("128B_atom_32B", "128B_atom_32B_flip_8B", "128B_atom_64B", "96B")
_L2 = {
    "none": "CU_TENSOR_MAP_L2_PROMOTION_NONE",
    "64B": "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
    "128B": "CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
    "256B": "CU_TENSOR_MAP_L2_PROMOTION_L2_256B",
}
_OOB = {"zero": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE", "nan": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"}

SWIZZLE_SPAN = {"none": 0, "32B": 32, "64B": 64, "128B": 128}
# rule 17: corner range per im2col rank; rule 26 (offsets) lives with the emulator
_CORNER_RANGE = {3: (-32768, 32767), 4: (-128, 127), 5: (-16, 15)}


@dataclass(frozen=True)
class TensorMapCompilationArg:
    """The compile-relevant part of a tensor map: element type, rank and mode (not the descriptor)."""

    dtype_name: str
    rank: int
    mode: str


class TensorMapArg:
    """A validated TMA descriptor for one tensor, in the driver's dimension order (innermost first)."""

    DESCRIPTOR_BYTES = 128  # rule 11: the CUtensorMap struct is 128 bytes ...
    DESCRIPTOR_ALIGN = 64  # ... and 64-byte aligned; a runtime allocating it must honour both

    __slots__ = (
        "box_dim",
        "channels_per_pixel",
        "dtype",
        "dtype_name",
        "elem_strides",
        "global_address",
        "global_dim",
        "global_strides",
        "handle",
        "interleave",
        "l2_promotion",
        "lower_corner",
        "mode",
        "oob_fill",
        "pixels_per_column",
        "rank",
        "shape",
        "strides",
        "swizzle",
        "upper_corner",
    )
    box_dim: tuple[int, ...]  # tiled maps only
    channels_per_pixel: int | None  # im2col maps only (also the three below)
    pixels_per_column: int | None
    lower_corner: tuple[int, ...] | None
    upper_corner: tuple[int, ...] | None
    dtype: np.dtype
    dtype_name: str
    elem_strides: tuple[int, ...]
    global_address: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]
    handle: Any
    interleave: str
    l2_promotion: str
    mode: str
    oob_fill: str
    rank: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    swizzle: str

    def __init__(self, **fields: Any) -> None:
        # Private: fields arrive already checked from `tiled` / `im2col`.
        for name in self.__slots__:
            setattr(self, name, fields.get(name))

    # ---------------------------------------------------------------- constructors

    @classmethod
    def tiled(
        cls,
        tensor: Any,
        tile: Any,
        *,
        elem_stride: Any = None,
        swizzle: str = "none",
        oob_fill: str = "zero",
        interleave: str = "none",
        l2_promotion: str = "none",
    ) -> TensorMapArg:
        """A tile-mode map (`cuTensorMapEncodeTiled`); `tile` and `elem_stride` are outermost first."""
        where = "TensorMapArg.tiled"
        common = _common(where, tensor, elem_stride, swizzle, oob_fill, interleave, l2_promotion, rank_range=(1, 5))
        rank, es = common["rank"], common["dtype"].itemsize
        inter, swz = common["interleave"], common["swizzle"]
        tile = _int_list(where, "tile", tile)
        if len(tile) != rank:
            _fail(where, "tile", tuple(tile), 12, f"the tile needs one entry per dimension ({rank})")
        box = tile[::-1]
        for i, b in enumerate(box):
            if not 1 <= b <= 256:
                _fail(where, _pname("tile", i, rank), b, 12, "every box dimension must be in [1, 256]")
        row = box[0] * es
        if inter == "none" and row % 16 != 0:
            _fail(
                where,
                _pname("tile", 0, rank),
                box[0],
                13,
                f"the box's inner row (tile[-1] * {es} bytes = {row}) must be a multiple of 16 bytes",
            )
        if inter == "none" and swz != "none" and row > SWIZZLE_SPAN[swz]:
            _fail(
                where,
                _pname("tile", 0, rank),
                box[0],
                14,
                f"with swizzle {swz!r} the box's inner row ({row} bytes) must be at most {SWIZZLE_SPAN[swz]} bytes",
            )
        for i, (b, e) in enumerate(zip(box, common["elem_strides"])):
            if e > 1 and b % e != 0:
                _fail(
                    where,
                    _pname("tile", i, rank),
                    b,
                    15,
                    f"a box dimension must be a multiple of its element stride ({e}); otherwise the "
                    "last partial stride is still loaded",
                )
        return cls(mode="tiled", box_dim=tuple(box), **common)

    @classmethod
    def im2col(
        cls,
        tensor: Any,
        *,
        channels_per_pixel: int,
        pixels_per_column: int,
        lower_corner: Any,
        upper_corner: Any,
        elem_stride: Any = None,
        swizzle: str = "none",
        oob_fill: str = "zero",
        interleave: str = "none",
        l2_promotion: str = "none",
    ) -> TensorMapArg:
        """An im2col map (`cuTensorMapEncodeIm2col`) over NWC/NHWC/NDHWC; corners are outermost first."""
        where = "TensorMapArg.im2col"
        common = _common(where, tensor, elem_stride, swizzle, oob_fill, interleave, l2_promotion, rank_range=(3, 5))
        rank, es, dims = common["rank"], common["dtype"].itemsize, common["global_dim"]
        spatial = rank - 2
        corners = {}
        for name, value in (("lower_corner", lower_corner), ("upper_corner", upper_corner)):
            values = _int_list(where, name, value)
            if len(values) != spatial:
                _fail(
                    where,
                    name,
                    tuple(values),
                    16,
                    f"a rank-{rank} im2col map needs {spatial} corner value(s), one per spatial dimension",
                )
            lo, hi = _CORNER_RANGE[rank]
            for k, v in enumerate(values):
                if not lo <= v <= hi:
                    _fail(where, f"{name}[{k}]", v, 17, f"rank-{rank} im2col corners must be in [{lo}, {hi}]")
            corners[name] = tuple(values[::-1])  # W first, as the driver reads them
        for j in range(spatial):
            lo, up = corners["lower_corner"][j], corners["upper_corner"][j]
            if dims[1 + j] - 1 + up < lo:
                k = spatial - 1 - j
                _fail(
                    where,
                    f"upper_corner[{k}]",
                    up,
                    18,
                    f"the pixel box must be non-empty: extent {dims[1 + j]} - 1 + upper ({up}) < lower ({lo})",
                )
        cpp = _int(where, "channels_per_pixel", channels_per_pixel)
        if not 1 <= cpp <= 256:
            _fail(where, "channels_per_pixel", cpp, 19, "channels_per_pixel must be in [1, 256]")
        if (cpp * es) % 16 != 0:
            _fail(
                where,
                "channels_per_pixel",
                cpp,
                19,
                f"a pixel's row (channels_per_pixel * {es} bytes = {cpp * es}) must be a multiple of 16 bytes",
            )
        ppc = _int(where, "pixels_per_column", pixels_per_column)
        if not 1 <= ppc <= 1024:
            _fail(where, "pixels_per_column", ppc, 20, "pixels_per_column must be in [1, 1024]")
        swz = common["swizzle"]
        if common["interleave"] == "none" and swz != "none" and cpp * es > SWIZZLE_SPAN[swz]:
            _fail(
                where,
                "channels_per_pixel",
                cpp,
                21,
                f"with swizzle {swz!r} a pixel's row ({cpp * es} bytes) must be at most {SWIZZLE_SPAN[swz]} bytes",
            )
        if common["elem_strides"][rank - 1] != 1:
            _fail(
                where,
                "elem_stride[0] (N)",
                common["elem_strides"][rank - 1],
                22,
                "the batch (N) element stride of an im2col map must be 1",
            )
        return cls(mode="im2col", channels_per_pixel=cpp, pixels_per_column=ppc, **corners, **common)

    # ---------------------------------------------------------------- derived values

    @property
    def box_bytes(self) -> int:
        """Bytes one load writes to shared memory and credits as complete_tx (filled elements included)."""
        es = self.dtype.itemsize
        if self.mode == "im2col":
            assert self.pixels_per_column is not None and self.channels_per_pixel is not None
            return self.pixels_per_column * self.channels_per_pixel * es
        return es * math.prod(-(-b // e) for b, e in zip(self.box_dim, self.effective_elem_strides))

    @property
    def effective_elem_strides(self) -> tuple[int, ...]:
        """Element strides as the hardware applies them: dimension 0's is 1 unless interleaved."""
        if self.interleave == "none":
            return (1, *self.elem_strides[1:])
        return tuple(self.elem_strides)

    def compilation_arg(self) -> TensorMapCompilationArg:
        """The hashable cache-key part; the descriptor itself is runtime data."""
        return TensorMapCompilationArg(self.dtype_name, self.rank, self.mode)

    def encode_params(self, base_address: int = 0) -> dict[str, Any]:
        """The exact arguments of cuTensorMapEncodeTiled/Im2col (driver order, enum names).

        `base_address` is the allocation's device address; `globalAddress` adds the handle's offset.
        """
        address = int(base_address) + self.global_address
        if address % 16 != 0 or (self.interleave == "32B" and address % 32 != 0):
            need = 32 if self.interleave == "32B" else 16
            _fail(
                "TensorMapArg.encode_params",
                "globalAddress",
                hex(address),
                3,
                f"the global address must be a multiple of {need} bytes",
            )
        params: dict[str, Any] = {
            "tensorDataType": _DATA_TYPE_ENUM_NAME[_tma_code(self.dtype_name)],
            "tensorRank": self.rank,
            "globalAddress": address,
            "globalDim": list(self.global_dim),
            "globalStrides": list(self.global_strides),
        }
        if self.mode == "tiled":
            params["boxDim"] = list(self.box_dim)
        else:
            assert self.lower_corner is not None and self.upper_corner is not None
            params["pixelBoxLowerCorner"] = list(self.lower_corner)
            params["pixelBoxUpperCorner"] = list(self.upper_corner)
            params["channelsPerPixel"] = self.channels_per_pixel
            params["pixelsPerColumn"] = self.pixels_per_column
        params["elementStrides"] = list(self.elem_strides)
        params["interleave"] = _INTERLEAVE[self.interleave]
        params["swizzle"] = _SWIZZLE[self.swizzle]
        params["l2Promotion"] = _L2[self.l2_promotion]
        params["oobFill"] = _OOB[self.oob_fill]
        return params

    def __repr__(self) -> str:
        box = (
            f"box_dim={self.box_dim}"
            if self.mode == "tiled"
            else f"cpp={self.channels_per_pixel}, ppc={self.pixels_per_column}, "
            f"lower={self.lower_corner}, upper={self.upper_corner}"
        )
        return (
            f"TensorMapArg.{self.mode}({self.dtype_name}, global_dim={self.global_dim}, "
            f"global_strides={self.global_strides}, {box}, elem_strides={self.elem_strides}, "
            f"swizzle={self.swizzle!r}, oob_fill={self.oob_fill!r})"
        )


# -------------------------------------------------------------------- checks shared by both modes


def _common(
    where: str,
    tensor: Any,
    elem_stride: Any,
    swizzle: str,
    oob_fill: str,
    interleave: str,
    l2_promotion: str,
    *,
    rank_range: tuple[int, int],
) -> dict[str, Any]:
    """Rules 1-10 (and the tensor's own shape/strides), shared by tiled and im2col maps."""
    handle = getattr(tensor, "handle", tensor)
    shape = getattr(tensor, "shape", None)
    strides = getattr(tensor, "strides", None)
    shape = tuple(int(s) for s in (handle.shape if shape is None else shape))
    strides = tuple(int(s) for s in (handle.strides if strides is None else strides))

    # rule 1: element type
    dtype = np.dtype(handle.dtype)
    elem = elem_of_numpy(dtype)
    if elem is None or elem.tma_code is None:
        _fail(
            where,
            "tensor.dtype",
            str(dtype),
            1,
            "the element type must be one of " + ", ".join(TMA_ELEM_TYPES) + " (tf32 and the packed "
            "sm_100 types are not supported)",
        )
    es = dtype.itemsize

    # rules 7, 8, 9, 10: the enum-valued options (checked before rank: rule 2 depends on interleave)
    interleave = _option(where, "interleave", interleave, _INTERLEAVE, 7)
    swizzle = _swizzle(where, swizzle)
    l2_promotion = _option(where, "l2_promotion", l2_promotion, _L2, 9)
    oob_fill = _option(where, "oob_fill", oob_fill, _OOB, 10)
    if interleave == "32B" and swizzle != "32B":
        _fail(where, "swizzle", swizzle, 7, "interleave '32B' requires swizzle '32B'")
    dtype_name = elem.name
    if oob_fill == "nan" and not elem.is_float:
        _fail(
            where,
            "oob_fill",
            oob_fill,
            10,
            f"NaN out-of-bounds fill needs a floating-point element type, not {dtype_name}",
        )

    # rule 2: rank
    rank = len(shape)
    lo, hi = rank_range
    if not lo <= rank <= hi:
        _fail(where, "tensor rank", rank, 2, f"the tensor's rank must be in [{lo}, {hi}]")
    if interleave != "none" and rank < 3:
        _fail(where, "tensor rank", rank, 2, f"interleave {interleave!r} needs a tensor of rank >= 3")

    # rule 3: global address alignment (the interp and cpu runtimes' allocations start 256-byte aligned)
    global_address = int(handle.offset) * es
    align = 32 if interleave == "32B" else 16
    if global_address % align != 0:
        _fail(
            where,
            "tensor offset",
            f"{handle.offset} elements ({global_address} bytes)",
            3,
            f"the global address must be a multiple of {align} bytes",
        )

    # rule 4: extents
    for k, d in enumerate(shape):
        if not 1 <= d <= 2**32:
            _fail(where, f"tensor.shape[{k}]", d, 4, "every global dimension must be in [1, 2^32]")
    global_dim = tuple(shape[::-1])

    # rule 5: strides (bytes, dimensions 1..rank-1; dimension 0 must be contiguous)
    if len(strides) != rank:
        _fail(
            where,
            "tensor.strides",
            strides,
            5,
            f"there must be one stride per dimension ({rank}), giving rank-1 driver strides",
        )
    if strides[-1] != 1 and shape[-1] != 1:
        _fail(
            where,
            f"tensor.strides[{rank - 1}] (innermost)",
            strides[-1],
            5,
            "the innermost dimension must be contiguous (stride 1 element); TMA has no stride for it",
        )
    global_strides = []
    for i in range(1, rank):
        k = rank - 1 - i
        b = strides[k] * es
        value = f"{strides[k]} ({b} bytes)"
        if b < 0:
            _fail(where, f"tensor.strides[{k}]", value, 5, "global strides cannot be negative")
        if b % align != 0:
            _fail(where, f"tensor.strides[{k}]", value, 5, f"every global stride must be a multiple of {align} bytes")
        if b >= 2**40:
            _fail(where, f"tensor.strides[{k}]", value, 5, "every global stride must be below 2^40 bytes")
        global_strides.append(b)

    # rule 6: element (traversal) strides
    if elem_stride is None:
        estr = [1] * rank
    else:
        estr = _int_list(where, "elem_stride", elem_stride)
        if len(estr) != rank:
            _fail(where, "elem_stride", tuple(estr), 6, f"elem_stride needs one entry per dimension ({rank})")
        estr = estr[::-1]
    for i, e in enumerate(estr):
        if not 1 <= e <= 8:
            _fail(where, _pname("elem_stride", i, rank), e, 6, "every element stride must be in [1, 8]")
    if interleave == "none" and estr[0] != 1:
        _fail(
            where,
            _pname("elem_stride", 0, rank),
            estr[0],
            6,
            "without interleave the innermost element stride is ignored by the hardware and must be 1",
        )

    return {
        "handle": handle,
        "dtype": dtype,
        "dtype_name": dtype_name,
        "rank": rank,
        "shape": shape,
        "strides": strides,
        "global_address": global_address,
        "global_dim": global_dim,
        "global_strides": tuple(global_strides),
        "elem_strides": tuple(estr),
        "interleave": interleave,
        "swizzle": swizzle,
        "l2_promotion": l2_promotion,
        "oob_fill": oob_fill,
    }


def _tma_code(elem_name: str) -> int:
    code = TMA_ELEM_TYPES[elem_name].tma_code
    assert code is not None  # TMA_ELEM_TYPES holds only types with a code
    return code


def _fail(where: str, param: str, value: Any, rule: int, text: str) -> NoReturn:
    raise TensorMapError(f"{where}: {param} = {value} breaks rule {rule}: {text}")


def _pname(param: str, driver_index: int, rank: int) -> str:
    """The user-facing (numpy order) name of a driver-order entry, e.g. "tile[1] (innermost)"."""
    k = rank - 1 - driver_index
    return f"{param}[{k}]" + (" (innermost)" if driver_index == 0 else "")


def _option(where: str, param: str, value: Any, table: dict[str, str], rule: int) -> str:
    for name in table:
        if isinstance(value, str) and value.lower() == name.lower():
            return name
    _fail(where, param, repr(value), rule, f"{param} must be one of " + ", ".join(map(repr, table)))


def _swizzle(where: str, value: Any) -> str:
    if isinstance(value, str) and value.lower() in (s.lower() for s in _SWIZZLE_SM100):
        _fail(where, "swizzle", repr(value), 8, "this swizzle mode is sm_100+; sm_90 has none, 32B, 64B, 128B")
    return _option(where, "swizzle", value, _SWIZZLE, 8)


def _int(where: str, param: str, value: Any) -> int:
    if isinstance(value, (bool, float)) or not isinstance(value, (int, np.integer)):
        raise TensorMapError(f"{where}: {param} = {value!r} must be an integer")
    return int(value)


def _int_list(where: str, param: str, value: Any) -> list[int]:
    try:
        items = list(value)
    except TypeError:
        raise TensorMapError(f"{where}: {param} = {value!r} must be a sequence of integers") from None
    return [_int(where, f"{param}[{k}]", v) for k, v in enumerate(items)]
