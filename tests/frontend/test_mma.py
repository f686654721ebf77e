"""``cp.mma_sync``, ``cp.ldmatrix``, ``cp.stmatrix`` in the frontend: what they expand to and their errors."""

from __future__ import annotations

import pytest

import cubepy as cp
from cubepy import Array, SharedMemory, bf16, cube, f16, f32, i32


def test_expansion():
    @cube
    def product(a: Array[f16]):
        tile = SharedMemory[f16](256)
        fa = cp.ldmatrix(tile, cp.UNIT_POS_PLANE * 8, 4)
        fb = cp.ldmatrix(tile, cp.UNIT_POS_PLANE * 8, 2, True)
        fc = cp.mma_fragment("m16n8k16", "c", f32)
        d = cp.mma_sync("m16n8k16", fa, fb, fc)
        cp.mma_sync("m16n8k16", fa, fb, d, out=d)
        cp.stmatrix(tile, cp.UNIT_POS_PLANE * 8, fa, 4)

    ops = cp.testing.expand(product, Array[f16]).ops
    assert [op for op in ops if op in ("ldmatrix", "stmatrix", "mma_sync")] == [
        "ldmatrix",
        "ldmatrix",
        "mma_sync",
        "mma_sync",
        "stmatrix",
    ]


def _fails(kernel, match: str, *args) -> None:
    with pytest.raises(cp.ExpandError, match=match):
        cp.testing.expand(kernel, *args)


def test_errors_name_what_is_wrong():
    @cube
    def unknown_shape():
        cp.mma_fragment("m16n16k16", "a", f16)

    _fails(unknown_shape, "m16n16k16.*not supported.*m16n8k16")

    @cube
    def f32_inputs_for_k16():
        cp.mma_fragment("m16n8k16", "a", f32)

    _fails(f32_inputs_for_k16, "f16 or bf16")

    @cube
    def short_fragment():
        a = cp.LocalArray[f16](4)
        b = cp.mma_fragment("m16n8k16", "b", f16)
        c = cp.mma_fragment("m16n8k16", "c", f32)
        cp.mma_sync("m16n8k16", a, b, c)

    _fails(short_fragment, "holds 8 items per unit, this LocalArray 4")

    @cube
    def mixed_inputs():
        a = cp.mma_fragment("m16n8k16", "a", f16)
        b = cp.mma_fragment("m16n8k16", "b", bf16)
        c = cp.mma_fragment("m16n8k16", "c", f32)
        cp.mma_sync("m16n8k16", a, b, c)

    _fails(mixed_inputs, "mma_sync m16n8k16 b")

    @cube
    def from_global(g: Array[f16]):
        cp.ldmatrix(g, 0, 4)

    _fails(from_global, "ldmatrix: expected shared memory", Array[f16])

    @cube
    def three_matrices():
        tile = SharedMemory[f16](256)
        cp.ldmatrix(tile, 0, 3)

    _fails(three_matrices, "count 3")

    @cube
    def wide_items():
        tile = SharedMemory[i32](256)
        cp.ldmatrix(tile, 0, 4)

    _fails(wide_items, "16-bit items")

    @cube
    def bad_operand():
        cp.mma_fragment_index("m16n8k16", "e", 0)

    _fails(bad_operand, "operand 'e'")

    @cube
    def past_the_fragment():
        cp.mma_fragment_index("m16n8k16", "b", 4)

    _fails(past_the_fragment, "element 4 of a 4-element fragment")
