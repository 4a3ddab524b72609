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

// ------------------------------------------------------------------ tensor cores, quantized weights
// The mma building blocks of matvec.cu's tensor-core entries (mv_tc, mv_tcd) and the Q4_K
// batch-1 direct loop (mvc_tcd) that fused.cu's Q4_K nodes share with matvec.cu.
#if defined(WFMT) && !(WFMT == 0 || WFMT == 1 || WFMT == 30)
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
// the even and odd pairs of 4 nibbles at bit `sh` (0 or 4) of each byte of w, minus OFF.
// f16, high nibbles: in place under the exponent of 64 (ulp 1/16), (0x5400 | v << 4) is
// 64 + v, so no shift for the even pair
template <int BF, u32 OFF> BC_DEV void mvt_nib4(u32 w, int sh, u32* a) {
    if (!BF && sh == 4) {
        constexpr u32 NEG = ((0x5400u + 16u * OFF) | 0x8000u) * 0x10001u;      // -(64 + OFF)
        a[0] = mvt_fma2<0>((w & 0x00F000F0u) | 0x54005400u, MvtK<0>::ONE, NEG);
        a[1] = mvt_fma2<0>(((w >> 8) & 0x00F000F0u) | 0x54005400u, MvtK<0>::ONE, NEG);
    } else {
        a[0] = mvt_pair<BF, OFF>(w >> sh, 0x000F000Fu);
        a[1] = mvt_pair<BF, OFF>(w >> (sh + 8), 0x000F000Fu);
    }
}

// Per format: QK, BYTES, BPC (blocks a chunk), NG (groups of 32 a chunk), XQ, MINS (sum(x)
// needed), SPLIT (a scale per slice of 16); of group gi of the chunk staged at p:
//   scales(p, gi, s, c): w = s[slice] * q + c (s[0] = s[1] unless SPLIT)
//   quants<BF>(p, gi, t, A): thread t's pairs (A[0], A[1] slice 0 even/odd, A[2], A[3] slice 1)
template <int F> struct MvtQ;
template <> struct MvtQ<BC_Q4_K> {
    static constexpr int QK = 256, BYTES = 144, BPC = 1, NG = 8, XQ = 0, MINS = 1, SPLIT = 0;
    // of the block's first 16 bytes h (d, dmin, scales[12])
    BC_DEV static void scales_h(const uint4 h, int gi, float* s, float& c) {
        const int j = gi & 3;
        const u32 b0 = (h.y >> (8 * j)) & 0xffu, b1 = (h.z >> (8 * j)) & 0xffu, b2 = (h.w >> (8 * j)) & 0xffu;
        u32 sc, m;
        if (gi < 4) { sc = b0 & 63u; m = b1 & 63u; }
        else        { sc = (b2 & 15u) | ((b0 >> 6) << 4); m = (b2 >> 4) | ((b1 >> 6) << 4); }
        s[0] = s[1] = bc_half_to_float((u16)(h.x & 0xffffu)) * bcq_u2f(sc);
        c = -bc_half_to_float((u16)(h.x >> 16)) * bcq_u2f(m);
    }
    BC_DEV static void scales(const u8* p, int gi, float* s, float& c) {
        scales_h(*reinterpret_cast<const uint4*>(p), gi, s, c);
    }
    // groups u and u + 4 (u < 4) at once: both come from bytes u of scales[0..3], [4..7], [8..11];
    // dq multiplies the quant scales (mvc_tcd's subnormal quants: 2^24 or 2^20)
    BC_DEV static void scales_pair(const uint4 h, int u, float (&s)[2][3], float dq = 1.f) {
        const u32 b0 = (h.y >> (8 * u)) & 0xffu, b1 = (h.z >> (8 * u)) & 0xffu, b2 = (h.w >> (8 * u)) & 0xffu;
        const float d = bc_half_to_float((u16)(h.x & 0xffffu)) * dq, dmin = -bc_half_to_float((u16)(h.x >> 16));
        s[0][0] = s[0][1] = d * bcq_u2f(b0 & 63u);
        s[0][2] = dmin * bcq_u2f(b1 & 63u);
        s[1][0] = s[1][1] = d * bcq_u2f((b2 & 15u) | ((b0 >> 6) << 4));
        s[1][2] = dmin * bcq_u2f((b2 >> 4) | ((b1 >> 6) << 4));
    }
    // of the 8 bytes 8t..8t+7 of the 32-byte run holding group gi (low nibbles: gi even)
    template <int BF> BC_DEV static void quants_q(const uint2 q, int gi, u32* A) {
        const int sh = 4 * (gi & 1);
        mvt_nib4<BF, 0>(q.x, sh, A);
        mvt_nib4<BF, 0>(q.y, sh, A + 2);
    }
    // f16 only (MVD4_SUB): the same pairs as fp16 subnormals, q 2^-24 (low nibbles, gi even) or
    // 16 q 2^-24 (high nibbles, in place): one AND a pair, the shift by 8 shared by a run's two
    // groups; exact (the mma takes fp16 subnormals, products and sums stay fp32 normals), the
    // caller scales by 2^24 or 2^20
    BC_DEV static void quants_sub(const uint2 q, int gi, u32* A) {
        const u32 m = (gi & 1) ? 0x00F000F0u : 0x000F000Fu;
        A[0] = q.x & m; A[1] = (q.x >> 8) & m; A[2] = q.y & m; A[3] = (q.y >> 8) & m;
    }
    template <int BF> BC_DEV static void quants(const u8* p, int gi, int t, u32* A) {
        quants_q<BF>(*reinterpret_cast<const uint2*>(p + 16 + 32 * (gi >> 1) + 8 * t), gi, A);
    }
};

