// matvec.cu -- y[b, n] = sum_k x[b, k] * W[n, k] for a batch of 1..8 rows of x (decode).
//
// One module per weight format (the WFMT define, ggml's type numbers: 0 F32, 1 F16,
// 30 BF16, 2 Q4_0, 3 Q4_1, 8 Q8_0, 12 Q4_K, 14 Q6_K). Entry points
//     matvec_<x>_b<B>[_res|_glu]     x in f32, f16, bf16 (activations; y has x's dtype)
// where B in {1, 2, 4, 8} is the largest batch the entry serves (the batch `nb` is a
// parameter, nb <= B), quantized modules also have matvec_{f16,bf16}_tc[_res|_glu] (tensor
// cores, any batch 1..8; below), and the epilogue is: none; `_res` y = x W^T + r; `_glu`
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
#pragma unroll
    for (int i = 0; i < R; ++i) {
        if (n0 + i >= N) break;
        float pair[2][B];
#pragma unroll
        for (int b = 0; b < B; ++b) { pair[0][b] = acc[i][b]; pair[1][b] = acc[NT - 1][b]; }
        mv_store<XT, B, EPI>(pair, y, r, N, n0 + i, nb);
    }
}

// ------------------------------------------------------------------ quantized weights on tensor cores
// Entries matvec_{f16,bf16}_tc[_res|_glu] of every quantized module (the host takes them for
// batches of 2..8, where the mma's 8 columns hold the batch rows at no extra cost; any batch
// 1..8 works). A block of MVT_W warps owns one
// tile of 16 rows and splits K between its warps (chunks of 256 weights, or 128 for Q8_0,
// round-robin); each warp stages its chunk of the 16 rows into shared memory (cp.async,
// MVT_S buffers: MVT_S - 1 chunks in flight) and runs mma.sync m16n8k16 with the weights as
// A (16 rows x 16 k) and x as B (16 k x 8 batch rows), fp32 accumulation.
//
// Exactness: the tensor cores only ever see small integers (the quants, minus their offset:
// q, q - 8, q - 32, int8), which fp16 and bf16 hold exactly, times x as given; each group of
// 32 weights gets a fresh accumulator, scaled in fp32 afterwards (Q6_K: each half of 16),
// and the formats with a min term (Q4_K, Q4_1) get sum(x) of the group from one more mma
// with A = ones. So the result is the fp32-accumulated dot product, as mv_quant's.
//
// Fragment layout: thread (g = lane / 4, t = lane % 4) holds, of a group of 32 weights, two
// quads (4 consecutive weights) for rows g and g + 8; mma k index 2t, 2t+1, 2t+8, 2t+9 of
// slice s are weights (quad_s + 0, + 2, + 1, + 3): the "even" pair (bytes 0 and 2 of a
// 32-bit word) and the "odd" pair (bytes 1 and 3) come out of one word by one mask each,
// and x's quad is permuted to match (two byte permutes). Quads: XQ 0: 8t and 8t + 4
// (Q4_K, Q8_0: 8 consecutive bytes a thread); XQ 1: 4t and 16 + 4t (Q4_0, Q4_1: low and
// high nibbles of 4 bytes; Q6_K: the two halves with their own scales).
#ifndef MVT_W
#define MVT_W 4         // tensor-core path: warps per block (one 16-row tile, K split between them)
#endif
#ifndef MVT_S
#define MVT_S 2         // tensor-core path: staging buffers per warp
#endif

#if !(WFMT == 0 || WFMT == 1 || WFMT == 30)
#include "mma.cuh"

