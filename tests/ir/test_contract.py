"""The ``contract`` pass: which ``mul`` + ``add``/``sub`` pairs become one ``fma``, and what that changes.

Expected values are worked by hand: with x = y = 1 + 2^-12 (exact in f32), x*y = 1 + 2^-11 + 2^-24
exactly; rounded to f32 that is a tie that goes to the even 1 + 2^-11, so ``x*y - (1 + 2^-11)`` is 0
with two roundings and 2^-24 with one.
"""

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, config, cube, f32, i32, testing
from cubepy.ir import contract as ir_contract

X = 1 + 2.0**-12
C = -(1 + 2.0**-11)


@cube
def mul_add(a, b, c):
    return a * b + c


@cube
def add_mul(a, b, c):
    return c + a * b


@cube
def mul_sub(a, b, c):
    return a * b - c


@cube
def sub_mul(a, b, c):
    return c - a * b


@cube
def mul_sub_literal(a, b):
    return a * b - 2.0


def _fma_operands(expansion) -> list[str]:
    (fma,) = [inst for inst in expansion.instructions if inst.op == "fma"]
    return [repr(v) for v in fma.operation.operands()]


def test_the_four_forms_fuse():
    args = (f32, f32, f32)
    assert testing.expand(mul_add, *args).ops == ["fma"]
    assert _fma_operands(testing.expand(mul_add, *args)) == ["scalar[0]", "scalar[1]", "scalar[2]"]
    assert _fma_operands(testing.expand(add_mul, *args)) == ["scalar[0]", "scalar[1]", "scalar[2]"]
    sub = testing.expand(mul_sub, *args)
    assert sub.ops == ["neg", "fma"]  # a*b - c = fma(a, b, -c)
    negated = sub.instructions[0]
    assert repr(negated.operation.input) == "scalar[2]" and _fma_operands(sub)[2] == repr(negated.out)
    rsub = testing.expand(sub_mul, *args)
    assert rsub.ops == ["neg", "fma"]  # c - a*b = fma(-a, b, c)
    assert repr(rsub.instructions[0].operation.input) == "scalar[0]"
    assert _fma_operands(rsub)[1:] == ["scalar[1]", "scalar[2]"]
    literal = testing.expand(mul_sub_literal, f32, f32)
    assert literal.ops == ["fma"] and _fma_operands(literal)[2] == "-2.0f32"


@pytest.mark.parametrize("elem", [cp.f16, cp.bf16, cp.f64, cp.Line[f32]])
def test_every_float_type_fuses(elem):
    assert testing.expand(mul_add, elem, elem, elem).ops == ["fma"]


@cube
def product_read_twice(a, b, c):
    p = a * b
    return p + c + p


@cube
def operand_reassigned_between(a, b, c, n):
    x = a  # loop-carried: a mutable local
    total = f32(0.0)
    for _ in range(n):
        p = x * b
        x = c  # fusing would read this x, not the one p was computed from
        total = p + x
    return total


@cube
def across_scopes(a, b, c, flag):
    p = a * b
    out = c
    if flag:
        out = p + c
    return out


def test_what_does_not_fuse():
    assert testing.expand(mul_add, f32, f32, f32, contract=False).ops == ["mul", "add"]
    assert testing.expand(mul_add, i32, i32, i32).ops == ["mul", "add"]
    assert "fma" not in testing.expand(product_read_twice, f32, f32, f32).ops
    assert "fma" not in testing.expand(operand_reassigned_between, f32, f32, f32, cp.u32).ops
    assert "fma" not in testing.expand(across_scopes, f32, f32, f32, cp.boolean).ops
    with config.override(CUBEPY_CONTRACT=False):
        assert testing.expand(mul_add, f32, f32, f32).ops == ["mul", "add"]


def test_a_returned_product_is_kept():
    @cube
    def both(a, b, c):
        p = a * b
        return p + c, p

    assert testing.expand(both, f32, f32, f32).ops == ["mul", "add"]


def test_the_pass_is_idempotent_and_off_unless_asked():
    definition = testing.expand(mul_add, f32, f32, f32, contract=False).definition
    assert ir_contract.contract_pass(definition) is definition  # definition.contract is False
    fused = ir_contract.contract(definition)
    assert [i.op for i in fused.body.instructions] == ["fma"]
    assert ir_contract.contract(fused) is fused


@cube(launch=True)
def axpy_kernel(x: Array[f32], y: Array[f32], z: Array[f32], out: Array[f32]):
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = x[ABSOLUTE_POS] * y[ABSOLUTE_POS] + z[ABSOLUTE_POS]


@cube(launch=True, contract=False)
def axpy_kernel_unfused(x: Array[f32], y: Array[f32], z: Array[f32], out: Array[f32]):
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = x[ABSOLUTE_POS] * y[ABSOLUTE_POS] + z[ABSOLUTE_POS]


@cube(launch=True)
def explicit_fma(x: Array[f32], y: Array[f32], z: Array[f32], out: Array[f32]):
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = cp.fma(x[ABSOLUTE_POS], y[ABSOLUTE_POS], z[ABSOLUTE_POS])


def _launch(kernel) -> float:
    client = cp.client("interp")
    args = [client.create(np.array([v], np.float32)) for v in (X, X, C)]
    out = client.zeros((1,), np.float32)
    kernel.launch(client, cp.CubeCount(1), cp.CubeDim(32), *(cp.ArrayArg(h) for h in (*args, out)))
    return float(client.read(out)[0])


def test_the_interp_runs_fused_code_rounded_once():
    assert _launch(axpy_kernel) == 2.0**-24
    assert _launch(explicit_fma) == 2.0**-24  # cp.fma: the same op, the same result
    assert _launch(axpy_kernel_unfused) == 0.0
    with config.override(CUBEPY_CONTRACT=False):  # the setting is part of the launch cache's key
        assert _launch(axpy_kernel) == 0.0
    assert _launch(axpy_kernel) == 2.0**-24


def _ptx_arith(kernel, **options) -> list[str]:
    client = cp.client("interp")
    args = [cp.ArrayArg(client.zeros((4,), np.float32)) for _ in range(4)]
    ptx = kernel.compile(cp.CubeDim(32), *args, **options).ptx
    return sorted(
        {word for line in ptx.splitlines() for word in line.split() if word.startswith(("fma.", "mul.rn", "add.rn"))}
    )


def test_compiled_code_uses_fma_rn_unless_told_not_to():
    assert _ptx_arith(axpy_kernel) == ["fma.rn.f32"]
    assert _ptx_arith(axpy_kernel, contract=False) == ["add.rn.f32", "mul.rn.f32"]
    assert _ptx_arith(axpy_kernel_unfused) == ["add.rn.f32", "mul.rn.f32"]
    assert _ptx_arith(axpy_kernel_unfused, contract=True) == ["fma.rn.f32"]
    with config.override(CUBEPY_CONTRACT=False):
        assert _ptx_arith(axpy_kernel) == ["add.rn.f32", "mul.rn.f32"]
    compiled = axpy_kernel.compile(
        cp.CubeDim(32), *[cp.ArrayArg(cp.client("interp").zeros((4,), np.float32)) for _ in range(4)]
    )
    passes = dict(compiled.pass_dumps)
    assert " fma " not in passes["fold_constants"] and " fma " in passes["contract"]
