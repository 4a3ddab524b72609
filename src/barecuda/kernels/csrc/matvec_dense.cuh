// matvec_dense.cuh -- the dense-weight (F32, F16, BF16: WFMT 0, 1, 30) part of matvec.cu: the
// template and the entry points matvec_<x>_b<B>[_res|_glu] of the dense modules. Included
// by matvec.cu for those WFMT only, after its shared prelude (MV_WARPS, EPI_*, mv_silu,
// mv_store); the parameters and the entry naming are matvec.cu's (see its head comment).
//
// A warp per MV_R rows; each lane streams 16-byte vectors of the rows (MV_U independent
// loads per row in flight, no L1 allocation; the row loop is mvc_dense of matvec_core.cuh,
// shared with fused.cu), x comes through L1; `vec` = 0 selects an element-wise path for
// rows that are not 16-byte aligned. Warp-shuffle reduction, the epilogue in lane 0.
#pragma once

#ifndef MV_R
#define MV_R 1          // dense: rows per warp
#endif
#ifndef MV_U
#define MV_U 4          // dense: 16-byte loads in flight per row per lane
#endif

template <typename WT, typename XT, int B, int EPI>
BC_DEV void mv_dense(const WT* __restrict__ W, const WT* __restrict__ W2, const XT* __restrict__ x,
                     XT* __restrict__ y, const XT* __restrict__ r, int N, int K, int nb, int vec) {
    constexpr int R = MV_R, NS = EPI == EPI_GLU ? 2 : 1;
    const int n0 = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * R;
    if (n0 >= N) return;
    const WT* const src[2] = {W, W2};
    float acc[R][2][B];
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
            for (int b = 0; b < B; ++b) acc[i][s][b] = 0.f;
    mvc_dense<WT, XT, R, NS, MV_U, B>(src, x, n0, N, K, nb, vec, acc);
#pragma unroll
    for (int i = 0; i < R; ++i)
        if (n0 + i < N) mv_store<XT, B, EPI>(acc[i], y, r, N, n0 + i, nb);
}

// ------------------------------------------------------------------ entry points
#if WFMT == 0
typedef float mv_w_t;
#elif WFMT == 1
typedef bc_half mv_w_t;
#else
typedef bc_bf16 mv_w_t;
#endif
#define MVW_ENTRY(code, XT, B, SUF, EPI)                                                                 \
    extern "C" __global__ void __launch_bounds__(32 * MV_WARPS)                                         \
    matvec_##code##_b##B##SUF(const void* W, const void* W2, const XT* x, XT* y, const XT* r, int N,   \
                              int K, int nb, int vec) {                                                 \
        mv_dense<mv_w_t, XT, B, EPI>((const mv_w_t*)W, (const mv_w_t*)W2, x, y, r, N, K, nb, vec);     \
    }
#define MVW_EPIS(code, XT, B) MVW_ENTRY(code, XT, B, , EPI_NONE) MVW_ENTRY(code, XT, B, _res, EPI_RES) \
    MVW_ENTRY(code, XT, B, _glu, EPI_GLU)
#define MVW_BATCHES(code, XT) MVW_EPIS(code, XT, 1) MVW_EPIS(code, XT, 2) MVW_EPIS(code, XT, 4) MVW_EPIS(code, XT, 8)
BC_FOR_FLOATS(MVW_BATCHES)