// 4-bit or 8-bit integers packed in halves: the exponent bits of 1024 (f16) or 128 (bf16), so
// that (magic | v) is the float 1024 + v; fma(h, 1, -(1024 + off)) is then v - off, exactly
template <int BF> struct MvtK {
    static constexpr u32 MAGIC = BF ? 0x43004300u : 0x64006400u;
    static constexpr u32 ONE = BF ? 0x3F803F80u : 0x3C003C00u;
    BC_DEV static u32 neg(u32 off) { return ((((BF ? 0x4300u : 0x6400u) + off) | 0x8000u) * 0x10001u); }
};
template <int BF> BC_DEV u32 mvt_fma2(u32 a, u32 b, u32 c) {
    u32 d;
    if (BF) asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    else    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
BC_DEV u32 mvt_prmt(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}
// (v of byte 0, v of byte 2) of w (already shifted) minus off, for v = w & vmask per byte pair
template <int BF, u32 OFF> BC_DEV u32 mvt_pair(u32 w, u32 vmask) {
    return mvt_fma2<BF>((w & vmask) | MvtK<BF>::MAGIC, MvtK<BF>::ONE, MvtK<BF>::neg(OFF));
}
// the even and odd pairs of 4 nibbles at bit `sh` of each byte of w, minus OFF
template <int BF, u32 OFF> BC_DEV void mvt_nib4(u32 w, int sh, u32* a) {
    a[0] = mvt_pair<BF, OFF>(w >> sh, 0x000F000Fu);
    a[1] = mvt_pair<BF, OFF>(w >> (sh + 8), 0x000F000Fu);
}

// Per format: QK, BYTES, BPC (blocks a chunk), NG (groups of 32 a chunk), XQ, MINS (sum(x)
// needed), SPLIT (a scale per slice of 16); of group gi of the chunk staged at p:
//   scales(p, gi, s, c): w = s[slice] * q + c (s[0] = s[1] unless SPLIT)
//   quants<BF>(p, gi, t, A): thread t's pairs (A[0], A[1] slice 0 even/odd, A[2], A[3] slice 1)
template <int F> struct MvtQ;
template <> struct MvtQ<BC_Q4_K> {
    static constexpr int QK = 256, BYTES = 144, BPC = 1, NG = 8, XQ = 0, MINS = 1, SPLIT = 0;
    BC_DEV static void scales(const u8* p, int gi, float* s, float& c) {
        const uint4 h = *reinterpret_cast<const uint4*>(p);
        const int j = gi & 3;
        const u32 b0 = (h.y >> (8 * j)) & 0xffu, b1 = (h.z >> (8 * j)) & 0xffu, b2 = (h.w >> (8 * j)) & 0xffu;
        u32 sc, m;
        if (gi < 4) { sc = b0 & 63u; m = b1 & 63u; }
        else        { sc = (b2 & 15u) | ((b0 >> 6) << 4); m = (b2 >> 4) | ((b1 >> 6) << 4); }
        s[0] = s[1] = bc_half_to_float((u16)(h.x & 0xffffu)) * bcq_u2f(sc);
        c = -bc_half_to_float((u16)(h.x >> 16)) * bcq_u2f(m);
    }
    template <int BF> BC_DEV static void quants(const u8* p, int gi, int t, u32* A) {
        const uint2 q = *reinterpret_cast<const uint2*>(p + 16 + 32 * (gi >> 1) + 8 * t);
        const int sh = 4 * (gi & 1);
        mvt_nib4<BF, 0>(q.x, sh, A);
        mvt_nib4<BF, 0>(q.y, sh, A + 2);
    }
};
template <> struct MvtQ<BC_Q6_K> {
    static constexpr int QK = 256, BYTES = 210, BPC = 1, NG = 8, XQ = 1, MINS = 0, SPLIT = 1;
    BC_DEV static void scales(const u8* p, int gi, float* s, float& c) {
        const float d = bc_half_to_float(bcq_u16(p + 208));
        const i8* sc = reinterpret_cast<const i8*>(p + 192 + 8 * (gi >> 2) + 2 * (gi & 3));
        s[0] = d * (float)sc[0];
        s[1] = d * (float)sc[1];
        c = 0.f;
    }
    template <int BF> BC_DEV static void quants(const u8* p, int gi, int t, u32* A) {
        const int hf = gi >> 2, qt = gi & 3;
        const int lsh = 4 * (qt >> 1), hsh = 2 * qt;
#pragma unroll
        for (int sl = 0; sl < 2; ++sl) {
            const u32 ql = bcq_w32_a2(p + 64 * hf + 32 * (qt & 1) + 16 * sl + 4 * t);
            const u32 qh = bcq_w32_a2(p + 128 + 32 * hf + 16 * sl + 4 * t);
#pragma unroll
            for (int o = 0; o < 2; ++o) {
                // 6-bit v: low nibble from ql, bits 4-5 from qh (moved to bit 4 of each half)
                const u32 hi = ((hsh + 8 * o >= 4) ? (qh >> (hsh + 8 * o - 4)) : (qh << (4 - hsh - 8 * o))) & 0x00300030u;
                const u32 v = ((ql >> (lsh + 8 * o)) & 0x000F000Fu) | hi | MvtK<BF>::MAGIC;
                A[2 * sl + o] = mvt_fma2<BF>(v, MvtK<BF>::ONE, MvtK<BF>::neg(32));
            }
        }
    }
};
template <> struct MvtQ<BC_Q8_0> {
    static constexpr int QK = 32, BYTES = 34, BPC = 4, NG = 4, XQ = 0, MINS = 0, SPLIT = 0;
    BC_DEV static void scales(const u8* p, int gi, float* s, float& c) {
        s[0] = s[1] = bc_half_to_float(bcq_u16(p + 34 * gi));
        c = 0.f;
    }
    template <int BF> BC_DEV static void quants(const u8* p, int gi, int t, u32* A) {
        u32 w[2];
        bcq_words_a2<2>(p + 34 * gi + 2 + 8 * t, w);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const u32 v = w[i] ^ 0x80808080u;           // int8 + 128
            if (BF) {
                // bf16 holds 0..255 + 128 inexactly: through fp32 (exact), then packed
                float f[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) f[e] = __uint_as_float(0x4B000000u | ((v >> (8 * e)) & 0xffu)) - 8388736.f;
                A[2 * i] = bc_pack_bf162(f[0], f[2]);
                A[2 * i + 1] = bc_pack_bf162(f[1], f[3]);
            } else {
                A[2 * i] = mvt_fma2<0>(mvt_prmt(v, 0x64646464u, 0x4240u), MvtK<0>::ONE, MvtK<0>::neg(128));
                A[2 * i + 1] = mvt_fma2<0>(mvt_prmt(v, 0x64646464u, 0x4341u), MvtK<0>::ONE, MvtK<0>::neg(128));
            }
        }
    }
};
template <> struct MvtQ<BC_Q4_0> {
    static constexpr int QK = 32, BYTES = 18, BPC = 8, NG = 8, XQ = 1, MINS = 0, SPLIT = 0;
    BC_DEV static void scales(const u8* p, int gi, float* s, float& c) {
        s[0] = s[1] = bc_half_to_float(bcq_u16(p + 18 * gi));
        c = 0.f;
    }
    template <int BF> BC_DEV static void quants(const u8* p, int gi, int t, u32* A) {
        const u32 w = bcq_w32_a2(p + 18 * gi + 2 + 4 * t);
        mvt_nib4<BF, 8>(w, 0, A);
        mvt_nib4<BF, 8>(w, 4, A + 2);
    }
};
template <> struct MvtQ<BC_Q4_1> {
    static constexpr int QK = 32, BYTES = 20, BPC = 8, NG = 8, XQ = 1, MINS = 1, SPLIT = 0;
    BC_DEV static void scales(const u8* p, int gi, float* s, float& c) {
        const u32 dm = *reinterpret_cast<const u32*>(p + 20 * gi);
        s[0] = s[1] = bc_half_to_float((u16)(dm & 0xffffu));
        c = bc_half_to_float((u16)(dm >> 16));
    }
    template <int BF> BC_DEV static void quants(const u8* p, int gi, int t, u32* A) {
        const u32 w = *reinterpret_cast<const u32*>(p + 20 * gi + 4 + 4 * t);
        mvt_nib4<BF, 0>(w, 0, A);
        mvt_nib4<BF, 0>(w, 4, A + 2);
    }
};

