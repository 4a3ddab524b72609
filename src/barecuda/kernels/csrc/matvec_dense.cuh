// matvec_dense.cuh -- the dense-weight (F32, F16, BF16: WFMT 0, 1, 30) part of matvec.cu: the
// template and the entry points matvec_<x>_b<B>[_res|_glu] of the dense modules. Included
// by matvec.cu for those WFMT only, after its shared prelude (MV_WARPS, EPI_*, mv_silu,
// mv_store, mvt_store); the parameters and the entry naming are matvec.cu's (see its head comment).
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
    mvt_store<XT, EPI, NS>(acc, y, r, N, n0, g, t, nb);
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
// ------------------------------------------------------------------ batch 1 through the bulk copy engine (sm_90)
// Entries matvec_<w>_bk[_res|_glu] of the F16 / BF16 modules: x of the weights' dtype, batch 1,
// the 16-byte path. One block a multiprocessor (the host's grid: at most one block each, about
// 220 KB of shared memory), a block owns rows [b N / grid, (b + 1) N / grid). Whole rows (of W
// and, for _glu, W2) come into a ring of S = warps x `spw` slots of shared memory by
// cp.async.bulk, each slot with its mbarrier (transaction count); x comes in once the same
// way. At the start every slot's copy is issued, so nearly all of the block's bytes are in
// flight before the first one lands. Row j of the block lives in slot j % S and is reduced
// by warp j % warps (a warp a row: lanes over 16-byte vectors, shuffles, lane 0 stores y);
// S is a multiple of the warps, so the warp that finishes a slot is the one that reads it
// next, and its lane 0 refills it with row j + S at once (its reads are done: __syncwarp,
// then a proxy fence). `spw` (slots a warp) arrives in the `vec` argument; the shared memory
// is _matvec.bulk_smem's (barriers, x, slots). Other architectures: an empty body (the host
// takes these entries only on 9.0 and later).
// Opt-in (MVW_BK=1: the shipped modules do not contain these entries): at batch 1 no faster
// than the CUDA-core rows on the H200 (docs/kernels.md, 2026-11-27 09:4x-09:5x).
#ifndef MVW_BK
#define MVW_BK 0        // 1 = build the bulk-copy entries matvec_<w>_bk[_res|_glu]
#endif
#if MVW_BK
#ifndef MVB_PROBE
#define MVB_PROBE 0     // bulk copies: 1 = no dot products (the copies, waits and refills alone: a floor probe)
#endif
BC_DEV u32 mvb_sa(const void* p) { return (u32)__cvta_generic_to_shared(p); }
BC_DEV void mvb_copy(u32 dst, const void* src, u32 bytes, u32 bar) {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
#endif
}
BC_DEV void mvb_expect(u32 bar, u32 bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
#endif
}
BC_DEV void mvb_wait(u32 bar, u32 parity) {
#if __CUDA_ARCH__ >= 900
    u32 done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#endif
}

