"""IR passes: each result is verified, and each does exactly its one job."""

from __future__ import annotations

import pytest

from cubepy.compiler.passes import PIPELINE, checked_io, dead_code, fold_constants, run_passes
from cubepy.ir import (
    BOOL,
    F16,
    F32,
    I32,
    U8,
    U32,
    VarKind,
    builtin,
    constant,
    format_kernel,
    ops,
    verify,
    walk,
)
from cubepy.ir.ops import branch
from tests.irbuild import USER_FILE, KernelBuilder, T, lit, vector_add


def _run(pass_, definition):
    verify(definition)
    result = pass_(definition)
    verify(result)
    return result


def _ops(definition):
    return [inst.op for inst in walk(definition.body)]


# -- checked_io -----------------------------------------------------------------------------------------
def test_checked_io_marks_every_access_of_a_checked_kernel():
    result = _run(checked_io, vector_add(F32, checked=True))
    accesses = [i.operation for i in walk(result.body) if isinstance(i.operation, (ops.Index, ops.IndexAssign))]
    assert len(accesses) == 3 and all(a.checked for a in accesses)
    assert all(i.loc is not None for i in walk(result.body)), "source locations survive"


def test_checked_io_leaves_unchecked_kernels_alone():
    definition = vector_add(F32, checked=False)
    assert _run(checked_io, definition) is definition


def test_checked_io_is_idempotent():
    once = _run(checked_io, vector_add(F32, checked=True))
    assert _run(checked_io, once) == once


# -- dead_code --------------------------------------------------------------------------------------------
def test_dead_code_removes_unread_pure_chains_to_a_fixed_point():
    kb = KernelBuilder()
    data = kb.array(T(F32), "data")
    pos = builtin("absolute_pos")
    x = kb.index(data, pos)
    y = kb.binary("mul", x, x)  # read only by z
    kb.unary("sqrt", y)  # z: never read
    kb.emit(ops.lookup("len")(data), T(U32))  # never read
    kb.store(data, pos, x)
    result = _run(dead_code, kb.build())
    assert _ops(result) == ["index", "index_assign"]


def test_dead_code_keeps_effects_and_values_read_in_nested_scopes():
    kb = KernelBuilder()
    data = kb.array(T(U32), "data")
    pos = builtin("absolute_pos")
    n = kb.emit(ops.lookup("len")(data), T(U32))  # read by the branch condition below
    limit = kb.binary("add", n, lit(1, U32))  # read inside the loop
    acc = kb.mut(T(U32))
    kb.assign(acc, lit(0, U32))  # MUT: always kept
    kb.emit(ops.lookup("atomic_add")(data, pos, lit(1, U32)), T(U32))  # result unread, but an effect
    kb.emit(ops.lookup("plane_sum")(pos), T(U32))  # a collective: kept
    with kb.if_(kb.compare("lt", pos, n)):
        with kb.range_loop(lit(0, U32), limit) as i:
            kb.binary("mul", i, i)  # dead inside the loop
            kb.assign(acc, kb.binary("add", acc, i))
    kb.store(data, pos, acc)
    result = _run(dead_code, kb.build())
    assert _ops(result) == [
        "len",
        "add",
        "assign",
        "atomic_add",
        "plane_sum",
        "lt",
        "if",
        "range_loop",
        "add",
        "assign",
        "index_assign",
    ]


# -- fold_constants ---------------------------------------------------------------------------------------
def test_fold_constants_folds_chains_and_substitutes_readers():
    kb = KernelBuilder()
    data = kb.array(T(U32), "data")
    pos = builtin("absolute_pos")
    three = kb.binary("add", lit(1, U32), lit(2, U32))
    nine = kb.binary("mul", three, lit(3, U32))
    wide = kb.cast(nine, T(F32))
    big = kb.compare("gt", wide, constant(8.5, T(F32)))
    with kb.if_(big):
        kb.store(data, pos, kb.binary("add", pos, nine))
    result = _run(fold_constants, kb.build())
    # 9.0 > 8.5 folds to true, so the ``if`` gives way to its body
    assert _ops(result) == ["add", "index_assign"]
    add = result.body.instructions[0].operation
    assert add.rhs == constant(9, T(U32))


