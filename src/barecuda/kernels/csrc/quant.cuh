// quant.cuh -- the GGUF (ggml) block formats, declared once, and what every quant kernel
// (matvec.cu, dequant.cu) shares: block structs, the decode of one 32-weight unit, and
// the warp's staging of a run of blocks into shared memory.
//
// Layouts are ggml's (ggml-common.h) and are checked byte for byte against the `gguf`
// package in tests/kernels/test_dequant.py. A row of K weights is K/QK consecutive
// blocks; a tensor is its rows back to back, so blocks are contiguous over the tensor.
//
// A "unit" is 32 consecutive weights of one block (a Q4_K sub-block, a whole Q8_0 block).
// Decoding a unit gives 32 small integers q[i] as exact floats and two affine pairs:
//     w[i] = a[i / 16] * q[i] + c[i / 16]
// so a dot product with x factors as a * sum(q x) + c * sum(x) per half-unit.
//
// Alignment: Q4_K blocks (144 B) are 16-byte multiples; Q4_1 (20 B) 4-byte; Q6_K (210 B),
// Q8_0 (34 B) and Q4_0 (18 B) only 2-byte. Staging copies whole 16-byte chunks of global
// memory into shared memory at the same offset modulo 16, so the decoders read shared
// memory with the block's own alignment (2-byte ones through funnel shifts).
#pragma once
#ifndef BCQ_HOST      // tests/kernels/test_dequant.py also compiles the decoders for the host
#include "common.cuh"
#endif

// ------------------------------------------------------------------ block layouts
#define BC_QK_K 256

struct __align__(2) bq4_K {         // 256 weights, 4.5 bits each
    u16 d;                          // f16 super-block scale for the 6-bit scales
    u16 dmin;                       // f16 super-block scale for the 6-bit mins
    u8  scales[12];                 // 8 x (6-bit scale, 6-bit min), packed
    u8  qs[128];                    // 4-bit values: byte 32j+l holds sub-block 2j (low) and 2j+1 (high)
};
struct __align__(2) bq6_K {         // 256 weights, 6.5625 bits each
    u8  ql[128];                    // low 4 bits
    u8  qh[64];                     // high 2 bits
    i8  scales[16];                 // 8-bit scale per 16 weights
    u16 d;                          // f16 super-block scale
};
struct __align__(2) bq8_0 {         // 32 weights: d * q
    u16 d;
    i8  qs[32];
};
struct __align__(2) bq4_0 {         // 32 weights: d * (q - 8); qs[j] low nibble = w[j], high = w[j+16]
    u16 d;
    u8  qs[16];
};
struct __align__(2) bq4_1 {         // 32 weights: d * q + m
    u16 d;
    u16 m;
    u8  qs[16];
};
static_assert(sizeof(bq4_K) == 144, "Q4_K block is 144 bytes");
static_assert(sizeof(bq6_K) == 210, "Q6_K block is 210 bytes");
static_assert(sizeof(bq8_0) == 34, "Q8_0 block is 34 bytes");
static_assert(sizeof(bq4_0) == 18, "Q4_0 block is 18 bytes");
static_assert(sizeof(bq4_1) == 20, "Q4_1 block is 20 bytes");
// (field offsets: NVRTC 13.0 has no __builtin_offsetof; the decoders below use the offsets
// of ggml-common.h, and tests/kernels/test_dequant.py checks every field against gguf)

// Format codes (the Python side passes them as the QFMT define): ggml's type numbers.
#define BC_Q4_0 2
#define BC_Q4_1 3
#define BC_Q8_0 8
#define BC_Q4_K 12
#define BC_Q6_K 14

// ------------------------------------------------------------------ small helpers
// float of an unsigned integer v < 2^23 without I2F (a quarter-rate instruction):
// the float 2^23 + v has v in its mantissa.
BC_DEV float bcq_u2f(u32 v) { return __uint_as_float(0x4B000000u | v) - 8388608.f; }

