"""``cubepy.ir.merge_branches``: adjacent branches on one immutable condition join into one; an instruction
between them moves above the first only when the first's bodies do not touch it.  ``a[i] if c else 0`` with a
global read is a branch (``cubepy.frontend.expressions``), so a row of them becomes one.  Expected values come
from numpy."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, cube, f32
from cubepy.ir import ops, walk
from cubepy.ir.ops import branch


@cube(launch=True)
def three_guarded(x: Array[f32], y: Array[f32], z: Array[f32], out: Array[f32]):
    """out[i] = x[i] + y[i] * z[i] past the end of out read as 0 (three conditional expressions on one guard)."""
    i = ABSOLUTE_POS
    inside = i < out.len()
    a = x[i] if inside else 0.0
    b = y[i] if inside else 0.0
    c = z[i] * b if inside else 0.0
    if inside:
        out[i] = a + c


@cube(launch=True)
def reads_between(x: Array[f32], y: Array[f32], out: Array[f32]):
    """The value between the first two branches reads the first's result: those two stay apart."""
    i = ABSOLUTE_POS
    inside = i < out.len()
    a = x[i] if inside else 0.0
    twice = a * 2.0
    b = y[i] if inside else twice
    if inside:
        out[i] = b + twice


def _branches(compiled) -> list[branch.If | branch.IfElse]:
    return [
        inst.operation
        for inst in compiled.definition.body.instructions
        if isinstance(inst.operation, (branch.If, branch.IfElse))
    ]


def _arrays(client, n: int = 40, out_len: int = 37):
    rng = np.random.default_rng(5)
    values = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    handles = [client.create(v) for v in values] + [client.zeros(out_len, np.float32)]
    return values, handles


def test_three_guarded_reads_are_one_branch_with_no_check():
    client = cp.client("interp")
    _, handles = _arrays(client, 37, 37)  # every array as long as out: the guard proves every access
    compiled = three_guarded.compile(cp.CubeDim(64), *(cp.ArrayArg(h) for h in handles))
    found = _branches(compiled)
    assert len(found) == 1  # the three reads and the store, all under ``inside``
    reads = [i.operation for i in walk(found[0].body) if isinstance(i.operation, ops.Index)]
    assert len(reads) == 3 and not any(r.checked for r in reads) and not any(r.speculative for r in reads)
    stores = [i.operation for i in walk(found[0].body) if isinstance(i.operation, ops.IndexAssign)]
    assert len(stores) == 1 and not stores[0].checked


@pytest.mark.parametrize("kind", ["interp", "cpu"])
def test_joined_branches_compute_what_numpy_does(kind):
    client = cp.client(kind)
    (x, y, z), handles = _arrays(client)
    three_guarded.launch(client, cp.CubeCount(1), cp.CubeDim(64), *(cp.ArrayArg(h) for h in handles))
    np.testing.assert_array_equal(client.read(handles[3]), (x + z * y)[:37])


@pytest.mark.parametrize("kind", ["interp", "cpu"])
def test_a_value_read_between_keeps_the_branches_apart(kind):
    client = cp.client(kind)
    (x, y, _), handles = _arrays(client)
    args = [cp.ArrayArg(h) for h in (handles[0], handles[1], handles[3])]
    found = _branches(reads_between.compile(cp.CubeDim(64), *args))
    assert len(found) == 2  # x's read apart; y's read joined with the store (nothing between them)
    first = [
        i.operation.memory.id
        for i in walk(found[0].then_body if isinstance(found[0], branch.IfElse) else found[0].body)
        if isinstance(i.operation, ops.Index)
    ]
    assert first == [0]
    reads_between.launch(client, cp.CubeCount(1), cp.CubeDim(64), *args)
    np.testing.assert_array_equal(client.read(handles[3]), (y + 2 * x)[:37])