@pytest.mark.parametrize(("cond", "expected"), [(True, ["add", "index_assign"]), (False, [])])
def test_fold_constants_keeps_only_the_body_an_if_on_a_literal_runs(cond, expected):
    kb = KernelBuilder()
    data = kb.array(T(U32), "data")
    pos = builtin("absolute_pos")
    with kb.if_(constant(cond, T(BOOL))):
        kb.store(data, pos, kb.binary("add", pos, lit(1, U32)))
    assert _ops(_run(fold_constants, kb.build())) == expected


def test_fold_constants_reads_the_compiled_in_cube_shape_and_plane_width():
    """``cube_dim`` is the product of the compiled-in shape, ``plane_dim`` 32: both become literals, and an ``if``
    on them folds (a cube of 64 units has whole planes)."""
    kb = KernelBuilder(cube_dim=(16, 4, 1))
    data = kb.array(T(U32), "data")
    whole_planes = kb.compare("eq", kb.binary("mod", builtin("cube_dim"), builtin("plane_dim")), lit(0, U32))
    with kb.if_(whole_planes):
        kb.store(data, builtin("unit_pos"), builtin("cube_dim_y"))
    result = _run(fold_constants, kb.build())
    assert _ops(result) == ["index_assign"]
    assert result.body.instructions[0].operation.value == constant(4, T(U32))


@pytest.mark.parametrize(
    "name, a, b, elem, expected",
    [
        ("floordiv", -7, 2, I32, -4),
        ("mod", -7, 2, I32, 1),
        ("div_trunc", -7, 2, I32, -3),
        ("rem_trunc", -7, 2, I32, -1),
        ("floordiv", 5, 0, I32, -1),
        ("floordiv", 5, 0, U32, 2**32 - 1),
        ("mod", 5, 0, I32, 5),
        ("floordiv", -(2**31), -1, I32, -(2**31)),
        ("add", 250, 10, U8, 4),
        ("shl", 1, 40, I32, 0),
        ("shr", -8, 100, I32, -1),
        ("shr", -8, 1, I32, -4),
        ("sub", 0, 1, U32, 2**32 - 1),
    ],
)
def test_fold_constants_integer_semantics(name, a, b, elem, expected):
    kb = KernelBuilder()
    out = kb.array(T(elem), "out")
    kb.store(out, builtin("absolute_pos"), kb.binary(name, lit(a, elem), lit(b, elem)))
    stored = _run(fold_constants, kb.build()).body.instructions[-1].operation.value
    assert stored == constant(expected, T(elem))


@pytest.mark.parametrize(
    "value, dst, expected",
    [
        (3.9, I32, 3),
        (-3.9, I32, -3),
        (1e20, I32, 2**31 - 1),
        (-1.0, U32, 0),
        (float("nan"), I32, 0),
        (0.1, BOOL, True),
        (float("nan"), BOOL, True),
        (16777217, F32, 16777216.0),
    ],
)
def test_fold_constants_casts(value, dst, expected):
    src = F32 if isinstance(value, float) else I32
    kb = KernelBuilder()
    out = kb.array(T(dst), "out")
    kb.store(out, builtin("absolute_pos"), kb.cast(lit(value, src), T(dst)))
    stored = _run(fold_constants, kb.build()).body.instructions[-1].operation.value
    assert stored == constant(expected, T(dst))


def test_fold_constants_rounds_floats_to_f32():
    kb = KernelBuilder()
    out = kb.array(T(F32), "out")
    kb.store(out, builtin("absolute_pos"), kb.binary("add", lit(0.1, F32), lit(0.2, F32)))
    stored = _run(fold_constants, kb.build()).body.instructions[-1].operation.value
    import numpy as np

    assert stored.value == float(np.float32(0.1) + np.float32(0.2)) != 0.1 + 0.2


