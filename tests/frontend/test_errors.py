"""One negative test per ExpandError case: the error class, the user's file and the offending line.

Each kernel marks its offending line with a ``# <-`` comment; ``expect_error`` checks that the
error points there and that the innermost traceback frames are the user's, not cubepy's.
"""

import inspect
import os

import pytest

import cubepy.frontend as cp
from cubepy.errors import CubeError, ExpandError
from cubepy.frontend import Array, Line, cube, f32, i32, testing, u32

CUBEPY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(cp.__file__)))


def marked_line(function) -> int:
    """The file line of the ``# <-`` marker in ``function``'s source."""
    lines, first = inspect.getsourcelines(function.fn)
    for offset, line in enumerate(lines):
        if "# <-" in line:
            return first + offset
    raise AssertionError("no # <- marker")


def expect_error(function, *specs, match: str, **comptime) -> ExpandError:
    with pytest.raises(ExpandError, match=match) as info:
        testing.expand(function, *specs, **comptime)
    error = info.value
    assert error.filename == __file__
    assert error.lineno == marked_line(function), str(error)
    # The test, the entry point (testing.expand), then only user code (none for syntax errors).
    tb = info.tb
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    assert frames[1].startswith(CUBEPY_DIR)
    assert all(f == __file__ for f in frames[2:]), frames
    return error


# -- unsupported syntax ----------------------------------------------------------------------------
@cube
def uses_try(a: Array[f32]):
    try:  # <-
        a[0] = 1.0
    finally:
        pass


def test_try_is_rejected():
    expect_error(uses_try, Array[f32], match="`try` statements are not supported")


@cube
def uses_with(a: Array[f32]):
    with open("x"):  # <-
        a[0] = 1.0


def test_with_is_rejected():
    expect_error(uses_with, Array[f32], match="`with` statements")


@cube
def uses_lambda(x: f32):
    f = lambda v: v + 1  # <-  # noqa: E731
    return f(x)


def test_lambda_is_rejected():
    expect_error(uses_lambda, f32, match="lambda expressions")


@cube
def uses_global(x: f32):
    global SOMETHING  # <-
    return x


def test_global_is_rejected():
    expect_error(uses_global, f32, match="`global`")


def make_nonlocal():
    value = 1

    @cube
    def uses_nonlocal(x: f32):
        nonlocal value  # <-
        return x

    return uses_nonlocal


def test_nonlocal_is_rejected():
    expect_error(make_nonlocal(), f32, match="`nonlocal`")


@cube
def uses_yield(x: f32):
    yield x  # <-


def test_yield_is_rejected():
    expect_error(uses_yield, f32, match="`yield`")


@cube
def uses_del(x: f32):
    y = x
    del y  # <-


def test_del_is_rejected():
    expect_error(uses_del, f32, match="`del`")


@cube
def uses_class(x: f32):
    class Inner:  # <-
        pass

    return x


def test_class_inside_is_rejected():
    expect_error(uses_class, f32, match="class definitions")


@cube
def uses_match(x: u32, mode):
    match mode:  # <-
        case 1:
            return x
    return x


def test_match_is_rejected():
    expect_error(uses_match, u32, mode=1, match="`match` statements")


@cube
def uses_walrus(x: u32):
    if (y := x + 1) > 2:  # <-
        return y
    return x


def test_walrus_is_rejected():
    expect_error(uses_walrus, u32, match="assignment expressions")


@cube
def uses_async(x: u32):
    async def inner():  # <-
        pass

    return x


def test_async_is_rejected():
    expect_error(uses_async, u32, match="async")


@cube
def for_else(a: Array[u32], n: u32):
    for i in range(n):  # <-
        a[i] = 1
    else:
        a[0] = 2


def test_for_else_is_rejected():
    expect_error(for_else, Array[u32], u32, match="for ... else")


@cube
def comprehension_over_runtime(x: Line[f32, 4]):
    return [v for v in x]  # <-


def test_comprehension_over_runtime_value_is_rejected():
    expect_error(comprehension_over_runtime, Line[f32, 4], match="cannot iterate over a runtime value")


@cube
def takes_three(a, b, c):
    return a + b + c


@cube
def star_args_at_runtime(x: Line[f32, 4]):
    return takes_three(*x)  # <-


