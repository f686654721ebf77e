"""Plane collectives against a per-plane reference, with a partial plane and inactive units."""

from __future__ import annotations

import numpy as np
import pytest

from cubepy.errors import SanitizerError

from .irb import BOOL, F32, I32, U32, Builder, bi, c, launch, line

UNITS = 40  # a full plane of 32 and a partial plane of 8 per cube
CUBES = 2
INACTIVE = 3  # units with unit_pos % 7 == 3 do not take part
SENTINEL = -12345


def planes():
    """(cube, [units of the plane]) for every plane of the grid."""
    for cube in range(CUBES):
        for start in range(0, UNITS, 32):
            yield cube, list(range(start, min(start + 32, UNITS)))


def active(unit: int) -> bool:
    return unit % 7 != INACTIVE


def wrap32(value: int) -> int:
    return int(np.array(value & 0xFFFFFFFF, dtype=np.uint32).view(np.int32))


def run_plane(op: str, values: np.ndarray, *, arg=None, value_ty=I32, out_ty=None, out_dtype=np.int32):
    b = Builder()
    inp, out = b.buffer(value_ty), b.buffer(out_ty or value_ty)
    pos = bi("absolute_pos")
    value = b.load(inp, pos)
    with b.if_(b.compare("ne", b.binary("mod", bi("unit_pos"), c(7)), c(INACTIVE))):
        result = b.plane(op, None if op == "elect" else value, arg, out_ty=out_ty)
        b.store(out, pos, result)
    out_line = (out_ty or value_ty).line
    count = len(values) // value_ty.line * out_line
    fill = np.full(count, SENTINEL).astype(out_dtype)
    line_sizes = {0: value_ty.line, 1: out_line}
    return launch(b.kernel((UNITS, 1, 1)), CUBES, [values, fill], line_sizes=line_sizes)[1]


@pytest.fixture
def data():
    return np.random.default_rng(7).integers(-4, 5, UNITS * CUBES).astype(np.int32)


REDUCTIONS = {
    "sum": lambda xs: wrap32(sum(xs)),
    "prod": lambda xs: wrap32(int(np.prod(xs, dtype=object))),
    "min": min,
    "max": max,
}


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
def test_reductions(op, data):
    got = run_plane(op, data)
    expected = np.full(len(data), SENTINEL)
    for cube, units in planes():
        members = [u for u in units if active(u)]
        result = REDUCTIONS[op]([int(data[cube * UNITS + u]) for u in members])
        for u in members:
            expected[cube * UNITS + u] = result
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op", ["inclusive_sum", "exclusive_sum", "inclusive_prod", "exclusive_prod"])
def test_scans(op, data):
    got = run_plane(op, data)
    expected = np.full(len(data), SENTINEL)
    is_sum = op.endswith("sum")
    for cube, units in planes():
        running = 0 if is_sum else 1
        for u in units:
            if not active(u):
                continue
            value = int(data[cube * UNITS + u])
            after = running + value if is_sum else running * value
            expected[cube * UNITS + u] = wrap32(after if op.startswith("inclusive") else running)
            running = after
    np.testing.assert_array_equal(got, expected)


def test_float_sum_and_line_values():
    values = np.random.default_rng(3).random(UNITS * CUBES * 2, dtype=np.float32)
    got = run_plane("sum", values, value_ty=line(F32, 2), out_dtype=np.float32)
    got = got.reshape(-1, 2)
    lanes = values.reshape(-1, 2)
    for cube, units in planes():
        members = [cube * UNITS + u for u in units if active(u)]
        np.testing.assert_allclose(
            got[members], np.broadcast_to(lanes[members].sum(axis=0), (len(members), 2)), rtol=1e-6
        )


def test_votes(data):
    flags = data % 3 == 0
    all_ = run_plane("all", flags, value_ty=BOOL, out_dtype=np.bool_)
    any_ = run_plane("any", flags, value_ty=BOOL, out_dtype=np.bool_)
    ballot = run_plane("ballot", flags, value_ty=BOOL, out_ty=U32, out_dtype=np.uint32)
    ballot4 = run_plane("ballot", flags, value_ty=BOOL, out_ty=line(U32, 4), out_dtype=np.uint32).reshape(-1, 4)
    elect = run_plane("elect", flags, value_ty=BOOL, out_ty=BOOL, out_dtype=np.bool_)
    for cube, units in planes():
        members = [u for u in units if active(u)]
        bits = sum(1 << (u % 32) for u in members if flags[cube * UNITS + u])
        for u in members:
            lane = cube * UNITS + u
            assert all_[lane] == all(flags[cube * UNITS + m] for m in members)
            assert any_[lane] == any(flags[cube * UNITS + m] for m in members)
            assert ballot[lane] == bits
            assert list(ballot4[lane]) == [bits, 0, 0, 0]
            assert elect[lane] == (u == members[0])


def shuffle_reference(op: str, data: np.ndarray, arg_of) -> np.ndarray:
    expected = np.full(len(data), SENTINEL)
    for cube, units in planes():
        base = units[0]
        for u in units:
            if not active(u):
                continue
            lane, arg = u - base, arg_of(u)
            if op in ("broadcast", "shuffle"):
                src = arg % 32
            elif op == "shuffle_xor":
                src = lane ^ arg if lane ^ arg < 32 else lane
            elif op == "shuffle_up":
                src = lane - arg if lane >= arg else lane
            else:
                src = lane + arg if lane + arg < 32 else lane
            exists = base + src < UNITS
            expected[cube * UNITS + u] = data[cube * UNITS + base + src] if exists else 0
    return expected


@pytest.mark.parametrize(
    "op, arg_of",
    [
        ("broadcast", lambda u: 5),
        ("shuffle", lambda u: (u * 5 + 3) % 37),
        ("shuffle_xor", lambda u: 5),
        ("shuffle_xor", lambda u: 33),
        ("shuffle_up", lambda u: 3),
        ("shuffle_down", lambda u: 3),
        ("shuffle_down", lambda u: u % 4),
    ],
)
def test_moves(op, arg_of, data):
    b_arg = None
    uniform = arg_of(0) == arg_of(1)
    if uniform:
        b_arg = c(arg_of(0))
    got = _run_move(op, data, b_arg, arg_of)
    np.testing.assert_array_equal(got, shuffle_reference(op, data, arg_of))


def _run_move(op, data, uniform_arg, arg_of, sanitize=False):
    b = Builder()
    inp, args, out = b.buffer(I32), b.buffer(U32), b.buffer(I32)
    pos = bi("absolute_pos")
    value = b.load(inp, pos)
    arg = uniform_arg if uniform_arg is not None else b.load(args, pos)
    with b.if_(b.compare("ne", b.binary("mod", bi("unit_pos"), c(7)), c(INACTIVE))):
        b.store(out, pos, b.plane(op, value, arg))
    arg_values = np.array([arg_of(i % UNITS) for i in range(len(data))], dtype=np.uint32)
    return launch(
        b.kernel((UNITS, 1, 1)), CUBES, [data, arg_values, np.full(len(data), SENTINEL, np.int32)], sanitize=sanitize
    )[2]


def test_sanitizer_reports_reads_of_inactive_lanes(data):
    with pytest.raises(SanitizerError, match="plane_shuffle reads lane 3 of its plane, which is inactive"):
        _run_move("shuffle", data, c(3), lambda u: 3, sanitize=True)
    # Reading only active lanes is fine under the sanitizer.
    _run_move("shuffle", data, c(4), lambda u: 4, sanitize=True)
