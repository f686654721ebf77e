// Twin of benchmarks.sass_kernels.sgemm (tile 16): 16x16 shared tiles, k a multiple of 16, store guard.
#define TILE 16
extern "C" __global__ void sgemm16(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                   unsigned m, unsigned k, unsigned n) {
    __shared__ float a_tile[TILE * TILE];
    __shared__ float b_tile[TILE * TILE];
    unsigned row = blockIdx.y * TILE + threadIdx.y;
    unsigned col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    #pragma unroll 1  // the cubepy kernel says cp.range(..., unroll=1): compare loop for loop
    for (unsigned k0 = 0; k0 < k; k0 += TILE) {
        a_tile[threadIdx.y * TILE + threadIdx.x] = a[row * k + k0 + threadIdx.x];
        b_tile[threadIdx.y * TILE + threadIdx.x] = b[(k0 + threadIdx.y) * n + col];
        __syncthreads();
#pragma unroll
        for (unsigned kk = 0; kk < TILE; ++kk) acc += a_tile[threadIdx.y * TILE + kk] * b_tile[kk * TILE + threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = acc;
}

// The same kernel with cubepy's checked-mode guards written out: a global read past a buffer's length
// gives 0, a write past it is dropped (the lengths arrive by value, as cubepy's metadata words do).
extern "C" __global__ void sgemm16_checked(const float* __restrict__ a, const float* __restrict__ b,
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
        a_tile[threadIdx.y * TILE + threadIdx.x] = ia < a_len ? a[ia] : 0.0f;
        b_tile[threadIdx.y * TILE + threadIdx.x] = ib < b_len ? b[ib] : 0.0f;
        __syncthreads();
#pragma unroll
        for (unsigned kk = 0; kk < TILE; ++kk) acc += a_tile[threadIdx.y * TILE + kk] * b_tile[kk * TILE + threadIdx.x];
        __syncthreads();
    }
    unsigned ic = row * n + col;
    if (row < m && col < n && ic < c_len) c[ic] = acc;
}