template <typename T> struct MvtBF { static constexpr int V = 0; };
template <> struct MvtBF<bc_bf16> { static constexpr int V = 1; };

// x's B fragment of one group of 32 (quads as the format's XQ says), permuted to the
// even/odd pairs; zeros where !on
template <int XQ, typename XT> BC_DEV void mvt_xfrag(const XT* xp, int t, bool on, u32 (&B)[2][2]) {
    u32 X[4] = {0u, 0u, 0u, 0u};
    if (on) {
        if (XQ == 0) {
            const uint4 v = *reinterpret_cast<const uint4*>(xp + 8 * t);
            X[0] = v.x; X[1] = v.y; X[2] = v.z; X[3] = v.w;
        } else {
            const uint2 a = *reinterpret_cast<const uint2*>(xp + 4 * t);
            const uint2 b = *reinterpret_cast<const uint2*>(xp + 16 + 4 * t);
            X[0] = a.x; X[1] = a.y; X[2] = b.x; X[3] = b.y;
        }
    }
#pragma unroll
    for (int sl = 0; sl < 2; ++sl) {
        B[sl][0] = mvt_prmt(X[2 * sl], X[2 * sl + 1], 0x5410u);
        B[sl][1] = mvt_prmt(X[2 * sl], X[2 * sl + 1], 0x7632u);
    }
}

// B of one group of the column layout: x's fragment where this thread's column holds the
// group (on), zeros elsewhere
BC_DEV void mvt_mask(const u32 (&B)[2][2], bool on, u32 (&b)[2][2]) {
    const u32 m = on ? ~0u : 0u;
#pragma unroll
    for (int sl = 0; sl < 2; ++sl) { b[sl][0] = B[sl][0] & m; b[sl][1] = B[sl][1] & m; }
}
// sum(x) of a group (both slices) into Dx: A = ones
template <int BF> BC_DEV void mvt_sumx(float* Dx, const u32 (&b)[2][2]) {
    const u32 o = MvtK<BF>::ONE;
    bc_mma16816<BF>(Dx, o, o, o, o, b[0][0], b[0][1]);
    bc_mma16816<BF>(Dx, o, o, o, o, b[1][0], b[1][1]);
}
// a group's products of rows g (Ag) and g + 8 (Ah): slice 0 into D0, slice 1 into D1
template <int BF> BC_DEV void mvt_dot(float* D0, float* D1, const u32 (&Ag)[4], const u32 (&Ah)[4], const u32 (&b)[2][2]) {
    bc_mma16816<BF>(D0, Ag[0], Ah[0], Ag[1], Ah[1], b[0][0], b[0][1]);
    bc_mma16816<BF>(D1, Ag[2], Ah[2], Ag[3], Ah[3], b[1][0], b[1][1]);
}

