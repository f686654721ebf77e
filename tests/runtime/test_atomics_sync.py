"""CUDA's atomicInc/atomicDec, fences, predicate barriers and plane matches (numba-cuda's names)."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import u32
from cubepy.errors import ExpandError


@cp.cube(launch=True)
def inc_dec(counter: cp.Array[cp.Atomic[u32]], olds: cp.Array[u32], limit: u32, dec: cp.Comptime[bool]):
    u = cp.UNIT_POS
    if dec:
        olds[u] = counter[0].fetch_dec(limit)
    else:
        olds[u] = counter[0].fetch_inc(limit)


def _inc(old: int, limit: int) -> int:
    return 0 if old >= limit else old + 1  # CUDA's atomicInc


def _dec(old: int, limit: int) -> int:
    return limit if old == 0 or old > limit else old - 1  # CUDA's atomicDec


@pytest.mark.parametrize(
    "dec, start, limit", [(False, 0, 10), (False, 50, 10), (False, 7, 0), (True, 3, 5), (True, 100, 10), (True, 0, 0)]
)
def test_fetch_inc_and_dec_wrap_like_cuda(client, dec, start, limit):
    counter = client.create(np.array([start], np.uint32))
    olds = client.zeros((64,), np.uint32)
    inc_dec.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(counter), cp.ArrayArg(olds), limit, dec)
    step = _dec if dec else _inc
    value, expected_olds = start, []
    for _ in range(64):  # any order of the 64 updates gives the same sequence of old values
        expected_olds.append(value)
        value = step(value, limit)
    assert client.read(counter)[0] == value
    assert sorted(client.read(olds).tolist()) == sorted(expected_olds)


@pytest.mark.ptxas
def test_fetch_inc_and_dec_are_the_hardware_instructions():
    client = cp.client("interp")
    args = (cp.ArrayArg(client.zeros((1,), np.uint32)), cp.ArrayArg(client.zeros((64,), np.uint32)), 10)
    assert "atom.global.inc.u32" in inc_dec.compile((64, 1, 1), *args, False).ptx
    assert "atom.global.dec.u32" in inc_dec.compile((64, 1, 1), *args, True).ptx


@cp.cube
def inc_of_i32(counter: cp.Array[cp.Atomic[cp.i32]]):
    counter[0].fetch_inc(5)


def test_fetch_inc_counts_in_u32_only():
    with pytest.raises(cp.VerifyError, match=r"atomic_inc counts in u32"):
        cp.testing.expand(inc_of_i32, cp.Array[cp.Atomic[cp.i32]])


@cp.cube(launch=True)
def predicate_barriers(flags: cp.Array[u32], out: cp.Array[u32]):
    u = cp.UNIT_POS
    pred = flags[u] != 0
    count = cp.sync_cube_count(pred)
    every = cp.sync_cube_and(pred)
    some = cp.sync_cube_or(pred)
    out[u * 3] = count
    out[u * 3 + 1] = u32(every)
    out[u * 3 + 2] = u32(some)


@pytest.mark.parametrize("flags", [np.arange(96) % 3 == 0, np.ones(96, bool), np.zeros(96, bool)])
def test_sync_cube_count_and_or(client, flags):
    out = client.zeros((96 * 3,), np.uint32)
    predicate_barriers.launch(
        client, cp.CubeCount(1), cp.CubeDim(96), cp.ArrayArg(client.create(flags.astype(np.uint32))), cp.ArrayArg(out)
    )
    got = client.read(out).reshape(96, 3)
    np.testing.assert_array_equal(got[:, 0], flags.sum())
    np.testing.assert_array_equal(got[:, 1], int(flags.all()))
    np.testing.assert_array_equal(got[:, 2], int(flags.any()))


@cp.cube(launch=True)
def fenced(out: cp.Array[u32], flag: cp.Array[u32], scope: cp.Comptime[str]):
    out[cp.ABSOLUTE_POS] = cp.ABSOLUTE_POS
    cp.fence(scope)
    flag[cp.ABSOLUTE_POS] = 1


@pytest.mark.parametrize(
    "scope, ptx", [("cube", "fence.acq_rel.cta"), ("device", "fence.acq_rel.gpu"), ("system", "fence.acq_rel.sys")]
)
def test_fence_orders_and_names_its_scope(client, scope, ptx):
    out, flag = client.zeros((32,), np.uint32), client.zeros((32,), np.uint32)
    fenced.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(out), cp.ArrayArg(flag), scope)
    np.testing.assert_array_equal(client.read(out), np.arange(32))
    np.testing.assert_array_equal(client.read(flag), 1)
    assert ptx in fenced.compile((32, 1, 1), cp.ArrayArg(out), cp.ArrayArg(flag), scope).ptx


def test_an_unknown_fence_scope_is_an_expand_error():
    with pytest.raises(ExpandError, match="fence scope 'block'.*cube.*device.*system"):
        cp.testing.expand(fenced, cp.Array[u32], cp.Array[u32], scope="block")


@cp.cube(launch=True)
def matches(values: cp.Array[u32], any_mask: cp.Array[u32], all_mask: cp.Array[u32]):
    u = cp.UNIT_POS
    any_mask[u] = cp.plane_match_any(values[u])
    all_mask[u] = cp.plane_match_all(values[u])


def test_plane_match_any_and_all(client):
    values = np.array([u % 4 for u in range(32)] + [7] * 32, np.uint32)
    any_mask, all_mask = client.zeros((64,), np.uint32), client.zeros((64,), np.uint32)
    matches.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(64),
        cp.ArrayArg(client.create(values)),
        cp.ArrayArg(any_mask),
        cp.ArrayArg(all_mask),
    )
    expected_any = [sum(1 << j for j in range(32) if values[32 * (u // 32) + j] == values[u]) for u in range(64)]
    np.testing.assert_array_equal(client.read(any_mask), np.array(expected_any, np.uint64).astype(np.uint32))
    np.testing.assert_array_equal(client.read(all_mask), [0] * 32 + [0xFFFFFFFF] * 32)


@cp.cube(launch=True)
def float_matches(values: cp.Array[cp.f32], any_mask: cp.Array[u32]):
    if cp.UNIT_POS % 2 == 0:  # only the even lanes take part
        any_mask[cp.UNIT_POS] = cp.plane_match_any(values[cp.UNIT_POS])


def test_plane_match_compares_float_bits_among_the_active_lanes(client):
    values = np.array([0.0, -0.0, 1.5, np.nan] * 8, np.float32)
    any_mask = client.zeros((32,), np.uint32)
    float_matches.launch(
        client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(client.create(values)), cp.ArrayArg(any_mask)
    )
    bits = values.view(np.uint32)
    expected = [sum(1 << j for j in range(0, 32, 2) if bits[j] == bits[u]) if u % 2 == 0 else 0 for u in range(32)]
    np.testing.assert_array_equal(client.read(any_mask), np.array(expected, np.uint64).astype(np.uint32))


@pytest.mark.ptxas
def test_plane_match_and_predicate_barriers_are_the_hardware_instructions():
    client = cp.client("interp")
    three = [cp.ArrayArg(client.zeros((64,), np.uint32)) for _ in range(3)]
    ptx = matches.compile((64, 1, 1), *three).ptx
    assert "match.any.sync.b32" in ptx and "match.all.sync.b32" in ptx
    ptx = predicate_barriers.compile((96, 1, 1), *three[:2]).ptx
    assert "bar.red.popc.u32" in ptx and "bar.red.and.pred" in ptx and "bar.red.or.pred" in ptx
