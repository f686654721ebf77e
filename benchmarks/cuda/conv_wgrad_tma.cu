// Twin of cubepy_layouts.conv's TMA weight gradient (f16, 2 stages, one warp per 16 x 16 block of dw):
// A = dy^T tiles by a 2-D tiled tensor map over (pixels, C_out), B = im2col boxes of x (16 pixels x 16
// channels), wmma 16x16x16 into f32, the block goes through shared memory to dw[o, kh, kw, c] with checks.
#include <mma.h>
#include "tma_common.cuh"
using namespace nvcuda;
#define TILE 16
#define TILE_ITEMS (TILE * TILE)
#define STAGES 2

struct ConvParams {
    int out_h, out_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, kernel_w;
    int channels;  // input channels padded to the tile
    int in_channels, out_channels, pixels;
};

__device__ __forceinline__ void issue_stage(unsigned long long* bar, const CUtensorMap* dy, const CUtensorMap* x,
                                            half* a_stage, half* b_stage, int m0, int n0, int k0,
                                            const ConvParams& p) {
    if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(bar, 2 * TILE_ITEMS * sizeof(half));
        tma_load_2d(a_stage, dy, bar, k0, m0);
        int tap = n0 / p.channels, c0 = n0 % p.channels;
        int kh = tap / p.kernel_w, kw = tap % p.kernel_w;
        int per_image = p.out_h * p.out_w;
        int img = k0 / per_image, rem = k0 % per_image;
        int oh = rem / p.out_w, ow = rem % p.out_w;
        tma_load_im2col_4d(b_stage, x, bar, img, oh * p.stride_h - p.pad_h, ow * p.stride_w - p.pad_w, c0,
                           (unsigned short)(kh * p.dil_h), (unsigned short)(kw * p.dil_w));
    }
}

extern "C" __global__ void conv_wgrad_tma(const __grid_constant__ CUtensorMap dy, const __grid_constant__ CUtensorMap x,
                                          float* __restrict__ dw, ConvParams p) {
    __shared__ __align__(128) half a_tiles[STAGES * TILE_ITEMS];
    __shared__ __align__(128) half b_tiles[STAGES * TILE_ITEMS];
    __shared__ __align__(8) unsigned long long bars[STAGES];
    __shared__ float result[TILE_ITEMS];
    int m0 = blockIdx.y * TILE, n0 = blockIdx.x * TILE;
    if (threadIdx.x == 0)
#pragma unroll
        for (int s = 0; s < STAGES; ++s) mbar_init(&bars[s], 1);
    __syncthreads();
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::col_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
    int k_tiles = (p.pixels + TILE - 1) / TILE;
#pragma unroll
    for (int s = 0; s < STAGES; ++s)
        if (s < k_tiles)
            issue_stage(&bars[s], &dy, &x, a_tiles + s * TILE_ITEMS, b_tiles + s * TILE_ITEMS, m0, n0, s * TILE, p);
    #pragma unroll 1  // the cubepy kernel (a library/example kernel) has no hint: ptxas may unroll it
    for (int round_start = 0; round_start < k_tiles; round_start += STAGES) {
        unsigned phase = (round_start / STAGES) % 2;
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            int tile = round_start + s;
            if (tile < k_tiles) {
                mbar_wait_parity(&bars[s], phase);
                wmma::load_matrix_sync(a, a_tiles + s * TILE_ITEMS, TILE);
                wmma::load_matrix_sync(b, b_tiles + s * TILE_ITEMS, TILE);
                __syncthreads();
                if (tile + STAGES < k_tiles)
                    issue_stage(&bars[s], &dy, &x, a_tiles + s * TILE_ITEMS, b_tiles + s * TILE_ITEMS, m0, n0,
                                (tile + STAGES) * TILE, p);
                wmma::mma_sync(acc, a, b, acc);
            }
        }
    }
    wmma::store_matrix_sync(result, acc, TILE, wmma::mem_row_major);
    __syncthreads();
    int taps = p.kernel_w;  // dw is (C_out, KH, KW, C_in): n = tap * channels + c
    #pragma unroll 1  // as the library's epilogue (cp.range(..., unroll=1))
    for (int i = threadIdx.x; i < TILE_ITEMS; i += 32) {
        int m = m0 + i / TILE, n = n0 + i % TILE;
        int tap = n / p.channels, c = n % p.channels;
        int kh = tap / taps, kw = tap % taps;
        int kernel_h_taps = gridDim.x * TILE / p.channels / taps;
        if (m < p.out_channels && c < p.in_channels && kh < kernel_h_taps)
            dw[((m * kernel_h_taps + kh) * taps + kw) * p.in_channels + c] = result[i];
    }
}
