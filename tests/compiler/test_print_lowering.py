"""``debug_print`` lowered to CUDA's ``vprintf``: the declaration, the format constant and the packed arguments."""

from __future__ import annotations

import re

import numpy as np

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, cube, f32, i8, i64, u32

from .conftest import needs_ptxas


@cube(launch=True)
def prints_every_kind(a: Array[f32], n: u32, big: i64, small: i8):
    cp.debug_print("a=%u b=%f c=%ld d=%d e=%d", n, a[ABSOLUTE_POS], big, small, ABSOLUTE_POS < n)


def _compiled():
    client = cp.client("interp")
    return prints_every_kind.compile(32, cp.ArrayArg(client.zeros((32,), np.float32)), 1, 2, 3)


def _global_string(ptx: str, name: str) -> str:
    match = re.search(rf"\.global \.align 1 \.b8 {re.escape(name)}\[(\d+)\] = \{{([\d, ]+)\}};", ptx)
    assert match, ptx[:2000]
    data = bytes(int(b) for b in match.group(2).split(", "))
    size = int(match.group(1))
    assert len(data) <= size
    return (data + bytes(size - len(data))).decode()  # PTX leaves out the trailing zero bytes


def test_vprintf_is_declared_and_called_with_the_format_and_the_arguments():
    ptx = _compiled().ptx
    assert re.search(
        r"\.extern \.func\s+\(\.param \.b32 func_retval0\) vprintf\s*\(\s*\.param \.b64 vprintf_param_0,"
        r"\s*\.param \.b64 vprintf_param_1\s*\)",
        ptx,
    )
    assert "call.uni (retval0), vprintf, (param0, param1);" in ptx
    # The unit's position first, then the format with %ld made %lld for the i64: one line per unit.
    assert (
        _global_string(ptx, "printf_format") == "[cube (%u, %u, %u) unit (%u, %u, %u)] a=%u b=%f c=%lld d=%d e=%d\n\0"
    )


def test_arguments_are_packed_with_c_variadic_promotions():
    llvm = _compiled().llvm
    # ctaid.xyz, tid.xyz, then n (u32), a[i] (f32 -> double), big (i64), small (i8 -> i32), the bool (-> i32):
    # C lays this out at offsets 0..20, 24, 32, 40, 48, 52.
    assert "alloca {i32, i32, i32, i32, i32, i32, i32, double, i64, i32, i32}" in llvm
    assert re.search(r"fpext float %\S+ to double", llvm)
    assert re.search(r"sext i8 %\S+ to i32", llvm)
    assert re.search(r"zext i1 %\S+ to i32", llvm)


@needs_ptxas
def test_ptxas_accepts_it():
    compiled = _compiled()
    assert compiled.cubin and compiled.resources is not None
    assert compiled.resources.stack_bytes >= 56  # the packed arguments live on the unit's stack
