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
