"""The element-type table in cubepy.ir.types agrees with numpy, LLVM and cuda.h, written out by hand here."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from cubepy.ir.types import ALL_ELEM_TYPES, ELEM_BY_NAME, elem_of_numpy

# name: (bytes, numpy type, LLVM type name in registers, CU_TENSOR_MAP_DATA_TYPE_* value or None).
# The codes are cuda.h's CUtensorMapDataType: UINT8=0, UINT16=1, UINT32=2, INT32=3, UINT64=4,
# INT64=5, FLOAT16=6, FLOAT32=7, FLOAT64=8, BFLOAT16=9; there are no signed 8/16-bit codes.
EXPECTED = {
    "f16": (2, np.float16, "half", 6),
    "bf16": (2, ml_dtypes.bfloat16, "bfloat", 9),
    "f32": (4, np.float32, "float", 7),
    "f64": (8, np.float64, "double", 8),
    "i8": (1, np.int8, "i8", 0),
    "i16": (2, np.int16, "i16", 1),
    "i32": (4, np.int32, "i32", 3),
    "i64": (8, np.int64, "i64", 5),
    "u8": (1, np.uint8, "i8", 0),
    "u16": (2, np.uint16, "i16", 1),
    "u32": (4, np.uint32, "i32", 2),
    "u64": (8, np.uint64, "i64", 4),
    "bool": (1, np.bool_, "i1", None),
    "usize": (8, np.uint64, "i64", None),
    # cuda.h has no fp8 code: fp8 tensor maps move bytes as UINT8.
    "e4m3": (1, ml_dtypes.float8_e4m3fn, "i8", 0),
    "e5m2": (1, ml_dtypes.float8_e5m2, "i8", 0),
}


def test_the_table_lists_exactly_the_expected_types():
    assert [e.name for e in ALL_ELEM_TYPES] == list(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_entry_matches_numpy_llvm_and_cuda_h(name):
    size, numpy_type, llvm, tma_code = EXPECTED[name]
    elem = ELEM_BY_NAME[name]
    assert elem.size == size
    assert elem.numpy == np.dtype(numpy_type)
    assert elem.numpy.itemsize == size  # numpy's own size agrees with the ABI size
    assert elem.llvm == llvm
    assert elem.tma_code == tma_code


@pytest.mark.parametrize(
    "numpy_type, name",
    [
        (np.float16, "f16"),
        (ml_dtypes.bfloat16, "bf16"),
        (np.float32, "f32"),
        (np.int8, "i8"),
        (np.uint64, "u64"),
        (np.bool_, "bool"),
        (ml_dtypes.float8_e4m3fn, "e4m3"),
        (ml_dtypes.float8_e5m2, "e5m2"),
    ],
)
def test_a_numpy_dtype_maps_back_to_its_element_type(numpy_type, name):
    assert elem_of_numpy(np.dtype(numpy_type)) is ELEM_BY_NAME[name]


@pytest.mark.parametrize("dtype", [np.dtype(np.complex64), np.dtype(">f4"), np.dtype("U3")])
def test_dtypes_outside_the_table_map_to_none(dtype):
    assert elem_of_numpy(dtype) is None
