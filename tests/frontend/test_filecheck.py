"""Kernels that carry their expected IR as ``# CHECK:`` comments, matched by the ``filecheck`` package.

``filecheck`` (a Python port of LLVM's FileCheck, in the ``test`` extra) reads the directives
(``CHECK``, ``CHECK-NEXT``, ``CHECK-NOT``, ``{{regex}}``) from the kernel's own source file.
"""

import pytest

import cubepy.frontend as cp
from cubepy.frontend import ABSOLUTE_POS, UNIT_POS, Array, Line, SharedMemory, cube, f32, testing, u32
from tests.filecheck import filecheck as check


@cube
def guarded_store(out: Array[f32], x: f32):
    # CHECK: {{%\d+}}: u32 = len global[0]
    # CHECK-NEXT: bool = lt @absolute_pos
    # CHECK-NEXT: if {{%\d+}} {
    # CHECK-NEXT: index_assign global[0], @absolute_pos, scalar[0] {checked=True}
    # CHECK-NEXT: }
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = x


@cube
def reduction(a: Array[f32], n: u32):
    # CHECK: %m{{\d+}}: f32 = assign 0.0f32
    # CHECK-NEXT: range_loop {{%\d+}} in 0u32..scalar[0] step 1u32 {
    # CHECK: add %m
    # CHECK-NEXT: %m{{\d+}}: f32 = assign
    # CHECK-NEXT: }
    # CHECK-NEXT: index_assign global[0], 0u32, %m
    acc = 0.0
    for i in range(n):
        acc += a[i]
    a[0] = acc


@cube
def tiled_sum(a: Array[Line[f32]], out: Array[f32]):
    # CHECK: shared
    # CHECK: sync_cube
    # CHECK-NOT: range_loop
    # CHECK: extract_lane {{%\d+}}, 0u32
    # CHECK: extract_lane {{%\d+}}, 3u32
    smem = SharedMemory[Line[f32]](32, 4)
    smem[UNIT_POS] = a[ABSOLUTE_POS]
    cp.sync_cube()
    line = smem[UNIT_POS]
    total = f32(0.0)
    for lane in cp.unroll(range(line.size)):
        total += line[lane]
    out[ABSOLUTE_POS] = total


@cube(launch=True)
def early_exit(out: Array[u32], n: u32):
    # CHECK: ge @absolute_pos, scalar[0]
    # CHECK-NEXT: if
    # CHECK-NEXT: return
    # CHECK-NEXT: }
    # CHECK-NEXT: index_assign
    if ABSOLUTE_POS >= n:
        return
    out[ABSOLUTE_POS] = n


@pytest.mark.parametrize(
    ("function", "specs"),
    [
        (guarded_store, (Array[f32], f32)),
        (reduction, (Array[f32], u32)),
        (tiled_sum, (Array[Line[f32, 4]], Array[f32])),
    ],
)
def test_checks(function, specs, tmp_path):
    expansion = testing.expand(function, *specs, checked=True)
    check(function, expansion.ir, tmp_path)


def test_checks_through_a_kernel(tmp_path):
    expansion = testing.expand(early_exit, Array[u32], u32)
    check(early_exit, expansion.ir, tmp_path)


def test_a_wrong_check_fails(tmp_path):
    @cube
    def wrong(out: Array[f32], x: f32):
        # CHECK: index_assign global[0], @absolute_pos, scalar[0] {checked=False}
        # (the expansion is checked, so the IR says {checked=True}: this directive must not match)
        out[ABSOLUTE_POS] = x

    expansion = testing.expand(wrong, Array[f32], f32, checked=True)
    with pytest.raises(AssertionError, match="filecheck failed"):
        check(wrong, expansion.ir, tmp_path)
