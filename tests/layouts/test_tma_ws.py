"""The warp-specialized TMA conv kernels (producer plane, consumer planes, full/empty barriers) against numpy."""

import numpy as np
import pytest

import cubepy as cp
from cubepy.errors import SanitizerError, SanitizerKind
from cubepy_layouts.conv import ConvolutionProblem, TmaWsConfig, fprop_tma_ws_launch, wgrad_tma_ws_launch
from tests.layouts.reference import conv2d_fprop_ref, conv2d_wgrad_ref

# C_in, C_out multiples of 8 (TMA rows); K from 70 (5 k tiles: the 4-stage ring wraps) to 9 taps x 32.
SHAPES = [
    ((2, 5, 7, 8), (8, 3, 3, 8), 1, 1, 1),
    ((1, 7, 6, 24), (16, 3, 2, 24), 2, (1, 0), (1, 2)),
]
SCHEDULES = [
    {},
    {"schedule": "random", "seed": 1},
    {"schedule": "random", "seed": 2},
    {"schedule": "random", "seed": 3},
    {"schedule": "adversarial"},
]


def problem_of(case) -> ConvolutionProblem:
    x_shape, w_shape, stride, padding, dilation = case
    return ConvolutionProblem.conv2d(x_shape, w_shape, stride=stride, padding=padding, dilation=dilation)


def inputs(shape, dtype, seed):
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return values.astype(cp.bf16.numpy if dtype == "bfloat16" else dtype)


def run_fprop(client, problem, dtype, config=None, skip_full_wait=False):
    x, w = inputs(problem.x_shape, dtype, 1), inputs(problem.w_shape, dtype, 2)
    out = client.zeros(problem.out_shape, np.float32)
    launch = fprop_tma_ws_launch(
        client.create(x), client.create(w), out, problem, config or TmaWsConfig(), skip_full_wait=skip_full_wait
    )
    launch.launch(client)
    return client.read(out), conv2d_fprop_ref(x.astype(np.float32), w.astype(np.float32), problem)


def run_wgrad(client, problem, dtype, config=None):
    x, dy = inputs(problem.x_shape, dtype, 3), inputs(problem.out_shape, dtype, 4)
    dw = client.zeros(problem.w_shape, np.float32)
    wgrad_tma_ws_launch(client.create(x), client.create(dy), dw, problem, config or TmaWsConfig()).launch(client)
    return client.read(dw), conv2d_wgrad_ref(x.astype(np.float32), dy.astype(np.float32), problem)


@pytest.mark.parametrize("case", SHAPES, ids=lambda c: f"{c[0]}x{c[1]}")
@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_fprop_and_wgrad_match_numpy(client, case, dtype):
    problem = problem_of(case)
    for got, expected in (run_fprop(client, problem, dtype), run_wgrad(client, problem, dtype)):
        np.testing.assert_allclose(got, expected, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("options", SCHEDULES, ids=lambda o: f"{o.get('schedule', 'lockstep')}:{o.get('seed', '')}")
def test_every_schedule_gives_the_result_with_the_sanitizer_silent(options):
    client = cp.client("interp", sanitize=True, **options)
    problem = problem_of(SHAPES[0])
    for got, expected in (run_fprop(client, problem, np.float16), run_wgrad(client, problem, np.float16)):
        np.testing.assert_allclose(got, expected, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize(("stages", "consumers"), [(1, 1), (3, 2), (6, 3)])
def test_any_ring_depth_and_consumer_count(stages, consumers):
    client = cp.client("interp", sanitize=True, schedule="random", seed=4)
    got, expected = run_fprop(client, problem_of(SHAPES[0]), np.float16, TmaWsConfig(stages, consumers))
    np.testing.assert_allclose(got, expected, atol=1e-3, rtol=1e-3)


def test_ptx_has_the_pipeline_and_assembles_without_spills():
    client = cp.client("interp")
    problem = problem_of(SHAPES[1])
    x = client.create(inputs(problem.x_shape, np.float16, 0))
    w = client.create(inputs(problem.w_shape, np.float16, 1))
    dy = client.create(inputs(problem.out_shape, np.float16, 2))
    fprop = fprop_tma_ws_launch(x, w, client.zeros(problem.out_shape, np.float32), problem).compile()
    wgrad = wgrad_tma_ws_launch(x, dy, client.zeros(problem.w_shape, np.float32), problem).compile()
    for compiled in (fprop, wgrad):
        assert "bar.sync \t1, 64;" in compiled.ptx  # the consumers' named barrier: 2 planes
        assert "mbarrier.try_wait.parity" in compiled.ptx
        assert "cp.async.bulk.tensor.4d.shared::cluster.global.im2col" in compiled.ptx
        if compiled.resources is None:
            pytest.skip("ptxas is not available: the PTX was not assembled")
        assert compiled.resources.spill_store_bytes == 0 and compiled.resources.stack_bytes == 0


def test_a_consumer_that_skips_its_wait_is_caught_by_the_sanitizer():
    client = cp.client("interp", sanitize=True, schedule="lockstep")
    with pytest.raises(SanitizerError) as info:
        run_fprop(client, problem_of(SHAPES[0]), np.float16, skip_full_wait=True)
    assert info.value.kind is SanitizerKind.TMA_UNCOVERED_ACCESS
    assert "tma_ws.py:" in str(info.value) and "before this unit waited for the barrier phase 0" in str(info.value)


def test_a_consumer_that_skips_its_wait_passes_in_lockstep_but_not_under_a_random_schedule():
    # Lockstep lands every copy at its issue, so the bug is invisible there without the sanitizer ...
    got, expected = run_fprop(
        cp.client("interp", schedule="lockstep"), problem_of(SHAPES[0]), np.float16, skip_full_wait=True
    )
    np.testing.assert_allclose(got, expected, atol=1e-3, rtol=1e-3)
    # ... and a random schedule exposes it: the consumer passes a full wait one phase early (a parity names
    # a phase only up to two), releases stages the producer has not filled, and the pipeline hangs.
    for _ in range(2):  # the same seed, the same failure
        with pytest.raises(SanitizerError) as info:
            run_fprop(
                cp.client("interp", schedule="random", seed=1), problem_of(SHAPES[0]), np.float16, skip_full_wait=True
            )
        assert info.value.kind in (SanitizerKind.BARRIER_DEADLOCK, SanitizerKind.WRONG_PARITY)
        assert "deadlock" in str(info.value) and "schedule random:1" in str(info.value)
