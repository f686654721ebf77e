"""Port of CubeCL's ``branch`` runtime tests.

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/branch.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD; superset of the classic file at 3956d6153).

``testgen_branch!`` runs per FloatType (f16, bf16, f32, f64); the value-form literal tests
(``testgen_value_form_literals!``, the all-types variant run on CUDA and CPU) run once per scalar type.

cubepy has no ``match`` rewrite: a Rust ``match`` on a runtime ``u32`` is written as an
``if``/``elif``/``else`` chain on that value (an or-pattern ``1 | 2`` becomes ``x == 1 or x == 2``).
A ``match`` used as a value becomes a variable assigned in every arm; it is declared before the
chain because a name first bound inside a runtime branch may not be read after it.
``terminate!()`` is ``return``.
"""

import functools

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, cube, u32

FLOATS = [cp.f16, cp.bf16, cp.f32, cp.f64]
# `test_value_form_literals` / `test_match_value_literals`: every scalar type of the Rust macros.
LITERAL_TYPES = [
    cp.i8,
    cp.i16,
    cp.i32,
    cp.i64,
    cp.u8,
    cp.u16,
    cp.u32,
    cp.u64,
    cp.f32,
    cp.f64,
]

CASE_0 = 0
CASE_1 = 1


def as_type(elem, *values):
    """``as_bytes![F: ...]``: each value is an f32 literal converted with ``F::new``."""
    return np.asarray(values, dtype=np.float32).astype(elem.numpy)


def f64(array):
    return np.asarray(array).astype(np.float64)


# --- value-form if/else with literal arms (lit_value_form!) ---------------------------------


@functools.cache
def make_kernel_lit(T, a, b):
    @cube(launch=True)
    def kernel_lit(output: Array[T], cond: u32):
        if UNIT_POS == 0:
            flag = cond != 0
            output[0] = T(a) if flag else T(b)

    return kernel_lit


@pytest.mark.parametrize("T", LITERAL_TYPES, ids=lambda t: t.name)
def test_value_form_literals(client, T):
    a, b = (30.0, 50.0) if T in (cp.f32, cp.f64) else (30, 50)
    kernel = make_kernel_lit(T, a, b)

    def run(cond):
        handle = client.empty((1,), T.numpy)
        kernel.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle), cond)
        return client.read(handle).tobytes()

    assert run(1) != run(0), f"value-form if/else miscompiled for {T.name}"


# --- match used as a value with literal arms (lit_match_value!) -----------------------------


@functools.cache
def make_kernel_match(T, a, b, c):
    @cube(launch=True)
    def kernel_match(output: Array[T], sel: u32):
        if UNIT_POS == 0:
            # Rust: `output[0] = match sel { 0 => a, 1 | 2 => b, _ => c };`
            value = T(c)
            if sel == 0:
                value = T(a)
            elif sel == 1 or sel == 2:
                value = T(b)
            else:
                value = T(c)
            output[0] = value

    return kernel_match


@pytest.mark.parametrize("T", LITERAL_TYPES, ids=lambda t: t.name)
def test_match_value_literals(client, T):
    a, b, c = (10.0, 20.0, 30.0) if T in (cp.f32, cp.f64) else (10, 20, 30)
    kernel = make_kernel_match(T, a, b, c)

    def run(sel):
        handle = client.empty((1,), T.numpy)
        kernel.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle), sel)
        return client.read(handle).tobytes()

    def as_bytes(value):
        return np.asarray([value], dtype=T.numpy).tobytes()

    assert run(0) == as_bytes(a), f"{T.name}: arm 0"
    assert run(1) == as_bytes(b), f"{T.name}: or-arm sel=1"
    assert run(2) == as_bytes(b), f"{T.name}: or-arm sel=2"
    assert run(3) == as_bytes(c), f"{T.name}: default"


# --- switch / select / loops (testgen_branch!, FloatType) -----------------------------------


@functools.cache
def make_kernel_switch_simple(F):
    @cube(launch_unchecked=True)
    def kernel_switch_simple(output: Array[F], case: u32):
        if case == 0:
            output[0] = F(1.0)
        elif case == 1:
            output[0] = F(3.0)
        else:
            output[0] = F(5.0)

    return kernel_switch_simple


