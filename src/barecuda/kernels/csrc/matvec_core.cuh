// matvec_core.cuh -- the CUDA-core row loops of the decode matvecs, written once for
// matvec.cu (batch 1..8, its epilogues in mv_store) and fused.cu (batch 1, the decode
// loop's epilogues in fm_store). Each loop leaves a warp's per-lane partial dot products in
// `acc`; the caller reduces them over the warp and applies its epilogue.
//
// Dense weights (mvc_dense): each lane streams 16-byte vectors of the warp's R rows (U
// independent loads per row in flight, no L1 allocation), x comes through L1; `vec` = 0 is
// the element-wise path for rows that are not 16-byte aligned.
// Quantized weights (mvc_quant): the rows' blocks go through shared memory in segments
// (cp.async, double-buffered; quant.cuh), each lane decodes 32-weight units in registers
// and dots them with x (w = a q + c per half-unit: a sum(q x) + c sum(x)).
#pragma once
#include "common.cuh"
#include "quant.cuh"

// n elements of x (float, half or bf16) at p, as floats; p aligned to n * sizeof(T)
template <typename T, int NEL> BC_DEV void mv_ldx(const T* __restrict__ p, float* f) {
    constexpr int BYTES = NEL * (int)sizeof(T);
    if constexpr (BYTES >= 16) {
#pragma unroll
        for (int i = 0; i < BYTES / 16; ++i) {
            BcVec<T> v = bc_vload(p + i * BcVec<T>::N);
            bc_vunpack(v, f + i * BcVec<T>::N);
        }
    } else if constexpr (BYTES == 8) {
        const uint2 w = *reinterpret_cast<const uint2*>(p);
        if constexpr (sizeof(T) == 4) {
            f[0] = __uint_as_float(w.x); f[1] = __uint_as_float(w.y);
        } else {
            BcVec<T> v; v.raw = make_uint4(w.x, w.y, 0u, 0u);
#pragma unroll
            for (int i = 0; i < 4; ++i) f[i] = bc_vget(v, i);
        }
    } else {
#pragma unroll
        for (int i = 0; i < NEL; ++i) f[i] = bc_load(p + i);
    }
}

// acc[i][s][b] += (row n0 + i of weight stream s) . (x row b), per lane; NS streams (src[0],
// src[1]: gate and up), R rows (clamped to N - 1), batch nb <= B
template <typename WT, typename XT, int R, int NS, int U, int B>
BC_DEV void mvc_dense(const WT* const (&src)[2], const XT* __restrict__ x, int n0, int N, int K, int nb, int vec,
                      float (&acc)[R][2][B]) {
    constexpr int VW = 16 / (int)sizeof(WT);
    const int lane = threadIdx.x & 31;
    if (vec) {
        const int nv = K / VW;
        for (int v0 = lane; v0 < nv; v0 += 32 * U) {
            BcVec<WT> w[U][NS][R];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int v = v0 + 32 * u;
#pragma unroll
                for (int s = 0; s < NS; ++s)
#pragma unroll
                    for (int i = 0; i < R; ++i) {
                        const int n = min(n0 + i, N - 1);
                        if (v < nv) w[u][s][i] = bc_vload_stream(src[s] + (long long)n * K + (long long)v * VW);
                    }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int v = v0 + 32 * u;
                if (v >= nv) break;
#pragma unroll
                for (int b = 0; b < B; ++b) {
                    if (b >= nb) break;
                    float xf[VW];
                    mv_ldx<XT, VW>(x + (long long)b * K + (long long)v * VW, xf);
#pragma unroll
                    for (int s = 0; s < NS; ++s)
#pragma unroll
                        for (int i = 0; i < R; ++i) {
                            float wf[VW];
                            bc_vunpack(w[u][s][i], wf);
                            float t = acc[i][s][b];
#pragma unroll
                            for (int e = 0; e < VW; ++e) t = fmaf(wf[e], xf[e], t);
                            acc[i][s][b] = t;
                        }
                }
            }
        }
    } else {
        for (int k = lane; k < K; k += 32) {
#pragma unroll
            for (int b = 0; b < B; ++b) {
                if (b >= nb) break;
                const float xv = bc_load(x + (long long)b * K + k);
#pragma unroll
                for (int s = 0; s < NS; ++s)
#pragma unroll
                    for (int i = 0; i < R; ++i) {
                        const int n = min(n0 + i, N - 1);
                        acc[i][s][b] = fmaf(bc_load(src[s] + (long long)n * K + k), xv, acc[i][s][b]);
                    }
            }
        }
    }
}

