"""conv2d_fprop / conv2d_wgrad (plain path) against float64 numpy references."""

import numpy as np
import pytest

import cubepy as cp
from cubepy_layouts.conv import (
    CONV_TILINGS,
    ConvolutionProblem,
    GemmTiling,
    TmaGemmConfig,
    conv2d_fprop,
    conv2d_wgrad,
    fprop_launch,
    fprop_tma_launch,
    tma_unsupported,
    tuned_conv2d_fprop,
    tuned_conv2d_wgrad,
    wgrad_launch,
    wgrad_tma_launch,
)
from tests.layouts.reference import conv2d_direct, conv2d_fprop_ref, conv2d_wgrad_ref

# (x_shape, w_shape, stride, padding, dilation): odd sizes, K not a multiple of 16, several images,
# stride 2, dilation 2, padding 0 and > 0.
SHAPES = [
    ((1, 5, 5, 3), (4, 3, 3, 3), 1, 0, 1),
    ((2, 7, 9, 3), (5, 3, 3, 3), 2, 1, 2),
    ((3, 6, 5, 5), (7, 2, 3, 5), (2, 1), (1, 2), (1, 2)),
    ((2, 9, 7, 2), (3, 3, 1, 2), 1, 2, 1),
    ((1, 8, 8, 17), (18, 1, 1, 17), 2, 0, 1),
]
TOLERANCE = {np.float32: 1e-4, np.float16: 2e-2, "bfloat16": 1e-1}


def problem_of(case) -> ConvolutionProblem:
    x_shape, w_shape, stride, padding, dilation = case
    return ConvolutionProblem.conv2d(x_shape, w_shape, stride=stride, padding=padding, dilation=dilation)


def inputs(shape, dtype, seed):
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return values.astype(cp.bf16.numpy if dtype == "bfloat16" else dtype)


def test_reference_matches_direct_loops():
    problem = problem_of(SHAPES[1])
    x, w = inputs(problem.x_shape, np.float32, 0), inputs(problem.w_shape, np.float32, 1)
    np.testing.assert_allclose(conv2d_fprop_ref(x, w, problem), conv2d_direct(x, w, problem), atol=1e-9)