// 32-bit word at a 2-byte aligned shared-memory address
BC_DEV u32 bcq_w32_a2(const u8* p) {
    const u64 a = reinterpret_cast<u64>(p);
    const u32* base = reinterpret_cast<const u32*>(a & ~(u64)3);
    return __funnelshift_r(base[0], base[1], (u32)(a & 2) * 8u);
}
// n consecutive 32-bit words from a 2-byte aligned shared-memory address (n + 1 reads)
// EXACT: never a byte past the NW words (dequant.cu's direct kernel, whose last part ends its
// tensor): the word after them is read only when the span is unaligned, and then only its low
// 2 bytes (all the funnel takes of it). Otherwise that whole aligned word is read (it lies
// inside the block's allocation where matvec.cu and fused.cu use it).
template <int NW, bool EXACT = false> BC_DEV void bcq_words_a2(const u8* p, u32* w) {
    const u64 a = reinterpret_cast<u64>(p);
    const u32* base = reinterpret_cast<const u32*>(a & ~(u64)3);
    const u32 sh = (u32)(a & 2) * 8u;
    u32 raw[NW + 1];
    constexpr int LAST = EXACT ? NW - 1 : NW;
#pragma unroll
    for (int i = 0; i <= LAST; ++i) raw[i] = base[i];
    if constexpr (EXACT) raw[NW] = sh ? (u32)*reinterpret_cast<const u16*>(base + NW) : 0u;
#pragma unroll
    for (int i = 0; i < NW; ++i) w[i] = __funnelshift_r(raw[i], raw[i + 1], sh);
}
BC_DEV u16 bcq_u16(const u8* p) { return *reinterpret_cast<const u16*>(p); }
// the 32 nibbles of Q4_0/Q4_1's qs (4 words) as floats: low nibbles are weights 0..15, high 16..31
BC_DEV void bcq_nib32(const u32* w, float* q) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            q[4 * i + b] = bcq_u2f((w[i] >> (8 * b)) & 15u);
            q[16 + 4 * i + b] = bcq_u2f((w[i] >> (8 * b + 4)) & 15u);
        }
}

// Q6_K: the 6-bit values of 4 NW bytes, low 4 bits from ql at bit lsh, high 2 from qh at bit hsh
template <int NW> BC_DEV void bcq_q6(const u32* ql, const u32* qh, u32 lsh, u32 hsh, float* q) {
#pragma unroll
    for (int i = 0; i < NW; ++i)
#pragma unroll
        for (int b = 0; b < 4; ++b)
            q[4 * i + b] = bcq_u2f(((ql[i] >> (8 * b + lsh)) & 15u) | (((qh[i] >> (8 * b + hsh)) & 3u) << 4));
}

// ------------------------------------------------------------------ formats
// BcQ<F>: QK (weights per block), BYTES (per block), UNITS (32-weight units per block),
// unit(blk, u, q, a, c): decode unit u of the block at blk (shared memory), and
// part(blk, p, q, a, c): the 8 weights 8p..8p+7 of the block, w = a * q + c (the layout
// where a warp's lanes cover a block contiguously: coalesced x loads and output stores).
template <int F> struct BcQ;

template <> struct BcQ<BC_Q4_K> {
    static constexpr int QK = 256, BYTES = 144, UNITS = 8;
    BC_DEV static void unit(const u8* blk, int u, float* q, float* a, float* c) {
        const uint4 h = *reinterpret_cast<const uint4*>(blk);       // d, dmin, scales[12]
        const float d = bc_half_to_float((u16)(h.x & 0xffffu));
        const float dmin = bc_half_to_float((u16)(h.x >> 16));
        const u32 s0 = h.y, s1 = h.z, s2 = h.w;                     // scales bytes 0-3, 4-7, 8-11
        // get_scale_min_k4(u): u < 4: sc = s[u] & 63, m = s[u+4] & 63;
        //                     u >= 4: sc = (s[u+4] & 15) | (s[u-4] >> 6) << 4, m = (s[u+4] >> 4) | (s[u] >> 6) << 4
        const int j = u & 3;
        const u32 b0 = (s0 >> (8 * j)) & 0xffu, b1 = (s1 >> (8 * j)) & 0xffu, b2 = (s2 >> (8 * j)) & 0xffu;
        u32 sc, m;
        if (u < 4) { sc = b0 & 63u; m = b1 & 63u; }
        else       { sc = (b2 & 15u) | ((b0 >> 6) << 4); m = (b2 >> 4) | ((b1 >> 6) << 4); }
        a[0] = a[1] = d * (float)sc;
        c[0] = c[1] = -dmin * (float)m;
        const uint4* qs = reinterpret_cast<const uint4*>(blk + 16 + 32 * (u >> 1));
        const u32 shift = (u & 1) * 4u;
#pragma unroll
        for (int v = 0; v < 2; ++v) {
            const uint4 t = qs[v];
            const u32 w[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int b = 0; b < 4; ++b) q[16 * v + 4 * i + b] = bcq_u2f((w[i] >> (8 * b + shift)) & 15u);
        }
    }
    // part p (0..31): the 8 weights 8p..8p+7 (sub-block p / 4): w[i] = a * q[i] + c
    BC_DEV static void part(const u8* blk, int p, float* q, float& a, float& c) {
        const int u = p >> 2;
        part_r(*reinterpret_cast<const uint4*>(blk),
               *reinterpret_cast<const uint2*>(blk + 16 + 32 * (u >> 1) + 8 * (p & 3)), p, q, a, c);
    }
    // the same from registers: h = the block's first 16 bytes, w = its 8 quant bytes
    // 16 + 32 (p / 8) + 8 (p % 4) .. + 7 (low nibbles for p % 8 < 4, else high)
    BC_DEV static void part_r(const uint4 h, const uint2 w2, int p, float* q, float& a, float& c) {
        const int u = p >> 2;
        const int j = u & 3;
        const u32 b0 = (h.y >> (8 * j)) & 0xffu, b1 = (h.z >> (8 * j)) & 0xffu, b2 = (h.w >> (8 * j)) & 0xffu;
        u32 sc, m;
        if (u < 4) { sc = b0 & 63u; m = b1 & 63u; }
        else       { sc = (b2 & 15u) | ((b0 >> 6) << 4); m = (b2 >> 4) | ((b1 >> 6) << 4); }
        a = bc_half_to_float((u16)(h.x & 0xffffu)) * (float)sc;
        c = -bc_half_to_float((u16)(h.x >> 16)) * (float)m;
        const u32 qs[2] = {w2.x, w2.y};
        const u32 shift = (u & 1) * 4u;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const u32 w = qs[i] >> shift;
#pragma unroll
            for (int b = 0; b < 4; ++b) q[4 * i + b] = bcq_u2f((w >> (8 * b)) & 15u);
        }
    }
};

