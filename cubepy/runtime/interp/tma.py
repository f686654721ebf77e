"""Exact numpy emulation of Hopper TMA bulk tensor copies (tile and im2col modes).

Implements the TMA semantics of docs/semantics/tma.md (tiled and im2col modes): which global elements land where, the
out-of-bounds fill, the 16-byte-chunk swizzle on absolute shared-memory addresses, the im2col pixel
walk, and the instruction-time preconditions of section 4 (rules 23-28) that can be checked here.
A tensor map is anything with the driver-order fields of `TensorMapArg`; coordinates are driver order
(innermost first).  Shared memory is a 1-D uint8 array; global memory is `tm.handle.storage`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from cubepy.errors import TensorMapError

__all__ = [
    "TmaWarning",
    "box_bytes",
    "fill_bytes",
    "im2col_load",
    "im2col_pixels",
    "im2col_rows",
    "slice_address",
    "swizzle_addresses",
    "tiled_box",
    "tiled_load",
    "tiled_store",
]

_SWIZZLE_MASK = {"none": 0, "32B": 1, "64B": 3, "128B": 7}  # bits of the 128-byte line index XORed in
_SWIZZLE_SPAN = {"none": 0, "32B": 32, "64B": 64, "128B": 128}
_SWIZZLE_REPEAT = {"32B": 256, "64B": 512, "128B": 1024}  # dst alignment that keeps the phase at 0
_OFFSET_MAX = {3: 65535, 4: 255, 5: 31}  # rule 26: 16 offset bits split over the spatial dims
# Canonical quiet NaNs; the hardware's exact OOB-NaN pattern is not public (section 1.3) [INFERRED].
_NAN_BITS = {
    "float16": (np.uint16, 0x7E00),
    "bfloat16": (np.uint16, 0x7FC0),
    "float32": (np.uint32, 0x7FC00000),
    "float64": (np.uint64, 0x7FF8000000000000),
}
_S32 = (-(2**31), 2**31 - 1)


class TmaWarning(UserWarning):
    """An advisory TMA condition: a swizzle phase shifted by dst alignment, or an off-lattice im2col base."""


def swizzle_addresses(byte_addrs: Any, swizzle: str) -> np.ndarray:
    """Where each absolute shared byte address lands under `swizzle` (section 1.4: a ^ ((a>>7)&M)<<4)."""
    mask = _swizzle_mask(swizzle)
    a = np.asarray(byte_addrs, dtype=np.int64)
    return a ^ (((a >> 7) & mask) << 4)


def fill_bytes(tm: Any) -> np.ndarray:
    """The bytes of one out-of-bounds element: zeros, or a canonical quiet NaN of the element type."""
    dtype = np.dtype(tm.dtype)
    if tm.oob_fill == "nan":
        if dtype.name not in _NAN_BITS:
            raise TensorMapError(f"oob_fill = nan breaks rule 10: {dtype.name} is not a floating-point type")
        bits_type, bits = _NAN_BITS[dtype.name]
        return np.array([bits], dtype=bits_type).view(np.uint8)  # native order, like the storage
    return np.zeros(dtype.itemsize, np.uint8)


def tiled_load(tm: Any, coords: Sequence[int], smem: np.ndarray, dst: int) -> int:
    """Tile-mode global->shared copy of the box at `coords` into `smem` at byte `dst`; returns tx bytes."""
    op = f"tma_load_{len(coords)}d"
    coords = _check_instruction(tm, op, "tiled", coords)
    offs, valid, nbytes = _tiled_elements(tm, op, coords)
    _check_smem(tm, op, smem, dst, "dst", nbytes)
    image = _gather(tm, offs, valid)
    _write_smem(smem, dst, image, tm.swizzle)
    return nbytes


def tiled_store(tm: Any, coords: Sequence[int], smem: np.ndarray, src: int) -> None:
    """Tile-mode shared->global copy of the box at `src` to `coords`; only in-bounds elements are written."""
    op = f"tma_store_{len(coords)}d"
    coords = _check_instruction(tm, op, "tiled", coords)
    for i, c in enumerate(coords):
        if c < 0:
            raise TensorMapError(
                f"{op}: coordinate {i} (driver order, innermost first) = {c} breaks "
                "rule 27: the starting coordinates of a TMA store must be >= 0"
            )
    # [INFERRED] the store walks the same index map as the load (section 1.3), traversal strides included.
    offs, valid, nbytes = _tiled_elements(tm, op, coords)
    _check_smem(tm, op, smem, src, "src", nbytes)
    es = np.dtype(tm.dtype).itemsize
    image = _read_smem(smem, src, nbytes, tm.swizzle).reshape(-1, es)
    if valid.any():
        gmem = _global_bytes(tm)
        gmem[tm.global_address + offs[valid][:, None] + np.arange(es)] = image[valid]


def im2col_load(tm: Any, coords: Sequence[int], offsets: Sequence[int], smem: np.ndarray, dst: int) -> int:
    """Im2col global->shared copy (section 2): `ppc` rows of `cpp` channels at byte `dst`; returns tx bytes."""
    op = f"tma_load_im2col_{len(coords)}d"
    coords = _check_instruction(tm, op, "im2col", coords)
    es = np.dtype(tm.dtype).itemsize
    cpp, ppc, rank = tm.channels_per_pixel, tm.pixels_per_column, tm.rank
    nbytes: int = ppc * cpp * es
    _check_smem(tm, op, smem, dst, "dst", nbytes)
    n, pix, row_ok, ch, ch_ok = _im2col_rows(tm, coords, offsets)
    strides = tm.global_strides
    reach = [(pix[j][row_ok], strides[j]) for j in range(rank - 2)]
    reach += [(n[row_ok], strides[rank - 2]), (ch[ch_ok], es)]
    _check_reach(tm, op, reach if row_ok.any() and ch_ok.any() else None)

    row_off = np.where(row_ok, n, 0) * strides[rank - 2]
    for j in range(rank - 2):
        row_off = row_off + np.where(row_ok, pix[j], 0) * strides[j]
    offs = (row_off[:, None] + np.where(ch_ok, ch, 0)[None, :] * es).ravel()
    valid = (row_ok[:, None] & ch_ok[None, :]).ravel()
    _write_smem(smem, dst, _gather(tm, offs, valid), tm.swizzle)
    return nbytes


def im2col_rows(tm: Any, coords: Sequence[int], offsets: Sequence[int]) -> tuple[np.ndarray, ...]:
    """What an im2col copy reads: per smem row the image `n`, pixel `pix` (S, ppc; W first) and whether it
    is in the tensor, then the channels `ch` (cpp,) and whether each is; out-of-bounds rows/channels are filled.
    """
    op = f"tma_load_im2col_{len(coords)}d"
    return _im2col_rows(tm, _check_instruction(tm, op, "im2col", coords), offsets)


def _im2col_rows(tm: Any, coords: list[int], offsets: Sequence[int]) -> tuple[np.ndarray, ...]:
    rank = tm.rank
    n, pix = im2col_pixels(tm, coords, offsets)
    dims = tm.global_dim
    # Zero fill depends only on the tensor bounds, never on the pixel box (section 2.3, property 3).
    row_ok = (n >= 0) & (n < dims[rank - 1])
    for j in range(rank - 2):
        row_ok &= (pix[j] >= 0) & (pix[j] < dims[1 + j])
    ch = coords[0] + np.arange(tm.channels_per_pixel, dtype=np.int64)
    ch_ok = (ch >= 0) & (ch < dims[0])
    return n, pix, row_ok, ch, ch_ok


def im2col_pixels(tm: Any, coords: Sequence[int], offsets: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The im2col pixel walk (section 2.3): per smem row, the image `n` (ppc,) and pixel `pix` (S, ppc).

    `pix[j]` is the spatial coordinate actually read (base + offset), W first.  The walk is the spec's
    loop in closed form: along each spatial dim the first run starts at the instruction's base and
    later runs restart at the lower corner; every wrap carries one step into the next dim, and the
    last dim's wraps step the image index by `elementStrides[N]`.
    """
    rank = tm.rank
    spatial = rank - 2
    op = f"tma_load_im2col_{rank}d"
    coords = [int(c) for c in coords]
    offsets = _check_offsets(tm, op, offsets)
    dims, lower, upper, estr = tm.global_dim, tm.lower_corner, tm.upper_corner, tm.elem_strides

    steps = np.arange(tm.pixels_per_column, dtype=np.int64)  # increments applied to the W base
    pix = np.empty((spatial, tm.pixels_per_column), np.int64)
    for j in range(spatial):
        base, lo, stride = coords[1 + j], lower[j], estr[1 + j]
        last = dims[1 + j] - 1 + upper[j]  # inclusive largest base
        if not lo <= base <= last:
            raise TensorMapError(
                f"{op}: coordinate {1 + j} ({'WHD'[j]} base) = {base} breaks rule 26: the filter base "
                f"must lie in the pixel bounding box [{lo}, {last}] (undefined behaviour on hardware)"
            )
        if (base - lo) % stride != 0:
            # [INFERRED] No public test covers this; the walk below keeps stepping from `base` until
            # the wrap and then restarts at `lo`, exactly as the spec's loop does.
            warnings.warn(
                f"{op}: {'WHD'[j]} base {base} is off the traversal-stride lattice "
                f"({lo} + k*{stride}); rule 26 (advisory)",
                TmaWarning,
                stacklevel=3,
            )
        first_run = (last - base) // stride + 1  # bases in the first run, from `base`
        full_run = (last - lo) // stride + 1  # bases in every later run, from `lo`
        in_first = steps < first_run
        later = np.maximum(steps - first_run, 0)
        pix[j] = np.where(in_first, base + steps * stride, lo + (later % full_run) * stride) + offsets[j]
        steps = np.where(in_first, 0, 1 + later // full_run)  # wraps carried into the next dim
    # [INFERRED] the batch index honours elementStrides[N] (section 2.7); rule 22 keeps it at 1.
    n = coords[rank - 1] + steps * estr[rank - 1]
    return n, pix


# -------------------------------------------------------------------- a kernel's copy instruction


def box_bytes(tm: Any, op: str, mode: str, rank: int) -> int:
    """The bytes one copy of ``tm`` moves, after checking the map suits a rank-``rank`` ``mode`` copy (rule 23)."""
    if tm.mode != mode or tm.rank != rank:
        raise TensorMapError(
            f"{op}: a rank-{rank} {mode} copy on a rank-{tm.rank} {tm.mode} tensor map; breaks rule 23"
        )
    return int(tm.box_bytes)


def slice_address(
    op: str, smem: str, capacity: int, item: int, base: int, offset: int, length: int, nbytes: int
) -> int:
    """The shared byte address of ``smem[offset]`` (``smem`` starts at ``base`` and holds ``capacity`` items of
    ``item`` bytes), after checking the slice ``[offset, offset + length)`` fits it and holds ``nbytes``."""
    if offset + length > capacity:
        raise TensorMapError(
            f"{op}: the shared slice [{offset}, {offset + length}) runs past the end of {smem} ({capacity} items)"
        )
    if nbytes > length * item:
        raise TensorMapError(
            f"{op}: the box is {nbytes} bytes but its shared slice holds {length} items "
            f"({length * item} bytes); breaks rule 28"
        )
    return base + offset * item


# -------------------------------------------------------------------- preconditions


def _check_instruction(tm: Any, op: str, mode: str, coords: Sequence[int]) -> list[int]:
    """Rule 23 (rank and mode), .s32 coordinates, and what the emulator refuses to model."""
    if tm.mode != mode:
        raise TensorMapError(
            f"{op}: the tensor map is a {tm.mode} map; breaks rule 23: a {mode} copy needs a {mode} map"
        )
    if len(coords) != tm.rank:
        raise TensorMapError(
            f"{op}: {len(coords)} coordinates breaks rule 23: the copy's rank must equal "
            f"the tensor map's rank ({tm.rank})"
        )
    out = []
    for i, c in enumerate(coords):
        if isinstance(c, (bool, float)) or not isinstance(c, (int, np.integer)):
            raise TensorMapError(f"{op}: coordinate {i} = {c!r} must be an integer")
        if not _S32[0] <= int(c) <= _S32[1]:
            raise TensorMapError(
                f"{op}: coordinate {i} (driver order, innermost first) = {c} is not a "
                "signed 32-bit value (coordinates are .s32 operands, section 1.2)"
            )
        out.append(int(c))
    if tm.interleave != "none":
        raise TensorMapError(
            f"{op}: interleave = {tm.interleave!r} is not emulated by the interp and cpu runtimes "
            "(section 1.6); use interleave 'none'"
        )
    if tm.swizzle != "none":
        es = np.dtype(tm.dtype).itemsize
        row = tm.box_dim[0] * es if mode == "tiled" else tm.channels_per_pixel * es
        span = _SWIZZLE_SPAN[tm.swizzle]
        if row != span:
            rule = 14 if mode == "tiled" else 21
            raise TensorMapError(
                f"{op}: an inner row of {row} bytes with swizzle {tm.swizzle!r} breaks rule {rule} as the "
                f"interp and cpu runtimes apply it: the row must be exactly {span} bytes (the padded-row layout of "
                "narrower rows is undocumented, section 1.4)"
            )
    return out


def _check_offsets(tm: Any, op: str, offsets: Sequence[int]) -> list[int]:
    spatial = tm.rank - 2
    if len(offsets) != spatial:
        raise TensorMapError(
            f"{op}: {len(offsets)} im2col offsets breaks rule 23: a rank-{tm.rank} im2col "
            f"copy takes {spatial} (W first)"
        )
    hi = _OFFSET_MAX[tm.rank]
    out = []
    for j, v in enumerate(offsets):
        if isinstance(v, (bool, float)) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) <= hi:
            raise TensorMapError(
                f"{op}: offset {j} ({'WHD'[j]}) = {v!r} breaks rule 26: rank-{tm.rank} "
                f"im2col offsets must be integers in [0, {hi}]"
            )
        out.append(int(v))
    return out