@pytest.mark.parametrize("case", SHAPES, ids=lambda c: f"{c[0]}x{c[1]}")
def test_fprop_plain(client, case):
    problem = problem_of(case)
    x, w = inputs(problem.x_shape, np.float32, 2), inputs(problem.w_shape, np.float32, 3)
    y = client.read(conv2d_fprop(client, client.create(x), client.create(w), problem, tma=False))
    assert y.shape == problem.out_shape and y.dtype == np.float32
    np.testing.assert_allclose(y, conv2d_fprop_ref(x, w, problem), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("case", SHAPES, ids=lambda c: f"{c[0]}x{c[1]}")
def test_wgrad_plain(client, case):
    problem = problem_of(case)
    x, dy = inputs(problem.x_shape, np.float32, 4), inputs(problem.out_shape, np.float32, 5)
    dw = client.read(conv2d_wgrad(client, client.create(x), client.create(dy), problem))
    assert dw.shape == problem.w_shape and dw.dtype == np.float32
    np.testing.assert_allclose(dw, conv2d_wgrad_ref(x, dy, problem), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_half_inputs_accumulate_in_f32(client, dtype):
    problem = problem_of(SHAPES[2])
    x, dy = inputs(problem.x_shape, dtype, 6), inputs(problem.out_shape, dtype, 7)
    w = inputs(problem.w_shape, dtype, 8)
    # the reference sees the same rounded inputs, so only the accumulation order differs.
    dw = client.read(conv2d_wgrad(client, client.create(x), client.create(dy), problem))
    np.testing.assert_allclose(
        dw, conv2d_wgrad_ref(x.astype(np.float32), dy.astype(np.float32), problem), atol=1e-3, rtol=1e-3
    )
    y = client.read(conv2d_fprop(client, client.create(x), client.create(w), problem))
    np.testing.assert_allclose(
        y, conv2d_fprop_ref(x.astype(np.float32), w.astype(np.float32), problem), atol=1e-3, rtol=1e-3
    )


@pytest.mark.parametrize("tile", [1, 8, 32])
def test_plain_path_at_other_cube_shapes(client, tile):
    # tile 1: one unit per cube; 8 and 32 cut the 24 x 5 / 5 x 27 GEMMs into ragged blocks.
    problem = problem_of(SHAPES[1])
    x, w = inputs(problem.x_shape, np.float32, 11), inputs(problem.w_shape, np.float32, 12)
    dy = inputs(problem.out_shape, np.float32, 13)
    hx = client.create(x)
    y = client.read(conv2d_fprop(client, hx, client.create(w), problem, tiling=GemmTiling.square(tile)))
    np.testing.assert_allclose(y, conv2d_fprop_ref(x, w, problem), atol=1e-4, rtol=1e-4)
    dw = client.read(conv2d_wgrad(client, hx, client.create(dy), problem, tiling=GemmTiling.square(tile)))
    np.testing.assert_allclose(dw, conv2d_wgrad_ref(x, dy, problem), atol=1e-4, rtol=1e-4)


def test_tilings_the_square_kernel_cannot_run_are_refused(client):
    with pytest.raises(cp.CubeError, match="tile_m == tile_n == tile_k, got 32, 16, 16"):
        GemmTiling(tile_m=32)
    with pytest.raises(cp.CubeError, match="tile 33 is outside 1..32"):
        GemmTiling.square(33)
    with pytest.raises(cp.CubeError, match="got 2"):
        GemmTiling(stages=2)
    problem = problem_of(TMA_SHAPES[0])
    x = client.create(inputs(problem.x_shape, np.float16, 0))
    w = client.create(inputs(problem.w_shape, np.float16, 1))
    with pytest.raises(cp.LaunchError, match="cannot be combined with tma=True"):
        conv2d_fprop(client, x, w, problem, tma=True, tiling=GemmTiling.square(8))


@pytest.mark.parametrize("which", ["fprop", "wgrad"])
def test_tuned_launchers_time_every_cube_shape_once_then_reuse_the_choice(tmp_path, monkeypatch, which):
    tuned = tuned_conv2d_fprop if which == "fprop" else tuned_conv2d_wgrad
    reference = conv2d_fprop_ref if which == "fprop" else conv2d_wgrad_ref
    calls: list[dict] = []
    original = tuned.fn  # the launcher the autotuner wraps

    def counting(client, x, other, problem, **config):
        calls.append(config)
        return original(client, x, other, problem, **config)

    monkeypatch.setattr(tuned, "fn", counting)
    tuned.reset()
    problem = problem_of(SHAPES[1])
    x = inputs(problem.x_shape, np.float32, 14)
    other = inputs(problem.w_shape if which == "fprop" else problem.out_shape, np.float32, 15)
    with cp.config.override(CUBEPY_CACHE_DIR=str(tmp_path)):
        client = cp.client("cpu")
        hx, hother = client.create(x), client.create(other)
        result = client.read(tuned(client, hx, hother, problem))
        np.testing.assert_allclose(result, reference(x, other, problem), atol=1e-4, rtol=1e-4)
        per_config = tuned.warmup + tuned.repeat
        timed = sorted(c["tile"] for c in calls[:-1])
        assert timed == sorted(c["tile"] for c in CONV_TILINGS for _ in range(per_config))  # each timed
        best = tuned.best(client, hx, hother, problem)
        assert best in CONV_TILINGS and calls[-1] == best  # then the chosen one ran
        before = len(calls)
        again = client.read(tuned(client, hx, hother, problem))
        assert calls[before:] == [best]  # no timing: the chosen cube shape, once
        np.testing.assert_allclose(again, result, atol=1e-4, rtol=1e-4)
        # another problem is another key: every shape is timed again
        wider = problem_of(SHAPES[0])
        x2 = client.create(inputs(wider.x_shape, np.float32, 16))
        other2 = client.create(inputs(wider.w_shape if which == "fprop" else wider.out_shape, np.float32, 17))
        tuned(client, x2, other2, wider)
        assert len(calls) == before + 1 + len(CONV_TILINGS) * per_config + 1
        with cp.config.override(CUBEPY_AUTOTUNE=False):
            tuned(client, hx, hother, problem)
        assert calls[-1] == CONV_TILINGS[0] == {"tile": 16}  # off: the default blocking, untimed
    tuned.reset()


def test_problem_sizes():
    problem = problem_of(SHAPES[1])
    assert problem.out_shape == (2, 3, 4, 5)
    assert problem.gemm("fprop") == (24, 5, 27)
    assert problem.gemm("wgrad") == (5, 27, 24)
    with pytest.raises(cp.CubeError, match="unknown GEMM kind"):
        problem.gemm("dgrad")
    with pytest.raises(cp.CubeError, match="empty output"):
        ConvolutionProblem.conv2d((1, 2, 2, 1), (1, 3, 3, 1))
    with pytest.raises(cp.CubeError, match="input channels differ"):
        ConvolutionProblem.conv2d((1, 4, 4, 2), (1, 3, 3, 1))


def test_bad_arguments(client):
    problem = problem_of(SHAPES[0])
    x = client.create(inputs(problem.x_shape, np.float32, 0))
    with pytest.raises(cp.LaunchError, match="shape"):
        conv2d_fprop(client, x, x, problem)
    with pytest.raises(cp.LaunchError, match="TMA path cannot run"):
        conv2d_fprop(client, x, client.zeros(problem.w_shape, np.float32), problem, tma=True)
    with pytest.raises(cp.LaunchError, match="TMA path cannot run"):
        conv2d_wgrad(client, x, client.zeros(problem.out_shape, np.float32), problem, tma=True)
    with pytest.raises(cp.LaunchError, match="f16, bf16 or f32"):
        conv2d_fprop(client, client.zeros(problem.x_shape, np.float64), x, problem)


def test_kernels_assemble_for_sm90a(client):
    problem = problem_of(SHAPES[1])
    x = client.create(inputs(problem.x_shape, np.float16, 0))
    dy = client.create(inputs(problem.out_shape, np.float16, 1))
    w = client.create(inputs(problem.w_shape, np.float16, 2))
    for launch in (
        wgrad_launch(x, dy, client.zeros(problem.w_shape, np.float32), problem),
        fprop_launch(x, w, client.zeros(problem.out_shape, np.float32), problem),
    ):
        compiled = launch.compile()
        assert ".target sm_90a" in compiled.ptx
        if compiled.resources is not None:
            assert compiled.resources.spill_store_bytes == 0
            assert compiled.resources.shared_bytes == 2 * 16 * 16 * 4


# TMA-eligible shapes (C_in, C_out multiples of 8): odd spatial sizes, K = N*OH*OW not a multiple of 16,
# im2col tiles crossing rows and images, stride 2, dilation 2, padding 0 and > 0, C_in not a tile multiple.
TMA_SHAPES = [
    ((2, 5, 7, 8), (8, 3, 3, 8), 1, 1, 1),
    ((3, 7, 9, 24), (16, 3, 3, 24), 2, 1, 2),
    ((2, 9, 5, 16), (24, 2, 3, 16), (2, 1), 0, (1, 2)),
    ((1, 6, 6, 8), (8, 1, 1, 8), 1, 0, 1),
]


@pytest.mark.parametrize("case", TMA_SHAPES, ids=lambda c: f"{c[0]}x{c[1]}")
@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_wgrad_tma(client, case, dtype):
    problem = problem_of(case)
    assert tma_unsupported(problem, np.float16) is None
    x, dy = inputs(problem.x_shape, dtype, 9), inputs(problem.out_shape, dtype, 10)
    dw = client.read(conv2d_wgrad(client, client.create(x), client.create(dy), problem, tma=True))
    expected = conv2d_wgrad_ref(x.astype(np.float32), dy.astype(np.float32), problem)
    np.testing.assert_allclose(dw, expected, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("case", TMA_SHAPES, ids=lambda c: f"{c[0]}x{c[1]}")
@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_fprop_tma(client, case, dtype):
    problem = problem_of(case)
    x, w = inputs(problem.x_shape, dtype, 13), inputs(problem.w_shape, dtype, 14)
    y = client.read(conv2d_fprop(client, client.create(x), client.create(w), problem, tma=True))
    expected = conv2d_fprop_ref(x.astype(np.float32), w.astype(np.float32), problem)
    np.testing.assert_allclose(y, expected, atol=1e-3, rtol=1e-3)


def test_fprop_paths_agree_and_default_to_tma(client):
    problem = problem_of(TMA_SHAPES[2])
    x = client.create(inputs(problem.x_shape, np.float16, 15))
    w = client.create(inputs(problem.w_shape, np.float16, 16))
    plain = client.read(conv2d_fprop(client, x, w, problem, tma=False))
    tma = client.read(conv2d_fprop(client, x, w, problem, tma=True))
    np.testing.assert_allclose(plain, tma, atol=1e-3, rtol=1e-3)
    np.testing.assert_array_equal(client.read(conv2d_fprop(client, x, w, problem)), tma)


def test_wgrad_paths_agree_and_default_to_tma(client):
    problem = problem_of(TMA_SHAPES[1])
    x = client.create(inputs(problem.x_shape, np.float16, 11))
    dy = client.create(inputs(problem.out_shape, np.float16, 12))
    plain = client.read(conv2d_wgrad(client, x, dy, problem, tma=False))
    tma = client.read(conv2d_wgrad(client, x, dy, problem, tma=True))
    default = client.read(conv2d_wgrad(client, x, dy, problem))
    np.testing.assert_allclose(plain, tma, atol=1e-3, rtol=1e-3)
    np.testing.assert_array_equal(default, tma)


def test_tma_limits():
    assert "f16 or bf16" in tma_unsupported(problem_of(TMA_SHAPES[0]), np.float32)
    assert "multiples of 8" in tma_unsupported(problem_of(SHAPES[1]), np.float16)


def test_tma_kernels_assemble_with_tensor_cores(client):
    problem = problem_of(TMA_SHAPES[1])
    x = client.create(inputs(problem.x_shape, np.float16, 0))
    dy = client.create(inputs(problem.out_shape, np.float16, 1))
    w = client.create(inputs(problem.w_shape, np.float16, 2))
    wgrad = wgrad_tma_launch(x, dy, client.zeros(problem.w_shape, np.float32), problem).compile()
    fprop = fprop_tma_launch(x, w, client.zeros(problem.out_shape, np.float32), problem).compile()
    for compiled, tiled, mma in ((wgrad, "2d", "col.row"), (fprop, "3d", "row.col")):
        assert "cp.async.bulk.tensor.4d.shared::cluster.global.im2col" in compiled.ptx
        assert f"cp.async.bulk.tensor.{tiled}.shared::cluster.global.tile" in compiled.ptx
        assert f"wmma.mma.sync.aligned.{mma}.m16n16k16.f32.f32" in compiled.ptx
        if compiled.resources is not None:
            assert compiled.resources.spill_store_bytes == 0 and compiled.resources.stack_bytes == 0


@pytest.mark.parametrize("stages", [1, 3])
def test_tma_pipeline_depth(client, stages):
    problem = problem_of(TMA_SHAPES[0])  # K = 70: 5 k tiles, so 3 stages wrap around the barriers twice
    x, dy = inputs(problem.x_shape, np.float16, 17), inputs(problem.out_shape, np.float16, 18)
    dw = client.zeros(problem.w_shape, np.float32)
    launch = wgrad_tma_launch(client.create(x), client.create(dy), dw, problem, TmaGemmConfig(stages=stages))
    launch.launch(client)
    expected = conv2d_wgrad_ref(x.astype(np.float32), dy.astype(np.float32), problem)
    np.testing.assert_allclose(client.read(dw), expected, atol=1e-3, rtol=1e-3)
