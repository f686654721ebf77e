"""Triton tutorials 01-05 in cubepy (``examples/triton``): each run on the interp (sanitized) and the cpu runtime
at ragged sizes against numpy, and every ``SASS_CASES`` entry compiles.

Tolerances: vector add and dropout are exact (one f32 add, one f32 division per element, the same as numpy's);
softmax is within 1e-6 of float64 numpy (values below 1, a few ulps from exp2 and the division); matmul (f16 in,
f32 accumulate, f16 out) within 1e-3 of the largest output (f16's half ulp is 2**-11 of it); layer norm in f32
within 1e-5 of float64 numpy, in f16 within the tutorial's own atol of 1e-2.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy.compiler import ptxas
from examples.triton import t01_vector_add, t02_fused_softmax, t03_matmul, t04_dropout, t05_layer_norm
from tests.frontend.test_random import stream_ref, uniform_ref

RUNTIMES = ["interp", "cpu"]


def _client(runtime: str):
    if runtime not in cp.runtimes():
        pytest.skip(f"runtime {runtime} is not available here")
    return cp.client(runtime, sanitize=True) if runtime == "interp" else cp.client(runtime)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_vector_add_ragged(runtime):
    errors = t01_vector_add.run(_client(runtime), n=98_432 + 7)
    assert errors == {"vector add max error": 0.0, "vector add (lines) max error": 0.0}


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(("rows", "cols", "programs"), [(67, 781, 16), (9, 100, 4), (5, 1025, 8), (7, 2056, 3)])
def test_softmax_ragged(runtime, rows, cols, programs):
    # fewer cubes than rows: each cube walks several rows, as Triton's persistent programs do; 781 and 1025 columns
    # run in lines of 1, 100 and 2056 (a multiple of 4 past the last power of two) in lines of 4
    errors = t02_fused_softmax.run(_client(runtime), rows=rows, cols=cols, programs=programs)
    assert errors["softmax max error"] < 1e-6


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_softmax_lines_of_one_and_four_agree(runtime):
    client = _client(runtime)
    x = client.create(np.random.default_rng(8).standard_normal((6, 1024)).astype(np.float32))
    ones, fours = (client.read(t02_fused_softmax.softmax(client, x, 4, lanes)) for lanes in (1, 4))
    np.testing.assert_allclose(ones, fours, rtol=1e-6, atol=0)


def test_softmax_block_is_the_next_power_of_two():
    assert [t02_fused_softmax.block_size(c) for c in (1, 256, 257, 781, 1024, 1025)] == [
        256,
        256,
        512,
        1024,
        1024,
        2048,
    ]


@pytest.mark.parametrize("runtime", ["cpu", pytest.param("interp", marks=pytest.mark.slow)])  # 4 s on the interp
def test_matmul_ragged(runtime):
    # 37 x 29 x 21: one cube, every tile edge ragged; 70 x 130 x 168: 2 x 3 blocks in grouped order and 6 K tiles,
    # so the 4-stage ring wraps; the rows' padding is NaN, which would show if a copy read past K or N
    errors = t03_matmul.run(_client(runtime), shapes=((37, 29, 21), (70, 130, 168)))
    for what, err in errors.items():
        assert err < 1e-3, (what, err)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_matmul_256(runtime):
    errors = t03_matmul.run(_client(runtime), shapes=((256, 256, 256),))
    assert errors["matmul 256x256x256 max relative error"] < 1e-3


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(("seed", "p"), [(123, 0.5), (-7, 0.3)])
def test_dropout_keep_mask_is_philox(runtime, seed, p):
    client = _client(runtime)
    n = 98_432 + 7
    x = np.random.default_rng(1).random(n, dtype=np.float32) + np.float32(0.5)  # no zeros: 0 means dropped
    got = client.read(t04_dropout.dropout(client, client.create(x), p, seed))
    # the reference stream (tests/frontend/test_random.py) is checked against Random123's and Triton's vectors
    keep = uniform_ref(stream_ref(seed, np.arange(n))[0]) > np.float32(p)
    assert np.array_equal(got != 0, keep)
    assert np.array_equal(got[keep], x[keep] / np.float32(1.0 - p))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_dropout_run(runtime):
    errors = t04_dropout.run(_client(runtime), n=5000)
    assert errors == {
        "dropout max error": 0.0,
        "same seed, elements dropped differently": 0.0,
        "another seed, same mask": 0.0,
    }


LAYER_NORM_SHAPES = [(30, 1000, np.float32, 1e-5), (23, 777, np.float16, 1e-2), (19, 2048 + 64, np.float16, 1e-2)]


@pytest.mark.parametrize(
    ("m", "n", "dtype", "tol", "runtime"),
    [
        # the f16 shapes on cpu and the first f16 one on the interp; the others (4-7 s each) in the slow tier
        pytest.param(
            *shape,
            runtime,
            marks=[pytest.mark.slow]
            if shape == LAYER_NORM_SHAPES[0] or (runtime == "interp" and shape != LAYER_NORM_SHAPES[1])
            else [],
        )
        for shape in LAYER_NORM_SHAPES
        for runtime in RUNTIMES
    ],
)
def test_layer_norm_forward_and_backward(runtime, m, n, dtype, tol):
    # 1000 f32 in lines of 4, 777 f16 (ragged) in lines of 1, 2112 f16 (a 4096 block, 128 units) in lines of 8
    errors = t05_layer_norm.run(_client(runtime), m=m, n=n, dtype=dtype)
    assert set(errors) == {f"layer norm {k} max error" for k in ("y", "dx", "dw", "db")}
    for what, err in errors.items():
        assert err < tol, (what, err)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_layer_norm_rows_share_partial_rows_under_the_lock(runtime, monkeypatch):
    # 3 partial rows for 40 rows: 13 or 14 cubes add into each one, taking turns under its lock
    monkeypatch.setattr(t05_layer_norm, "group_size", lambda n: 3)
    errors = t05_layer_norm.run(_client(runtime), m=40, n=300, dtype=np.float32)
    for what, err in errors.items():
        assert err < 1e-5, (what, err)


def test_layer_norm_lines_of_one_on_a_row_of_whole_lines(client):
    # the same kernels as a ragged row runs, on rows that would take lines of 8
    errors = t05_layer_norm.run(client, m=9, n=512, dtype=np.float16, lanes=1)
    for what, err in errors.items():
        assert err < 1e-2, (what, err)


def test_layer_norm_refuses_rows_over_64_kib():
    with pytest.raises(cp.LaunchError, match="64 KiB"):
        t05_layer_norm.row_block(32769, 2)
    assert t05_layer_norm.row_block(8192, 2) == 8192 and t05_layer_norm.units(8192) == 256
    assert t05_layer_norm.units(1024) == 128 and t05_layer_norm.units(64) == 32
    sizes = [(8192, 2), (8192, 4), (777, 2), (1000, 4), (64, 4), (96, 2)]
    assert [t05_layer_norm.line_size(n, itemsize) for n, itemsize in sizes] == [8, 4, 1, 4, 2, 4]


CASES = [
    pytest.param(case, id=f"{module.__name__.rsplit('.', 1)[1]}: {case.label} ({case.measure})")
    for module in (t01_vector_add, t02_fused_softmax, t03_matmul, t04_dropout, t05_layer_norm)
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
