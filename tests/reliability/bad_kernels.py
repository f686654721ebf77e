"""Kernels that break a rule of the kernel language, one each; the offending line is marked ``# BAD``.

They live in their own module so that expanding them (at launch) is what fails, not importing them.
"""
# ruff: noqa

import cubepy as cp
from cubepy import ABSOLUTE_POS, UNIT_POS, Array, Comptime, Line, cube, f32, u32

COUNTER = 0


@cube(launch=True)
def uses_try(out: Array[f32]):
    try:  # BAD
        out[UNIT_POS] = f32(1)
    except ValueError:
        pass


@cube(launch=True)
def uses_with(out: Array[f32]):
    with open("x"):  # BAD
        out[UNIT_POS] = f32(1)


@cube(launch=True)
def uses_lambda(out: Array[f32]):
    double = lambda v: v * 2  # BAD
    out[UNIT_POS] = double(f32(1))


@cube(launch=True)
def uses_generator(out: Array[f32]):
    out[UNIT_POS] = f32(sum(v for v in range(UNIT_POS)))  # BAD


@cube(launch=True)
def uses_list_comprehension(out: Array[f32]):
    values = [f32(v) for v in range(UNIT_POS)]  # BAD
    out[UNIT_POS] = values[0]


@cube(launch=True)
def uses_global(out: Array[f32]):
    global COUNTER  # BAD
    out[UNIT_POS] = f32(1)


def make_nonlocal_kernel():
    """A kernel with a ``nonlocal`` statement (it needs an enclosing function)."""
    total = 0

    @cube(launch=True)
    def uses_nonlocal(out: Array[f32]):
        nonlocal total  # BAD
        out[UNIT_POS] = f32(1)

    return uses_nonlocal


uses_nonlocal = make_nonlocal_kernel()


@cube(launch=True)
def uses_yield(out: Array[f32]):
    yield out  # BAD


@cube(launch=True)
def uses_async(out: Array[f32]):
    async def helper():  # BAD
        return 1

    out[UNIT_POS] = f32(1)


@cube(launch=True)
def uses_del(out: Array[f32]):
    value = f32(1)
    del value  # BAD
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def uses_match(out: Array[f32]):
    match UNIT_POS:  # BAD
        case 0:
            out[UNIT_POS] = f32(1)


@cube(launch=True)
def uses_class(out: Array[f32]):
    class Local:  # BAD
        pass

    out[UNIT_POS] = f32(1)


@cube(launch=True)
def uses_import(out: Array[f32]):
    import math  # BAD

    out[UNIT_POS] = f32(1)


@cube(launch=True)
def uses_raise(out: Array[f32]):
    if UNIT_POS > 1000:
        raise ValueError("no")  # BAD
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def uses_undefined_name(out: Array[f32]):
    out[UNIT_POS] = undefined_value  # BAD


@cube(launch=True)
def stores_float_into_int_array(out: Array[u32]):
    out[UNIT_POS] = f32(1.5)  # BAD


@cube(launch=True)
def unrolls_a_runtime_range(out: Array[f32], n: u32):
    for i in cp.unroll(range(n)):  # BAD
        out[i] = f32(1)


@cube(launch=True)
def shared_memory_of_runtime_length(out: Array[f32], n: u32):
    tile = cp.SharedMemory[f32](n)  # BAD
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def comptime_of_a_runtime_value(out: Array[f32], n: u32):
    size = cp.comptime(n)  # BAD
    out[UNIT_POS] = f32(size)


@cube
def takes_two(a, b):
    return a + b


@cube(launch=True)
def calls_with_wrong_arity(out: Array[f32]):
    out[UNIT_POS] = takes_two(f32(1))  # BAD


@cube(launch=True)
def calls_plain_python(out: Array[f32]):
    print("hello")  # BAD
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def assigns_to_a_builtin(out: Array[f32]):
    UNIT_POS = 3  # BAD
    out[0] = f32(1)


@cube(launch=True)
def too_much_shared(out: Array[f32]):
    tile = cp.SharedMemory[f32](60000)  # 240 000 bytes: over 227 KiB
    tile[UNIT_POS] = f32(1)
    out[UNIT_POS] = tile[UNIT_POS]


@cube(launch=True)
def writes_one(out: Array[f32]):
    out[UNIT_POS] = f32(1)


@cube(launch=True)
def scales(a: Array[f32], factor: f32, out: Array[f32], mode: Comptime[int]):
    out[UNIT_POS] = a[UNIT_POS] * factor + f32(mode)


@cube(launch_unchecked=True)
def writes_past_the_end(out: Array[f32]):
    out[cp.ABSOLUTE_POS] = f32(7)
    out[cp.ABSOLUTE_POS + 1] = f32(9)  # the last unit writes one past the end


@cube(launch=True)
def doubles_lines(out: Array[Line[f32]]):
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = out[ABSOLUTE_POS] * f32(2)


@cube(launch=True)
def doubles_row_lines(t: cp.Tensor[Line[f32]]):
    row = cp.CUBE_POS
    lanes = t.line_size
    if UNIT_POS < t.shape(1) // lanes:
        t[row * (t.stride(0) // lanes) + UNIT_POS] = t[row * (t.stride(0) // lanes) + UNIT_POS] * f32(2)