// acc[t][b] = (row stream t) . (x row b) per lane, t = s * R + i (row n0 + i of weight s),
// batch nb <= B. WARPS: warps a block (each has its own staging buffers). `started()` runs
// once the first segment's copies are issued, before anything reads x (fused.cu waits
// there for the previous kernel of a programmatic launch).
template <int F, typename XT, int R, int NS, int B, int WARPS, typename Started>
BC_DEV void mvc_quant(const u8* __restrict__ W, const u8* __restrict__ W2, const XT* __restrict__ x, int n0, int N,
                      int K, int nb, float (&acc)[NS * R][B], Started started) {
    using Q = BcQ<F>;
    constexpr int NT = NS * R;
    constexpr int SEGB = Q::QK == 256 ? 8 : 64;                 // blocks per staged segment
    constexpr int SB = BCQ_STAGE_BYTES(SEGB * Q::BYTES);
    __shared__ __align__(16) u8 stage[WARPS][2][NT][SB];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    const int nblk = K / Q::QK;
    const long long rb = (long long)nblk * Q::BYTES;
    const u8* src[NT];
    const u8* end[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const u8* base = t < R ? W : W2;
        src[t] = base + min(n0 + t % R, N - 1) * rb;
        end[t] = base + N * rb;
    }
    const int nseg = (nblk + SEGB - 1) / SEGB;
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int b = 0; b < B; ++b) acc[t][b] = 0.f;
    auto stage_seg = [&](int sg) {
        const int nb_ = min(SEGB, nblk - sg * SEGB);
#pragma unroll
        for (int t = 0; t < NT; ++t)
            bcq_stage(stage[wi][sg & 1][t], src[t] + (long long)sg * SEGB * Q::BYTES, nb_ * Q::BYTES, end[t], lane);
    };
    stage_seg(0);
    bcq_commit();
    started();
    for (int sg = 0; sg < nseg; ++sg) {
        if (sg + 1 < nseg) stage_seg(sg + 1);
        bcq_commit();
        bcq_wait<1>();
        __syncwarp();
        const int nbk = min(SEGB, nblk - sg * SEGB);
        for (int u = lane; u < nbk * Q::UNITS; u += 32) {
            const int blk = u / Q::UNITS, ui = u % Q::UNITS;
            float q[NT][32], a[NT][2], c[NT][2];
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                const u8* g = src[t] + (long long)sg * SEGB * Q::BYTES;
                const u8* sb = stage[wi][sg & 1][t] + (reinterpret_cast<u64>(g) & 15) + blk * Q::BYTES;
                Q::unit(sb, ui, q[t], a[t], c[t]);
            }
            const long long k = ((long long)sg * SEGB + blk) * Q::QK + ui * 32;
#pragma unroll
            for (int b = 0; b < B; ++b) {
                if (b >= nb) break;
                float xf[32];
                mv_ldx<XT, 32>(x + (long long)b * K + k, xf);
                float sx0 = 0.f, sx1 = 0.f;
#pragma unroll
                for (int i = 0; i < 16; ++i) { sx0 += xf[i]; sx1 += xf[16 + i]; }
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    float d0 = 0.f, d1 = 0.f;
#pragma unroll
                    for (int i = 0; i < 16; ++i) { d0 = fmaf(q[t][i], xf[i], d0); d1 = fmaf(q[t][16 + i], xf[16 + i], d1); }
                    acc[t][b] += a[t][0] * d0 + c[t][0] * sx0 + a[t][1] * d1 + c[t][1] * sx1;
                }
            }
        }
        __syncwarp();
    }
}
