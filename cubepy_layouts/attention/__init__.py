"""FlashAttention forward kernels written with cubepy.

| module | kernel |
|---|---|
| ``hopper`` | ``kernel="wgmma"`` (default): sm_90a, a TMA producer warp, two consumer warpgroups on wgmma |
| ``mma_sync`` | ``kernel="mma_sync"``: sm_80, ``mma.sync`` with K/V staged by a ``cp.async`` pipeline |
"""

from cubepy_layouts.attention.api import (
    ATTENTION_CONFIGS,
    flash_attention,
    flash_attention_launch,
    tuned_flash_attention,
)
from cubepy_layouts.attention.config import AttentionConfig, AttentionProblem, attention_problem
from cubepy_layouts.attention.reference import attention_reference

__all__ = [
    "ATTENTION_CONFIGS",
    "AttentionConfig",
    "AttentionProblem",
    "attention_problem",
    "attention_reference",
    "flash_attention",
    "flash_attention_launch",
    "tuned_flash_attention",
]
