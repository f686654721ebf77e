"""``cp.const_array``: the IR it declares and reads, and an ExpandError at the user's line for each misuse."""

import inspect
import os

import numpy as np
import pytest

import cubepy.frontend as cp
from cubepy import ir
from cubepy.errors import CubeError, ExpandError
from cubepy.frontend import ABSOLUTE_POS, Array, cube, f32, i32, testing, u32

CUBEPY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(cp.__file__)))

TABLE = np.array([0.5, 1.5, -2.0, 3.25], dtype=np.float32)
OTHER = np.array([1, 2, 3], dtype=np.int32)
GRID = np.arange(12, dtype=np.int32).reshape(3, 4)


def _expect_error(function, *specs, match: str) -> ExpandError:
    """The expansion fails with ``match`` at the ``# <-`` line of ``function`` in this file."""
    with pytest.raises(ExpandError, match=match) as info:
        testing.expand(function, *specs)
    lines, first = inspect.getsourcelines(function.fn)
    marked = first + next(k for k, line in enumerate(lines) if "# <-" in line)
    assert (info.value.filename, info.value.lineno) == (__file__, marked), str(info.value)
    return info.value


@cube
def lookup(idx: Array[u32], out: Array[f32]):
    tbl = cp.const_array(TABLE)
    out[ABSOLUTE_POS] = tbl[idx[ABSOLUTE_POS]] + f32(tbl.len())


def test_declares_the_table_and_reads_it_with_a_runtime_index():
    expansion = testing.expand(lookup, Array[u32], Array[f32])
    (table,) = expansion.definition.const_tables
    assert table.var.type == ir.Type(ir.F32)
    assert table.values == (0.5, 1.5, -2.0, 3.25)
    assert "const[0]: f32[4] = [0.5, 1.5, -2.0, 3.25]" in expansion.text
    assert "index const[0], %" in expansion.text
    assert "add %1, 4.0f32" in expansion.text  # len() is the comptime item count


@cube
def _pick(i):
    return cp.const_array(OTHER)[i]


@cube
def two_tables_one_twice(out: Array[i32]):
    first = cp.const_array(OTHER)[ABSOLUTE_POS]
    out[ABSOLUTE_POS] = first + _pick(ABSOLUTE_POS + 1) + cp.const_array(GRID)[1, ABSOLUTE_POS]


def test_a_cube_function_may_declare_it_and_a_table_named_twice_is_declared_once():
    definition = testing.expand(two_tables_one_twice, Array[i32]).definition
    assert [t.values for t in definition.const_tables] == [(1, 2, 3), tuple(range(12))]
    assert all(t.var.type == ir.Type(ir.I32) for t in definition.const_tables)


@cube
def grid_shape(out: Array[u32]):
    g = cp.const_array(GRID)
    out[0] = u32(g.shape[0] * 100 + g.shape[1] * 10) + u32(g.len())
    out[1] = u32(g[2, ABSOLUTE_POS])


def test_a_2d_table_has_its_shape_and_row_major_indices():
    text = testing.expand(grid_shape, Array[u32]).text
    assert "add 340u32, 12u32" in text  # shape (3, 4): 3*100 + 4*10, plus len() = 12 items
    assert "mul 2u32, 4u32" in text and "add %1, @absolute_pos" in text  # g[2, i] is item 2*4 + i


def _reader(table: np.ndarray):
    @cube
    def read(out: Array[u32]):
        out[0] = u32(cp.const_array(table)[ABSOLUTE_POS])

    return read


@pytest.mark.parametrize(
    "dtype, elem",
    [(np.float16, ir.F16), (np.uint8, ir.U8), (np.int64, ir.I64), (np.uint64, ir.U64), (np.bool_, ir.BOOL)],
)
def test_the_dtype_picks_the_element_type(dtype, elem):
    (declared,) = testing.expand(_reader(np.zeros(3, dtype=dtype)), Array[u32]).definition.const_tables
    assert declared.var.elem is elem


def test_outside_a_kernel_is_an_error():
    with pytest.raises(CubeError, match="cp.const_array only works inside a cube function or kernel"):
        cp.const_array(TABLE)


