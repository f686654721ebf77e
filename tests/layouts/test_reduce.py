"""``cubepy_layouts.reduce``: cube-wide sum, max and min against numpy, on interp and cpu, and through ptxas."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import cubepy as cp
from cubepy import CUBE_DIM, CUBE_POS, UNIT_POS, Array, cube, f32, f64, i32, u32
from cubepy.compiler import ptxas
from cubepy.ir import VarKind, ops, walk
from cubepy_layouts.reduce import cube_max, cube_min, cube_sum

KERNELS: dict = {}


def reduce_kernel(elem):
    """out[unit, :] = (cube_sum, cube_max, cube_min) of the cube's values, as every unit sees them."""
    if elem in KERNELS:
        return KERNELS[elem]

    @cube(launch=True)
    def cube_reductions(x: Array[elem], out: Array[elem]):
        unit = CUBE_POS * CUBE_DIM + UNIT_POS
        value = x[unit]
        out[unit * 3] = cube_sum(value)
        out[unit * 3 + 1] = cube_max(value)
        out[unit * 3 + 2] = cube_min(value)

    KERNELS[elem] = cube_reductions
    return cube_reductions


DTYPES = {f32: np.float32, f64: np.float64, i32: np.int32, u32: np.uint32}


def _values(dtype, count: int) -> np.ndarray:
    rng = np.random.default_rng(count)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(count).astype(dtype)
    low = 0 if dtype == np.uint32 else -1000
    return rng.integers(low, 1000, count).astype(dtype)


def _run(runtime: str, elem, cube_dim: tuple[int, ...], cubes: int = 2) -> tuple[np.ndarray, np.ndarray]:
    client = cp.client(runtime)
    units = int(np.prod(cube_dim))
    data = _values(DTYPES[elem], units * cubes)
    x, out = client.create(data), client.zeros((units * cubes * 3,), DTYPES[elem])
    reduce_kernel(elem).launch(client, cp.CubeCount(cubes), cp.CubeDim(*cube_dim), cp.ArrayArg(x), cp.ArrayArg(out))
    return data.reshape(cubes, units), client.read(out).reshape(cubes, units, 3)


def _check(data: np.ndarray, got: np.ndarray) -> None:
    for cube_values, seen in zip(data, got):
        if np.issubdtype(data.dtype, np.floating):
            exact = cube_values.astype(np.float64).sum()
            tol = 8 * np.finfo(data.dtype).eps * np.abs(cube_values).astype(np.float64).sum()
            np.testing.assert_allclose(seen[:, 0].astype(np.float64), exact, rtol=0, atol=tol)
            assert (seen[:, 0] == seen[0, 0]).all(), "every unit gets the same sum"
        else:  # integers wrap as the element type does
            np.testing.assert_array_equal(seen[:, 0], cube_values.sum(dtype=data.dtype))
        np.testing.assert_array_equal(seen[:, 1], cube_values.max())
        np.testing.assert_array_equal(seen[:, 2], cube_values.min())


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize("elem", [f32, f64, i32, u32], ids=lambda e: repr(e))
def test_every_type_matches_numpy(runtime, elem):
    _check(*_run(runtime, elem, (96,)))


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize(
    "cube_dim",
    [(1,), (7,), (32,), (50,), (1024,), (16, 16), (5, 7), (4, 3, 5), (8, 8, 2)],
    ids=lambda d: "x".join(map(str, d)),
)
def test_any_cube_shape_including_partial_planes(runtime, cube_dim):
    _check(*_run(runtime, f32, cube_dim))


@cube(launch=True)
def repeated(x: Array[f32], out: Array[f32], rounds: u32):
    """A reduction in a loop reuses its shared slots each round: the closing sync keeps rounds apart."""
    acc = f32(0.0)
    for r in cp.range(0, rounds, 1, unroll=1):
        acc += cube_sum(x[UNIT_POS] * f32(r + 1))
    out[UNIT_POS] = acc


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_reduction_in_a_loop_reuses_its_slots(runtime):
    client = cp.client(runtime)
    data = np.arange(64, dtype=np.float32)
    out = client.zeros((64,), np.float32)
    repeated.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(64),
        cp.ArrayArg(client.create(data)),
        cp.ArrayArg(out),
        cp.ScalarArg(3, u32),
    )
    np.testing.assert_array_equal(client.read(out), np.float32(data.sum() * (1 + 2 + 3)))


def test_a_line_is_refused_with_a_clear_error():
    @cube(launch=True)
    def lines(x: Array[cp.Line[f32]], out: Array[cp.Line[f32]]):
        out[UNIT_POS] = cube_sum(x[UNIT_POS])

    arg = cp.ArrayArg(cp.client("interp").zeros((128,), np.float32), line_size=4)
    with pytest.raises(cp.ExpandError, match="cube_sum reduces one scalar runtime value") as caught:
        lines.compile(cp.CubeDim(32), arg, arg)
    source, first = inspect.getsourcelines(lines.fn)
    line = first + next(i for i, text in enumerate(source) if "cube_sum(" in text)
    assert caught.value.filename == __file__ and caught.value.lineno == line


@pytest.mark.skipif(not ptxas.available(), reason="ptxas not available")
def test_ptx_is_a_plane_tree_with_proven_shared_accesses():
    """Two barriers per reduction, butterfly shuffles (5 in each plane, then 3 across the 8 planes of 256
    units), and no bounds check on the 32 shared slots."""
    client = cp.client("interp")
    args = (cp.ArrayArg(client.zeros((256,), np.float32)), cp.ArrayArg(client.zeros((768,), np.float32)))
    compiled = reduce_kernel(f32).compile(cp.CubeDim(256), *args)
    ptx = compiled.ptx
    assert ptx.count("bar.sync") == 6, ptx
    assert ptx.count("shfl.sync.bfly") == 3 * (5 + 3), ptx
    assert "activemask" not in ptx  # 256 units: whole planes, full-mask collectives
    shared = [
        inst.operation
        for inst in walk(compiled.definition.body)
        if isinstance(inst.operation, (ops.Index, ops.IndexAssign)) and inst.operation.memory.kind is VarKind.SHARED
    ]
    assert len(shared) == 6 and not any(op.checked for op in shared)
