"""Generic kernels: ``cp.TypeVar`` parameters bound from the launch arguments or from explicit element types."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy.errors import CubeError, LaunchError
from cubepy.runtime.client import ComputeClient
from cubepy.runtime.interp.backend import InterpBackend

F = cp.TypeVar("F", cp.Float)
N = cp.TypeVar("N", cp.Numeric)
I = cp.TypeVar("I", (cp.i32, cp.u32))  # noqa: E741 - a type parameter's customary one-letter name


@cp.cube(launch=True, contract=False)  # numpy rounds the product and the sum separately
def scaled_tile(a: F, x: cp.Array[F], y: cp.Array[F], out: cp.Array[F]):
    i = cp.ABSOLUTE_POS
    if i < out.len():
        tile = cp.SharedMemory[F](64)
        tile[cp.UNIT_POS] = x[i]
        cp.sync_cube()
        out[i] = a * tile[cp.UNIT_POS] + y[i] + F(1)


@cp.cube(launch=True)
def line_sum(x: cp.Tensor[cp.Line[N]], out: cp.Array[N]):
    i = cp.ABSOLUTE_POS
    if i < x.len():
        out[i] = cp.vector_sum(x[i])


@cp.cube(launch=True)
def atomic_total(x: cp.Array[I], total: cp.Array[cp.Atomic[I]]):
    if cp.ABSOLUTE_POS < x.len():
        total[0].fetch_add(x[cp.ABSOLUTE_POS])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_one_kernel_runs_for_each_float_type_against_numpy(client, dtype):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(64).astype(dtype), rng.standard_normal(64).astype(dtype)
    out = client.zeros((64,), dtype)
    scaled_tile.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(64),
        dtype(1.5),
        cp.ArrayArg(client.create(x)),
        cp.ArrayArg(client.create(y)),
        cp.ArrayArg(out),
    )
    result = client.read(out)
    assert result.dtype == dtype
    np.testing.assert_array_equal(result, dtype(1.5) * x + y + dtype(1))


def test_lines_and_atomics_bind_their_element_type(client):
    x = np.arange(32, dtype=np.int64).reshape(8, 4)
    out = client.zeros((8,), np.int64)
    line_sum.launch(client, cp.CubeCount(1), cp.CubeDim(8), cp.TensorArg(client.create(x), 4), cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), x.sum(axis=1))
    for dtype in (np.int32, np.uint32):
        total = client.zeros((1,), dtype)
        atomic_total.launch(
            client,
            cp.CubeCount(1),
            cp.CubeDim(32),
            cp.ArrayArg(client.create(np.arange(32, dtype=dtype))),
            cp.ArrayArg(total),
        )
        assert client.read(total)[0] == np.arange(32).sum()


def test_expand_and_compile_take_explicit_element_types():
    expansion = cp.testing.expand(scaled_tile, cp.f64, cp.Array[cp.f64], cp.Array[cp.f64], cp.Array[cp.f64])
    assert "f64 = mul" in expansion.ir and "f32" not in expansion.ir
    ptx = scaled_tile.compile((64, 1, 1), cp.f16, cp.Array[cp.f16], cp.Array[cp.f16], cp.Array[cp.f16]).ptx
    assert ".f16" in ptx or ".b16" in ptx


def test_each_element_type_compiles_once(tmp_path):
    client = ComputeClient("interp", InterpBackend())
    for dtype in (np.float32, np.float64, np.float32, np.float64, np.float32):
        out = client.zeros((64,), dtype)
        x = cp.ArrayArg(client.create(np.ones(64, dtype)))
        scaled_tile.launch(client, cp.CubeCount(1), cp.CubeDim(64), 2.0, x, x, cp.ArrayArg(out))
    assert client.stats == {"hits": 3, "misses": 2}
    assert (
        scaled_tile.bind_types((2.0,) + (cp.Array[cp.f32],) * 3).identity
        != scaled_tile.bind_types((2.0,) + (cp.Array[cp.f64],) * 3).identity
    )


def test_conflicting_and_unbound_type_parameters_are_launch_errors(client):
    f32s, f64s = (cp.ArrayArg(client.create(np.ones(4, d))) for d in (np.float32, np.float64))
    with pytest.raises(LaunchError, match=r"F is f32 from parameter 'x' but f64 from parameter 'y'"):
        scaled_tile.launch(client, 1, 4, 1.0, f32s, f64s, f32s)
    with pytest.raises(LaunchError, match=r"parameter 'x' binds F to i32, but TypeVar\('F': f16\|bf16\|f32\|f64\)"):
        ints = cp.ArrayArg(client.create(np.ones(4, np.int32)))
        scaled_tile.launch(client, 1, 4, 1.0, ints, ints, ints)
    with pytest.raises(LaunchError, match="binds I to i64"):
        atomic_total.launch(client, 1, 4, *(cp.ArrayArg(client.create(np.ones(4, np.int64))),) * 2)


def test_a_type_parameter_outside_a_bound_kernel_says_so():
    with pytest.raises(CubeError, match="type parameter F is not bound here"):
        F(1.0)


def test_a_generic_kernel_handed_straight_to_a_client_says_how_to_bind_it(client):
    x = cp.ArrayArg(client.create(np.ones(4, np.float32)))
    with pytest.raises(CubeError, match="is generic: launch it with kernel.launch"):
        client.launch(scaled_tile, (1,), (4,), (1.0, x, x, x))
    scaled_tile.bind_types((1.0, x, x, x)).launch(client, 1, 4, 1.0, x, x, x)
    np.testing.assert_array_equal(client.read(x.handle), [3, 3, 3, 3])  # 1*1 + 1 + 1, in place


def test_a_bound_kernel_keeps_the_decorators_contract_choice():
    @cp.cube(launch=True, contract=False)
    def unfused(a: F, x: cp.Array[F], out: cp.Array[F]):
        out[cp.ABSOLUTE_POS] = a * x[cp.ABSOLUTE_POS] + x[cp.ABSOLUTE_POS]

    @cp.cube(launch=True)
    def contracted(a: F, x: cp.Array[F], out: cp.Array[F]):
        out[cp.ABSOLUTE_POS] = a * x[cp.ABSOLUTE_POS] + x[cp.ABSOLUTE_POS]

    fused = cp.testing.expand(contracted, cp.f32, cp.Array[cp.f32], cp.Array[cp.f32])
    assert "f32 = fma" in fused.ir and "mul" not in fused.ir
    separate = unfused.compile(cp.CubeDim(32), cp.f64, cp.Array[cp.f64], cp.Array[cp.f64])
    assert " fma " not in separate.ir and "f64 = mul" in separate.ir
    forced = unfused.compile(cp.CubeDim(32), cp.f64, cp.Array[cp.f64], cp.Array[cp.f64], contract=True)
    assert "fma.rn.f64" in forced.ptx
