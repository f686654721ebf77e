// Twin of benchmarks.sass_kernels.sgemm (tile 16): 16x16 shared tiles, k a multiple of 16, store guard.
// sgemm16_checked is the same kernel with cubepy's checked-mode guards written out: a global read past a
// buffer's length gives 0, a write past it is dropped (the lengths arrive by value, as cubepy's metadata
// words do).
#define TILE 16

template <bool Checked>
__device__ __forceinline__ void sgemm_tile(const float* __restrict__ a, const float* __restrict__ b,
                                           float* __restrict__ c, unsigned m, unsigned k, unsigned n,
                                           unsigned a_len, unsigned b_len, unsigned c_len) {
    __shared__ float a_tile[TILE * TILE];
    __shared__ float b_tile[TILE * TILE];
    unsigned row = blockIdx.y * TILE + threadIdx.y;
    unsigned col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    #pragma unroll 1  // the cubepy kernel says cp.range(..., unroll=1): compare loop for loop
    for (unsigned k0 = 0; k0 < k; k0 += TILE) {
        unsigned ia = row * k + k0 + threadIdx.x, ib = (k0 + threadIdx.y) * n + col;
        a_tile[threadIdx.y * TILE + threadIdx.x] = !Checked || ia < a_len ? a[ia] : 0.0f;
        b_tile[threadIdx.y * TILE + threadIdx.x] = !Checked || ib < b_len ? b[ib] : 0.0f;
        __syncthreads();
#pragma unroll
        for (unsigned kk = 0; kk < TILE; ++kk) acc += a_tile[threadIdx.y * TILE + kk] * b_tile[kk * TILE + threadIdx.x];
        __syncthreads();
    }
    unsigned ic = row * n + col;
    if (row < m && col < n && (!Checked || ic < c_len)) c[ic] = acc;
}

extern "C" __global__ void sgemm16(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                   unsigned m, unsigned k, unsigned n) {
    sgemm_tile<false>(a, b, c, m, k, n, 0, 0, 0);
}

extern "C" __global__ void sgemm16_checked(const float* __restrict__ a, const float* __restrict__ b,
                                           float* __restrict__ c, unsigned m, unsigned k, unsigned n,
                                           unsigned a_len, unsigned b_len, unsigned c_len) {
    sgemm_tile<true>(a, b, c, m, k, n, a_len, b_len, c_len);
}
