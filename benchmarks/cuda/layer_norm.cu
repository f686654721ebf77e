// Twin of benchmarks.sass_kernels.layer_norm: one warp per row, mean and variance by butterfly sums.
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
extern "C" __global__ void layer_norm(const float* __restrict__ x, const float* __restrict__ gamma,
                                      const float* __restrict__ beta, float* __restrict__ out, unsigned cols,
                                      unsigned row_stride, float eps) {
    unsigned base = blockIdx.x * row_stride;
    float total = 0.0f;
    #pragma unroll 1  // the cubepy kernel says cp.range(..., unroll=1): compare loop for loop
    for (unsigned c = threadIdx.x; c < cols; c += 32) total += x[base + c];
    float mean = warp_sum(total) / (float)cols;
    float sq = 0.0f;
    #pragma unroll 1  // the cubepy kernel says cp.range(..., unroll=1): compare loop for loop
    for (unsigned c = threadIdx.x; c < cols; c += 32) {
        float d = x[base + c] - mean;
        sq += d * d;
    }
    // cp.rsqrt is correctly rounded (sqrt.rn then div.rn, the interp's bits): the same computation in CUDA
    // is 1 / sqrtf with nvcc's default -prec-sqrt=true -prec-div=true, not the 2-ulp rsqrtf approximation.
    float rstd = 1.0f / sqrtf(warp_sum(sq) / (float)cols + eps);
    #pragma unroll 1  // the cubepy kernel says cp.range(..., unroll=1): compare loop for loop
    for (unsigned c = threadIdx.x; c < cols; c += 32) out[base + c] = (x[base + c] - mean) * rstd * gamma[c] + beta[c];
}