struct MvdRegs {
    uint4 h[2];         // rows g, g + 8: the super-block's head
    uint2 q[2][4];      // rows g, g + 8: bytes 8t..8t+7 of quant run j
};
// MVD4_LD: 1 (default) mvc_tcd's loads go through L1, as mvc_tcd6's (MVD6_LD): a thread's 8
// bytes of a 32-byte quant run start 16 bytes into a sector, so two loads ask for each sector
// and L1 serves the second; 0 they bypass L1 (L1::no_allocate, the default before 2026-11-27 06:0x).
// MVD4_SUB: 1 (default) mvc_tcd (V 2, f16 x) decodes nibbles to fp16 subnormals
// (MvtQ<BC_Q4_K>::quants_sub: one AND a pair, no fma: 30% fewer instructions executed); 0 the
// exponent trick of mvt_nib4 (bf16 x always: a bf16 subnormal times x underflows fp32).
// H200 06:0x, same run, 14336x4096 (4 warps, MVD_PF=2): 17.40 us (0/0), 15.54 (LD), 16.55 (SUB),
// 14.52 (both); 4096x14336 16.25 / 15.28 / 15.12 / 13.57; 28672x4096 29.91 / 26.59 / 28.84 / 24.79.
#ifndef MVD4_LD
#define MVD4_LD 1
#endif
#ifndef MVD4_SUB
#define MVD4_SUB 1
#endif
// MVD4_L2: 128 (default), 64 or 256: mvc_tcd's weight loads carry the L2 prefetch-size hint
// (.L2::<n>B: the L2 fetches the aligned n bytes around the sector asked for; a block's warps
// read a row's super-blocks c, c + 1, ... at about the same time); 0 plain loads (the default
// before 2026-11-27 09:5x). H200 09:5x, same run, 0 / 128 / 256: 4096x4096 6.20 / 6.10 / 6.11 us,
// 14336x4096 13.04 / 13.19 / 13.37, 4096x14336 (MVD_PF=2) 13.42 / 12.89 / 12.98, 28672x4096
// 23.19 / 22.96 / 23.32; fused gate/up 14336x4096 24.32 / 23.27 / 23.29, down+res 13.59 / 13.10
// / 13.14, qkv 9.17 / 8.88 / 8.71, wo+res 6.35 / 6.20 / 6.25.
#ifndef MVD4_L2
#define MVD4_L2 128
#endif
#if MVD4_L2 == 256
#define MVD4_L2Q ".L2::256B"
#elif MVD4_L2 == 128
#define MVD4_L2Q ".L2::128B"
#elif MVD4_L2 == 64
#define MVD4_L2Q ".L2::64B"
#else
#define MVD4_L2Q ""
#endif
#if MVD4_LD
#define MVD4_LDQ "ld.global.nc" MVD4_L2Q
#else
#define MVD4_LDQ "ld.global.nc.L1::no_allocate" MVD4_L2Q
#endif
BC_DEV uint4 mvd_ld16(const u8* p) {
    uint4 v;
    asm volatile(MVD4_LDQ ".v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
BC_DEV uint2 mvd_ld8(const u8* p) {
    uint2 v;
    asm volatile(MVD4_LDQ ".v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}


// MVD4_ROLL: 1 mvc_tcd (register path) reloads each part of a super-block's registers for the
// super-block PF turns ahead as soon as its last use is issued (the head after the scales, quant
// run j after group 2j + 1's mma), not after the whole super-block: the next loads are in flight
// during this one's mmas. 0 (default): after the super-block. ptxas gives it 96 registers at
// MVD_PF=1 (68): H200 09:4x/09:5x, 3-5% faster where the grid is one wave anyway (4096x4096 5.96
// against 6.15 us; fused qkv, wo+res), 2-17% slower at the tall shapes (14336x4096 14.65 / 12.85).
#ifndef MVD4_ROLL
#define MVD4_ROLL 0
#endif


// Q4_K at batch 1, weights straight into registers (matvec.cu's column layout, COL = 1): a
// block's warp tile is rows n0 + g and n0 + g + 8 (g = lane / 4) of NS weight streams (W;
// W2 for gate/up); the nw warps of the block take the rows' super-blocks round-robin (warp
// wi: wi, wi + nw, ...), each thread loading a super-block's 16-byte head and bytes
// 8t..8t+7 of its four 32-byte quant runs, PF super-blocks ahead. `started()` runs once
// the first PF loads are issued, before x is read (fused.cu waits there for the previous
// node of a programmatic launch). On return v[s][h] is this warp's share of row
// n0 + g + 8h of stream s, the same in the 4 threads of the row (t = lane % 4).
// V 1: sum(x) of each group by mma (ones times x) and one accumulator chain; V 2: sum(x) by
// shuffles once a super-block and the mma's two slices in two chains (half the mmas, half
// the chain).
template <typename XT, int NS, int PF, int V, typename Started>
BC_DEV void mvc_tcd(const u8* __restrict__ W, const u8* __restrict__ W2, const XT* __restrict__ x, int n0, int N,
                    int K, int wi, int nw, float (&v)[NS][2], Started started) {
    using Q = MvtQ<BC_Q4_K>;
    constexpr int BF = MvtBF<XT>::V;
    constexpr bool SUB = MVD4_SUB && !BF && V == 2;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    // SUB: thread t's groups t and t + 4 are both low (t even) or high nibbles
    const float dq = SUB ? ((t & 1) ? 1048576.f : 16777216.f) : 1.f;
    const int nblk = K / 256;
    const long long rb = (long long)nblk * 144;
    const u8* rows[NS][2];
#pragma unroll
    for (int s = 0; s < NS; ++s) {
        rows[s][0] = (s ? W2 : W) + (long long)min(n0 + g, N - 1) * rb;
        rows[s][1] = (s ? W2 : W) + (long long)min(n0 + g + 8, N - 1) * rb;
    }
#if MVD4_ROLL
    // part 0: the heads, 1 + j: quant run j
    auto load_part = [&](int c, MvdRegs (&R)[NS], int part) {
        if (c < nblk) {
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const u8* b = rows[s][h] + (long long)c * 144;
                    if (part == 0) R[s].h[h] = mvd_ld16(b);
                    else R[s].q[h][part - 1] = mvd_ld8(b + 16 + 32 * (part - 1) + 8 * t);
                }
        }
    };
#endif
    auto load = [&](int c, MvdRegs (&R)[NS]) {
        if (c < nblk) {
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const u8* b = rows[s][h] + (long long)c * 144;
                    R[s].h[h] = mvd_ld16(b);
#pragma unroll
                    for (int j = 0; j < 4; ++j) R[s].q[h][j] = mvd_ld8(b + 16 + 32 * j + 8 * t);
                }
        }
    };
    float acc[NS][4];
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[s][i] = 0.f;
    MvdRegs buf[PF][NS];
#pragma unroll
    for (int p = 0; p < PF; ++p) load(wi + p * nw, buf[p]);
    started();
    for (int c0 = wi; c0 < nblk; c0 += PF * nw) {
#pragma unroll
        for (int p = 0; p < PF; ++p) {
            const int c = c0 + p * nw;
            if (c >= nblk) break;
            // column 2u holds group u, column 2u + 1 group u + 4 (u < 4): thread t's two
            // columns are the groups t and t + 4, whose scales share their bytes
            u32 B[2][2];
            const XT* xp = x + (long long)c * 256 + 32 * ((g >> 1) + 4 * (g & 1));
            float Dx[4] = {0.f, 0.f, 0.f, 0.f};
            if constexpr (V == 2) {
                // sum(x) of the groups of columns 2t and 2t + 1 by shuffles, not by mma: this
                // lane's 8 values, the row of 4 lanes (column g's group), then lanes 8t, 8t + 4
                const uint4 xv = *reinterpret_cast<const uint4*>(xp + 8 * t);
                const u32 X[4] = {xv.x, xv.y, xv.z, xv.w};
                float sx = 0.f;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    float lo, hi;
                    bc_unpack2<BF>(X[i], lo, hi);
                    sx += lo + hi;
                }
                sx += __shfl_xor_sync(BC_FULL_MASK, sx, 1);
                sx += __shfl_xor_sync(BC_FULL_MASK, sx, 2);
                Dx[0] = Dx[2] = __shfl_sync(BC_FULL_MASK, sx, 8 * t);
                Dx[1] = Dx[3] = __shfl_sync(BC_FULL_MASK, sx, 8 * t + 4);
#pragma unroll
                for (int sl = 0; sl < 2; ++sl) {
                    B[sl][0] = mvt_prmt(X[2 * sl], X[2 * sl + 1], 0x5410u);
                    B[sl][1] = mvt_prmt(X[2 * sl], X[2 * sl + 1], 0x7632u);
                }
            } else {
                mvt_xfrag<0>(xp, t, true, B);
            }
            float sv[NS][2][2][3];
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int h = 0; h < 2; ++h) Q::scales_pair(buf[p][s].h[h], t, sv[s][h], dq);
#if MVD4_ROLL
            load_part(c + PF * nw, buf[p], 0);
#endif
            float D[NS][4], D1[NS][4];          // V 2: the two slices in two chains
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int i = 0; i < 4; ++i) D[s][i] = D1[s][i] = 0.f;
#pragma unroll
            for (int gi = 0; gi < 8; ++gi) {
                u32 b[2][2];
                mvt_mask(B, g == (gi < 4 ? 2 * gi : 2 * gi - 7), b);
                if constexpr (V != 2) mvt_sumx<BF>(Dx, b);
#pragma unroll
                for (int s = 0; s < NS; ++s) {
                    u32 Ag[4], Ah[4];
                    if constexpr (SUB) {
                        Q::quants_sub(buf[p][s].q[0][gi >> 1], gi, Ag);
                        Q::quants_sub(buf[p][s].q[1][gi >> 1], gi, Ah);
                    } else {
                        Q::template quants_q<BF>(buf[p][s].q[0][gi >> 1], gi, Ag);
                        Q::template quants_q<BF>(buf[p][s].q[1][gi >> 1], gi, Ah);
                    }
                    if constexpr (V == 2) mvt_dot<BF>(D[s], D1[s], Ag, Ah, b);
                    else mvt_dot<BF>(D[s], D[s], Ag, Ah, b);
                }
#if MVD4_ROLL
                if (gi & 1) load_part(c + PF * nw, buf[p], 1 + (gi >> 1));
#endif
            }
#if !MVD4_ROLL
            load(c + PF * nw, buf[p]);
#endif
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float* sc = sv[s][i >> 1][i & 1];
                    acc[s][i] = fmaf(sc[2], Dx[i], fmaf(sc[0], D[s][i] + D1[s][i], acc[s][i]));
                }
        }
    }
    // rows g, g + 8: their groups are spread over the 4 threads' 8 columns
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float a = acc[s][2 * h] + acc[s][2 * h + 1];
            a += __shfl_xor_sync(BC_FULL_MASK, a, 1);
            a += __shfl_xor_sync(BC_FULL_MASK, a, 2);
            v[s][h] = a;
        }
}

