"""Triton tutorial 06, fused attention (forward): FlashAttention-2, the scores never leave the chip.

Triton's ``_attn_fwd`` gives each program ``BLOCK_M`` queries of one (batch, head) and walks the keys in
tiles of ``BLOCK_N``: ``qk = q @ k.T``, an online softmax in base 2 (``qk_scale = sm_scale * log2(e)``),
``acc = acc * alpha + p @ v``; causal attention runs the off-diagonal tiles unmasked (``STAGE`` 1) and the
diagonal tile masked (``STAGE`` 2).  It stores ``o = acc / l`` and ``M = m + log2(l)``, the log-sum-exp of the
scaled scores in base 2.

The cubepy version is the library's sm_80 kernel, ``cubepy_layouts.attention.mma_sync`` (the same design on
``mma.sync``, with K and V staged by a ``cp.async`` pipeline; see docs/guide/attention.md), reached through
``flash_attention(..., config=AttentionConfig(kernel="mma_sync"))``.  It returns the natural-log ``lse``;
Triton's ``M`` is ``lse * log2(e)``.  Unlike the tutorial (N_CTX a multiple of the tiles), any length works.
"""

from __future__ import annotations

import math

import numpy as np

import cubepy as cp
from cubepy_layouts.attention import AttentionConfig, attention_reference, flash_attention
from cubepy_layouts.attention.api import flash_attention_launch
from examples.triton import SassCase

CONFIG = AttentionConfig(kernel="mma_sync")  # 64 queries x 64 keys per step, 4 planes: Triton's sm_80 tile
LOG2E = 1.0 / math.log(2.0)


def attention(client, q, k, v, causal: bool, sm_scale: float):
    """The tutorial's ``attention.apply``: new handles ``(o, lse)`` for f16 handles (Z, H, N_CTX, HEAD_DIM).

    ``lse`` is the natural log-sum-exp of each row of scaled scores; Triton's ``M`` is ``lse * log2(e)``."""
    return flash_attention(client, q, k, v, causal, sm_scale, return_lse=True, config=CONFIG)


def run(client, z: int = 1, h: int = 2, n_ctx: int = 130, head_dim: int = 64) -> dict[str, float]:
    """Both masks at a ragged ``n_ctx`` (inputs N(0, 0.5) and sm_scale 0.5, as the tutorial's test) against numpy."""
    rng = np.random.default_rng(6)
    q, k, v = (rng.normal(0.0, 0.5, (z, h, n_ctx, head_dim)).astype(np.float16) for _ in range(3))
    sm_scale = 0.5
    errors = {}
    for causal in (False, True):
        o, lse = attention(client, client.create(q), client.create(k), client.create(v), causal, sm_scale)
        o_ref, lse_ref = attention_reference(q, k, v, causal, sm_scale)
        name = "causal" if causal else "non-causal"
        errors[f"attention o max error ({name})"] = float(np.max(np.abs(client.read(o) - o_ref)))
        errors[f"attention M max error ({name})"] = float(np.max(np.abs(client.read(lse) * LOG2E - lse_ref * LOG2E)))
    return errors


def _build(target: str = "sm_80", **options):
    """A ``SassCase.build``: the tutorial's benchmark shape 4 x 32 x 1024 x 64, f16, non-causal, with M."""
    client = cp.client("interp")
    q = client.zeros((4, 32, 1024, 64), np.float16)
    o = client.zeros((4, 32, 1024, 64), np.float16)
    lse = client.zeros((4, 32, 1024), np.float32)
    return flash_attention_launch(q, q, q, o, lse, causal=False, config=CONFIG).compile(target, **options)


def _build_hopper(target: str = "sm_90a", **options):
    """The Hopper kernel (TMA producer, wgmma consumers) at the tutorial's sm_90 tile: 128 x 64, 2 stages."""
    client = cp.client("interp")
    q = client.zeros((4, 32, 1024, 64), np.float16)
    o = client.zeros((4, 32, 1024, 64), np.float16)
    lse = client.zeros((4, 32, 1024), np.float32)
    config = AttentionConfig(kernel="wgmma", block_m=128, block_n=64, stages=2)
    return flash_attention_launch(q, q, q, o, lse, causal=False, config=config).compile(target, **options)


SASS_CASES: list[SassCase] = [
    SassCase(
        "06 fused attention",
        "attention fwd, mma.sync + cp.async, 64 x 64 tiles, 3 stages, D 64",
        _build,
        "_attn_fwd",
        target="sm_80",
        measure="loop",
    ),
    SassCase(
        "06 fused attention",
        "attention fwd, wgmma + TMA, 128 x 64 tiles, 2 stages, D 64 (its unmasked loop: a round of 2 key blocks)",
        _build_hopper,
        "_attn_fwd",
        target="sm_90a",
        measure="mma_loop",
    ),
]