def test_fold_constants_leaves_half_precision_powi_and_runtime_values_alone():
    kb = KernelBuilder()
    out = kb.array(T(F16), "out")
    pos = builtin("absolute_pos")
    kb.store(out, pos, kb.binary("add", lit(1.0, F16), lit(2.0, F16)))
    kb.store(out, pos, kb.emit(ops.lookup("powi")(lit(2.0, F16), lit(3, I32)), T(F16)))
    kb.store(out, pos, kb.cast(kb.binary("add", pos, lit(1, U32)), T(F16)))
    result = _run(fold_constants, kb.build())
    assert _ops(result) == ["add", "index_assign", "powi", "index_assign", "add", "cast", "index_assign"]


def test_fold_constants_into_a_mutable_local_becomes_an_assign():
    kb = KernelBuilder()
    acc = kb.mut(T(I32))
    kb.emit(ops.lookup("mul")(lit(6, I32), lit(7, I32)), acc)
    kb.store(kb.array(T(I32), "out"), builtin("absolute_pos"), acc)
    first = _run(fold_constants, kb.build()).body.instructions[0]
    assert first.out.kind is VarKind.MUT and first.operation == ops.Assign(constant(42, T(I32)))


def test_fold_constants_reads_integer_identities_as_their_operand():
    """``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x`` and ``x // 1`` of an integer ``x`` that cannot change are
    ``x`` in their readers; a float ``x + 0.0`` (``-0.0 + 0.0`` is ``+0.0``) and a mutable ``x`` stay."""
    kb = KernelBuilder()
    out = kb.array(T(U32), "out")
    pos = builtin("absolute_pos")
    width = kb.scalar(T(U32), "width")
    row = kb.binary("mul", pos, width)
    for name, a, b in (
        ("add", row, lit(0, U32)),
        ("add", lit(0, U32), row),
        ("sub", row, lit(0, U32)),
        ("mul", row, lit(1, U32)),
        ("mul", lit(1, U32), row),
        ("floordiv", row, lit(1, U32)),
    ):
        kb.store(out, pos, kb.binary(name, a, b))
    floats = kb.array(T(F32), "floats")
    kb.store(floats, pos, kb.binary("add", kb.cast(pos, T(F32)), lit(0.0, F32)))
    moving = kb.mut(T(U32))
    kb.assign(moving, pos)
    same = kb.binary("add", moving, lit(0, U32))
    kb.assign(moving, kb.binary("add", moving, lit(1, U32)))
    kb.store(out, same, moving)
    result = _run(fold_constants, kb.build())
    stores = [i.operation for i in walk(result.body) if isinstance(i.operation, ops.IndexAssign)]
    assert all(store.value == row for store in stores[:6])
    assert _ops(result).count("add") == 3  # the float add, the add of the mutable, its increment
    assert stores[-1].index == same


def test_fold_constants_on_lines_broadcasts():
    kb = KernelBuilder()
    out = kb.array(T(F32, 4), "out")
    kb.store(out, builtin("absolute_pos"), kb.binary("mul", lit(1.5, F32, 4), lit(2.0, F32, 4)))
    stored = _run(fold_constants, kb.build()).body.instructions[-1].operation.value
    assert stored == constant(3.0, T(F32, 4))


def test_fold_constants_substitutes_branch_operands():
    kb = KernelBuilder()
    out = kb.array(T(U32), "out")
    end = kb.binary("add", lit(4, U32), lit(4, U32))
    with kb.range_loop(lit(0, U32), end) as i:
        kb.store(out, i, i)
    loop = _run(fold_constants, kb.build()).body.instructions[0].operation
    assert isinstance(loop, branch.RangeLoop) and loop.end == constant(8, T(U32))


# -- the pipeline ------------------------------------------------------------------------------------------
def test_run_passes_dumps_after_each_pass_in_order():
    definition, dumps = run_passes(vector_add(F32, 4, checked=True), dumps=True)
    assert (
        [name for name, _ in dumps]
        == [name for name, _ in PIPELINE]
        == ["checked_io", "fold_constants", "contract", "dead_code", "merge_branches", "plane_uniform", "bounds"]
    )
    assert dumps[-1][1] == format_kernel(definition)
    assert "checked=True" in dumps[0][1]
    assert USER_FILE.rsplit("/", 1)[-1] in dumps[-1][1]
    assert run_passes(vector_add(F32, 4, checked=True))[1] == []  # no text unless asked for
