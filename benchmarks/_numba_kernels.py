"""numba-cuda kernels of the interp-throughput cases (for its simulator, ``NUMBA_ENABLE_CUDASIM=1``)."""

from __future__ import annotations

import math

from numba import cuda, float32


@cuda.jit
def add(x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + y[i]


@cuda.jit
def softmax_rows(x, out):
    # One block of 32 threads per row, strided over the columns; the block reductions go through
    # shared memory (the simulator's stand-in for cubepy's plane_max / plane_sum).
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    cols = x.shape[1]
    part = cuda.shared.array(32, float32)
    local = float32(-3.0e38)
    for c in range(tid, cols, 32):
        local = max(local, x[row, c])
    part[tid] = local
    cuda.syncthreads()
    row_max = part[0]
    for i in range(1, 32):
        row_max = max(row_max, part[i])
    cuda.syncthreads()
    local = float32(0.0)
    for c in range(tid, cols, 32):
        local += math.exp(x[row, c] - row_max)
    part[tid] = local
    cuda.syncthreads()
    total = float32(0.0)
    for i in range(32):
        total += part[i]
    for c in range(tid, cols, 32):
        out[row, c] = math.exp(x[row, c] - row_max) / total


@cuda.jit
def matmul(a, b, c):
    tile = 16
    sa = cuda.shared.array((16, 16), float32)
    sb = cuda.shared.array((16, 16), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * tile + ty
    col = cuda.blockIdx.x * tile + tx
    acc = float32(0.0)
    for k0 in range(0, a.shape[1], tile):
        sa[ty, tx] = a[row, k0 + tx]
        sb[ty, tx] = b[k0 + ty, col]
        cuda.syncthreads()
        for kk in range(tile):
            acc += sa[ty, kk] * sb[kk, tx]
        cuda.syncthreads()
    if row < c.shape[0] and col < c.shape[1]:
        c[row, col] = acc


KERNELS = {"vector_add": add, "softmax_rows": softmax_rows, "matmul": matmul}
