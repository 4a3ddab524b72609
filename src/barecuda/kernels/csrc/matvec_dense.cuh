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

// ------------------------------------------------------------------ tensor cores (f16 / bf16)
// Entries matvec_<w>_tc[_res|_glu] of the F16 module (x f16) and of the BF16 module (x bf16):
// x of the weights' dtype, any batch 1..8, the 16-byte path only (`vec` = 1: K % 8 == 0 and
// the pointers 16-byte aligned; the host checks). A block owns a tile of 16 rows; its warps
// (blockDim.x / 32, at most MVW_MAXW: a run-time choice of the host) split K in runs of 32
// weights, round-robin (in a turn the block reads MVW_U * warps consecutive runs of each
// row). No staging: thread (g = lane / 4, t = lane % 4) loads, of each run, the 16 bytes
// 8t..8t+7 of rows g and g + 8 (L1::no_allocate) and the same 16 bytes of x row g (through
// L1; zeros for g >= nb), and runs two mma.sync m16n8k16 with the weights as A and x as B:
// the mma's k index is a permutation of the run's (a thread's words 0, 1 are its k pairs
// 2t, 2t + 8 of the first mma, words 2, 3 those of the second; x's words match), so the
// products are W x exactly as given, accumulated in fp32; the batch rows are the mma's 8
// columns. K tails (K % 32) are a thread's predicate (its 8 weights are all in or all out).
// The warps' fragments meet in shared memory; warp 0 applies the epilogue (thread (g, t)
// holds rows g, g + 8 of batch rows 2t, 2t + 1).
#if WFMT == 1 || WFMT == 30
#include "mma.cuh"
#ifndef MVW_U
#define MVW_U 4         // tensor cores: runs (32 weights a row) in flight a warp
#endif
#ifndef MVW_PF
#define MVW_PF 0        // tensor cores: 1 = load the next turn's runs before this turn's mmas
#endif
#ifndef MVW_ORD
#define MVW_ORD 0       // tensor cores: 0 = a warp's runs of a turn strided by the warps, 1 = consecutive
#endif
#ifndef MVW_L2
#define MVW_L2 0        // tensor cores: the weight loads' L2 prefetch size (0 none, 128, 256 bytes)
#endif
#define MVW_MAXW 16     // tensor cores: most warps a block

// 16 bytes of weights, read once: no L1 allocation, MVW_L2's prefetch hint
BC_DEV uint4 mvw_ld(const uint4* p) {
    uint4 v;
#if MVW_L2 == 256
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#elif MVW_L2 == 128
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#endif
    return v;
}
#ifndef MVW_MB
#define MVW_MB 1        // tensor cores: __launch_bounds__'s min blocks (1 leaves ptxas the registers to
#endif                  // keep every run's loads in flight: 80 a thread at MVW_U=4; 2: 64, some wait)