def _check_smem(tm: Any, op: str, smem: Any, addr: Any, name: str, nbytes: int) -> None:
    """Rules 24 and 28: a 128-byte-aligned shared address whose whole box fits the allocation."""
    if not isinstance(smem, np.ndarray) or smem.dtype != np.uint8 or smem.ndim != 1:
        raise TensorMapError(f"{op}: shared memory must be a 1-D uint8 array")
    if isinstance(addr, (bool, float)) or not isinstance(addr, (int, np.integer)):
        raise TensorMapError(f"{op}: {name} = {addr!r} must be an integer byte address")
    addr = int(addr)
    if addr % 128 != 0:
        raise TensorMapError(
            f"{op}: {name} = {addr} breaks rule 24: the shared-memory address of a TMA copy must be 128-byte aligned"
        )
    if addr < 0 or addr + nbytes > smem.size:
        raise TensorMapError(
            f"{op}: {name} = {addr} breaks rule 28: the box's {nbytes} bytes "
            f"[{addr}, {addr + nbytes}) must lie inside the {smem.size}-byte shared memory"
        )
    if tm.swizzle != "none" and addr % _SWIZZLE_REPEAT[tm.swizzle] != 0:
        warnings.warn(
            f"{op}: {name} = {addr} is not {_SWIZZLE_REPEAT[tm.swizzle]}-byte aligned, so the "
            f"{tm.swizzle} swizzle pattern starts at a shifted phase (rule 24)",
            TmaWarning,
            stacklevel=3,
        )