template <> struct BcQ<BC_Q6_K> {
    static constexpr int QK = 256, BYTES = 210, UNITS = 8;
    // unit u = 4 * half + quarter: weights 128 half + 32 quarter + l (l < 32)
    BC_DEV static void unit(const u8* blk, int u, float* q, float* a, float* c) {
        const int hf = u >> 2, qt = u & 3;
        const float d = bc_half_to_float(bcq_u16(blk + 208));
        const i8* sc = reinterpret_cast<const i8*>(blk + 192 + 8 * hf + 2 * qt);
        a[0] = d * (float)sc[0];
        a[1] = d * (float)sc[1];
        c[0] = -32.f * a[0];
        c[1] = -32.f * a[1];
        u32 ql[8], qh[8];
        bcq_words_a2<8>(blk + 64 * hf + 32 * (qt & 1), ql);
        bcq_words_a2<8>(blk + 128 + 32 * hf, qh);
        bcq_q6<8>(ql, qh, (qt >> 1) * 4u, 2u * qt, q);
    }
    // part p (0..31): weights 8p..8p+7 = half 8p/128, quarter, l0..l0+7 of the unit layout
    BC_DEV static void part(const u8* blk, int p, float* q, float& a, float& c) {
        const int hf = p >> 4, qt = (p >> 2) & 3, l0 = 8 * (p & 3);
        a = bc_half_to_float(bcq_u16(blk + 208)) * (float)reinterpret_cast<const i8*>(blk)[192 + 8 * hf + 2 * qt + (l0 >> 4)];
        c = -32.f * a;
        u32 ql[2], qh[2];
        bcq_words_a2<2>(blk + 64 * hf + 32 * (qt & 1) + l0, ql);
        bcq_words_a2<2>(blk + 128 + 32 * hf + l0, qh);
        bcq_q6<2>(ql, qh, (qt >> 1) * 4u, 2u * qt, q);
    }
};

template <> struct BcQ<BC_Q8_0> {
    static constexpr int QK = 32, BYTES = 34, UNITS = 1;
    BC_DEV static void unit(const u8* blk, int, float* q, float* a, float* c) {
        const float d = bc_half_to_float(bcq_u16(blk));
        a[0] = a[1] = d;
        c[0] = c[1] = -128.f * d;                 // q stored as (int8 + 128)
        u32 w[8];
        bcq_words_a2<8>(blk + 2, w);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const u32 v = w[i] ^ 0x80808080u;
#pragma unroll
            for (int b = 0; b < 4; ++b) q[4 * i + b] = bcq_u2f((v >> (8 * b)) & 0xffu);
        }
    }
    template <bool EXACT = false>
    BC_DEV static void part(const u8* blk, int p, float* q, float& a, float& c) {
        a = bc_half_to_float(bcq_u16(blk));
        c = -128.f * a;
        u32 w[2];
        bcq_words_a2<2, EXACT>(blk + 2 + 8 * p, w);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const u32 v = w[i] ^ 0x80808080u;
#pragma unroll
            for (int b = 0; b < 4; ++b) q[4 * i + b] = bcq_u2f((v >> (8 * b)) & 0xffu);
        }
    }
};

