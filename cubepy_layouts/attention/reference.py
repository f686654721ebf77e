"""The float64 numpy oracle the attention kernels are tested against."""

from __future__ import annotations

import numpy as np


def attention_reference(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False, sm_scale: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(o, lse)`` in float64: ``o = softmax(q k^T * sm_scale) v``, ``lse`` the natural log of the row sums.

    ``causal`` masks key ``j > i`` for query ``i`` (top-left aligned); a query row with no key left
    (possible only when ``seq_k == 0``) is not defined here.
    """
    q64, k64, v64 = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    scale = 1.0 / np.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    scores = np.einsum("bhid,bhjd->bhij", q64, k64) * scale
    if causal:
        seq_q, seq_k = scores.shape[-2:]
        scores = np.where(np.arange(seq_k)[None, :] > np.arange(seq_q)[:, None], -np.inf, scores)
    peak = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - peak)
    total = weights.sum(axis=-1, keepdims=True)
    o = np.einsum("bhij,bhjd->bhid", weights / total, v64)
    lse = (peak + np.log(total))[..., 0]
    return o, lse
