"""``benchmarks.attention_sass``: the hot-loop figures from hand-written listings, and one real cubepy row."""

from __future__ import annotations

import pytest

from benchmarks import attention_sass
from benchmarks.sass import find_cuda_tool


def test_tensor_core_instructions_are_weighed_by_their_shape():
    assert attention_sass._mma_volume("HGMMA.64x64x16.F32 R24, gdesc[UR4], R24, gsb0 ;") == 64 * 64 * 16
    assert attention_sass._mma_volume("HGMMA.64x128x16.F32.BF16 R24, R152, gdesc[UR8], R24 ;") == 64 * 128 * 16
    assert attention_sass._mma_volume("HMMA.16816.F32 R40, R48, R64, R40 ;") == 16 * 8 * 16
    assert attention_sass._mma_volume("@P0 HMMA.1688.F32 R4, R8, R12, R4 ;") == 16 * 8 * 8
    assert attention_sass._mma_volume("IMAD R5, R84, c[0x0][0x188], R88 ;") == 0


def test_the_main_loop_is_the_loop_with_tensor_core_instructions_normalised_per_64x64_block():
    # one loop of 8 instructions: 2 HGMMA 64x64x16 (a 64-row, 64-key head of dim 16: Q K^T and P V), and a
    # longer loop without tensor-core instructions, which is not the hot loop
    listing = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   HGMMA.64x64x16.F32 R24, gdesc[UR24], R24 ;
        /*0020*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0030*/                   HGMMA.64x64x16.F32 R56, gdesc[UR28], R56 ;
        /*0040*/                   FMUL R2, R2, R3 ;
        /*0050*/                   FADD R4, R4, R2 ;
        /*0060*/                   MUFU.EX2 R5, R4 ;
        /*0070*/                   ISETP.GE.AND P0, PT, R0, 0x10, PT ;
        /*0080*/              @!P0 BRA 0x10 ;
        /*0090*/                   IADD3 R6, R6, 0x1, RZ ;
        /*00a0*/                   IADD3 R7, R7, 0x1, RZ ;
        /*00b0*/                   IADD3 R8, R8, 0x1, RZ ;
        /*00c0*/                   IADD3 R9, R9, 0x1, RZ ;
        /*00d0*/                   IADD3 R10, R10, 0x1, RZ ;
        /*00e0*/                   IADD3 R11, R11, 0x1, RZ ;
        /*00f0*/                   IADD3 R12, R12, 0x1, RZ ;
        /*0100*/                   IADD3 R13, R13, 0x1, RZ ;
        /*0110*/                   ISETP.GE.AND P1, PT, R6, 0x10, PT ;
        /*0120*/              @!P1 BRA 0x90 ;
        /*0130*/                   EXIT ;
    """
    figures = attention_sass.hot_loop(listing, head_dim=16)
    assert figures["hot_loop"] == 8 and figures["mma_in_loop"] == 2
    assert figures["rows_x_keys"] == 64 * 64  # 2 x 64*64*16 over 2 * 16
    assert figures["per_block"] == 8
    # the same loop for a head of 32: each product covers half the keys, so a 64 x 64 block costs twice the loop
    assert attention_sass.hot_loop(listing, head_dim=32)["per_block"] == 16
    assert attention_sass.hot_loop("/*0000*/ EXIT ;", head_dim=64)["per_block"] is None
    assert figures["masked_loop"] is None  # one loop with tensor-core instructions


def test_a_second_longer_tensor_core_loop_is_the_masked_loop():
    # a main loop of 4 instructions and, after it, a masked loop of 6 (the same 2 HGMMA and 2 selects)
    listing = """
        /*0000*/                   HGMMA.64x64x16.F32 R24, gdesc[UR24], R24 ;
        /*0010*/                   HGMMA.64x64x16.F32 R56, gdesc[UR28], R56 ;
        /*0020*/                   ISETP.GE.AND P0, PT, R0, 0x10, PT ;
        /*0030*/              @!P0 BRA 0x0 ;
        /*0040*/                   HGMMA.64x64x16.F32 R24, gdesc[UR24], R24 ;
        /*0050*/                   HGMMA.64x64x16.F32 R56, gdesc[UR28], R56 ;
        /*0060*/                   FSEL R24, R24, -INF, P1 ;
        /*0070*/                   FSEL R25, R25, -INF, P2 ;
        /*0080*/                   ISETP.GE.AND P0, PT, R0, 0x12, PT ;
        /*0090*/              @!P0 BRA 0x40 ;
        /*00a0*/                   EXIT ;
    """
    figures = attention_sass.hot_loop(listing, head_dim=16)
    assert (figures["hot_loop"], figures["per_block"]) == (4, 4)
    assert (figures["masked_loop"], figures["masked_per_block"]) == (6, 6)


@pytest.mark.skipif(attention_sass.missing_tools() is not None, reason=str(attention_sass.missing_tools()))
def test_the_sm80_kernel_row_from_ptxas():
    # the mma_sync kernel: 4 warps of 16 rows each, 64 keys a step, head dim 64 (m16n8k16 instructions)
    figures = attention_sass.cubepy_attention(find_cuda_tool("cuobjdump"), head_dim=64, causal=False, kernel="mma_sync")
    assert figures["target"] == "sm_80" and figures["spills"] == 0
    assert figures["mma_in_loop"] == 64  # 16 rows x 64 keys x 64 dims, twice, in 16x8x16 products
    assert figures["rows_x_keys"] == 16 * 64
