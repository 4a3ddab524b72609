// matvec.cu -- y[b, n] = sum_k x[b, k] * W[n, k] for a batch of 1..8 rows of x (decode).
//
// One module per weight format (the WFMT define, ggml's type numbers: 0 F32, 1 F16,
// 30 BF16, 2 Q4_0, 3 Q4_1, 8 Q8_0, 12 Q4_K, 14 Q6_K). Entry points
//     matvec_<x>_b<B>[_res|_glu]     x in f32, f16, bf16 (activations; y has x's dtype)
// where B in {1, 2, 4, 8} is the largest batch the entry serves (the batch `nb` is a
// parameter, nb <= B), and the epilogue is: none; `_res` y = x W^T + r; `_glu`
// y = silu(x Wg^T) * (x Wu^T) with Wg = W, Wu = W2 (two weights of one format and shape).
// Every entry has the same parameters:
//     (const void* W, const void* W2, const x_t* x, x_t* y, const x_t* r, int N, int K, int nb, int vec)
// x is [nb, K] and y, r are [nb, N], contiguous. Accumulation is fp32.
//
// Dense weights: a warp per MV_R rows; each lane streams 16-byte vectors of the rows
// (MV_U independent loads per row in flight, no L1 allocation), x comes through L1;
// `vec` = 0 selects an element-wise path for rows that are not 16-byte aligned.
// Quantized weights: a warp per MVQ_R rows (one for `_glu`); the rows' blocks go through shared memory in
// segments (cp.async, double-buffered), each lane decodes 32-weight units in registers
// (quant.cuh) and dots them with x; warp-shuffle reduction; the epilogue in lane 0.
#include "common.cuh"
#include "quant.cuh"

#ifndef WFMT
#define WFMT 1
#endif
#ifndef MV_R
#define MV_R 1          // dense: rows per warp
#endif
#ifndef MV_U
#define MV_U 4          // dense: 16-byte loads in flight per row per lane
#endif
#ifndef MVQ_P8
#define MVQ_P8 0        // quantized: 1 = 8 weights per lane (BcQ::part), 0 = 32 (BcQ::unit)
#endif
#ifndef MVQ_R
#define MVQ_R 1         // quantized: rows per warp (not for _glu entries)
#endif
#define MV_WARPS 4      // warps per block (the Python side launches 32 * MV_WARPS threads)

#define EPI_NONE 0
#define EPI_RES 1
#define EPI_GLU 2

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

template <typename T> BC_DEV float mv_silu(float g) { return g / (1.f + bc_exp(-g)); }

// lane 0 writes y[b, n] for b < nb with the epilogue
template <typename XT, int B, int EPI>
BC_DEV void mv_store(float (&acc)[2][B], XT* __restrict__ y, const XT* __restrict__ r, int N, int n, int nb) {
#pragma unroll
    for (int b = 0; b < B; ++b) {
        float v = bc_warp_sum(acc[0][b]);
        if constexpr (EPI == EPI_GLU) {
            const float u = bc_warp_sum(acc[1][b]);
            v = mv_silu<float>(v) * u;
        }
        if ((threadIdx.x & 31) == 0 && b < nb) {
            const long long o = (long long)b * N + n;
            if constexpr (EPI == EPI_RES) v += bc_load(r + o);
            bc_store(y + o, v);
        }
    }
}

// ------------------------------------------------------------------ dense weights
template <typename WT, typename XT, int B, int EPI>
BC_DEV void mv_dense(const WT* __restrict__ W, const WT* __restrict__ W2, const XT* __restrict__ x,
                     XT* __restrict__ y, const XT* __restrict__ r, int N, int K, int nb, int vec) {
    constexpr int R = MV_R, U = MV_U, NS = EPI == EPI_GLU ? 2 : 1;
    constexpr int VW = 16 / (int)sizeof(WT);
    const int lane = threadIdx.x & 31;
    const int n0 = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * R;
    if (n0 >= N) return;
    const WT* src[2] = {W, W2};
    float acc[R][2][B];
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
            for (int b = 0; b < B; ++b) acc[i][s][b] = 0.f;
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
#pragma unroll
    for (int i = 0; i < R; ++i)
        if (n0 + i < N) mv_store<XT, B, EPI>(acc[i], y, r, N, n0 + i, nb);
}

