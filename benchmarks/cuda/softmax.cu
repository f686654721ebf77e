// Twin of benchmarks.sass_kernels.softmax: one warp per row, butterfly max and sum, expf.
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
extern "C" __global__ void softmax(const float* __restrict__ x, float* __restrict__ out, unsigned cols,
                                   unsigned row_stride) {
    unsigned base = blockIdx.x * row_stride;
    float local_max = -3.0e38f;
    #pragma unroll 1  // the cubepy kernel says cp.range(..., unroll=1): compare loop for loop
    for (unsigned c = threadIdx.x; c < cols; c += 32) local_max = fmaxf(local_max, x[base + c]);
    float row_max = warp_max(local_max);
    float local_sum = 0.0f;
    #pragma unroll 1  // the cubepy kernel says cp.range(..., unroll=1): compare loop for loop
    for (unsigned c = threadIdx.x; c < cols; c += 32) local_sum += expf(x[base + c] - row_max);
    float row_sum = warp_sum(local_sum);
    #pragma unroll 1  // the cubepy kernel says cp.range(..., unroll=1): compare loop for loop
    for (unsigned c = threadIdx.x; c < cols; c += 32) out[base + c] = expf(x[base + c] - row_max) / row_sum;
}
