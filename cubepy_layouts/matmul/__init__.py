"""GEMM kernels on tensor cores, written with the layout library.

| module | kernel |
|---|---|
| ``mma_sync`` | ``mma_sync_matmul``: sm_80 ``mma.sync`` m16n8k16 GEMM, ``ldmatrix`` fragments from shared-memory tiles |
| ``wgmma_gemm`` | ``wgmma_matmul``: sm_90a warp-specialized GEMM, TMA 128B-swizzled stages, full/empty barriers, ``wgmma`` |
"""

from cubepy_layouts.matmul.mma_sync import MmaSyncTiling, RowMajorLayout, mma_sync_launch, mma_sync_matmul
from cubepy_layouts.matmul.wgmma_gemm import (
    WgmmaGemmConfig,
    WgmmaGemmLaunch,
    pad_columns,
    wgmma_gemm_launch,
    wgmma_matmul,
)

__all__ = [
    "MmaSyncTiling",
    "RowMajorLayout",
    "mma_sync_launch",
    "mma_sync_matmul",
    "WgmmaGemmConfig",
    "WgmmaGemmLaunch",
    "pad_columns",
    "wgmma_gemm_launch",
    "wgmma_matmul",
]
