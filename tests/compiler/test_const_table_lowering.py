"""Constant tables lower to PTX ``.const`` data read with ``ld.const``: FileCheck directives over the PTX."""

import numpy as np

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, f16, f32, u32
from tests.frontend.test_filecheck import check

from .conftest import needs_ptxas

# 0.5, 1.5, -2.0, 3.25, 7.0 as little-endian f32 bytes: 0x3F000000, 0x3FC00000, 0xC0000000, 0x40500000, 0x40E00000.
TABLE = np.array([0.5, 1.5, -2.0, 3.25, 7.0], dtype=np.float32)
HALVES = np.array([[1.0, -1.0], [0.5, 2.0]], dtype=np.float16)  # 0x3C00, 0xBC00, 0x3800, 0x4000


@cp.cube(launch=True, launch_unchecked=True)
def lookup(idx: Array[u32], out: Array[f32]):
    # CHECK: .const .align 4 .b8 const0[20] = {0, 0, 0, 63, 0, 0, 192, 63, 0, 0, 0, 192, 0, 0, 80, 64, 0, 0, 224, 64};
    # CHECK: .entry lookup
    # CHECK: ld.global.nc.b32 [[I:%r[0-9]+]]
    # CHECK: shl.b32 [[OFFSET:%r[0-9]+]], [[I]], 2;
    # CHECK: mov.b32 [[BASE:%r[0-9]+]], const0;
    # CHECK: add.s32 [[ADDRESS:%r[0-9]+]], [[BASE]], [[OFFSET]];
    # CHECK: ld.const.b32 {{%r[0-9]+}}, {{\[}}[[ADDRESS]]{{\]}};
    # CHECK: st.global.b32
    out[ABSOLUTE_POS] = cp.const_array(TABLE)[idx[ABSOLUTE_POS]]


@cp.cube(launch=True)
def lookup_halves(row: Array[u32], out: Array[f16]):
    # CHECK: .const .align 2 .b8 const0[8] = {0, 60, 0, 188, 0, 56, 0, 64};
    # CHECK: setp.gt.{{u32|u64}} {{%p[0-9]+}}, {{%rd?[0-9]+}}, 3;
    # CHECK-NEXT: mov.b16 [[ZERO:%rs[0-9]+]], 0x0000;
    # CHECK: ld.const.b16 [[ZERO]]
    out[ABSOLUTE_POS] = cp.const_array(HALVES)[row[ABSOLUTE_POS], 1]


def _ptx(kernel, out_type, unchecked: bool) -> str:
    arrays = (Array[u32].default_compilation_arg(), out_type.default_compilation_arg())
    return kernel.compile(cp.CubeDim(64), *arrays, unchecked=unchecked).ptx


@needs_ptxas
def test_a_runtime_index_is_one_ld_const_from_the_table_data(tmp_path):
    check(lookup, _ptx(lookup, Array[f32], unchecked=True), tmp_path)


@needs_ptxas
def test_a_checked_2d_f16_read_bounds_the_row_major_index(tmp_path):
    """Item ``row * 2 + 1`` of 4: past item 3 the read keeps the register's 0 and skips the ld.const."""
    check(lookup_halves, _ptx(lookup_halves, Array[f16], unchecked=False), tmp_path)


def test_the_llvm_global_is_an_addrspace_4_constant():
    arrays = (Array[u32].default_compilation_arg(), Array[f32].default_compilation_arg())
    llvm = lookup.compile(cp.CubeDim(64), *arrays, unchecked=True).llvm
    assert '@"const0" = internal addrspace(4) constant [20 x i8] c"\\00\\00\\00?\\00\\00\\c0?' in llvm
    assert 'getelementptr float, ptr addrspace(4) @"const0"' in llvm
