"""What a FlashAttention launch is asked for: the problem (shapes, dtype, masking) and the kernel's tuning."""

from __future__ import annotations

import math

import attrs
import ml_dtypes
import numpy as np

import cubepy as cp

KERNELS = ("wgmma", "mma_sync")
# Both kernels run exp2 as ex2.approx.ftz (fast math): a probability below 2**-126 is 0 either way, and without
# ftz ptxas wraps every MUFU.EX2 in a compare and two predicated multiplies (three instructions per exp2).
FASTMATH = True
HEAD_DIMS = (64, 128)
DTYPES = {np.dtype(np.float16): cp.f16, np.dtype(ml_dtypes.bfloat16): cp.bf16}


@attrs.frozen
class AttentionConfig:
    """The kernel and its tiles; ``None`` fields take the kernel's own default for the problem.

    ``kernel``: ``"wgmma"`` (sm_90a: TMA, wgmma, warp specialization) or ``"mma_sync"`` (sm_80: ``mma.sync``
    with a ``cp.async`` pipeline).  ``block_m`` queries and ``block_n`` keys per step; ``stages`` of the K/V ring.
    """

    kernel: str = "wgmma"
    block_m: int | None = None
    block_n: int | None = None
    stages: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.kernel not in KERNELS:
            raise cp.LaunchError(f"AttentionConfig: kernel must be one of {KERNELS}, got {self.kernel!r}")
        for name in ("block_m", "block_n", "stages"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise cp.LaunchError(f"AttentionConfig: {name} must be a positive int, got {value!r}")


@attrs.frozen
class AttentionProblem:
    """One attention: ``o = softmax(q k^T * sm_scale [+ causal mask]) v`` per (batch, head)."""

    batch: int
    heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    elem: cp.ScalarType  # f16 or bf16, of q, k, v and o
    causal: bool
    sm_scale: float
    return_lse: bool

    @property
    def scale_log2(self) -> float:
        """``sm_scale * log2(e)``: the softmax runs on exp2 with the scale folded into the scores."""
        return self.sm_scale * math.log2(math.e)


def attention_problem(q, k, v, causal: bool, sm_scale: float | None, return_lse: bool) -> AttentionProblem:
    """The problem of handles ``q, k, v``; a LaunchError naming the argument that does not fit API's contract."""
    for name, handle in (("q", q), ("k", k), ("v", v)):
        if len(handle.shape) != 4:
            raise cp.LaunchError(
                f"flash_attention: {name} must be 4-D (batch, heads, seq, head_dim), got {handle.shape}"
            )
        if np.dtype(handle.dtype) not in DTYPES:
            raise cp.LaunchError(f"flash_attention: {name} must be float16 or bfloat16, got {handle.dtype}")
        strides = getattr(handle, "strides", None)
        if strides is not None and tuple(strides) != _contiguous(handle.shape):
            raise cp.LaunchError(f"flash_attention: {name} must be contiguous, got strides {tuple(strides)}")
    batch, heads, seq_q, head_dim = q.shape
    if tuple(k.shape[:2]) != (batch, heads) or k.shape[3] != head_dim:
        raise cp.LaunchError(f"flash_attention: k {k.shape} does not match q {q.shape} in batch, heads or head_dim")
    if tuple(v.shape) != tuple(k.shape):
        raise cp.LaunchError(f"flash_attention: v {v.shape} must have k's shape {k.shape}")
    if not (np.dtype(q.dtype) == np.dtype(k.dtype) == np.dtype(v.dtype)):
        raise cp.LaunchError(f"flash_attention: q, k, v differ in dtype: {q.dtype}, {k.dtype}, {v.dtype}")
    if head_dim not in HEAD_DIMS:
        raise cp.LaunchError(f"flash_attention: head_dim must be one of {HEAD_DIMS}, got {head_dim}")
    if min(batch, heads, seq_q, k.shape[2]) <= 0:
        raise cp.LaunchError(f"flash_attention: empty problem q {q.shape}, k {k.shape}")
    scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else float(sm_scale)
    return AttentionProblem(
        batch, heads, seq_q, k.shape[2], head_dim, DTYPES[np.dtype(q.dtype)], bool(causal), scale, bool(return_lse)
    )


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))
