// Twin of benchmarks.sass_kernels.row_sum (block 256): strided partials, warp sums, then shared memory.
#define BLOCK 256
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
extern "C" __global__ void row_sum(const float* __restrict__ x, float* __restrict__ out, unsigned cols) {
    __shared__ float partials[BLOCK / 32];
    unsigned base = blockIdx.x * cols;
    float acc = 0.0f;
    #pragma unroll 1  // the cubepy kernel says cp.range(..., unroll=1): compare loop for loop
    for (unsigned c = threadIdx.x; c < cols; c += BLOCK) acc += x[base + c];
    float total = warp_sum(acc);
    unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) partials[warp] = total;
    __syncthreads();
    if (warp == 0) {
        float value = lane < BLOCK / 32 ? partials[lane] : 0.0f;
        float row_total = warp_sum(value);
        if (threadIdx.x == 0) out[blockIdx.x] = row_total;
    }
}
