// Twin of benchmarks.sass_kernels.vector_add_lines: float4 lines, 3-D absolute position, length guard.
struct Dims { unsigned x, y, z; };

extern "C" __global__ void vector_add_lines(const float4* __restrict__ lhs, const float4* __restrict__ rhs,
                                            float4* __restrict__ out, unsigned n_lines) {
    unsigned cube = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned unit = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned pos = cube * (blockDim.x * blockDim.y * blockDim.z) + unit;
    if (pos < n_lines) {
        float4 a = lhs[pos], b = rhs[pos];
        out[pos] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    }
}