// ------------------------------------------------------------------ quantized weights
template <int F, typename XT, int B, int EPI>
BC_DEV void mv_quant(const u8* __restrict__ W, const u8* __restrict__ W2, const XT* __restrict__ x,
                     XT* __restrict__ y, const XT* __restrict__ r, int N, int K, int nb) {
    using Q = BcQ<F>;
    constexpr int NS = EPI == EPI_GLU ? 2 : 1;
    constexpr int R = EPI == EPI_GLU ? 1 : MVQ_R;              // rows per warp (x and sum(x) shared)
    constexpr int NT = NS * R;                                  // staged row streams: t = s * R + i
    constexpr int SEGB = Q::QK == 256 ? 8 : 64;                 // blocks per staged segment
    constexpr int SB = BCQ_STAGE_BYTES(SEGB * Q::BYTES);
    __shared__ __align__(16) u8 stage[MV_WARPS][2][NT][SB];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    const int n0 = (blockIdx.x * MV_WARPS + wi) * R;
    if (n0 >= N) return;                                        // whole warps only
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
    float acc[NT][B];
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
    for (int sg = 0; sg < nseg; ++sg) {
        if (sg + 1 < nseg) stage_seg(sg + 1);
        bcq_commit();
        bcq_wait<1>();
        __syncwarp();
        const int nbk = min(SEGB, nblk - sg * SEGB);
#if MVQ_P8
        // 8 weights per lane, lanes covering the blocks contiguously: one 16-byte load of x
        // per lane and batch row, coalesced across the warp
        constexpr int P = Q::QK / 8;
        for (int gp = lane; gp < nbk * P; gp += 32) {
            const int blk = gp / P, pi = gp % P;
            float q[NT][8], a[NT], c[NT];
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                const u8* g = src[t] + (long long)sg * SEGB * Q::BYTES;
                const u8* sb = stage[wi][sg & 1][t] + (reinterpret_cast<u64>(g) & 15) + blk * Q::BYTES;
                Q::part(sb, pi, q[t], a[t], c[t]);
            }
            const long long k = ((long long)sg * SEGB + blk) * Q::QK + pi * 8;
#pragma unroll
            for (int b = 0; b < B; ++b) {
                if (b >= nb) break;
                float xf[8];
                mv_ldx<XT, 8>(x + (long long)b * K + k, xf);
                float sx = 0.f;
#pragma unroll
                for (int i = 0; i < 8; ++i) sx += xf[i];
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    float d = 0.f;
#pragma unroll
                    for (int i = 0; i < 8; ++i) d = fmaf(q[t][i], xf[i], d);
                    acc[t][b] += a[t] * d + c[t] * sx;
                }
            }
        }
#else
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
#endif
        __syncwarp();
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
        if (n0 + i >= N) break;
        float pair[2][B];
#pragma unroll
        for (int b = 0; b < B; ++b) { pair[0][b] = acc[i][b]; pair[1][b] = acc[NT - 1][b]; }
        mv_store<XT, B, EPI>(pair, y, r, N, n0 + i, nb);
    }
}

// ------------------------------------------------------------------ entry points
#if WFMT == 0 || WFMT == 1 || WFMT == 30
#if WFMT == 0
typedef float mv_w_t;
#elif WFMT == 1
typedef bc_half mv_w_t;
#else
typedef bc_bf16 mv_w_t;
#endif
#define MV_BODY(XT, B, EPI) \
    mv_dense<mv_w_t, XT, B, EPI>((const mv_w_t*)W, (const mv_w_t*)W2, x, y, r, N, K, nb, vec)
#else
#define MV_BODY(XT, B, EPI) \
    mv_quant<WFMT, XT, B, EPI>((const u8*)W, (const u8*)W2, x, y, r, N, K, nb)
#endif

#define MV_ENTRY(code, XT, B, SUF, EPI)                                                                  \
    extern "C" __global__ void __launch_bounds__(32 * MV_WARPS)                                         \
    matvec_##code##_b##B##SUF(const void* W, const void* W2, const XT* x, XT* y, const XT* r, int N,   \
                              int K, int nb, int vec) {                                                 \
        (void)vec;                                                                                      \
        MV_BODY(XT, B, EPI);                                                                            \
    }
#define MV_EPIS(code, XT, B) MV_ENTRY(code, XT, B, , EPI_NONE) MV_ENTRY(code, XT, B, _res, EPI_RES) \
    MV_ENTRY(code, XT, B, _glu, EPI_GLU)
#define MV_BATCHES(code, XT) MV_EPIS(code, XT, 1) MV_EPIS(code, XT, 2) MV_EPIS(code, XT, 4) MV_EPIS(code, XT, 8)
BC_FOR_FLOATS(MV_BATCHES)
