"""Device prints on the interp: one line per unit, cube-major then unit, C's printf text."""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, CUBE_DIM, CUBE_POS, UNIT_POS, UNIT_POS_Y, Array, cube, f32, i32, u32
from cubepy.ir import printf
from cubepy.runtime.interp.printing import format_line


@cube(launch=True)
def report(values: Array[f32], limit: u32):
    if ABSOLUTE_POS < limit:
        cp.debug_print("v[%u]=%.1f", ABSOLUTE_POS, values[ABSOLUTE_POS])


@pytest.fixture
def client():
    """The interp's own client (the order of the lines is the interp's; other runtimes print in theirs)."""
    return cp.client("interp", sanitize=True)


def test_each_unit_prints_one_line_cube_major_then_unit(client, capsys):
    values = client.create(np.array([0.5, 1.5, 2.5, 3.5, 4.5, 5.5], np.float32))
    report.launch(client, cp.CubeCount(2), cp.CubeDim(3), cp.ArrayArg(values), 5)
    assert capsys.readouterr().out.splitlines() == [
        "[cube (0, 0, 0) unit (0, 0, 0)] v[0]=0.5",
        "[cube (0, 0, 0) unit (1, 0, 0)] v[1]=1.5",
        "[cube (0, 0, 0) unit (2, 0, 0)] v[2]=2.5",
        "[cube (1, 0, 0) unit (0, 0, 0)] v[3]=3.5",
        "[cube (1, 0, 0) unit (1, 0, 0)] v[4]=4.5",
    ]


@cube(launch=True)
def two_prints(out: Array[i32]):
    print("first", UNIT_POS, UNIT_POS_Y)
    if UNIT_POS % 2 == 1:
        cp.debug_print("odd %d in cube %u: %x\n", i32(0) - i32(UNIT_POS), CUBE_POS, u32(255))
    out[CUBE_POS * CUBE_DIM + UNIT_POS] = i32(UNIT_POS)


def test_prints_come_out_instruction_by_instruction_in_2d_cubes(client, capsys):
    if client.name == "interp":  # the order of lockstep execution (other schedules interleave planes their way)
        client = cp.client("interp", sanitize=client.sanitize, schedule="lockstep")
    out = client.zeros((8,), np.int32)
    two_prints.launch(client, cp.CubeCount(2), cp.CubeDim(2, 2), cp.ArrayArg(out))
    assert capsys.readouterr().out == (
        "[cube (0, 0, 0) unit (0, 0, 0)] first 0 0\n"
        "[cube (0, 0, 0) unit (1, 0, 0)] first 1 0\n"
        "[cube (0, 0, 0) unit (0, 1, 0)] first 2 1\n"
        "[cube (0, 0, 0) unit (1, 1, 0)] first 3 1\n"
        "[cube (1, 0, 0) unit (0, 0, 0)] first 0 0\n"
        "[cube (1, 0, 0) unit (1, 0, 0)] first 1 0\n"
        "[cube (1, 0, 0) unit (0, 1, 0)] first 2 1\n"
        "[cube (1, 0, 0) unit (1, 1, 0)] first 3 1\n"
        "[cube (0, 0, 0) unit (1, 0, 0)] odd -1 in cube 0: ff\n"
        "[cube (0, 0, 0) unit (1, 1, 0)] odd -3 in cube 0: ff\n"
        "[cube (1, 0, 0) unit (1, 0, 0)] odd -1 in cube 1: ff\n"
        "[cube (1, 0, 0) unit (1, 1, 0)] odd -3 in cube 1: ff\n"
    )
    np.testing.assert_array_equal(client.read(out), [0, 1, 2, 3, 0, 1, 2, 3])


def _libc_snprintf():
    name = ctypes.util.find_library("c")
    if name is None:
        pytest.skip("no C library to compare printf with")
    return ctypes.CDLL(name).snprintf


C_TYPES = {
    "i32": ctypes.c_int32,
    "u32": ctypes.c_uint32,
    "i64": ctypes.c_int64,
    "u64": ctypes.c_uint64,
    "f64": ctypes.c_double,
}
CASES = [
    ("%d %u %x %X %o %i", [(-5, "i32")] * 5 + [(7, "i32")]),
    ("%5d|%-5d|%05d|%+d|% d|%.3d", [(42, "i32")] * 6),
    ("%lld %llu %llx %llo", [(-1, "i64"), (-1, "i64"), (2**40 + 5, "u64"), (2**63, "u64")]),
    ("%u %d", [(4294967295, "u32"), (4294967295, "u32")]),
    (
        "%f %e %g %.3f %10.2e %G %E %F",
        [
            (3.14159, "f64"),
            (1e-7, "f64"),
            (1e6, "f64"),
            (2 / 3, "f64"),
            (12345.678, "f64"),
            (1e-10, "f64"),
            (-2.5, "f64"),
            (0.125, "f64"),
        ],
    ),
    ("%.0f %.10g %#g %+.2e %-8.2f|", [(2.5, "f64"), (1 / 3, "f64"), (1.0, "f64"), (-12.5, "f64"), (3.0, "f64")]),
    ("%f %f %g %g", [(float("inf"), "f64"), (float("-inf"), "f64"), (-0.0, "f64"), (1e300, "f64")]),
    (
        "%#x %#X %#o %#08o|%-#6o|%#o|%#.4o %c%c %%",
        [
            (255, "u32"),
            (255, "u32"),
            (8, "u32"),
            (8, "u32"),
            (8, "u32"),
            (0, "u32"),
            (8, "u32"),
            (65, "i32"),
            (0x1_42, "i32"),
        ],
    ),
]


@pytest.mark.parametrize(("fmt", "args"), CASES, ids=[fmt for fmt, _ in CASES])
def test_the_text_is_what_c_printf_writes(fmt, args):
    snprintf = _libc_snprintf()
    buffer = ctypes.create_string_buffer(1024)
    snprintf(buffer, len(buffer), fmt.encode(), *(C_TYPES[kind](value) for value, kind in args))
    bits = [64 if kind in ("i64", "u64", "f64") else 32 for _, kind in args]
    values = [np.float64(v) if kind == "f64" else np.uint64(v % 2**64) for v, kind in args]
    assert format_line(fmt, values, bits) == buffer.value.decode()


def test_promotions_follow_c_varargs():
    assert [
        printf.promoted(e).name
        for e in (
            cp.f16.ir,
            cp.bf16.ir,
            cp.f32.ir,
            cp.i8.ir,
            cp.u16.ir,
            cp.boolean.ir,
            cp.u32.ir,
            cp.i64.ir,
            cp.usize.ir,
        )
    ] == ["f64", "f64", "f64", "i32", "u32", "i32", "u32", "i64", "usize"]
