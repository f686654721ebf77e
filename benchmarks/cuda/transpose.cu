// Twin of benchmarks.sass_kernels.transpose (tile 32, 8 rows per pass): a padded shared tile, both sides guarded.
#define TILE 32
#define ROWS_PER_PASS 8
extern "C" __global__ void transpose32(const float* __restrict__ x, float* __restrict__ out, unsigned rows,
                                       unsigned cols) {
    __shared__ float buf[TILE * (TILE + 1)];
    unsigned col = blockIdx.x * TILE + threadIdx.x;
#pragma unroll
    for (unsigned j = 0; j < TILE; j += ROWS_PER_PASS) {
        unsigned row = blockIdx.y * TILE + threadIdx.y + j;
        if (row < rows && col < cols) buf[(threadIdx.y + j) * (TILE + 1) + threadIdx.x] = x[row * cols + col];
    }
    __syncthreads();
    unsigned out_col = blockIdx.y * TILE + threadIdx.x;
#pragma unroll
    for (unsigned j = 0; j < TILE; j += ROWS_PER_PASS) {
        unsigned out_row = blockIdx.x * TILE + threadIdx.y + j;
        if (out_row < cols && out_col < rows)
            out[out_row * rows + out_col] = buf[threadIdx.x * (TILE + 1) + threadIdx.y + j];
    }
}
