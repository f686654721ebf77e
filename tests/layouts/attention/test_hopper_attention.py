"""The sm_90a FlashAttention kernel (``AttentionConfig(kernel="wgmma")``) against the float64 oracle, and the
cpu runtime against the interp.

Tolerances against the oracle: with ``u`` the unit roundoff of the element type (2**-11 for f16, 2**-8 for
bf16), the kernel rounds each probability to 16 bits before P V (``wgmma_a_from_accumulator``: at most
``u * max|v|`` on an output, since the probabilities of a row sum to the divisor) and rounds the output once
(``u * |o|``); S and P V are exact products summed in f64 and rounded once per wgmma, and the f32 softmax
with exp2/log2 (a few ulps) adds about 1e-6.  So ``|o - o_ref| <= u * (|o_ref| + max|v|) + 1e-5``.  ``lse``
is f32 throughout (values near 5, f32 ulp 5e-7): 1e-4 leaves margin.

cpu against interp: everything but ``exp2`` and ``log2`` is exact and runs the same emulation (TMA, mbarriers,
wgmma), but those two are numpy's on the interp and the C library's on cpu, which the cpu runtime guide
allows to differ by a few ulps (its "Math" section).  A probability one f32 ulp apart can round to a
different 16-bit value (one 16-bit ulp, ``2u p``), moving an output by at most ``2u max|v|``, plus one
16-bit ulp of its own rounding: ``|o_cpu - o_interp| <= 2u (|o_interp| + max|v|)``.  Such ties are rare:
at least 99% of the outputs must be bit-equal.  ``lse`` gets 8 f32 ulps (measured: at most 2).  The
scheduling bug that made cpu wrong by 0.1-1 (a unit running ahead of its plane after a wgmma or an mbarrier
wait) is tested bit for bit in ``tests/runtime/cpu/test_plane_release_after_waits.py``.
"""

from __future__ import annotations

import re
import shutil

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


def _run(client, q, k, v, causal, sm_scale, config):
    o, lse = flash_attention(
        client, client.create(q), client.create(k), client.create(v), causal, sm_scale, True, config
    )
    return client.read(o), client.read(lse)


def _check_oracle(o, lse, q, k, v, causal, sm_scale):
    """o and lse against the float64 oracle, under the bounds of the module docstring."""
    o_ref, lse_ref = attention_reference(q, k, v, causal, sm_scale)
    u = ROUNDOFF[np.dtype(q.dtype)]
    got = o.astype(np.float64)
    bound = u * (np.abs(o_ref) + np.abs(v.astype(np.float64)).max()) + 1e-5
    assert np.all(np.abs(got - o_ref) <= bound), f"o error {np.abs(got - o_ref).max()} over the bound"
    np.testing.assert_allclose(lse, lse_ref, rtol=0, atol=1e-4)


def _check_both(interp, cpu, shape_q, seq_k, dtype, causal, config, sm_scale=None, seed=0):
    """The kernel on both runtimes against the oracle, and cpu against interp (module docstring)."""
    q, k, v = _inputs(shape_q, seq_k, dtype, seed)
    o_i, lse_i = _run(interp, q, k, v, causal, sm_scale, config)
    o_c, lse_c = _run(cpu, q, k, v, causal, sm_scale, config)
    _check_oracle(o_i, lse_i, q, k, v, causal, sm_scale)
    _check_oracle(o_c, lse_c, q, k, v, causal, sm_scale)
    u = ROUNDOFF[np.dtype(dtype)]
    wide_i, wide_c = o_i.astype(np.float64), o_c.astype(np.float64)
    bound = 2 * u * (np.abs(wide_i) + np.abs(v.astype(np.float64)).max())
    assert np.all(np.abs(wide_c - wide_i) <= bound), f"cpu - interp {np.abs(wide_c - wide_i).max()}"
    same = np.mean(o_i.view(np.uint16) == o_c.view(np.uint16))
    assert same >= 0.99, f"only {same:.2%} of the outputs are bit-equal"
    assert np.all(np.abs(lse_c - lse_i) <= 8 * np.spacing(np.abs(lse_i))), np.abs(lse_c - lse_i).max()


@pytest.fixture(scope="module")
def interp():
    return cp.client("interp")


@pytest.fixture(scope="module")
def cpu():
    return cp.client("cpu")


