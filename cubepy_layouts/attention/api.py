"""``flash_attention``: the public entry, choosing the kernel module for an ``AttentionConfig``."""

from __future__ import annotations

import importlib

import numpy as np

import cubepy as cp
from cubepy_layouts.attention.config import AttentionConfig, attention_problem

_MODULES = {"wgmma": "cubepy_layouts.attention.hopper", "mma_sync": "cubepy_layouts.attention.mma_sync"}


def flash_attention_launch(
    q, k, v, o, lse=None, *, causal: bool = False, sm_scale: float | None = None, config: AttentionConfig | None = None
):
    """The launch (``.launch(client)``, ``.compile(target)``) writing ``o`` (and ``lse`` when given) for q, k, v."""
    config = AttentionConfig() if config is None else config
    problem = attention_problem(q, k, v, causal, sm_scale, lse is not None)
    if tuple(o.shape) != tuple(q.shape) or np.dtype(o.dtype) != np.dtype(q.dtype):
        raise cp.LaunchError(f"flash_attention: o must be {q.shape} {q.dtype}, got {o.shape} {o.dtype}")
    if lse is not None and (tuple(lse.shape) != tuple(q.shape[:3]) or np.dtype(lse.dtype) != np.float32):
        raise cp.LaunchError(f"flash_attention: lse must be {q.shape[:3]} float32, got {lse.shape} {lse.dtype}")
    module = importlib.import_module(_MODULES[config.kernel])
    return module.attention_launch(problem, config, q, k, v, o, lse)


def flash_attention(
    client,
    q,
    k,
    v,
    causal: bool = False,
    sm_scale: float | None = None,
    return_lse: bool = False,
    config: AttentionConfig | None = None,
):
    """``softmax(q k^T * sm_scale) v`` per (batch, head): a new handle of q's shape and dtype (and f32 ``lse``)."""
    o = client.empty(tuple(q.shape), np.dtype(q.dtype))
    lse = client.empty(tuple(q.shape[:3]), np.float32) if return_lse else None
    flash_attention_launch(q, k, v, o, lse, causal=causal, sm_scale=sm_scale, config=config).launch(client)
    return (o, lse) if return_lse else o


# What ``tuned_flash_attention`` times: the Hopper kernel's key block and ring depth, then the sm_80 kernel.
# A configuration the device cannot run (wgmma below sm_90) fails, and autotune records why.
ATTENTION_CONFIGS = (
    {"kernel": "wgmma", "block_m": 128, "block_n": 128, "stages": 2},
    {"kernel": "wgmma", "block_m": 128, "block_n": 64, "stages": 3},
    {"kernel": "wgmma", "block_m": 64, "block_n": 128, "stages": 2},
    {"kernel": "mma_sync", "block_n": 64, "stages": 3},
    {"kernel": "mma_sync", "block_n": 32, "stages": 2},
)


def _attention_key(q, k, v, causal: bool = False, sm_scale: float | None = None, return_lse: bool = False):
    """Tune once per shape pair, dtype and mask."""
    return (tuple(q.shape), tuple(k.shape), str(np.dtype(q.dtype)), bool(causal))


@cp.autotune(configs=list(ATTENTION_CONFIGS), key=_attention_key)
def tuned_flash_attention(
    client, q, k, v, causal: bool = False, sm_scale: float | None = None, return_lse: bool = False, **fields
):
    """``flash_attention`` with the ``AttentionConfig`` chosen by timing ``ATTENTION_CONFIGS`` once per
    (shapes, dtype, causal) and client (``tuned_flash_attention.best(client, q, k, v)`` says which;
    ``CUBEPY_AUTOTUNE=0`` takes the first)."""
    return flash_attention(client, q, k, v, causal, sm_scale, return_lse, AttentionConfig(**fields))
