"""GEMM kernels on tensor cores, written with the layout library.

| module | kernel |
|---|---|
| ``mma_sync`` | ``mma_sync_matmul``: sm_80 ``mma.sync`` m16n8k16 GEMM, ``ldmatrix`` fragments from shared-memory tiles |
"""

from cubepy_layouts.matmul.mma_sync import MmaSyncTiling, RowMajorLayout, mma_sync_launch, mma_sync_matmul

__all__ = ["MmaSyncTiling", "RowMajorLayout", "mma_sync_launch", "mma_sync_matmul"]