template <> struct BcQ<BC_Q4_0> {
    static constexpr int QK = 32, BYTES = 18, UNITS = 1;
    BC_DEV static void unit(const u8* blk, int, float* q, float* a, float* c) {
        const float d = bc_half_to_float(bcq_u16(blk));
        a[0] = a[1] = d;
        c[0] = c[1] = -8.f * d;
        u32 w[4];
        bcq_words_a2<4>(blk + 2, w);
        bcq_nib32(w, q);
    }
    template <bool EXACT = false>
    BC_DEV static void part(const u8* blk, int p, float* q, float& a, float& c) {
        a = bc_half_to_float(bcq_u16(blk));
        c = -8.f * a;
        u32 w[2];
        bcq_words_a2<2, EXACT>(blk + 2 + 8 * (p & 1), w);
        const u32 sh = (p >> 1) * 4u;
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int b = 0; b < 4; ++b) q[4 * i + b] = bcq_u2f((w[i] >> (8 * b + sh)) & 15u);
    }
};

template <> struct BcQ<BC_Q4_1> {
    static constexpr int QK = 32, BYTES = 20, UNITS = 1;
    BC_DEV static void unit(const u8* blk, int, float* q, float* a, float* c) {
        const u32 dm = *reinterpret_cast<const u32*>(blk);
        a[0] = a[1] = bc_half_to_float((u16)(dm & 0xffffu));
        c[0] = c[1] = bc_half_to_float((u16)(dm >> 16));
        u32 w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = reinterpret_cast<const u32*>(blk + 4)[i];
        bcq_nib32(w, q);
    }
    BC_DEV static void part(const u8* blk, int p, float* q, float& a, float& c) {
        const u32 dm = *reinterpret_cast<const u32*>(blk);
        a = bc_half_to_float((u16)(dm & 0xffffu));
        c = bc_half_to_float((u16)(dm >> 16));
        const u32* qs = reinterpret_cast<const u32*>(blk + 4 + 8 * (p & 1));
        const u32 sh = (p >> 1) * 4u;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const u32 w = qs[i] >> sh;
#pragma unroll
            for (int b = 0; b < 4; ++b) q[4 * i + b] = bcq_u2f((w >> (8 * b)) & 15u);
        }
    }
};

#ifndef BCQ_HOST
// ------------------------------------------------------------------ staging
// Copy bytes [g, g + len) of a tensor whose bytes end at gend into shared memory at
// s + (g mod 16), by whole 16-byte chunks (cp.async, no registers), one warp. The
// chunk holding gend (when gend is not 16-byte aligned) is copied 2 bytes at a time so
// nothing past the tensor is read. The tensor's start must be 16-byte aligned.
// The caller commits/waits (bcq_commit, bcq_wait<N>) and __syncwarp()s.
BC_DEV void bcq_cp16(void* s, const void* g) {
    const u32 sa = (u32)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(sa), "l"(g) : "memory");
}
BC_DEV void bcq_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> BC_DEV void bcq_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

BC_DEV void bcq_stage(u8* s, const u8* g, int len, const u8* gend, int lane) {
    const u64 ga = reinterpret_cast<u64>(g);
    const u8* c0 = reinterpret_cast<const u8*>(ga & ~(u64)15);
    const int nch = (int)(((ga & 15) + (u64)len + 15) >> 4);
    for (int i = lane; i < nch; i += 32) {
        const u8* gc = c0 + 16 * i;
        u8* sc = s + 16 * i;
        if (gc + 16 <= gend) {
            bcq_cp16(sc, gc);
        } else {
            for (int b = 0; gc + b < gend; b += 2)
                *reinterpret_cast<u16*>(sc + b) = *reinterpret_cast<const u16*>(gc + b);
        }
    }
}
// shared-memory bytes a staged run of `len` bytes may occupy
#define BCQ_STAGE_BYTES(len) ((((len) + 15 + 15) / 16) * 16 + 16)
#endif  // BCQ_HOST