# -- misuse ---------------------------------------------------------------------------------------------
LIST_TABLE = [1.0, 2.0]
COMPLEX_TABLE = np.ones(4, dtype=np.complex64)
BIG_ENDIAN = np.ones(4, dtype=">f4")
EMPTY = np.zeros(0, dtype=np.float32)
SCALAR = np.array(2.0, dtype=np.float32)
HUGE = np.zeros(64 * 1024 // 4 + 1, dtype=np.float32)
HALF_BANK = np.zeros(32 * 1024 // 4, dtype=np.float32)
HALF_BANK_TOO = np.ones(32 * 1024 // 4, dtype=np.float32)


@cube
def from_a_list(out: Array[f32]):
    out[0] = cp.const_array(LIST_TABLE)[0]  # <-


def test_a_list_is_rejected():
    _expect_error(from_a_list, Array[f32], match=r"numpy array captured from Python, got a list; .*np\.array")


@cube
def from_an_argument(a: Array[f32], out: Array[f32]):
    out[0] = cp.const_array(a)[0]  # <-


def test_a_buffer_argument_is_rejected():
    _expect_error(from_an_argument, Array[f32], Array[f32], match="got a kernel value")


@cube
def of_complex(out: Array[f32]):
    out[0] = cp.const_array(COMPLEX_TABLE)[0]  # <-


def test_an_unsupported_dtype_is_rejected():
    error = _expect_error(of_complex, Array[f32], match="dtype complex64 has no cubepy element type")
    assert "float32" in str(error)


@cube
def of_big_endian(out: Array[f32]):
    out[0] = cp.const_array(BIG_ENDIAN)[0]  # <-


def test_a_foreign_byte_order_is_rejected():
    _expect_error(of_big_endian, Array[f32], match=r"dtype >f4 has no cubepy element type")


@cube
def of_empty(out: Array[f32]):
    out[0] = cp.const_array(EMPTY)[0]  # <-


def test_an_empty_table_is_rejected():
    _expect_error(of_empty, Array[f32], match=r"the table is empty \(shape \(0,\)\)")


@cube
def of_scalar(out: Array[f32]):
    out[0] = cp.const_array(SCALAR)[0]  # <-


def test_a_0d_array_is_rejected():
    _expect_error(of_scalar, Array[f32], match="a 0-d array is one value")


@cube
def of_huge(out: Array[f32]):
    out[0] = cp.const_array(HUGE)[0]  # <-


def test_a_table_over_64_kib_is_rejected():
    _expect_error(of_huge, Array[f32], match="16385 f32 values is 65540 bytes, more than CUDA's 65536-byte")


@cube
def two_halves_and_more(out: Array[f32]):
    a = cp.const_array(HALF_BANK)
    b = cp.const_array(HALF_BANK_TOO)
    again = cp.const_array(HALF_BANK)  # the same table again costs nothing
    out[0] = a[0] + b[0] + again[0] + cp.const_array(OTHER.astype(np.float32))[0]  # <-


def test_tables_together_over_64_kib_are_rejected():
    _expect_error(two_halves_and_more, Array[f32], match=r"\(with the kernel's other tables, 65548 bytes\)")


@cube
def writes(out: Array[f32]):
    tbl = cp.const_array(TABLE)
    tbl[ABSOLUTE_POS] = 1.0  # <-


def test_writing_is_rejected():
    _expect_error(writes, Array[f32], match="a constant table of f32 is read-only")


@cube
def two_indices_on_1d(out: Array[f32]):
    out[0] = cp.const_array(TABLE)[0, 1]  # <-


def test_two_indices_on_a_1d_table_are_rejected():
    _expect_error(two_indices_on_1d, Array[f32], match=r"one-dimensional \(shape \(4,\)\)")


@cube
def one_index_too_many(out: Array[i32]):
    out[0] = cp.const_array(GRID)[0, 1, 2]  # <-


def test_a_wrong_number_of_indices_is_rejected():
    _expect_error(one_index_too_many, Array[i32], match=r"shape \(3, 4\): expected 2 indices, got 3")
