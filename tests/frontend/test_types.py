"""Element types, literals, promotion and Python operator semantics."""

import ml_dtypes
import numpy as np
import pytest

import cubepy.frontend as cp
from cubepy import ir
from cubepy.frontend import Array, Line, cube, f16, f32, i8, i32, testing, u8, u32, usize


def only(expansion, op):
    found = [inst for inst in expansion.instructions if inst.op == op]
    assert len(found) == 1, expansion.ir
    return found[0]


def test_element_type_objects():
    assert (f32.name, f32.size, f32.numpy, f32.ir) == ("f32", 4, np.dtype(np.float32), ir.F32)
    assert cp.bf16.numpy == np.dtype(ml_dtypes.bfloat16)
    assert cp.usize.numpy == np.dtype(np.uint64) and cp.usize.size == 8
    assert cp.boolean.name == "bool" and cp.boolean.numpy == np.dtype(np.bool_)
    assert [t.name for t in (cp.i8, cp.i16, cp.i64, cp.u16, cp.u64, cp.f64, cp.f16)] == [
        "i8",
        "i16",
        "i64",
        "u16",
        "u64",
        "f64",
        "f16",
    ]


def test_element_types_outside_kernels_make_numpy_scalars():
    value = f32(1.5)
    assert isinstance(value, np.float32) and value == 1.5
    assert u8.max_value() == 255 and i8.min_value() == -128


@cube
def cast_literal():
    return f32(5), u32(7), f16(0.1)


def test_calling_a_type_on_a_number_gives_a_typed_constant():
    a, b, c = testing.expand(cast_literal).outputs
    assert (a.kind, str(a.type), a.value) == (ir.VarKind.CONSTANT, "f32", 5.0)
    assert (str(b.type), b.value) == ("u32", 7)
    assert c.value == float(np.float16(0.1))


@cube
def cast_runtime(x: u32):
    return f32(x)


def test_calling_a_type_on_a_runtime_value_casts():
    inst = only(testing.expand(cast_runtime, u32), "cast")
    assert str(inst.out.type) == "f32"


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        (u32, u32, "u32"),
        (u32, i32, "u32"),
        (u8, i32, "i32"),
        (u32, usize, "usize"),
        (f16, i32, "f16"),
        (f16, f32, "f32"),
    ],
)
def test_promotion_of_mixed_types(left, right, expected):
    @cube
    def add(a, b):
        return a + b

    out = only(testing.expand(add, left, right), "add").out
    assert str(out.type) == expected


@cube
def literals(x: u8, y: f16):
    return x + 1, y * 2, x * 0.5


def test_python_numbers_adapt_to_the_other_operand():
    expansion = testing.expand(literals, u8, f16)
    add, mul, mul_float = [inst for inst in expansion.instructions if inst.op in ("add", "mul")]
    assert str(add.out.type) == "u8" and str(add.operation.rhs) == "1u8"
    assert str(mul.out.type) == "f16"
    assert str(mul_float.out.type) == "f32"  # a float literal with an integer makes f32


@cube
def python_division(x: i32, y: i32):
    return x // y, x % y, x / y


def test_floor_division_and_modulo_keep_python_meaning():
    expansion = testing.expand(python_division, i32, i32)
    assert expansion.ops == ["floordiv", "mod", "cast", "cast", "div"]
    div = only(expansion, "div")
    assert str(div.out.type) == "f32"  # integers divide as f32


@cube
def truncating(x: i32, y: i32):
    return cp.div_trunc(x, y), cp.rem_trunc(x, y)


def test_truncating_division_is_explicit():
    assert testing.expand(truncating, i32, i32).ops == ["div_trunc", "rem_trunc"]


def test_truncating_division_folds_like_c():
    assert (cp.div_trunc(-7, 2), cp.rem_trunc(-7, 2)) == (-3, -1)
    assert (-7 // 2, -7 % 2) == (-4, 1)


@cube
def powers(x: f32, n: i32, k: u32):
    return x**2, x**0.5, x**n, k**3


def test_power_maps_to_powi_powf_or_multiplication():
    assert testing.expand(powers, f32, i32, u32).ops == ["powi", "powf", "powi", "mul", "mul"]


@cube
def unary(x: i32, b: cp.boolean, f: f32):
    return -x, ~x, ~b, abs(x), abs(f), round(f)


def test_unary_operators():
    assert testing.expand(unary, i32, cp.boolean, f32).ops == ["neg", "bitnot", "not", "abs", "abs", "round"]


@cube
def compare_lines(a: Array[Line[f32]]):
    return a[0] < a[1]


def test_comparisons_on_lines_give_lines_of_bools():
    out = only(testing.expand(compare_lines, Array[Line[f32, 4]]), "lt").out
    assert str(out.type) == "boolx4"


@cube
def line_ops(a: Array[Line[f32]]):
    line = a[0]
    scaled = line * 2.0 + Line[f32](u32(1))
    first = scaled[0]
    return scaled, first, line.size


def test_line_arithmetic_broadcasts_scalars():
    expansion = testing.expand(line_ops, Array[Line[f32, 4]])
    scaled, first, size = expansion.outputs
    assert str(scaled.type) == "f32x4" and str(first.type) == "f32" and size == 4
    assert "extract_lane" in expansion.ops


@cube
def line_broadcast(a: Array[Line[f32]]):
    a[0] = Line(f32(5.0))
    a[1] = Line(1.0, 4)


def test_line_broadcast_on_store():
    expansion = testing.expand(line_broadcast, Array[Line[f32, 4]])
    stores = [inst for inst in expansion.instructions if inst.op == "index_assign"]
    assert [str(s.operation.value) for s in stores] == ["5.0f32x4", "1.0f32x4"]


@cube
def line_cast(a: Array[Line[f16]]):
    return Line[f32](a[0])


def test_line_cast_is_per_lane():
    assert str(only(testing.expand(line_cast, Array[Line[f16, 2]]), "cast").out.type) == "f32x2"


@cube
def lane_write(a: Array[Line[f32]]):
    line = a[0]
    line[1] = 3.0
    a[0] = line


def test_lane_write_copies_into_a_mutable_line():
    assert testing.expand(lane_write, Array[Line[f32, 4]]).ops == ["index", "assign", "insert_lane", "index_assign"]


@cube
def lossless_store(a: Array[f32], x: u8, y: i32):
    a[0] = x
    return i32(y)


def test_lossless_store_converts():
    expansion = testing.expand(lossless_store, Array[f32], u8, i32)
    assert expansion.ops == ["cast", "index_assign"]


@cube
def annotated(x: u8):
    acc: f32 = 0
    total: u32 = x
    return acc, total


def test_annotated_assignment_converts_to_the_annotation():
    acc, total = testing.expand(annotated, u8).outputs
    assert str(acc.type) == "f32" and str(total.type) == "u32"


@cube
def runtime_literal(x: u8):
    return cp.runtime(3) + x, cp.runtime(2.0)


def test_runtime_literals_adapt_like_numbers():
    expansion = testing.expand(runtime_literal, u8)
    add = only(expansion, "add")
    assert str(add.out.type) == "u8"
    assert expansion.outputs[1].kind is ir.VarKind.CONSTANT


def test_comptime_marker():
    @cube
    def marker(x: u32, n):
        return x + cp.comptime(n), cp.comptime(cp.runtime(3))

    assert testing.expand(marker, u32, n=4).outputs[1] == 3
