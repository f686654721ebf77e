"""Contraction reaches libdevice: ``acc += exp(x)`` fuses expf's last multiply (ex2 * 2^k) into the add."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from cubepy import f32


@cp.cube(launch=True)
def exp_sum(x: cp.Array[f32], out: cp.Array[f32]):
    acc = f32(0.0)
    for i in range(x.len()):
        acc += cp.exp(x[i])
    out[cp.ABSOLUTE_POS] = acc


def _ptx(contract: bool) -> list[str]:
    client = cp.client("interp")
    x, out = cp.ArrayArg(client.zeros((8,), np.float32)), cp.ArrayArg(client.zeros((1,), np.float32))
    ptx = exp_sum.compile(cp.CubeDim(1), x, out, contract=contract).ptx
    return [line.strip() for line in ptx.splitlines()]


def _users_of_ex2(lines: list[str]) -> list[str]:
    """For each ex2.approx, the first later instruction that reads its result (where expf scales by 2^k)."""
    users = []
    for i, line in enumerate(lines):
        match = re.match(r"ex2\.approx\S*\s+(%r\d+),", line)
        if match:
            reads = re.compile(rf"^\S+\s+%\w+, .*{re.escape(match.group(1))}\b")
            users.append(next(later for later in lines[i + 1 :] if reads.match(later)))
    assert users, "no ex2.approx in the PTX"
    return users


def test_the_add_takes_expfs_last_multiply():
    lines = _ptx(contract=True)
    assert all(user.startswith("fma.rn.f32") for user in _users_of_ex2(lines)), _users_of_ex2(lines)
    assert not any(line.startswith("mul.f32") for line in lines)


def test_without_contraction_the_multiply_and_add_stay_apart():
    lines = _ptx(contract=False)
    assert all(user.startswith("mul.f32") for user in _users_of_ex2(lines)), _users_of_ex2(lines)
    assert any(line.startswith("add.rn.f32") for line in lines)


@pytest.mark.parametrize("contract", [True, False])
def test_the_sum_matches_numpy_on_the_interp(client, contract):
    x = np.linspace(-3, 3, 8, dtype=np.float32)
    out = client.zeros((1,), np.float32)
    exp_sum.launch(client, cp.CubeCount(1), cp.CubeDim(1), cp.ArrayArg(client.create(x)), cp.ArrayArg(out))
    np.testing.assert_allclose(client.read(out)[0], np.exp(x.astype(np.float64)).sum(), rtol=4e-7 * 8)