def test_star_args_of_runtime_value_are_rejected():
    expect_error(star_args_at_runtime, Line[f32, 4], match="cannot iterate over a runtime value")


# -- variables -------------------------------------------------------------------------------
@cube
def first_bound_in_branch(a: Array[u32], x: u32):
    if x > 3:
        t = x + 1
    a[0] = t  # <-


def test_name_first_bound_in_runtime_branch_and_read_after():
    error = expect_error(first_bound_in_branch, Array[u32], u32, match="'t' is assigned only on some paths")
    assert "line" in error.message


@cube
def first_bound_in_loop(a: Array[u32], n: u32):
    for i in range(n):
        t = a[i]
    a[0] = t  # <-


def test_name_first_bound_in_runtime_loop_and_read_after():
    expect_error(first_bound_in_loop, Array[u32], u32, match="'t' is assigned inside the runtime loop")


@cube
def read_before_assignment(a: Array[u32], x: u32):
    a[0] = t  # <-  # noqa: F821
    if x > 1:
        t = 1  # noqa: F841


def test_read_before_assignment():
    expect_error(read_before_assignment, Array[u32], u32, match="'t' is used before it is assigned")


@cube
def comptime_object_in_branch(a: Array[u32], x: u32):
    mode = "sum"
    if x > 1:
        mode = "max"
    a[0] = len(mode)  # <-


def test_comptime_object_rebound_under_runtime_condition():
    # A string cannot become a runtime value: the arm's end reports it at the `if` body's end.
    with pytest.raises(ExpandError, match="'mode' holds a comptime str"):
        testing.expand(comptime_object_in_branch, Array[u32], u32)


@cube
def escapes_branch(a: Array[u32], x: u32, box):
    if x > 1:
        box.append(x + 1)
    a[0] = box[0]  # <-


def test_value_escaping_its_branch():
    expect_error(escapes_branch, Array[u32], u32, box=[], match="computed inside a runtime branch")


# -- control flow ----------------------------------------------------------------------------
@cube
def return_under_runtime_condition(x: u32):
    if x > 1:
        return x  # <-
    return x + 1


def test_value_return_inside_runtime_control_flow():
    expect_error(return_under_runtime_condition, u32, match="`return` inside runtime control flow")


@cube(launch=True)
def kernel_returns_value(a: Array[u32]):
    a[1] = a[0]
    return a[0]  # <-


def test_kernel_cannot_return_a_value():
    expect_error(kernel_returns_value, Array[u32], match="a kernel cannot return a value")


@cube(launch=True)
def kernel_returns_value_in_a_runtime_branch(a: Array[u32]):
    if a[0] > 1:
        return a[0]  # <-
    a[1] = u32(0)


def test_kernel_cannot_return_a_value_under_runtime_control_flow():
    expect_error(kernel_returns_value_in_a_runtime_branch, Array[u32], match="a kernel cannot return a value")


@cube
def comptime_made_runtime_then_unrolled(a: Array[f32], flag: u32):
    n = 4
    if flag > 0:
        n = 8  # <-
    for i in cp.unroll(range(n)):
        a[i] = f32(i)


def test_comptime_made_runtime_is_reported_at_the_assignment_and_the_use():
    error = expect_error(comptime_made_runtime_then_unrolled, Array[f32], u32, match="needs a plain int")
    use = marked_line(comptime_made_runtime_then_unrolled) + 1
    assert f"(used at {__file__}:{use}: `for i in cp.unroll(range(n)):`)" in error.message
    assert (
        f"'n' held the comptime value 4 until this assignment under the runtime if at line {use - 2} made it "
        "a mutable runtime variable"
    ) in error.message
    assert error.source_line.strip() == "n = 8  # <-"


@cube
def comptime_made_runtime_in_a_loop_then_sized(a: Array[f32], count: u32):
    size = 16
    for _ in range(count):
        size = size * 2  # <-
    tile = cp.SharedMemory[f32](size)
    tile[0] = a[0]


def test_comptime_made_runtime_by_a_loop_is_reported_at_the_assignment():
    error = expect_error(
        comptime_made_runtime_in_a_loop_then_sized,
        Array[f32],
        u32,
        match="shared/local memory length must be a comptime positive int",
    )
    assert "'size' held the comptime value 16 until this assignment under the runtime loop at line" in error.message


