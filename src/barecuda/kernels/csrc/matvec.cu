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
// Dense weights: matvec_dense.cuh (the template, its tuning defines and the dense modules'
// entry points; included below for WFMT 0, 1, 30).
// Quantized weights: a warp per MVQ_R rows (one for `_glu`); the rows' blocks go through shared memory in
// segments (cp.async, double-buffered), each lane decodes 32-weight units in registers
// (quant.cuh) and dots them with x; warp-shuffle reduction; the epilogue in lane 0.
#ifndef WFMT
#define WFMT 1
#endif
#include "common.cuh"
#include "quant.cuh"
#include "matvec_core.cuh"

#ifndef MVQ_R
#define MVQ_R 1         // quantized: rows per warp (not for _glu entries)
#endif
#define MV_WARPS 4      // warps per block (the Python side launches 32 * MV_WARPS threads)

#define EPI_NONE 0
#define EPI_RES 1
#define EPI_GLU 2

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

// the 16-row tile's stores after mma m16n8 accumulation (mv_tc, mv_dense_tc): thread (g, t) holds
// rows g, g + 8 of batch rows 2t, 2t + 1 in acc[s][0..3] (s: the weight; gate, up for EPI_GLU)
template <typename XT, int EPI, int NS>
BC_DEV void mvt_store(const float (&acc)[NS][4], XT* __restrict__ y, const XT* __restrict__ r, int N, int n0,
                      int g, int t, int nb) {
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

// ------------------------------------------------------------------ dense weights
// (the template, its tuning defines MV_R / MV_U and the entry points: matvec_dense.cuh)
#if WFMT == 0 || WFMT == 1 || WFMT == 30
#include "matvec_dense.cuh"
#endif

// ------------------------------------------------------------------ quantized weights
template <int F, typename XT, int B, int EPI>
BC_DEV void mv_quant(const u8* __restrict__ W, const u8* __restrict__ W2, const XT* __restrict__ x,
                     XT* __restrict__ y, const XT* __restrict__ r, int N, int K, int nb) {
    constexpr int NS = EPI == EPI_GLU ? 2 : 1;
    constexpr int R = EPI == EPI_GLU ? 1 : MVQ_R;              // rows per warp (x and sum(x) shared)
    constexpr int NT = NS * R;                                  // row streams: t = s * R + i
    const int n0 = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * R;
    if (n0 >= N) return;                                        // whole warps only
    float acc[NT][B];
    mvc_quant<F, XT, R, NS, B, MV_WARPS>(W, W2, x, n0, N, K, nb, acc, [] {});
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

// (MvtK, the nibble helpers, MvtQ<BC_Q4_K>, MvtBF, mvt_xfrag/mask/sumx/dot: matvec_core.cuh)
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
// the 32-weight formats with one scale d a block (w = d * q), BPC blocks a chunk
template <int BYTES_, int BPC_, int XQ_> struct MvtScaleD {
    static constexpr int QK = 32, BYTES = BYTES_, BPC = BPC_, NG = BPC_, XQ = XQ_, MINS = 0, SPLIT = 0;
    BC_DEV static void scales(const u8* p, int gi, float* s, float& c) {
        s[0] = s[1] = bc_half_to_float(bcq_u16(p + BYTES * gi));
        c = 0.f;
    }
};
template <> struct MvtQ<BC_Q8_0> : MvtScaleD<34, 4, 0> {
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
template <> struct MvtQ<BC_Q4_0> : MvtScaleD<18, 8, 1> {
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

// The staging buffers of a block (declared once by the entry: its batch-1 and batch
// instantiations of mv_tc share them).
template <int F, int EPI> struct MvtGeo {
    using S = MvtStage<F>;
    static constexpr int NS = EPI == EPI_GLU ? 2 : 1;
    static constexpr int DEPTH = MvtDepth<NS * 16 * S::RS>::V;   // chunks resident a warp
    static constexpr int BUF = 16 * S::RS;                        // one buffer: 16 staged rows
    static constexpr int BYTES = MVT_W * DEPTH * NS * BUF;
};


// COL = 0: the batch rows are the mma's 8 columns (B column g = x row g), each group's
// products are scaled as they come. COL = 1 (batch 1): column n holds x of group n of the
// chunk and zeros elsewhere, so one accumulator fragment per chunk collects every group's
// sum(q x) in its own column -- thread (g, t) ends the chunk with groups 2t and 2t + 1 of
// rows g and g + 8, scales exactly those (no shuffles), and x is loaded once a chunk.
template <int F, typename XT, int EPI, int COL>
BC_DEV void mv_tc(u8* __restrict__ smem, const u8* __restrict__ W, const u8* __restrict__ W2,
                  const XT* __restrict__ x, XT* __restrict__ y, const XT* __restrict__ r, int N, int K, int nb) {
    using Q = MvtQ<F>;
    using S = MvtStage<F>;
    using G = MvtGeo<F, EPI>;
    constexpr int BF = MvtBF<XT>::V;
    constexpr int NS = G::NS, DEPTH = G::DEPTH;
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    auto bufp = [&](int buf) { return smem + (wi * DEPTH * NS + buf) * G::BUF; };
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
                u8* dst = bufp(buf) + soff[k];
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
    const XT* xg = x + (long long)(COL ? 0 : min(g, nb - 1)) * K;
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
            const u8* base = bufp((it % DEPTH) * NS + s);
            pr[s][0] = base + g * S::RS + ((rg[s] + cbo) & 15);
            pr[s][1] = base + (g + 8) * S::RS + ((rh[s] + cbo) & 15);
        }
        // scales: COL: the groups 2t, 2t + 1 of this thread's columns; else the 4 threads of
        // a row decode groups t and t + 4 (SL slots) and each group's come from lane (g, gi % 4)
        constexpr int SL = COL ? 2 : (Q::NG + 3) / 4;
        float sv[NS][2][SL][3];
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int k = 0; k < SL; ++k) {
                    const int gi = COL ? 2 * t + k : t + 4 * k;
                    if (gi < ng) Q::scales(pr[s][h], gi, sv[s][h][k], sv[s][h][k][2]);
                    else sv[s][h][k][0] = sv[s][h][k][1] = sv[s][h][k][2] = 0.f;
                }
        if constexpr (COL) {
            u32 B[2][2];
            mvt_xfrag<Q::XQ>(xc + 32 * g, t, g < ng, B);
            float D[NS][2][4], Dx[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int i = 0; i < 4; ++i) D[s][0][i] = D[s][1][i] = 0.f;
#pragma unroll
            for (int gi = 0; gi < Q::NG; ++gi) {
                if (gi >= ng) break;
                u32 b[2][2];
                mvt_mask(B, g == gi, b);
                if (Q::MINS) mvt_sumx<BF>(Dx, b);
#pragma unroll
                for (int s = 0; s < NS; ++s) {
                    u32 Ag[4], Ah[4];
                    Q::template quants<BF>(pr[s][0], gi, t, Ag);
                    Q::template quants<BF>(pr[s][1], gi, t, Ah);
                    mvt_dot<BF>(D[s][0], D[s][Q::SPLIT], Ag, Ah, b);
                }
            }
            // D[.][.][i]: row g + 8 (i >> 1), group 2t + (i & 1)
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float* v = sv[s][i >> 1][i & 1];
                    float a = fmaf(v[0], D[s][0][i], acc[s][i]);
                    if (Q::SPLIT) a = fmaf(v[1], D[s][1][i], a);
                    if (Q::MINS) a = fmaf(v[2], Dx[i], a);
                    acc[s][i] = a;
                }
        } else {
#pragma unroll
            for (int gi = 0; gi < Q::NG; ++gi) {
                if (gi >= ng) break;
                // x: this thread's two quads of batch row g, permuted to the even/odd pairs
                u32 B[2][2];
                mvt_xfrag<Q::XQ>(xc + 32 * gi, t, xon, B);
                float Dx[4] = {0.f, 0.f, 0.f, 0.f};
                if (Q::MINS) mvt_sumx<BF>(Dx, B);
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
                    float D0[4] = {0.f, 0.f, 0.f, 0.f}, D1[4] = {0.f, 0.f, 0.f, 0.f};
                    mvt_dot<BF>(D0, Q::SPLIT ? D1 : D0, Ag, Ah, B);
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        float a = fmaf(sc[i >> 1][0], D0[i], acc[s][i]);
                        if (Q::SPLIT) a = fmaf(sc[i >> 1][1], D1[i], a);
                        if (Q::MINS) a = fmaf(sc[i >> 1][2], Dx[i], a);
                        acc[s][i] = a;
                    }
                }
            }
        }
        __syncwarp();
    }
    if constexpr (COL) {    // a row's groups are spread over its 4 threads' 8 columns
#pragma unroll
        for (int s = 0; s < NS; ++s) {
            float r0 = acc[s][0] + acc[s][1], r1 = acc[s][2] + acc[s][3];
            r0 += __shfl_xor_sync(BC_FULL_MASK, r0, 1);
            r1 += __shfl_xor_sync(BC_FULL_MASK, r1, 1);
            r0 += __shfl_xor_sync(BC_FULL_MASK, r0, 2);
            r1 += __shfl_xor_sync(BC_FULL_MASK, r1, 2);
            acc[s][0] = r0; acc[s][2] = r1; acc[s][1] = acc[s][3] = 0.f;
        }
    }
    // the warps' partial sums through shared memory (the staging buffers, now idle)
    bcq_wait<0>();
    __syncthreads();
    float* red = reinterpret_cast<float*>(smem);
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
    mvt_store<XT, EPI, NS>(acc, y, r, N, n0, g, t, nb);
}

