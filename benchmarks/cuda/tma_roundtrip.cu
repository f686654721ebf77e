// Twin of examples.tma_roundtrip (16 x 32 f32 tiles, 128 threads): TMA load, dst = scale * src + 1, TMA store.
#include "tma_common.cuh"
#define ROWS 16
#define COLS 32
#define DIM 128  // threads per block, as launched
extern "C" __global__ void tma_roundtrip(const __grid_constant__ CUtensorMap src, const __grid_constant__ CUtensorMap dst,
                                         float scale) {
    __shared__ __align__(128) float tile[ROWS * COLS];
    __shared__ __align__(8) unsigned long long bar;
    const unsigned size = ROWS * COLS;
    if (threadIdx.x == 0) mbar_init(&bar, blockDim.x);
    __syncthreads();
    int y = blockIdx.y * ROWS, x = blockIdx.x * COLS;
    if (threadIdx.x == 0) tma_load_2d(tile, &src, &bar, y, x);
    mbar_wait(&bar, mbar_arrive_expect_tx(&bar, threadIdx.x == 0 ? size * 4 : 0));
    // cubepy compiles for the launch's cube (CUBE_DIM is 128 there): the same constant step, and no unroll hint
    // on either side (ptxas unrolls both alike).
    for (unsigned i = threadIdx.x; i < size; i += DIM) tile[i] = scale * tile[i] + 1.0f;
    fence_async_shared();
    __syncthreads();
    if (threadIdx.x == 0) {
        tma_store_2d(&dst, tile, y, x);
        bulk_commit();
        bulk_wait_read0();
    }
}