template <int F> struct MvtStage {
    static constexpr int CB = MvtQ<F>::BPC * MvtQ<F>::BYTES;          // bytes of a full chunk of one row
    static constexpr int NCH = (CB + 30) / 16;                         // 16-byte pieces a row may need
    static constexpr int RS = 16 * (NCH | 1);                          // row stride: an odd number of pieces
    static constexpr int SLOTS = (16 * NCH + 31) / 32;                 // pieces a lane copies
};
// MVT_S, or fewer (down to 1: no prefetch) where MVT_W warps' buffers would pass 48 KB
template <int CHB> struct MvtDepth {
    static constexpr int L = 48 * 1024 / (MVT_W * CHB);
    static constexpr int V = L >= MVT_S ? MVT_S : L >= 1 ? L : 1;
};
template <typename T> struct MvtBF { static constexpr int V = 0; };
template <> struct MvtBF<bc_bf16> { static constexpr int V = 1; };

template <int F, typename XT, int EPI>
BC_DEV void mv_tc(const u8* __restrict__ W, const u8* __restrict__ W2, const XT* __restrict__ x,
                  XT* __restrict__ y, const XT* __restrict__ r, int N, int K, int nb) {
    using Q = MvtQ<F>;
    using S = MvtStage<F>;
    constexpr int BF = MvtBF<XT>::V;
    constexpr int NS = EPI == EPI_GLU ? 2 : 1;
    // chunks resident a warp (gate/up: a chunk is a buffer per stream)
    constexpr int DEPTH = MvtDepth<NS * 16 * S::RS>::V;
    __shared__ __align__(16) u8 smem[MVT_W][DEPTH * NS][16][S::RS];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16;
    const int nblk = K / Q::QK;
    const long long rb = (long long)nblk * Q::BYTES;
    const int nchunk = (nblk + Q::BPC - 1) / Q::BPC;
    // this lane's staging slots: (row, 16-byte piece) pairs, for each weight stream
    const u8* gend[NS];
    const u8* rowp[NS][S::SLOTS];
    int soff[S::SLOTS], piece[S::SLOTS];
#pragma unroll
    for (int k = 0; k < S::SLOTS; ++k) {
        const int i = lane + 32 * k;
        const int rr = i / S::NCH;
        piece[k] = i < 16 * S::NCH ? i % S::NCH : S::NCH;             // NCH: no piece
        soff[k] = rr * S::RS + 16 * piece[k];
#pragma unroll
        for (int s = 0; s < NS; ++s)
            rowp[s][k] = (s ? W2 : W) + (long long)min(n0 + min(rr, 15), N - 1) * rb;
    }
    u64 rg[NS], rh[NS];                                                // rows g and g + 8
#pragma unroll
    for (int s = 0; s < NS; ++s) {
        gend[s] = (s ? W2 : W) + (long long)N * rb;
        rg[s] = reinterpret_cast<u64>((s ? W2 : W) + (long long)min(n0 + g, N - 1) * rb);
        rh[s] = reinterpret_cast<u64>((s ? W2 : W) + (long long)min(n0 + g + 8, N - 1) * rb);
    }
    auto stage = [&](int c, int buf, int s) {
        const long long cb = (long long)c * S::CB;
        const int len = (int)min((long long)S::CB, rb - cb);
#pragma unroll
        for (int k = 0; k < S::SLOTS; ++k) {
            const u8* gr = rowp[s][k] + cb;
            const u8* src = reinterpret_cast<const u8*>(reinterpret_cast<u64>(gr) & ~(u64)15) + 16 * piece[k];
            if (piece[k] < S::NCH && src < gr + len) {
                u8* dst = &smem[wi][buf][0][0] + soff[k];
                if (src + 16 <= gend[s]) {
                    bcq_cp16(dst, src);
                } else {
                    for (int b = 0; src + b < gend[s]; b += 2)
                        *reinterpret_cast<u16*>(dst + b) = *reinterpret_cast<const u16*>(src + b);
                }
            }
        }
    };
    float acc[NS][4];
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[s][i] = 0.f;
    const XT* xg = x + (long long)min(g, nb - 1) * K;
    const bool xon = g < nb;
    auto stage_it = [&](int it) {
        const int c = wi + it * MVT_W;
        if (c < nchunk) {
#pragma unroll
            for (int s = 0; s < NS; ++s) stage(c, (it % DEPTH) * NS + s, s);
        }
        bcq_commit();
    };
    const int nit = (nchunk - wi + MVT_W - 1) / MVT_W;
#pragma unroll
    for (int it = 0; it < DEPTH - 1; ++it) stage_it(it);
    for (int it = 0; it < nit; ++it) {
        stage_it(it + DEPTH - 1);
        bcq_wait<DEPTH - 1>();
        __syncwarp();
        const int c = wi + it * MVT_W;
        const int ng = min(Q::NG, (nblk - c * Q::BPC) * (Q::NG / Q::BPC));
        const XT* xc = xg + (long long)c * Q::BPC * Q::QK;
        // the staged rows g and g + 8 (a staged row keeps its global address modulo 16)
        const u8* pr[NS][2];
        const u64 cbo = (u64)c * S::CB;
#pragma unroll
        for (int s = 0; s < NS; ++s) {
            const u8* base = &smem[wi][(it % DEPTH) * NS + s][0][0];
            pr[s][0] = base + g * S::RS + ((rg[s] + cbo) & 15);
            pr[s][1] = base + (g + 8) * S::RS + ((rh[s] + cbo) & 15);
        }
        // scales: the 4 threads of a row decode groups t and t + 4 (SL slots); each group's
        // come from lane (g, gi % 4) below
        constexpr int SL = (Q::NG + 3) / 4;
        float sv[NS][2][SL][3];
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int k = 0; k < SL; ++k) {
                    const int gi = t + 4 * k;
                    if (gi < ng) Q::scales(pr[s][h], gi, sv[s][h][k], sv[s][h][k][2]);
                    else sv[s][h][k][0] = sv[s][h][k][1] = sv[s][h][k][2] = 0.f;
                }
#pragma unroll
        for (int gi = 0; gi < Q::NG; ++gi) {
            if (gi >= ng) break;
            // x: this thread's two quads of batch row g, permuted to the even/odd pairs
            u32 B[2][2];
            {
                u32 X[4] = {0u, 0u, 0u, 0u};
                if (xon) {
                    if (Q::XQ == 0) {
                        const uint4 v = *reinterpret_cast<const uint4*>(xc + 32 * gi + 8 * t);
                        X[0] = v.x; X[1] = v.y; X[2] = v.z; X[3] = v.w;
                    } else {
                        const uint2 a = *reinterpret_cast<const uint2*>(xc + 32 * gi + 4 * t);
                        const uint2 b = *reinterpret_cast<const uint2*>(xc + 32 * gi + 16 + 4 * t);
                        X[0] = a.x; X[1] = a.y; X[2] = b.x; X[3] = b.y;
                    }
                }
#pragma unroll
                for (int sl = 0; sl < 2; ++sl) {
                    B[sl][0] = mvt_prmt(X[2 * sl], X[2 * sl + 1], 0x5410u);
                    B[sl][1] = mvt_prmt(X[2 * sl], X[2 * sl + 1], 0x7632u);
                }
            }
            float Dx[4] = {0.f, 0.f, 0.f, 0.f};
            if (Q::MINS) {
                const u32 o = MvtK<BF>::ONE;
                bc_mma16816<BF>(Dx, o, o, o, o, B[0][0], B[0][1]);
                bc_mma16816<BF>(Dx, o, o, o, o, B[1][0], B[1][1]);
            }
            const int src = (lane & ~3) | (gi & 3);
#pragma unroll
            for (int s = 0; s < NS; ++s) {
                u32 Ag[4], Ah[4];
                Q::template quants<BF>(pr[s][0], gi, t, Ag);
                Q::template quants<BF>(pr[s][1], gi, t, Ah);
                float sc[2][3];
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int e = 0; e < 3; ++e)
                        if (e < 1 + Q::SPLIT || (e == 2 && Q::MINS))
                            sc[h][e] = __shfl_sync(BC_FULL_MASK, sv[s][h][gi >> 2][e], src);
                if (Q::SPLIT) {
                    float D0[4] = {0.f, 0.f, 0.f, 0.f}, D1[4] = {0.f, 0.f, 0.f, 0.f};
                    bc_mma16816<BF>(D0, Ag[0], Ah[0], Ag[1], Ah[1], B[0][0], B[0][1]);
                    bc_mma16816<BF>(D1, Ag[2], Ah[2], Ag[3], Ah[3], B[1][0], B[1][1]);
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        acc[s][i] += sc[i >> 1][0] * D0[i] + sc[i >> 1][1] * D1[i];
                } else {
                    float D[4] = {0.f, 0.f, 0.f, 0.f};
                    bc_mma16816<BF>(D, Ag[0], Ah[0], Ag[1], Ah[1], B[0][0], B[0][1]);
                    bc_mma16816<BF>(D, Ag[2], Ah[2], Ag[3], Ah[3], B[1][0], B[1][1]);
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        acc[s][i] = fmaf(sc[i >> 1][0], D[i], acc[s][i]);
                        if (Q::MINS) acc[s][i] = fmaf(sc[i >> 1][2], Dx[i], acc[s][i]);
                    }
                }
            }
        }
        __syncwarp();
    }
    // the warps' partial sums through shared memory (the staging buffers, now idle)
    bcq_wait<0>();
    __syncthreads();
    float* red = reinterpret_cast<float*>(&smem[0][0][0][0]);
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[((wi * NS + s) * 4 + i) * 32 + lane] = acc[s][i];
    __syncthreads();
    if (wi) return;
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float v = 0.f;
#pragma unroll
            for (int w = 0; w < MVT_W; ++w) v += red[((w * NS + s) * 4 + i) * 32 + lane];
            acc[s][i] = v;
        }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int n = n0 + g + 8 * (i >> 1), b = 2 * t + (i & 1);
        if (n < N && b < nb) {
            float v = acc[0][i];
            if constexpr (EPI == EPI_GLU) v = mv_silu<float>(v) * acc[NS - 1][i];
            const long long o = (long long)b * N + n;
            if constexpr (EPI == EPI_RES) v += bc_load(r + o);
            bc_store(y + o, v);
        }
    }
}
#endif  // quantized WFMT

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

#if !(WFMT == 0 || WFMT == 1 || WFMT == 30)
#define MVT_ENTRY(code, XT, SUF, EPI)                                                                    \
    extern "C" __global__ void __launch_bounds__(32 * MVT_W)                                            \
    matvec_##code##_tc##SUF(const void* W, const void* W2, const XT* x, XT* y, const XT* r, int N,     \
                            int K, int nb, int vec) {                                                   \
        (void)vec;                                                                                      \
        mv_tc<WFMT, XT, EPI>((const u8*)W, (const u8*)W2, x, y, r, N, K, nb);                           \
    }
#define MVT_EPIS(code, XT) MVT_ENTRY(code, XT, , EPI_NONE) MVT_ENTRY(code, XT, _res, EPI_RES) \
    MVT_ENTRY(code, XT, _glu, EPI_GLU)
MVT_EPIS(f16, bc_half)
MVT_EPIS(bf16, bc_bf16)
#endif
