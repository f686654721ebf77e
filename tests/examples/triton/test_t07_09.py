"""Triton tutorials 07-09 in cubepy (``examples/triton``): each run on the interp (sanitized) and the cpu runtime at
ragged sizes against numpy, and every ``SASS_CASES`` entry compiles.

Tolerances: ``asin`` in f32 within the ulps ``docs/semantics/math-accuracy.md`` states (3 on the interp, 1 on the
cpu runtime) of float64 numpy; the GEMMs take f16 inputs, accumulate in f32 (K <= 136 products of values below
~4: the f32 sums are good to ~1e-5) and round the result to f16, so every output is within half an f16 ulp of the
exact product: 2**-6 for the values here (all below 64), 2**-6 + 1e-3 asserted.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy.compiler import ptxas
from examples.triton import t07_extern_math, t08_grouped_gemm, t09_persistent_matmul

RUNTIMES = ["interp", "cpu"]
ASIN_ULPS = {"interp": 3, "cpu": 1}
F16_GEMM_TOL = 2.0**-6 + 1e-3


def _client(runtime: str, schedule: str | None = None):
    if runtime not in cp.runtimes():
        pytest.skip(f"runtime {runtime} is not available here")
    if runtime == "interp":
        return cp.client(runtime, sanitize=True, schedule=schedule)
    return cp.client(runtime)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_asin_within_the_documented_ulps(runtime):
    client = _client(runtime)
    n = 10_000 + 3  # ten cubes, the last one ragged
    x = np.random.default_rng(3).uniform(-1.0, 1.0, n).astype(np.float32)
    x[:6] = [-1.0, 1.0, 0.0, -0.0, 0.5, -1e-30]
    hx, hy = client.create(x), client.empty((n,), np.float32)
    cube_count = t07_extern_math.cube_count(n)
    t07_extern_math.asin_kernel.launch(client, cube_count, cp.CubeDim(128), cp.ArrayArg(hx), cp.ArrayArg(hy))
    got = client.read(hy).astype(np.float64)
    exact = np.arcsin(x.astype(np.float64))
    ulps = np.abs(got - exact) / np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert ulps.max() <= ASIN_ULPS[runtime]
    assert got[0] == -got[1] and got[2] == 0.0 and np.signbit(got[3])  # odd function, -0 kept


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_asin_run_both_forms(runtime):
    errors = t07_extern_math.run(_client(runtime), n=4099)
    assert set(errors) == {"asin max error", "asin (lines) max error"}
    assert all(err <= 3 * 2.0**-23 for err in errors.values()), errors  # 3 ulps of values in [1, pi/2]


@pytest.mark.parametrize(
    ("runtime", "schedule"),
    [("interp", None), pytest.param("interp", "random", marks=pytest.mark.slow), ("cpu", None)],
)
def test_grouped_gemm_ragged_problems(runtime, schedule):
    # 5 problems, 8 tiles, 4 cubes: a cube's tiles span problems; M ragged everywhere, N and K not tile multiples
    errors = t08_grouped_gemm.run(_client(runtime, schedule))
    assert len(errors) == 5
    for what, err in errors.items():
        assert err < F16_GEMM_TOL, (what, err)


@pytest.mark.parametrize("cubes", [1, 64])
def test_grouped_gemm_one_cube_or_idle_cubes(cubes):
    # one cube walks every tile of every problem; with 64 cubes most find no tile at all
    errors = t08_grouped_gemm.run(_client("interp"), shapes=[(70, 24, 136), (3, 80, 8)], cubes=cubes)
    assert all(err < F16_GEMM_TOL for err in errors.values()), errors


def test_grouped_gemm_table_and_alignment():
    table, sizes = t08_grouped_gemm.pack([(3, 8, 16), (5, 16, 8)])
    # m, n, k, lda, ldb, ldc, then the offsets, each rounded up to 8 items (16 bytes)
    assert table.tolist() == [3, 8, 16, 16, 8, 8, 0, 0, 0, 5, 16, 8, 8, 16, 16, 48, 128, 24]
    assert sizes == (88, 256, 104)
    with pytest.raises(cp.LaunchError, match="multiples of 8"):
        t08_grouped_gemm.pack([(4, 8, 12)])


@pytest.mark.parametrize(
    ("runtime", "schedule"),
    [("interp", None), pytest.param("interp", "adversarial", marks=pytest.mark.slow), ("cpu", None)],
)
def test_persistent_matmul_ragged(runtime, schedule):
    # 150 x 72 x 104 is 3 x 2 tiles on 4 cubes (two cubes take 2 tiles, in GROUP_SIZE_M order) and 4 K tiles,
    # so the 3-slot ring wraps
    errors = t09_persistent_matmul.run(_client(runtime, schedule), m=150, n=72, k=104, cubes=4)
    assert errors["persistent matmul max error"] < F16_GEMM_TOL


@pytest.mark.slow
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_persistent_matmul_default_run(runtime):
    # 301 x 136 x 72: 5 x 3 tiles on 5 cubes, 3 tiles each
    errors = t09_persistent_matmul.run(_client(runtime))
    assert errors["persistent matmul max error"] < F16_GEMM_TOL


@pytest.mark.parametrize(("shape", "cubes"), [((17, 8, 8), 3), ((130, 72, 40), 1)])
def test_persistent_matmul_more_cubes_than_tiles_or_one(shape, cubes):
    m, n, k = shape
    errors = t09_persistent_matmul.run(_client("interp"), m=m, n=n, k=k, cubes=cubes)
    assert errors["persistent matmul max error"] < F16_GEMM_TOL


def test_persistent_matmul_refuses_unaligned_rows():
    client = cp.client("interp")
    a, b = client.zeros((4, 12), np.float16), client.zeros((12, 8), np.float16)
    with pytest.raises(cp.LaunchError, match="multiples of 8"):
        t09_persistent_matmul.launch(client, a, b, client.zeros((4, 8), np.float16), cubes=1)


CASES = [
    pytest.param(case, id=f"{module.__name__.rsplit('.', 1)[1]}: {case.label}")
    for module in (t07_extern_math, t08_grouped_gemm, t09_persistent_matmul)
    for case in module.SASS_CASES
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_sass_case_builds(case):
    compiled = case.build(target=case.target, unchecked=True)
    assert compiled.target == case.target and f".entry {compiled.name}" in compiled.ptx
    if ptxas.available():
        assert compiled.cubin and compiled.resources is not None
    checked = case.build(target=case.target)
    # The modes are different kernels in the IR; their PTX may agree where every check is proven (the vector
    # add's guard on the length its three buffers share).
    assert checked.definition.checked and not compiled.definition.checked