def _check_reach(tm: Any, op: str, axes: list[tuple[np.ndarray, int]] | None) -> None:
    """Raise unless every in-bounds element lies inside the storage (exact Python ints: no overflow)."""
    if axes is None:
        return
    es = np.dtype(tm.dtype).itemsize
    end = tm.global_address + es + sum(int(idx.max()) * int(stride) for idx, stride in axes)
    size = _global_bytes(tm).size
    if end > size:
        raise TensorMapError(
            f"{op}: the tensor map reaches byte {end} but its allocation holds {size} bytes "
            "(global dims/strides describe memory outside the buffer)"
        )


# -------------------------------------------------------------------- data movement


def tiled_box(tm: Any, coords: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per box element in copy order (dim 0 fastest): its global coordinates, driver order, and whether
    it is in bounds (else the element is the out-of-bounds fill); shapes (elements, rank) and (elements,)."""
    coords = _check_instruction(tm, f"tma_load_{len(coords)}d", "tiled", coords)
    axes = _tiled_axes(tm, coords)
    grids = np.meshgrid(*[g for g, _ in reversed(axes)], indexing="ij")  # numpy order: dim 0 last
    oks = np.meshgrid(*[ok for _, ok in reversed(axes)], indexing="ij")
    where = np.stack([grid.ravel() for grid in reversed(grids)], axis=1)
    return where, np.logical_and.reduce([ok.ravel() for ok in oks])


def _tiled_axes(tm: Any, coords: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per dimension (driver order): the global indices the box walks and which are in bounds."""
    estr = list(tm.elem_strides)
    if tm.interleave == "none":
        estr[0] = 1  # the hardware ignores dimension 0's traversal stride
    axes = []
    for i in range(tm.rank):
        count = -(-tm.box_dim[i] // estr[i])  # ceil: a partial last stride is still loaded
        g = coords[i] + np.arange(count, dtype=np.int64) * estr[i]
        axes.append((g, (g >= 0) & (g < tm.global_dim[i])))
    return axes


def _tiled_elements(tm: Any, op: str, coords: list[int]) -> tuple[np.ndarray, np.ndarray, int]:
    """Byte offsets (0 where OOB) and in-bounds mask of every box element, dim 0 fastest (section 1.3)."""
    rank, es = tm.rank, np.dtype(tm.dtype).itemsize
    byte_strides = [es, *tm.global_strides]
    axes = _tiled_axes(tm, coords)
    any_valid = all(ok.any() for _, ok in axes)
    _check_reach(tm, op, [(g[ok], byte_strides[i]) for i, (g, ok) in enumerate(axes)] if any_valid else None)
    offs = np.zeros((1,) * rank, np.int64)
    valid = np.ones((1,) * rank, bool)
    for i, (g, ok) in enumerate(axes):
        shape = [1] * rank
        shape[rank - 1 - i] = g.size  # numpy order: dimension 0 is the last, fastest axis
        offs = offs + (np.where(ok, g, 0) * byte_strides[i]).reshape(shape)
        valid = valid & ok.reshape(shape)
    return offs.ravel(), valid.ravel(), offs.size * es


def _gather(tm: Any, offs: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The linear image (flat bytes) of the elements at `offs`, filled where not `valid`."""
    es = np.dtype(tm.dtype).itemsize
    image = np.empty((offs.size, es), np.uint8)
    image[:] = fill_bytes(tm)
    if valid.any():
        gmem = _global_bytes(tm)
        image[valid] = gmem[tm.global_address + offs[valid][:, None] + np.arange(es)]
    return image.reshape(-1)


def _write_smem(smem: np.ndarray, base: int, image: np.ndarray, swizzle: str) -> None:
    if _swizzle_mask(swizzle) == 0:
        smem[base : base + image.size] = image
        return
    smem[_chunk_index(base, image.size, swizzle)] = image.reshape(-1, 16)


def _read_smem(smem: np.ndarray, base: int, nbytes: int, swizzle: str) -> np.ndarray:
    if _swizzle_mask(swizzle) == 0:
        return cast(np.ndarray, smem[base : base + nbytes].copy())
    return cast(np.ndarray, smem[_chunk_index(base, nbytes, swizzle)].reshape(-1))


def _chunk_index(base: int, nbytes: int, swizzle: str) -> np.ndarray:
    """(chunks, 16) shared byte addresses of the linear image's 16-byte chunks after swizzling."""
    if nbytes % 16 != 0:
        raise TensorMapError(f"a swizzled box must be a whole number of 16-byte chunks, not {nbytes} bytes")
    chunk = swizzle_addresses(base + np.arange(0, nbytes, 16, dtype=np.int64), swizzle)
    return chunk[:, None] + np.arange(16)


def _global_bytes(tm: Any) -> np.ndarray:
    storage = tm.handle.storage
    if not isinstance(storage, np.ndarray) or not storage.flags.c_contiguous:
        raise TensorMapError("the CPU TMA emulator needs a handle whose storage is a contiguous numpy array")
    return storage.reshape(-1).view(np.uint8)


def _swizzle_mask(swizzle: str) -> int:
    if swizzle not in _SWIZZLE_MASK:
        raise TensorMapError(f"swizzle = {swizzle!r} is not one of 'none', '32B', '64B', '128B' (rule 8)")
    return _SWIZZLE_MASK[swizzle]