@pytest.mark.parametrize(
    ("shape_q", "seq_k", "head_dim", "dtype", "causal", "config"),
    [
        # one consumer warpgroup, 64-key blocks: two blocks, the second ragged
        ((1, 2, 70), 90, 64, np.float16, False, AttentionConfig(block_m=64, block_n=64)),
        # a 2-stage ring of 32-key blocks: the producer waits on `empty` in its second round (5 s: the slow tier)
        pytest.param(
            (1, 2, 70),
            90,
            64,
            ml_dtypes.bfloat16,
            True,
            AttentionConfig(block_m=64, block_n=32, stages=2),
            marks=pytest.mark.slow,
        ),
        # two consumer warpgroups (block_m 128), 64-key blocks, more queries than keys (seconds: the slow tier)
        pytest.param(
            (1, 1, 130), 100, 64, np.float16, True, AttentionConfig(block_m=128, block_n=64), marks=pytest.mark.slow
        ),
        # head_dim 128: two TMA boxes per tile (seconds: the slow tier)
        pytest.param(
            (1, 1, 70),
            100,
            128,
            ml_dtypes.bfloat16,
            False,
            AttentionConfig(block_m=64, block_n=32),
            marks=pytest.mark.slow,
        ),
    ],
)
def test_ragged_on_interp_and_cpu(interp, cpu, shape_q, seq_k, head_dim, dtype, causal, config):
    _check_both(interp, cpu, (*shape_q, head_dim), seq_k, dtype, causal, config)


@pytest.mark.slow
def test_default_tiles_on_interp_and_cpu(interp, cpu):
    # 128 x 128 tiles, 2 stages: the tuned configuration's first entry
    _check_both(interp, cpu, (1, 2, 70, 64), 90, np.float16, False, AttentionConfig(kernel="wgmma"), seed=1)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("shape_q", "seq_k", "head_dim", "dtype", "causal", "config"),
    [
        ((1, 2, 130), 130, 128, np.float16, True, AttentionConfig(kernel="wgmma")),
        ((1, 2, 130), 200, 128, ml_dtypes.bfloat16, False, AttentionConfig(kernel="wgmma")),
        ((2, 1, 200), 150, 64, ml_dtypes.bfloat16, True, AttentionConfig(block_m=128, block_n=64, stages=3)),
        ((1, 1, 70), 300, 128, np.float16, True, AttentionConfig(block_m=64, block_n=128, stages=2)),
        ((1, 1, 70), 100, 64, np.float16, False, AttentionConfig(block_m=64, block_n=16, stages=4)),
    ],
)
def test_larger_on_interp_and_cpu(interp, cpu, shape_q, seq_k, head_dim, dtype, causal, config):
    _check_both(interp, cpu, (*shape_q, head_dim), seq_k, dtype, causal, config, seed=2)


@pytest.mark.slow
def test_negative_scale_scales_before_the_mask(interp, cpu):
    # sm_scale <= 0: the scores are scaled first, so the mask's -inf stays -inf
    config = AttentionConfig(block_m=64, block_n=32)
    _check_both(interp, cpu, (1, 1, 40, 64), 50, np.float16, True, config, sm_scale=-0.2, seed=3)


@pytest.mark.parametrize("schedule", ["random", "adversarial"])
def test_ping_pong_of_two_consumer_warpgroups_is_race_free_under_the_sanitizer(schedule):
    # block_m 128: two consumer warpgroups taking turns at named barriers; 5 key blocks through a 2-stage ring
    # (the last one ragged), so the peeled first trip, steady trips and the peeled last trip all run
    client = cp.client("interp", schedule=schedule, sanitize=True, seed=5)
    q, k, v = _inputs((1, 1, 100, 64), 150, np.float16, seed=6)
    config = AttentionConfig(block_m=128, block_n=32, stages=2)
    o, lse = _run(client, q, k, v, True, None, config)
    _check_oracle(o, lse, q, k, v, True, None)


def test_pipeline_is_race_free_under_the_sanitizer():
    # 3 key blocks through a 2-stage ring, the last one ragged; random schedule
    client = cp.client("interp", schedule="random", sanitize=True)
    q, k, v = _inputs((1, 1, 20, 64), 80, np.float16, seed=4)
    config = AttentionConfig(block_m=64, block_n=32, stages=2)
    o, lse = _run(client, q, k, v, False, None, config)
    _check_oracle(o, lse, q, k, v, False, None)