@functools.cache
def make_kernel_switch_value_expr(F):
    @cube(launch=True)
    def kernel_switch_value_expr(output: Array[F], case: u32):
        if UNIT_POS == 0:
            value = F(0.0)
            if case == 0:
                value = F(1.0)
            elif case == 1:
                value = F(3.0)
            else:
                value = F(5.0)
            output[0] = value

    return kernel_switch_value_expr


@functools.cache
def make_kernel_switch_or_arm(F):
    @cube(launch=True)
    def kernel_switch_or_arm(output: Array[F], case: u32):
        if UNIT_POS == 0:
            value = F(0.0)
            if case == 0:
                value = F(1.0)
            elif case == 1 or case == 2:
                value = F(3.0)
            else:
                value = F(5.0)
            output[0] = value

    return kernel_switch_or_arm


@functools.cache
def make_kernel_switch_const(F):
    @cube(launch=True)
    def kernel_switch_const(output: Array[F], case: u32):
        if UNIT_POS == 0:
            value = F(0.0)
            if case == CASE_0:
                value = F(1.0)
            elif case == CASE_1:
                value = F(3.0)
            else:
                value = F(5.0)
            output[0] = value

    return kernel_switch_const


@functools.cache
def make_kernel_select(F):
    @cube(launch=True)
    def kernel_select(output: Array[F], cond: u32):
        if UNIT_POS == 0:
            output[0] = cp.select(cond == 1, F(3.0), F(5.0))

    return kernel_select


@functools.cache
def make_kernel_for_loop_with_break(F):
    @cube(launch=True)
    def kernel_for_loop_with_break(output: Array[F]):
        max_iterations = 20  # comptime!(20_i32)
        for i in range(0, max_iterations):
            if i > 3:
                break
            output[i] = F(1.0)

    return kernel_for_loop_with_break


@functools.cache
def make_kernel_for_loop_with_return(F):
    @cube(launch=True)
    def kernel_for_loop_with_return(output: Array[F]):
        max_iterations = 20  # comptime!(20_i32)
        for i in range(0, max_iterations):
            if i > 3:
                return  # terminate!()
            output[i] = F(1.0)
        output[0] = F(5.0)

    return kernel_for_loop_with_return


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_switch_const(client, F):
    handle = client.create(as_type(F, 0.0, 1.0))

    make_kernel_switch_const(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle), 1)

    assert f64(client.read(handle))[0] == 3.0


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_switch_statement(client, F):
    handle = client.create(as_type(F, 0.0, 1.0))

    make_kernel_switch_simple(F).launch_unchecked(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle), 0)

    assert f64(client.read(handle))[0] == 1.0


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_switch_used_as_value(client, F):
    handle = client.create(as_type(F, 0.0, 1.0))

    make_kernel_switch_value_expr(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle), 1)

    assert f64(client.read(handle))[0] == 3.0


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_switch_default(client, F):
    handle = client.create(as_type(F, 0.0, 1.0))

    make_kernel_switch_value_expr(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle), 5)

    assert f64(client.read(handle))[0] == 5.0


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_switch_or_branch(client, F):
    handle = client.create(as_type(F, 0.0, 1.0))

    make_kernel_switch_or_arm(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle), 2)

    assert f64(client.read(handle))[0] == 3.0


@pytest.mark.parametrize("cond", [True, False], ids=["true", "false"])
@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_select(client, F, cond):
    handle = client.create(as_type(F, 0.0))
    cond_u32 = 1 if cond else 0

    make_kernel_select(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle), cond_u32)

    actual = f64(client.read(handle))
    if cond:
        assert actual[0] == 3.0
    else:
        assert actual[0] == 5.0


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_for_loop_with_break(client, F):
    handle = client.create(np.zeros(20, dtype=F.numpy))

    make_kernel_for_loop_with_break(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle))

    expected = [1.0 if i < 4 else 0.0 for i in range(20)]
    np.testing.assert_array_equal(f64(client.read(handle)), expected)


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_for_loop_with_return(client, F):
    handle = client.create(np.zeros(20, dtype=F.numpy))

    make_kernel_for_loop_with_return(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle))

    expected = [1.0 if i < 4 else 0.0 for i in range(20)]
    np.testing.assert_array_equal(f64(client.read(handle)), expected)