// ONLY_BATCH: the batch layout alone (the _tcb entries: the column layout's registers
// raise the whole kernel's count, 63 -> 72 a thread for Q4_K f16)
template <int F, typename XT, int EPI, int ONLY_BATCH>
BC_DEV void mv_tc_entry(const u8* W, const u8* W2, const XT* x, XT* y, const XT* r, int N, int K, int nb) {
    __shared__ __align__(16) u8 smem[MvtGeo<F, EPI>::BYTES];
    if (!ONLY_BATCH && nb == 1) mv_tc<F, XT, EPI, 1>(smem, W, W2, x, y, r, N, K, nb);
    else                        mv_tc<F, XT, EPI, 0>(smem, W, W2, x, y, r, N, K, nb);
}

// ------------------------------------------------------------------ Q4_K, batch 1: straight into registers
// Entries matvec_{f16,bf16}_tcd[_res|_glu] of the Q4_K module (batch 1 only). As mv_tc's
// column layout (COL = 1), but each thread loads its own weights from global memory into
// registers (no staging, no shared memory, so no 48 KB bound on warps or depth): of rows g
// and g + 8 of the block's 16-row tile, a super-block's 16-byte head (d, dmin, scales; the
// 4 threads of a row load the same one) and bytes 8t..8t+7 of each of its four 32-byte runs
// of quants, MVD_PF super-blocks ahead. The block's warps (blockDim.x / 32, at most
// MVD_MAXW: a run-time choice of the host) take the row's super-blocks round-robin.
// The Q6_K module has the same entries (mvc_tcd6: 13 aligned 32-bit words a row and
// super-block, see matvec_core.cuh; the host takes them only when K % 512 == 0).
#if WFMT == BC_Q4_K || WFMT == BC_Q6_K
#ifndef MVD_PF
#define MVD_PF 2        // super-blocks in flight a warp (registers; the host picks 1 for Q4_K rows shorter than 8192)
#endif
#define MVD_MAXW 16     // most warps a block
#ifndef MVD_MINB
#define MVD_MINB 1      // > 1: __launch_bounds__' blocks of MVD_MAXW warps a multiprocessor (a register cap; sweep)
#endif
#if MVD_MINB > 1
#define MVD_LB(T) __launch_bounds__(T, MVD_MINB)
#else
#define MVD_LB(T) __launch_bounds__(T)
#endif
#ifndef MVD_V
#define MVD_V 2         // mvc_tcd's variant (matvec_core.cuh; 1: the first, kept for the sweep)
#endif