// ------------------------------------------------------------------ Q6_K at batch 1: straight into registers
// The same column layout as mvc_tcd (column n: group n of the super-block, 32 weights = two
// slices of 16 with their own int8 scales; D0 collects slice 0, D1 slice 1), weights loaded
// by each thread from global memory with no staging. A Q6_K block is 210 bytes, so its
// address is only 2-byte aligned: with K % 512 == 0 (rows a multiple of 4 bytes) block c
// sits at m = 2 (c & 1) modulo 4 in every row. Thread t owns, of each 16-byte run of ql/qh,
// the 4 bytes at 4t - m (mod 16): aligned 32-bit words at run + 4t - m, 13 a row (k = 0..12:
// the 8 runs of ql, the 4 of qh, one more), and for t = 0, m = 2 the bytes {14, 15, 0, 1} of a
// run come from two consecutive words (one prmt; the word at run - 2 lies in the previous
// block, never before the tensor: block 0 has m = 0). x's quads are loaded in the same order
// ((4t - m) & 15 and + 2), so the mma's k index means the same weight for A and B. Word 12 is
// the scales bytes 4t - m .. 4t - m + 3; with a 16-bit load at 194 + 4t it gives this
// thread's scales 4t .. 4t + 3 (groups 2t, 2t + 1), and d comes from a 16-bit load at 208.
// Nothing past the block is read.
struct Mvd6Regs {
    u32 w[2][13];       // rows g, g + 8: words at run + 4t - m
    u32 s[2];           // rows g, g + 8: the 16 bits at 194 + 4t
    u32 d[2];           // rows g, g + 8: d's 16 bits
};
// MVD6_LD: 1 (default) the quant words go through L1: a 32-byte sector holds this thread's
// words of two 16-byte runs, which two of its loads read, and L1 serves the second (H200
// 02:4x: 23.1 against 31.5 us at 14336x4096); 0 they bypass it (L1::no_allocate, as Q4_K's).
#ifndef MVD6_LD
#define MVD6_LD 1
#endif
// MVD6_L2: 128 (default), 64 or 256: the quant words' loads carry the L2 prefetch-size hint (as
// MVD4_L2); 0 plain loads (the default before 2026-11-27 09:5x). H200 09:5x, same run, 0 / 128 /
// 256: 4096x4096 9.61 / 9.39 / 9.79 us, 14336x4096 22.87 / 22.41 / 23.14, 4096x14336 21.37 /
// 21.17 / 21.51, 28672x4096 39.18 / 38.69 / 39.60; fused down+res 21.41 / 21.13 / 21.49, head
// 128256x4096 145.04 / 143.78 / 144.66.
#ifndef MVD6_L2
#define MVD6_L2 128
#endif
#if MVD6_L2 == 256
#define MVD6_L2Q ".L2::256B"
#elif MVD6_L2 == 128
#define MVD6_L2Q ".L2::128B"
#elif MVD6_L2 == 64
#define MVD6_L2Q ".L2::64B"
#else
#define MVD6_L2Q ""
#endif
BC_DEV u32 mvd_ld4(const u8* p) {
    u32 v;
#if MVD6_LD
    asm volatile("ld.global.nc" MVD6_L2Q ".u32 %0, [%1];" : "=r"(v) : "l"(p));
#else
    asm volatile("ld.global.nc.L1::no_allocate" MVD6_L2Q ".u32 %0, [%1];" : "=r"(v) : "l"(p));
#endif
    return v;
}
BC_DEV u32 mvd_ld2(const u8* p) {
    unsigned short v;
    asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
// MVD6_SUB: 1 (default) mvc_tcd6 (f16 x) builds the 6-bit values as fp16 subnormals q * 2^-24
// (no exponent bits, no fma) and takes the - 32 out as 32 sum(x) of each (group, slice), by
// shuffles once a super-block; 0 the exponent trick (bf16 x always). H200 06:4x, same run,
// MVD_PF=2: 4096x14336 21.22 against 23.49 us, 28672x4096 38.91 / 39.50, 14336x4096 22.80 /
// 23.02, 4096x4096 9.58 / 9.21; the fused down+res node (4096x14336) 21.29 / 23.44.
#ifndef MVD6_SUB
#define MVD6_SUB 1
#endif
// thread t's 4 weights of slice sl of group gi (pairs: A[2 sl] even bytes, A[2 sl + 1] odd),
// minus 32 (SUB: q * 2^-24, as they are); sel 0x3254 (t = 0, m = 2) or 0x3210 picks the
// run's bytes out of two words
template <int BF, bool SUB = false> BC_DEV void mvd6_quants(const u32 (&w)[13], int gi, u32 sel, u32* A) {
    const int hf = gi >> 2, qt = gi & 3;
    const int lsh = 4 * (qt >> 1), hsh = 2 * qt;
#pragma unroll
    for (int sl = 0; sl < 2; ++sl) {
        const int kq = 4 * hf + 2 * (qt & 1) + sl, kh = 8 + 2 * hf + sl;
        const u32 ql = mvt_prmt(w[kq], w[kq + 1], sel);
        const u32 qh = mvt_prmt(w[kh], w[kh + 1], sel);
#pragma unroll
        for (int o = 0; o < 2; ++o) {
            const u32 hi = ((hsh + 8 * o >= 4) ? (qh >> (hsh + 8 * o - 4)) : (qh << (4 - hsh - 8 * o))) & 0x00300030u;
            if constexpr (SUB) {
                A[2 * sl + o] = ((ql >> (lsh + 8 * o)) & 0x000F000Fu) | hi;
            } else {
                const u32 v = ((ql >> (lsh + 8 * o)) & 0x000F000Fu) | hi | MvtK<BF>::MAGIC;
                A[2 * sl + o] = mvt_fma2<BF>(v, MvtK<BF>::ONE, MvtK<BF>::neg(32));
            }
        }
    }
}
BC_DEV float mvd6_i8(u32 w, int j) { return bcq_u2f(((w >> (8 * j)) & 0xffu) ^ 0x80u) - 128.f; }

// As mvc_tcd, for Q6_K (the caller ensures K % 512 == 0). On return v[s][h] is this warp's
// share of row n0 + g + 8h of stream s, the same in the 4 threads of the row.
template <typename XT, int NS, int PF, typename Started>
BC_DEV void mvc_tcd6(const u8* __restrict__ W, const u8* __restrict__ W2, const XT* __restrict__ x, int n0, int N,
                     int K, int wi, int nw, float (&v)[NS][2], Started started) {
    constexpr int BF = MvtBF<XT>::V;
    constexpr bool SUB = MVD6_SUB && !BF;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int nblk = K / 256;
    const long long rb = (long long)nblk * 210;
    const u8* rows[NS][2];
#pragma unroll
    for (int s = 0; s < NS; ++s) {
        rows[s][0] = (s ? W2 : W) + (long long)min(n0 + g, N - 1) * rb;
        rows[s][1] = (s ? W2 : W) + (long long)min(n0 + g + 8, N - 1) * rb;
    }
    auto load = [&](int c, Mvd6Regs (&R)[NS]) {
        if (c < nblk) {
            const int m = 2 * (c & 1);
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const u8* b = rows[s][h] + (long long)c * 210;
#pragma unroll
                    for (int k = 0; k < 13; ++k) R[s].w[h][k] = mvd_ld4(b + 16 * k + 4 * t - m);
                    R[s].s[h] = mvd_ld2(b + 194 + 4 * t);
                    R[s].d[h] = mvd_ld2(b + 208);
                }
        }
    };
    float acc[NS][4];
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[s][i] = 0.f;
    Mvd6Regs buf[PF][NS];
#pragma unroll
    for (int p = 0; p < PF; ++p) load(wi + p * nw, buf[p]);
    started();
    for (int c0 = wi; c0 < nblk; c0 += PF * nw) {
#pragma unroll
        for (int p = 0; p < PF; ++p) {
            const int c = c0 + p * nw;
            if (c >= nblk) break;
            const int m = 2 * (c & 1);
            // x of group g (this thread's column), slice sl: halves (4t - m) & 15 and + 2
            const XT* xp = x + (long long)c * 256 + 32 * g;
            const int x0 = (4 * t - m) & 15, x1 = (4 * t - m + 2) & 15;
            u32 B[2][2];
            float sx[2][2];     // SUB: sum(x) of slice sl of group 2t + j, as sx[j][sl]
#pragma unroll
            for (int sl = 0; sl < 2; ++sl) {
                const u32 X0 = *reinterpret_cast<const u32*>(xp + 16 * sl + x0);
                const u32 X1 = *reinterpret_cast<const u32*>(xp + 16 * sl + x1);
                B[sl][0] = mvt_prmt(X0, X1, 0x5410u);
                B[sl][1] = mvt_prmt(X0, X1, 0x7632u);
                if constexpr (SUB) {
                    // this lane's 4 of the slice, the row of 4 lanes (group g), then lanes 8t, 8t + 4
                    float a, b, c, d;
                    bc_unpack2<BF>(X0, a, b);
                    bc_unpack2<BF>(X1, c, d);
                    float p = (a + b) + (c + d);
                    p += __shfl_xor_sync(BC_FULL_MASK, p, 1);
                    p += __shfl_xor_sync(BC_FULL_MASK, p, 2);
                    sx[0][sl] = __shfl_sync(BC_FULL_MASK, p, 8 * t);
                    sx[1][sl] = __shfl_sync(BC_FULL_MASK, p, 8 * t + 4);
                }
            }
            const u32 sel = (t == 0 && m) ? 0x3254u : 0x3210u;
            // scales of groups 2t (slices: bytes 0, 1) and 2t + 1 (bytes 2, 3), times d
            float sv[NS][2][4];
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const u32 sw = mvt_prmt(buf[p][s].w[h][12], buf[p][s].s[h], m ? 0x5432u : 0x3210u);
                    const float d = bc_half_to_float((u16)buf[p][s].d[h]) * (SUB ? 16777216.f : 1.f);
#pragma unroll
                    for (int j = 0; j < 4; ++j) sv[s][h][j] = d * mvd6_i8(sw, j);
                }
            float D0[NS][4], D1[NS][4];
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int i = 0; i < 4; ++i) D0[s][i] = D1[s][i] = 0.f;
#pragma unroll
            for (int gi = 0; gi < 8; ++gi) {
                u32 b[2][2];
                mvt_mask(B, g == gi, b);
#pragma unroll
                for (int s = 0; s < NS; ++s) {
                    u32 Ag[4], Ah[4];
                    mvd6_quants<BF, SUB>(buf[p][s].w[0], gi, sel, Ag);
                    mvd6_quants<BF, SUB>(buf[p][s].w[1], gi, sel, Ah);
                    mvt_dot<BF>(D0[s], D1[s], Ag, Ah, b);
                }
            }
            load(c + PF * nw, buf[p]);
            // D[i]: row g + 8 (i >> 1), group 2t + (i & 1)
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float* sc = sv[s][i >> 1] + 2 * (i & 1);
                    if constexpr (SUB) {        // (q - 32) x = 2^24 (q 2^-24 x) - 32 x; sc holds the 2^24
                        D0[s][i] = fmaf(-0x1p-19f, sx[i & 1][0], D0[s][i]);
                        D1[s][i] = fmaf(-0x1p-19f, sx[i & 1][1], D1[s][i]);
                    }
                    acc[s][i] = fmaf(sc[1], D1[s][i], fmaf(sc[0], D0[s][i], acc[s][i]));
                }
        }
    }
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float a = acc[s][2 * h] + acc[s][2 * h + 1];
            a += __shfl_xor_sync(BC_FULL_MASK, a, 1);
            a += __shfl_xor_sync(BC_FULL_MASK, a, 2);
            v[s][h] = a;
        }
}