template <typename XT, int EPI>
BC_DEV void mv_dense_bulk(const u8* __restrict__ W, const u8* __restrict__ W2, const XT* __restrict__ x,
                          XT* __restrict__ y, const XT* __restrict__ r, int N, int K, int spw) {
#if __CUDA_ARCH__ >= 900
    constexpr int NS = EPI == EPI_GLU ? 2 : 1;
    extern __shared__ __align__(128) u8 mvb_sm[];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int S = nw * spw;
    const u32 rb = (u32)K * 2u;                                        // bytes a row (K % 8 == 0)
    const int r0 = (int)((long long)blockIdx.x * N / gridDim.x);
    const int nr = (int)((long long)(blockIdx.x + 1) * N / gridDim.x) - r0;
    // barriers (x's, then one a slot), x, the slots: each part 128-byte aligned
    const u32 bar0 = mvb_sa(mvb_sm), xs = bar0 + ((8u * (S + 1) + 127u) & ~127u);
    const u32 slots = xs + ((rb + 127u) & ~127u), sb = NS * rb;
    if (threadIdx.x == 0) {
        for (int i = 0; i <= S; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar0 + 8u * i) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    auto issue = [&](int j) {                                          // row r0 + j into slot j % S
        const int s = j % S;
        const u32 bar = bar0 + 8u * (s + 1), dst = slots + (u32)s * sb;
        mvb_expect(bar, sb);
        mvb_copy(dst, W + (long long)(r0 + j) * rb, rb, bar);
        if (NS == 2) mvb_copy(dst + rb, W2 + (long long)(r0 + j) * rb, rb, bar);
    };
    if (lane == 0) {
        if (wi == 0) {
            mvb_expect(bar0, rb);
            mvb_copy(xs, x, rb, bar0);
        }
        for (int j = wi; j < S && j < nr; j += nw) issue(j);
    }
    mvb_wait(bar0, 0);
    const int kv = K >> 3;
    const uint4* xv = reinterpret_cast<const uint4*>(mvb_sm + (xs - bar0));
    for (int j = wi; j < nr; j += nw) {
        const int s = j % S;
        mvb_wait(bar0 + 8u * (s + 1), (u32)(j / S) & 1u);
        const uint4* wv = reinterpret_cast<const uint4*>(mvb_sm + (slots - bar0) + (u32)s * sb);
        float acc[2] = {0.f, 0.f};
#pragma unroll 4
        for (int v = lane; v < (MVB_PROBE ? 0 : kv); v += 32) {
            BcVec<XT> xb;
            xb.raw = xv[v];
            float xf[8];
            bc_vunpack(xb, xf);
#pragma unroll
            for (int t = 0; t < NS; ++t) {
                BcVec<mv_w_t> wb;
                wb.raw = wv[t * kv + v];
                float wf[8];
                bc_vunpack(wb, wf);
                float a = acc[t];
#pragma unroll
                for (int e = 0; e < 8; ++e) a = fmaf(wf[e], xf[e], a);
                acc[t] = a;
            }
        }
        __syncwarp();
        if (lane == 0 && j + S < nr) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the slot's reads before the copy's writes
            issue(j + S);
        }
        float v = bc_warp_sum(acc[0]);
        if constexpr (EPI == EPI_GLU) v = mv_silu<float>(v) * bc_warp_sum(acc[1]);
        if (lane == 0) {
            const int n = r0 + j;
            if constexpr (EPI == EPI_RES) v += bc_load(r + n);
            bc_store(y + n, v);
        }
    }
#else
    (void)W; (void)W2; (void)x; (void)y; (void)r; (void)N; (void)K; (void)spw;
#endif
}

#define MVW_BK_ENTRY(code, XT, SUF, EPI)                                                                 \
    extern "C" __global__ void __launch_bounds__(32 * MVW_MAXW, 1)                                      \
    matvec_##code##_bk##SUF(const void* W, const void* W2, const XT* x, XT* y, const XT* r, int N,     \
                            int K, int nb, int vec) {                                                   \
        (void)nb;                                                                                       \
        mv_dense_bulk<XT, EPI>((const u8*)W, (const u8*)W2, x, y, r, N, K, vec);                        \
    }
#if WFMT == 1
MVW_BK_ENTRY(f16, bc_half, , EPI_NONE)
MVW_BK_ENTRY(f16, bc_half, _res, EPI_RES)
MVW_BK_ENTRY(f16, bc_half, _glu, EPI_GLU)
#else
MVW_BK_ENTRY(bf16, bc_bf16, , EPI_NONE)
MVW_BK_ENTRY(bf16, bc_bf16, _res, EPI_RES)
MVW_BK_ENTRY(bf16, bc_bf16, _glu, EPI_GLU)
#endif
#endif  // MVW_BK
#endif  // WFMT == 1 || WFMT == 30