@cube
def runtime_value_needed_comptime(a: Array[f32], count: u32):
    for i in cp.unroll(range(count)):  # <-
        a[i] = f32(0)


def test_a_plain_runtime_value_is_reported_at_its_use():
    error = expect_error(runtime_value_needed_comptime, Array[f32], u32, match="needs a plain int")
    assert "held the comptime value" not in error.message


@cube
def not_a_kernel(a: Array[f32]):
    a[0] = f32(1)


@pytest.mark.parametrize("attribute", ["launch", "launch_unchecked", "compile"])
def test_a_cube_function_says_how_to_become_a_kernel(attribute):
    from cubepy.errors import NotAKernelError

    with pytest.raises(
        NotAKernelError,
        match=rf"'not_a_kernel' is a cube function, not a kernel, so it has no "
        rf"\.{attribute}: decorate it with @cube\(launch=True\)",
    ):
        getattr(not_a_kernel, attribute)
    assert not hasattr(not_a_kernel, attribute)  # still an AttributeError
    assert isinstance(NotAKernelError("x"), CubeError)


@cube
def runtime_break_in_unrolled_loop(a: Array[u32]):
    for i in cp.unroll(range(4)):
        if a[i] == 0:
            break  # <-


def test_runtime_break_in_unrolled_loop():
    expect_error(runtime_break_in_unrolled_loop, Array[u32], match="inside a comptime \\(unrolled\\) loop")


@cube
def while_turns_runtime(a: Array[u32]):
    i = 0
    while i < 4:  # <-
        i = a[i]


def test_while_condition_turning_runtime():
    expect_error(while_turns_runtime, Array[u32], match="was comptime and became runtime")


@cube
def truth_of_runtime_value(x: u32):
    assert x > 1  # <-


def test_python_truth_of_runtime_value():
    expect_error(truth_of_runtime_value, u32, match="where Python needs a plain bool")


# -- types -----------------------------------------------------------------------------------
@cube
def float_into_int_array(a: Array[u32], x: f32):
    a[0] = x  # <-


def test_lossy_store_names_both_types():
    expect_error(float_into_int_array, Array[u32], f32, match="storing f32 into u32 loses information")


@cube
def float_literal_into_int_array(a: Array[u32]):
    a[0] = 1.5  # <-


def test_float_literal_into_int_array():
    expect_error(float_literal_into_int_array, Array[u32], match="cannot store a float into u32")


@cube
def literal_out_of_range(x: u32):
    return x + (-1)  # <-


def test_literal_that_does_not_fit():
    expect_error(literal_out_of_range, u32, match="does not fit in u32")


@cube
def int_power(x: i32, y: i32):
    return x**y  # <-


def test_integer_power_needs_comptime_exponent():
    expect_error(int_power, i32, i32, match="comptime non-negative integer exponent")


@cube
def comptime_of_runtime(x: u32):
    return cp.comptime(x)  # <-


def test_comptime_marker_on_runtime_value():
    expect_error(comptime_of_runtime, u32, match="expected a comptime value")


@cube
def shared_runtime_size(n: u32):
    return cp.SharedMemory[f32](n)  # <-


def test_shared_memory_needs_comptime_size():
    expect_error(shared_runtime_size, u32, match="comptime positive int")


# -- plain Python ------------------------------------------------------------------------------
def test_cube_function_called_from_python():
    with pytest.raises(CubeError, match="called from plain Python"):
        takes_three(1, 2, 3)


def test_kernel_called_from_python():
    with pytest.raises(CubeError, match="called from plain Python"):
        kernel_returns_value(None)


def test_builtin_used_outside_a_kernel():
    with pytest.raises(CubeError, match="inside a cube function"):
        cp.ABSOLUTE_POS + 1  # noqa: B018


class Config:
    def __init__(self):
        self.count = 0


@cube
def comptime_object_field(x: u32, config):
    if x > 1:
        config.count = 1  # <-


def test_field_of_a_comptime_object_under_runtime_condition():
    expect_error(comptime_object_field, u32, config=Config(), match="field 'count' of Config")