// the direct loop of format F (Q4_K: mvc_tcd variant V; Q6_K: mvc_tcd6)
template <int F, typename XT, int NS, int PF, int V, typename Started>
BC_DEV void mvc_tcdf(const u8* __restrict__ W, const u8* __restrict__ W2, const XT* __restrict__ x, int n0, int N,
                     int K, int wi, int nw, float (&v)[NS][2], Started started) {
    if constexpr (F == BC_Q6_K) mvc_tcd6<XT, NS, PF>(W, W2, x, n0, N, K, wi, nw, v, started);
    else mvc_tcd<XT, NS, PF, V>(W, W2, x, n0, N, K, wi, nw, v, started);
}

// the block's sum of mvc_tcd's v over its warps (red: MAXW * NS * 2 * 32 floats of shared
// memory), in every lane of warp 0 (lane l: rows n0 + l / 4 and n0 + l / 4 + 8); false in
// the other warps, which may return
template <int NS> BC_DEV bool mvc_tcd_sum(float* red, float (&v)[NS][2]) {
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (nw == 1) return true;
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int h = 0; h < 2; ++h) red[((wi * NS + s) * 2 + h) * 32 + lane] = v[s][h];
    __syncthreads();
    if (wi) return false;
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float a = 0.f;
            for (int w = 0; w < nw; ++w) a += red[((w * NS + s) * 2 + h) * 32 + lane];
            v[s][h] = a;
        }
    return true;
}
#endif  // quantized WFMT