@pytest.mark.parametrize(
    ("config", "head_dim", "message"),
    [
        (AttentionConfig(block_m=96), 64, "block_m must be 64 or 128"),
        (AttentionConfig(block_n=24), 64, "block_n must be a multiple of 16 in"),
        (AttentionConfig(block_n=272), 64, "block_n must be a multiple of 16 in"),
        (AttentionConfig(stages=5), 64, "stages must be at most 4"),
        (AttentionConfig(block_n=256, stages=2), 128, "bytes of shared memory"),
    ],
)
def test_unsupported_tiles_are_launch_errors(interp, cpu, config, head_dim, message):
    for client in (interp, cpu):
        q = client.zeros((1, 1, 8, head_dim), np.float16)
        with pytest.raises(cp.LaunchError, match=message):
            flash_attention(client, q, q, q, config=config)


def test_a_non_finite_scale_is_a_launch_error(interp):
    q = interp.zeros((1, 1, 8, 64), np.float16)
    with pytest.raises(cp.LaunchError, match="sm_scale must be finite"):
        flash_attention(interp, q, q, q, sm_scale=float("inf"))


@pytest.mark.parametrize(
    ("head_dim", "dtype", "causal", "config"),
    [
        (64, np.float16, True, AttentionConfig(block_m=64, block_n=64)),
        pytest.param(64, np.float16, False, AttentionConfig(), marks=pytest.mark.slow),
        pytest.param(128, ml_dtypes.bfloat16, True, AttentionConfig(), marks=pytest.mark.slow),
    ],
)
def test_ptx_assembles_for_sm_90a_without_spills(interp, head_dim, dtype, causal, config):
    q = interp.zeros((1, 1, 128, head_dim), dtype)
    o = interp.zeros((1, 1, 128, head_dim), dtype)
    lse = interp.zeros((1, 1, 128), np.float32)
    compiled = flash_attention_launch(q, q, q, o, lse, causal=causal, config=config).compile("sm_90a")
    ptx = compiled.ptx
    name = "bf16" if np.dtype(dtype) == np.dtype(ml_dtypes.bfloat16) else "f16"
    block_n = config.block_n or 128
    for needle in (
        f"wgmma.mma_async.sync.aligned.m64n{block_n}k16.f32.{name}.{name}",  # S = Q K^T
        f"wgmma.mma_async.sync.aligned.m64n{head_dim}k16.f32.{name}.{name}",  # O += P V
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
        "mbarrier.try_wait.parity.shared.b64",
        "setmaxnreg.dec.sync.aligned.u32",
        "setmaxnreg.inc.sync.aligned.u32",
        "ex2.approx",
    ):
        assert needle in ptx, needle
    # ptxas honours setmaxnreg only with the register count at entry known: .reqntid and .minnctapersm
    assert ".minnctapersm 1" in ptx
    if config.block_m != 64:  # two consumer warpgroups take turns (ping-pong) at named barriers 3 and 4
        # each waits at its own barrier (3 + its index, a register) and hands the turn to the other's
        for form in (r"bar\.sync\s+%r\d+, 256;", r"bar\.arrive\s+3, 256;", r"bar\.arrive\s+4, 256;"):
            assert re.search(form, ptx), form
    if shutil.which("ptxas") is None:
        return
    assert compiled.resources is not None
    assert compiled.resources.registers <= 255
    assert compiled.resources.spill_store_bytes == 0 and compiled.resources.spill_load_bytes == 0
    # no "Potential Performance Loss": setmaxnreg is not ignored (C7508) and the wgmmas of S_j and of
    # P_{j-1} V_{j-1} are not serialized (C7514: the accumulator read between issue and wait)
    assert compiled.performance_notes == (), compiled.performance_notes


def test_triton_tutorial_06_hopper_sass_case_compiles_for_sm_90a():
    from examples.triton import t06_fused_attention

    case = t06_fused_attention.SASS_CASES[1]
    compiled = case.build(target=case.target, unchecked=True)
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16" in compiled.ptx  # S = Q K^T, 64 keys per block
    assert "cp.async.bulk.tensor.3d" in compiled.ptx
    if compiled.resources is not None:
        assert compiled.resources.spill_store_bytes == 0
