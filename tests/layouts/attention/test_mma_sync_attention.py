"""The sm_80 FlashAttention kernel (``AttentionConfig(kernel="mma_sync")``) against the float64 oracle.

Tolerances: with ``u`` the unit roundoff of the element type (2**-11 for f16, 2**-8 for bf16), the kernel
rounds each probability to 16 bits before P V (at most ``u * max|v|`` on an output, since the
probabilities of a row sum to the divisor) and rounds the output once (``u * |o|``); the f32 accumulation
and the approximate exp2 (2 ulps) add about 1e-6.  So ``|o - o_ref| <= u * (|o_ref| + max|v|) + 1e-5``.
``lse`` is f32 throughout (values near 5, f32 ulp 5e-7, fast-math log 2**-21 absolute): 1e-4 leaves margin.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cubepy as cp
from cubepy_layouts.attention import AttentionConfig, attention_reference, flash_attention
from cubepy_layouts.attention.api import flash_attention_launch

ROUNDOFF = {np.dtype(np.float16): 2.0**-11, np.dtype(ml_dtypes.bfloat16): 2.0**-8}


def _inputs(shape_q, seq_k, dtype, seed=0):
    rng = np.random.default_rng(seed)
    b, h, _, d = shape_q
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal((b, h, seq_k, d)).astype(dtype)
    v = rng.standard_normal((b, h, seq_k, d)).astype(dtype)
    return q, k, v


def _check(client, shape_q, seq_k, dtype=np.float16, causal=False, sm_scale=None, config=None, seed=0):
    """Run the kernel and compare o and lse with the oracle under the bounds of the module docstring."""
    q, k, v = _inputs(shape_q, seq_k, dtype, seed)
    config = AttentionConfig(kernel="mma_sync") if config is None else config
    o, lse = flash_attention(
        client, client.create(q), client.create(k), client.create(v), causal, sm_scale, True, config
    )
    o_ref, lse_ref = attention_reference(q, k, v, causal, sm_scale)
    got = client.read(o).astype(np.float64)
    bound = ROUNDOFF[np.dtype(dtype)] * (np.abs(o_ref) + np.abs(v.astype(np.float64)).max()) + 1e-5
    assert np.all(np.abs(got - o_ref) <= bound), f"o error {np.abs(got - o_ref).max()} over the bound"
    np.testing.assert_allclose(client.read(lse), lse_ref, rtol=0, atol=1e-4)


@pytest.fixture(scope="module")
def interp():
    return cp.client("interp")


@pytest.mark.parametrize(
    ("head_dim", "dtype", "causal"),
    [
        (64, np.float16, False),
        (64, np.float16, True),
        (64, ml_dtypes.bfloat16, True),
        # head_dim 128 doubles every tile: seconds each on the interp, so the slow tier runs them
        pytest.param(128, ml_dtypes.bfloat16, False, marks=pytest.mark.slow),
        pytest.param(128, np.float16, True, marks=pytest.mark.slow),
    ],
)
def test_interp_ragged_against_the_oracle(interp, head_dim, dtype, causal):
    _check(interp, (1, 2, 70, head_dim), 100, dtype, causal)


def test_batch_and_heads_in_the_grid_with_whole_tiles(interp):
    # seq_k a multiple of the 64-key tile: no masked tile at all (non-causal); 2 batches x 2 heads
    _check(interp, (2, 2, 64, 64), 128, np.float16, causal=False, seed=1)


@pytest.mark.parametrize(
    ("seq_q", "seq_k", "causal", "block_n", "sm_scale"),
    [
        (130, 40, True, None, None),  # more queries than keys: the last blocks' rows see every key
        (30, 200, True, 32, None),  # the causal diagonal of a 64-row block spans two 32-key tiles
        pytest.param(70, 150, False, 128, None, marks=pytest.mark.slow),  # 128-key tiles: a large kernel
        (70, 100, True, 16, -0.2),  # a negative scale: scores are scaled before the max and the mask
        (1, 1, False, None, 0.3),
    ],
)
def test_interp_tiles_scales_and_odd_lengths(interp, seq_q, seq_k, causal, block_n, sm_scale):
    config = AttentionConfig(kernel="mma_sync", block_n=block_n)
    _check(interp, (1, 1, seq_q, 64), seq_k, np.float16, causal, sm_scale, config, seed=2)


@pytest.mark.parametrize("schedule", ["random", "adversarial"])
def test_pipeline_is_race_free_under_the_sanitizer(schedule):
    # 4 key tiles through a 3-stage ring (ragged last tile), Q's own stage first
    client = cp.client("interp", schedule=schedule, sanitize=True)
    _check(client, (1, 1, 20, 64), 230, np.float16, causal=False, seed=3)


def test_sanitized_causal_two_stages():
    client = cp.client("interp", schedule="random", sanitize=True)
    config = AttentionConfig(kernel="mma_sync", stages=2, block_n=32)
    _check(client, (1, 1, 70, 64), 90, ml_dtypes.bfloat16, True, None, config, seed=4)


@pytest.mark.parametrize("causal", [False, True])
def test_cpu_runtime(causal):
    # 16-key tiles: the same code with a quarter of the unrolled tile, so LLVM's O3 for the host takes seconds
    config = AttentionConfig(kernel="mma_sync", block_n=16)
    _check(cp.client("cpu"), (1, 2, 70, 64), 100, np.float16, causal, None, config, seed=5)


@pytest.mark.slow
@pytest.mark.parametrize(("head_dim", "dtype", "causal"), [(64, np.float16, True), (128, ml_dtypes.bfloat16, False)])
def test_cpu_runtime_default_tiles(head_dim, dtype, causal):
    _check(cp.client("cpu"), (1, 2, 70, head_dim), 100, dtype, causal, seed=6)


def test_without_lse_writes_o_only(interp):
    q, k, v = _inputs((1, 1, 33, 64), 47, np.float16, seed=7)
    o = flash_attention(
        interp, interp.create(q), interp.create(k), interp.create(v), config=AttentionConfig("mma_sync")
    )
    o_ref, _ = attention_reference(q, k, v)
    bound = 2.0**-11 * (np.abs(o_ref) + np.abs(v.astype(np.float64)).max()) + 1e-5
    assert np.all(np.abs(interp.read(o).astype(np.float64) - o_ref) <= bound)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (AttentionConfig("mma_sync", block_m=128), "block_m must be 64"),
        (AttentionConfig("mma_sync", block_n=48), "block_n must be 16, 32, 64 or 128"),
        (AttentionConfig("mma_sync", stages=1), "stages must be 2 to 7"),
        (AttentionConfig("mma_sync", block_n=128, stages=7), "bytes of shared memory"),
    ],
)
def test_unsupported_tiles_are_launch_errors(interp, config, message):
    q = interp.zeros((1, 1, 8, 64), np.float16)
    with pytest.raises(cp.LaunchError, match=message):
        flash_attention(interp, q, q, q, config=config)


@pytest.mark.parametrize(
    ("head_dim", "causal"),
    [
        pytest.param(64, False, marks=pytest.mark.slow),
        (64, True),
        (128, True),
    ],  # the causal kernels hold the other's code
)
def test_ptx_passes_ptxas_for_sm_80(interp, head_dim, causal):
    q = interp.zeros((1, 1, 128, head_dim), ml_dtypes.bfloat16)
    o = interp.zeros((1, 1, 128, head_dim), ml_dtypes.bfloat16)
    lse = interp.zeros((1, 1, 128), np.float32)
    launch = flash_attention_launch(q, q, q, o, lse, causal=causal, config=AttentionConfig("mma_sync"))
    compiled = launch.compile("sm_80")
    ptx = compiled.ptx
    for needle in (
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
        "cp.async.cg.shared.global",
        "cp.async.wait_group",
        "ex2.approx.ftz.f32",
    ):
        assert needle in ptx, needle
    assert "st.shared" not in ptx  # P goes from the S accumulators to the a fragments in registers
    if compiled.resources is not None:  # ptxas on PATH
        assert compiled.resources.registers <= 255
        assert compiled.resources.spill_store_bytes == 0 and compiled.resources.spill_load_bytes == 0


def test_triton_tutorial_06_port_runs_sanitized():
    from examples.triton import t06_fused_attention

    # inputs N(0, 0.5): max|v| < 2.5 at this size, so the output bound above is below 2**-11 * 5
    errors = t06_fused_attention.run(cp.client("interp", sanitize=True), z=1, h=1, n_ctx=70)
    assert len(errors) == 4
    for name, error in errors.items():
        assert error < (2.0**-11 * 5 if " o " in name else 1.5e-4), (name, error)


def test_triton_tutorial_06_sass_case_compiles_for_sm_80():
    from examples.triton import t06_fused_attention

    sm80, hopper = t06_fused_attention.SASS_CASES  # the sm_90a case is compiled in test_hopper_attention
    case = sm80
    assert (case.triton, case.target, case.measure) == ("_attn_fwd", "sm_80", "loop")
    # the Hopper kernel runs its masked blocks in a second loop: its main loop is the smaller tensor-core one
    assert (hopper.triton, hopper.target, hopper.measure) == ("_attn_fwd", "sm_90a", "mma_loop")
    compiled = case.build(target=case.target, unchecked=True)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in compiled.ptx
    if compiled.resources is not None:
        assert compiled.resources.spill_store_bytes == 0