template <typename XT, int EPI>
BC_DEV void mv_tcd(const u8* __restrict__ W, const u8* __restrict__ W2, const XT* __restrict__ x,
                   XT* __restrict__ y, const XT* __restrict__ r, int N, int K) {
    constexpr int NS = EPI == EPI_GLU ? 2 : 1;
    __shared__ float red[MVD_MAXW * NS * 2 * 32];
    const int n0 = blockIdx.x * 16, lane = threadIdx.x & 31;
    float v[NS][2];
    mvc_tcdf<WFMT, XT, NS, MVD_PF, MVD_V>(W, W2, x, n0, N, K, threadIdx.x >> 5, blockDim.x >> 5, v, [] {});
    if (!mvc_tcd_sum<NS>(red, v) || (lane & 3)) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int n = n0 + (lane >> 2) + 8 * h;
        if (n < N) {
            float o = v[0][h];
            if constexpr (EPI == EPI_GLU) o = mv_silu<float>(o) * v[NS - 1][h];
            if constexpr (EPI == EPI_RES) o += bc_load(r + n);
            bc_store(y + n, o);
        }
    }
}
#endif  // WFMT == BC_Q4_K || WFMT == BC_Q6_K
#endif  // quantized WFMT

// ------------------------------------------------------------------ entry points
#if !(WFMT == 0 || WFMT == 1 || WFMT == 30)
#define MV_BODY(XT, B, EPI) \
    mv_quant<WFMT, XT, B, EPI>((const u8*)W, (const u8*)W2, x, y, r, N, K, nb)
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
// matvec_<x>_tc*: any batch (batch 1: the column layout); matvec_<x>_tcb*: the batch layout only
#define MVT_ENTRY(code, XT, TC, SUF, EPI, OB)                                                            \
    extern "C" __global__ void __launch_bounds__(32 * MVT_W)                                            \
    matvec_##code##_##TC##SUF(const void* W, const void* W2, const XT* x, XT* y, const XT* r, int N,   \
                              int K, int nb, int vec) {                                                 \
        (void)vec;                                                                                      \
        mv_tc_entry<WFMT, XT, EPI, OB>((const u8*)W, (const u8*)W2, x, y, r, N, K, nb);                 \
    }
