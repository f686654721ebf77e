"""GEMM kernels on tensor cores, written with the layout library.

| module | kernel |
|---|---|
| ``mma_sync`` | ``mma_sync_matmul``: sm_80 ``mma.sync`` m16n8k16 GEMM, ``ldmatrix`` fragments from shared-memory tiles |
| ``async_tiled`` | ``async_tiled_matmul``: f32 GEMM (FMA micro-tiles), tiles staged by a multi-stage ``cp.Pipeline`` of ``cp.async`` |
| ``wgmma_gemm`` | ``wgmma_matmul``: sm_90a warp-specialized GEMM, TMA 128B-swizzled stages, full/empty barriers, ``wgmma`` |
| | (two groups in flight, ``setmaxnreg``, TMA-store epilogue with bias and activation, persistent, fp8) |
| ``wgmma_kernel`` | the device side of ``wgmma_matmul`` |
"""

from cubepy_layouts.matmul.async_tiled import (
    TUNING_CONFIGS,
    AsyncTiledConfig,
    AsyncTiledLaunch,
    async_tiled_launch,
    async_tiled_matmul,
    tuned_async_tiled_matmul,
)
from cubepy_layouts.matmul.mma_sync import MmaSyncTiling, RowMajorLayout, mma_sync_launch, mma_sync_matmul
from cubepy_layouts.matmul.wgmma_gemm import (
    GEMM_CONFIGS,
    WgmmaGemmConfig,
    WgmmaGemmLaunch,
    pad_columns,
    tuned_wgmma_matmul,
    wgmma_gemm_launch,
    wgmma_matmul,
)

__all__ = [
    "TUNING_CONFIGS",
    "AsyncTiledConfig",
    "AsyncTiledLaunch",
    "async_tiled_launch",
    "async_tiled_matmul",
    "tuned_async_tiled_matmul",
    "MmaSyncTiling",
    "RowMajorLayout",
    "mma_sync_launch",
    "mma_sync_matmul",
    "GEMM_CONFIGS",
    "WgmmaGemmConfig",
    "WgmmaGemmLaunch",
    "pad_columns",
    "tuned_wgmma_matmul",
    "wgmma_gemm_launch",
    "wgmma_matmul",
]
