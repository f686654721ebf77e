"""Hand-built tables and shared-memory images for the wgmma tests, written from the PTX ISA's text.

Nothing here calls cubepy: the fragment tables are the ISA's "register fragment" figures for wgmma
(warp w of the warpgroup owns rows 16w..16w+15; lane l = 4g + t), and the images place a K-major tile
the way the ISA's canonical layouts (8-row x 16-byte core matrices) and the TMA swizzle put it.
"""

from __future__ import annotations

import numpy as np

SWIZZLE_WIDTH = {"32B": 32, "64B": 64, "128B": 128}
SWIZZLE_BITS = {"32B": 1, "64B": 3, "128B": 7}


def d_table(n: int) -> dict[tuple[int, int], tuple[int, int]]:
    """(unit, register) -> (row, col) of the f32 accumulator of m64nN, by the ISA's figure."""
    table = {}
    for unit in range(128):
        w, lane = divmod(unit, 32)
        g, t = divmod(lane, 4)
        for j in range(n // 8):  # one 8-column block: four registers
            table[unit, 4 * j + 0] = (16 * w + g, 8 * j + 2 * t)
            table[unit, 4 * j + 1] = (16 * w + g, 8 * j + 2 * t + 1)
            table[unit, 4 * j + 2] = (16 * w + g + 8, 8 * j + 2 * t)
            table[unit, 4 * j + 3] = (16 * w + g + 8, 8 * j + 2 * t + 1)
    return table


def a_table(size: int) -> dict[tuple[int, int], tuple[int, int]]:
    """(unit, element) -> (row, k) of A in registers, inputs of ``size`` bytes, by the ISA's figures."""
    table = {}
    for unit in range(128):
        w, lane = divmod(unit, 32)
        g, t = divmod(lane, 4)
        top, bottom = 16 * w + g, 16 * w + g + 8
        if size == 2:  # a0,a1 | a2,a3 | a4,a5 | a6,a7: (top, 2t..) (bottom, 2t..) (top, 2t+8..) (bottom, 2t+8..)
            spots = [(top, 2 * t), (top, 2 * t + 1), (bottom, 2 * t), (bottom, 2 * t + 1)]
            spots += [(top, 2 * t + 8), (top, 2 * t + 9), (bottom, 2 * t + 8), (bottom, 2 * t + 9)]
        elif size == 4:  # tf32: a0 (top, t), a1 (bottom, t), a2 (top, t+4), a3 (bottom, t+4)
            spots = [(top, t), (bottom, t), (top, t + 4), (bottom, t + 4)]
        else:  # 8-bit: four consecutive k per register
            spots = [(top, 4 * t + i) for i in range(4)] + [(bottom, 4 * t + i) for i in range(4)]
            spots += [(top, 16 + 4 * t + i) for i in range(4)] + [(bottom, 16 + 4 * t + i) for i in range(4)]
        for i, spot in enumerate(spots):
            table[unit, i] = spot
    return table


def swizzled_image(x: np.ndarray, swizzle: str) -> np.ndarray:
    """Bytes of a K-major tile ``x`` (rows of exactly the swizzle width), rows ``width`` apart, 8-row groups
    ``8 * width`` apart, each 16-byte chunk moved as the swizzle moves it (chunk ^= (address >> 7) & bits)."""
    width = SWIZZLE_WIDTH[swizzle]
    raw = np.ascontiguousarray(x).view(np.uint8).reshape(x.shape[0], -1)
    assert raw.shape[1] == width
    image = np.zeros(x.shape[0] * width, np.uint8)
    for r in range(x.shape[0]):
        for c in range(width):
            logical = (r // 8) * 8 * width + (r % 8) * width + c
            chunk = (logical >> 4) & 7
            physical = (logical & ~0x70) | ((chunk ^ ((logical >> 7) & SWIZZLE_BITS[swizzle])) << 4)
            image[physical] = raw[r, c]
    return image


def interleaved_image(x: np.ndarray, lbo: int, sbo: int) -> np.ndarray:
    """Bytes of a K-major tile ``x`` without swizzle: core matrices of 8 rows x 16 bytes (rows 16 bytes apart),
    the k-th 16-byte chunk of a row ``lbo`` bytes after the previous, 8-row groups ``sbo`` bytes apart."""
    raw = np.ascontiguousarray(x).view(np.uint8).reshape(x.shape[0], -1)
    image = np.zeros(x.shape[0] // 8 * sbo, np.uint8)
    for r in range(x.shape[0]):
        for c in range(raw.shape[1]):
            image[(r // 8) * sbo + (r % 8) * 16 + (c // 16) * lbo + c % 16] = raw[r, c]
    return image


# MN-major tiles of 16-bit elements (PTX ISA canonical layouts; CUTLASS's make_gmma_desc<Major::MN> comment),
# T = 8 elements per 16 bytes:
# * no swizzle: ((T, m), (8, k)) : ((1, SBO), (T, LBO)): 8 consecutive MN elements fill 16 bytes, the 8 k of
#   a core matrix are 16 bytes apart, core matrices SBO apart along MN and LBO apart along K;
# * a swizzle of W bytes: ((W/2, m), (8, k)) : ((1, LBO), (W/2, SBO)): a W-byte row holds W/2 consecutive
#   MN elements of one k, 8 k rows W apart, 8-k groups SBO apart, further MN blocks LBO apart; then the
#   16-byte chunk bits 4-6 are XORed with bits 7-9 (1, 2, 3 of them), as a TMA copy stores it.
def swizzle_bytes(image: np.ndarray, swizzle: str) -> np.ndarray:
    """``image`` (bytes at logical addresses) with each byte moved to its swizzled address."""
    if swizzle == "none":
        return image
    address = np.arange(image.size)
    physical = address ^ (((address >> 7) & SWIZZLE_BITS[swizzle]) << 4)
    out = np.zeros_like(image)
    out[physical] = image
    return out


def mn_layout(rows: int, swizzle: str) -> tuple[int, int, int]:
    """(LBO, SBO, bytes one 16-k step moves the start) of the test's MN-major tiles of ``rows`` MN elements:
    MN blocks first, then 8-k groups (CUTLASS's ``tile_to_shape`` of the MN-major atom)."""
    if swizzle == "none":
        lbo = 128 * (rows // 8)  # all the MN core matrices of one 8-k group, then the next group
        return lbo, 128, 2 * lbo
    width = SWIZZLE_WIDTH[swizzle]
    sbo = 8 * width * (rows // (width // 2))
    return 8 * width, sbo, 2 * sbo


def mn_image(x: np.ndarray, swizzle: str) -> np.ndarray:
    """The bytes of ``x`` (MN x K, 16-bit) stored MN-major with ``mn_layout``'s offsets."""
    rows, ks = x.shape
    lbo, sbo, _ = mn_layout(rows, swizzle)
    raw = np.ascontiguousarray(x).view(np.uint8).reshape(rows, ks, 2)
    size = ks // 8 * (lbo if swizzle == "none" else sbo)
    image = np.zeros(size, np.uint8)
    for mn in range(rows):
        for k in range(ks):
            if swizzle == "none":
                at = (mn // 8) * sbo + (k // 8) * lbo + (k % 8) * 16 + (mn % 8) * 2
            else:
                width = SWIZZLE_WIDTH[swizzle]
                at = (mn // (width // 2)) * lbo + (k // 8) * sbo + (k % 8) * width + (mn % (width // 2)) * 2
            image[at : at + 2] = raw[mn, k]
    return swizzle_bytes(image, swizzle)
