"""The attention entry points: argument checks and the float64 oracle, without running a kernel."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import cubepy as cp
from cubepy_layouts.attention import (
    ATTENTION_CONFIGS,
    AttentionConfig,
    attention_problem,
    attention_reference,
    flash_attention,
    flash_attention_launch,
    tuned_flash_attention,
)


@pytest.fixture(scope="module")
def interp():
    return cp.client("interp")


def _qkv(client, shape_q=(1, 2, 5, 64), seq_k=7, dtype=np.float16):
    b, h, _, d = shape_q
    return client.zeros(shape_q, dtype), client.zeros((b, h, seq_k, d), dtype), client.zeros((b, h, seq_k, d), dtype)


def test_problem_reads_shapes_dtype_and_default_scale(interp):
    q, k, v = _qkv(interp, (2, 3, 5, 128), 9, ml_dtypes.bfloat16)
    problem = attention_problem(q, k, v, causal=True, sm_scale=None, return_lse=True)
    assert (problem.batch, problem.heads, problem.seq_q, problem.seq_k, problem.head_dim) == (2, 3, 5, 9, 128)
    assert problem.elem == cp.bf16 and problem.causal and problem.return_lse
    assert problem.sm_scale == pytest.approx(1 / math.sqrt(128))
    assert problem.scale_log2 == pytest.approx(1.4426950408889634 / math.sqrt(128))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c, q, k, v: (c.zeros((2, 5, 64), np.float16), k, v), "q must be 4-D"),
        (lambda c, q, k, v: (c.zeros(q.shape, np.float32), k, v), "q must be float16 or bfloat16"),
        (lambda c, q, k, v: (q, c.zeros((1, 2, 7, 128), np.float16), v), "does not match q"),
        (lambda c, q, k, v: (q, k, c.zeros((1, 2, 8, 64), np.float16)), "v (1, 2, 8, 64) must have k's shape"),
        (lambda c, q, k, v: (q, k, c.zeros(v.shape, ml_dtypes.bfloat16)), "differ in dtype"),
        (lambda c, q, k, v: tuple(c.zeros(t.shape[:3] + (32,), np.float16) for t in (q, k, v)), "head_dim must be"),
    ],
)
def test_bad_arguments_name_what_is_wrong(interp, change, message):
    q, k, v = change(interp, *_qkv(interp))
    with pytest.raises(cp.LaunchError) as error:
        flash_attention(interp, q, k, v)
    assert message in str(error.value)


def test_config_rejects_unknown_kernel_and_bad_tiles():
    with pytest.raises(cp.LaunchError, match="kernel must be one of"):
        AttentionConfig(kernel="cudnn")
    with pytest.raises(cp.LaunchError, match="block_n must be a positive int"):
        AttentionConfig(block_n=0)


def test_reference_against_a_loop_by_hand():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((1, 1, 3, 4)), rng.standard_normal((1, 1, 5, 4)), rng.standard_normal((1, 1, 5, 4))
    o, lse = attention_reference(q, k, v, causal=True, sm_scale=0.5)
    for i in range(3):
        keys = range(i + 1)  # causal, top-left aligned: query i sees keys 0..i
        scores = [0.5 * sum(q[0, 0, i, d] * k[0, 0, j, d] for d in range(4)) for j in keys]
        weights = [math.exp(s) for s in scores]
        total = sum(weights)
        for d in range(4):
            expect = sum(w * v[0, 0, j, d] for w, j in zip(weights, keys)) / total
            assert o[0, 0, i, d] == pytest.approx(expect, rel=1e-12)
        assert lse[0, 0, i] == pytest.approx(math.log(total), rel=1e-12)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_every_tuning_entry_is_a_launchable_configuration(interp, head_dim):
    q, k, v = _qkv(interp, (1, 1, 70, head_dim), 90)
    o = interp.empty(tuple(q.shape), np.float16)
    for fields in ATTENTION_CONFIGS:
        launch = flash_attention_launch(q, k, v, o, config=AttentionConfig(**fields))
        assert launch.cube_count is not None  # built: the tiles fit (shared memory, block sizes)


@pytest.mark.slow  # among the suite's heaviest; CI's slow tier runs it
def test_tuned_attention_without_timing_takes_the_first_config(interp, monkeypatch):
    calls = []
    original = tuned_flash_attention.fn
    monkeypatch.setattr(
        tuned_flash_attention, "fn", lambda *args, **fields: calls.append(fields) or original(*args, **fields)
    )
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 1, n, 64)).astype(np.float16) for n in (20, 33, 33))
    with cp.config.override(CUBEPY_AUTOTUNE=False):
        got = tuned_flash_attention(interp, interp.create(q), interp.create(k), interp.create(v), causal=True)
    assert calls == [{"causal": True, **ATTENTION_CONFIGS[0]}]
    expected, _ = attention_reference(q, k, v, causal=True)
    assert np.abs(interp.read(got).astype(np.float64) - expected).max() < 2e-3