template <typename XT, int EPI>
BC_DEV void mv_dense_tc(const uint4* __restrict__ W, const uint4* __restrict__ W2, const XT* __restrict__ x,
                        XT* __restrict__ y, const XT* __restrict__ r, int N, int K, int nb) {
    constexpr int NS = EPI == EPI_GLU ? 2 : 1, U = MVW_U, BF = WFMT == 30;
    __shared__ float red[MVW_MAXW * NS * 4 * 32];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16;
    const long long kv = K >> 3;                                       // 16-byte vectors a row
    const uint4* rows[NS][2];
#pragma unroll
    for (int s = 0; s < NS; ++s) {
        rows[s][0] = (s ? W2 : W) + (long long)min(n0 + g, N - 1) * kv + t;
        rows[s][1] = (s ? W2 : W) + (long long)min(n0 + g + 8, N - 1) * kv + t;
    }
    const uint4* xr = reinterpret_cast<const uint4*>(x + (long long)min(g, nb - 1) * K) + t;
    const bool xon = g < nb;
    const int nrun = (K + 31) >> 5;
    float acc[NS][4];
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[s][i] = 0.f;
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    uint4 a[U][NS][2], b[U];
    auto load = [&](int j0) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            // branch-free (every load issued before any use): out-of-range vectors load the
            // row's last one and are zeroed after
            const int j = j0 + u * (MVW_ORD ? 1 : nw);
            const bool ok = j < nrun && 4 * j + t < kv;                  // this thread's 8 weights
            const long long v = ok ? 4 * j : kv - 1 - t;
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    a[u][s][h] = mvw_ld(rows[s][h] + v);
            b[u] = xr[v];
            if (!ok || !xon) b[u] = z;                                     // zero x: A's garbage x 0
        }
    };
    auto mma = [&](const uint4 (&aa)[U][NS][2], const uint4 (&bb)[U]) {
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int s = 0; s < NS; ++s) {
                bc_mma16816<BF>(acc[s], aa[u][s][0].x, aa[u][s][1].x, aa[u][s][0].y, aa[u][s][1].y, bb[u].x, bb[u].y);
                bc_mma16816<BF>(acc[s], aa[u][s][0].z, aa[u][s][1].z, aa[u][s][0].w, aa[u][s][1].w, bb[u].z, bb[u].w);
            }
    };
    const int step = nw * U, first = MVW_ORD ? wi * U : wi;
    if (MVW_PF) {
        if (first < nrun) load(first);
        for (int j0 = first; j0 < nrun; j0 += step) {
            uint4 ca[U][NS][2], cb[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                cb[u] = b[u];
#pragma unroll
                for (int s = 0; s < NS; ++s) { ca[u][s][0] = a[u][s][0]; ca[u][s][1] = a[u][s][1]; }
            }
            if (j0 + step < nrun) load(j0 + step);
            mma(ca, cb);
        }
    } else {
        for (int j0 = first; j0 < nrun; j0 += step) {
            load(j0);
            mma(a, b);
        }
    }
    if (nw > 1) {
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int i = 0; i < 4; ++i) red[((wi * NS + s) * 4 + i) * 32 + lane] = acc[s][i];
        __syncthreads();
        if (wi) return;
        for (int w = 1; w < nw; ++w)
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[s][i] += red[((w * NS + s) * 4 + i) * 32 + lane];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int n = n0 + g + 8 * (i >> 1), bi = 2 * t + (i & 1);
        if (n < N && bi < nb) {
            float v = acc[0][i];
            if constexpr (EPI == EPI_GLU) v = mv_silu<float>(v) * acc[NS - 1][i];
            const long long o = (long long)bi * N + n;
            if constexpr (EPI == EPI_RES) v += bc_load(r + o);
            bc_store(y + o, v);
        }
    }
}

#define MVW_TC_ENTRY(code, XT, SUF, EPI)                                                                 \
    extern "C" __global__ void __launch_bounds__(32 * MVW_MAXW, MVW_MB)                                 \
    matvec_##code##_tc##SUF(const void* W, const void* W2, const XT* x, XT* y, const XT* r, int N,     \
                            int K, int nb, int vec) {                                                   \
        (void)vec;                                                                                      \
        mv_dense_tc<XT, EPI>((const uint4*)W, (const uint4*)W2, x, y, r, N, K, nb);                     \
    }
#if WFMT == 1
MVW_TC_ENTRY(f16, bc_half, , EPI_NONE)
MVW_TC_ENTRY(f16, bc_half, _res, EPI_RES)
MVW_TC_ENTRY(f16, bc_half, _glu, EPI_GLU)
#else
MVW_TC_ENTRY(bf16, bc_bf16, , EPI_NONE)
MVW_TC_ENTRY(bf16, bc_bf16, _res, EPI_RES)
MVW_TC_ENTRY(bf16, bc_bf16, _glu, EPI_GLU)
#endif
#endif  // WFMT == 1 || WFMT == 30
