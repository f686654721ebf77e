// Twin of benchmarks.sass_kernels.saxpy: out[i] = a * x[i] + y[i] with a length guard.
extern "C" __global__ void saxpy(float a, const float* __restrict__ x, const float* __restrict__ y,
                                 float* __restrict__ out, unsigned n) {
    unsigned cube = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned unit = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned pos = cube * (blockDim.x * blockDim.y * blockDim.z) + unit;
    if (pos < n) out[pos] = a * x[pos] + y[pos];
}