#define MVT_EPIS2(code, XT, TC, OB) MVT_ENTRY(code, XT, TC, , EPI_NONE, OB) \
    MVT_ENTRY(code, XT, TC, _res, EPI_RES, OB) MVT_ENTRY(code, XT, TC, _glu, EPI_GLU, OB)
#define MVT_EPIS(code, XT) MVT_EPIS2(code, XT, tc, 0) MVT_EPIS2(code, XT, tcb, 1)
MVT_EPIS(f16, bc_half)
MVT_EPIS(bf16, bc_bf16)
#endif
#if WFMT == BC_Q4_K || WFMT == BC_Q6_K
// (gate/up: at most MVD_MAXW / 2 warps, which leaves the registers of both streams' buffers)
#define MVD_ENTRY(code, XT, SUF, EPI)                                                                    \
    extern "C" __global__ void MVD_LB(EPI == EPI_GLU ? 16 * MVD_MAXW : 32 * MVD_MAXW)                  \
    matvec_##code##_tcd##SUF(const void* W, const void* W2, const XT* x, XT* y, const XT* r, int N,    \
                             int K, int nb, int vec) {                                                  \
        (void)nb; (void)vec;                                                                            \
        mv_tcd<XT, EPI>((const u8*)W, (const u8*)W2, x, y, r, N, K);                                    \
    }
MVD_ENTRY(f16, bc_half, , EPI_NONE)
MVD_ENTRY(f16, bc_half, _res, EPI_RES)
MVD_ENTRY(f16, bc_half, _glu, EPI_GLU)
MVD_ENTRY(bf16, bc_bf16, , EPI_NONE)
MVD_ENTRY(bf16, bc_bf16, _res, EPI_RES)
MVD_ENTRY(bf16, bc_bf16, _glu, EPI_GLU)
#endif
