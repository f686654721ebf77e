// Twin of benchmarks.sass_kernels.wmma_tile: one warp, a (row) and b (col) staged in shared memory, c from global.
// wmma_tile_checked adds cubepy's checked-mode guards to the staging loop's global reads (a read past a
// buffer's length gives 0); cubepy's cmma tile loads and stores are not bounds-checked, so neither are these.
#include <mma.h>
using namespace nvcuda;

template <bool Checked>
__device__ __forceinline__ void wmma_body(const half* __restrict__ a, const half* __restrict__ b,
                                          const float* __restrict__ c, float* __restrict__ out, unsigned a_len,
                                          unsigned b_len) {
    __shared__ half a_tile[256];
    __shared__ half b_tile[256];
    #pragma unroll 1  // the cubepy kernel says cp.range(..., unroll=1): compare loop for loop
    for (unsigned i = threadIdx.x; i < 256; i += 32) {
        a_tile[i] = !Checked || i < a_len ? a[i] : __float2half(0.0f);
        b_tile[i] = !Checked || i < b_len ? b[i] : __float2half(0.0f);
    }
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> lhs;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> rhs;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(lhs, a_tile, 16);
    wmma::load_matrix_sync(rhs, b_tile, 16);
    wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
    wmma::mma_sync(acc, lhs, rhs, acc);
    wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

extern "C" __global__ void wmma_tile(const half* __restrict__ a, const half* __restrict__ b,
                                     const float* __restrict__ c, float* __restrict__ out) {
    wmma_body<false>(a, b, c, out, 0, 0);
}

extern "C" __global__ void wmma_tile_checked(const half* __restrict__ a, const half* __restrict__ b,
                                             const float* __restrict__ c, float* __restrict__ out,
                                             unsigned a_len, unsigned b_len) {
    wmma_body<true>(a, b, c, out, a_len, b_len);
}
