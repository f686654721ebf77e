"""``cp.debug_print`` and ``print()`` in kernels: the instruction they expand to, and their errors."""

from __future__ import annotations

import sys

import pytest

import cubepy as cp
from cubepy import Array, f16, f32, i8, i64, u32, u64
from cubepy.errors import ExpandError


def _prints(expansion) -> list:
    return [inst.operation for inst in expansion.instructions if inst.op == "debug_print"]


@cp.cube
def formats(a: Array[f32], n: u32, big: i64, small: i8, half: f16):
    cp.debug_print("n=%u a=%.3f big=%ld small=%hhd half=%g pct=%% tag=%s", n, a[0], big, small, half, "T")


def test_the_format_is_canonical_for_the_argument_types():
    (op,) = _prints(cp.testing.expand(formats, Array[f32], u32, i64, cp.i8, f16))
    # %ld of an i64 becomes %lld, %hhd of an i8 becomes %d (it is passed as a 32-bit int); %s of a comptime
    # value is its text; %% stays.
    assert op.format == "n=%u a=%.3f big=%lld small=%d half=%g pct=%% tag=T"
    assert [var.elem.name for var in op.args] == ["u32", "f32", "i64", "i8", "f16"]


@cp.cube
def runtime_s(n: u64, x: f32, flag: cp.boolean):
    cp.debug_print("%s %5s %s", n, x, flag)


def test_percent_s_of_a_runtime_value_uses_its_default_conversion():
    (op,) = _prints(cp.testing.expand(runtime_s, u64, f32, cp.boolean))
    assert op.format == "%llu %5g %d"


@cp.cube
def with_print(a: Array[f32], n: u32):
    print("n is", n, "and a[0] is", a[0], 3, sep=" ", end=";\n")


def test_print_becomes_a_debug_print():
    expansion = cp.testing.expand(with_print, Array[f32], u32)
    (op,) = _prints(expansion)
    assert op.format == "n is %u and a[0] is %g 3;\n"
    assert "debug_print" in expansion.ir


def my_print(*args, **kwargs):
    my_print.calls.append(args)


my_print.calls = []


@cp.cube
def shadowed_print(n: u32):
    print = my_print  # noqa: A001  (the user's own print is called as it is)
    print("at expansion", 1)


def test_a_print_the_user_rebound_is_called_as_is():
    my_print.calls.clear()
    assert _prints(cp.testing.expand(shadowed_print, u32)) == []
    assert my_print.calls == [("at expansion", 1)]


@cp.cube
def no_args_print():
    print()


def test_an_empty_print_prints_an_empty_line():
    (op,) = _prints(cp.testing.expand(no_args_print))
    assert op.format == "\n" and op.args == ()


@cp.cube
def bad_format_type(n: u32):
    cp.debug_print(n)


@cp.cube
def too_few_values(n: u32):
    cp.debug_print("%u %u", n)


@cp.cube
def too_many_values(n: u32):
    cp.debug_print("%u", n, n)


@cp.cube
def float_conversion_of_an_int(n: u32):
    cp.debug_print("%f", n)


@cp.cube
def int_conversion_of_a_float(x: f32):
    cp.debug_print("%d", x)


@cp.cube
def unknown_conversion(n: u32):
    cp.debug_print("%y", n)


@cp.cube
def star_width(n: u32):
    cp.debug_print("%*d", n, n)


@cp.cube
def prints_a_line(a: Array[cp.Line[f32]]):
    cp.debug_print("%f", a[0])


@cp.cube
def print_to_stderr(n: u32):
    print(n, file=sys.stderr)


@pytest.mark.parametrize(
    ("function", "specs", "words"),
    [
        (bad_format_type, (u32,), "the format must be a comptime str, got a runtime u32"),
        (too_few_values, (u32,), "'%u %u' has more conversions than the 1 value(s) given"),
        (too_many_values, (u32,), "'%u' has 1 conversion(s) for 2 values"),
        (float_conversion_of_an_int, (u32,), "'%f' needs a float, got a u32"),
        (int_conversion_of_a_float, (f32,), "'%d' needs an integer, got a f32"),
        (unknown_conversion, (u32,), "'%' at position 0 of '%y' is not a conversion"),
        (star_width, (u32,), "'%*' at position 0 of '%*d' takes its width from an argument"),
        (prints_a_line, (Array[cp.Line[f32, 4]],), "a line of 4 cannot be printed as one value"),
        (print_to_stderr, (u32,), "print(file=...) is not supported in a kernel"),
    ],
    ids=lambda value: getattr(value, "name", None) or "",
)
def test_bad_prints_name_the_problem_and_the_line(function, specs, words):
    with pytest.raises(ExpandError) as info:
        cp.testing.expand(function, *specs)
    assert words in info.value.message
    assert info.value.filename == __file__
    assert info.value.source_line is not None and (
        "debug_print" in info.value.source_line or "print(" in info.value.source_line
    )
