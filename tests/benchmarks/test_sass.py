"""``benchmarks.sass`` on two kernels: both sides compile, the table has their counts, the loop finder works."""

import pytest

from benchmarks import sass

pytestmark = pytest.mark.skipif(sass.missing_tools() is not None, reason=str(sass.missing_tools()))


def test_two_kernels_side_by_side(capsys):
    rows = sass.compare(("saxpy", "SGEMM 16x16 unchecked"))
    assert [r["name"] for r in rows] == ["saxpy f32", "SGEMM 16x16 unchecked"]
    for row in rows:
        for side in ("cubepy", "nvcc"):
            assert row[side]["instructions"] > 10
            assert row[side]["local"] == 0
        assert row["ratio"] == row["cubepy"]["instructions"] / row["nvcc"]["instructions"]
    gemm = rows[1]
    # both keep the K-tile loop rolled; its 16 multiply-adds and 32 shared loads are at least 48 instructions
    assert len(gemm["nvcc"]["loops"]) == 1 and gemm["nvcc"]["loops"][0] >= 48
    assert gemm["cubepy"]["loops"] and gemm["cubepy"]["loops"][-1] >= 48
    table = sass.format_table(rows)
    assert "| saxpy f32 |" in table and "Geometric mean" in table


def test_loop_sizes_from_a_listing():
    listing = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0020*/                   NOP ;
        /*0030*/                   ISETP.GE.AND P0, PT, R0, 0x10, PT ;
        /*0040*/              @!P0 BRA 0x10 ;
        /*0050*/                   EXIT ;
        /*0060*/                   BRA 0x60;
    """
    assert sass._count(listing) == (6, [3], [])  # no loop issues tensor-core instructions


def test_a_slow_path_jumping_back_into_the_main_line_is_not_a_loop():
    # ptxas's out-of-line mbarrier retry: the main line branches to it and it jumps back; only its
    # own retry branch (0x80 -> 0x70) is a loop.
    listing = """
        /*0000*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R3 ;
        /*0010*/              @!P0 BRA 0x70 ;
        /*0020*/                   LDS R0, [R7] ;
        /*0030*/                   STS [R7], R0 ;
        /*0040*/              @P1 EXIT ;
        /*0050*/                   STS [R7+0x4], R0 ;
        /*0060*/                   EXIT ;
        /*0070*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R3 ;
        /*0080*/              @!P0 BRA 0x70 ;
        /*0090*/                   BRA 0x20 ;
    """
    _, loops = sass.loop_bodies(listing)
    assert [len(body) for body in loops] == [2]


def test_a_slow_path_inside_a_loop_is_not_a_loop_either():
    # the same retry inside a loop (0x20 .. 0x50): the loop leads from the retry's return target (0x10) back
    # to the wait, but that target does not dominate the return jump (the wait reaches the slow path
    # without passing it), so only the real loop and the retry's own branch are loops (the unreachable
    # self-branch after EXIT is none)
    listing = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0020*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R3 ;
        /*0030*/              @!P0 BRA 0x80 ;
        /*0040*/                   ISETP.GE.AND P1, PT, R0, 0x10, PT ;
        /*0050*/              @!P1 BRA 0x10 ;
        /*0060*/                   EXIT ;
        /*0070*/                   BRA 0x70;
        /*0080*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R3 ;
        /*0090*/              @!P0 BRA 0x80 ;
        /*00a0*/                   BRA 0x40 ;
    """
    _, loops = sass.loop_bodies(listing)
    assert sorted(len(body) for body in loops) == [2, 5]  # the retry's own branch, the loop


def test_the_hgmma_loop_and_the_k_it_covers_from_a_listing():
    from benchmarks import gemm_sass

    listing = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR24], R24 ;
        /*0020*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR28], R24 ;
        /*0030*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0040*/                   ISETP.GE.AND P0, PT, R0, 0x10, PT ;
        /*0050*/              @!P0 BRA 0x10 ;
        /*0060*/                   EXIT ;
    """
    _, loops = sass.loop_bodies(listing)
    assert [len(body) for body in loops] == [5]
    # two m64n64k16 products over a 64 x 64 tile: one trip covers K = 32, so a K step of 64 is two trips
    shapes = [tuple(map(int, m.groups())) for t in loops[0] if (m := gemm_sass._HGMMA.match(t))]
    assert shapes == [(64, 64, 16), (64, 64, 16)]
