// dequant_direct.cuh -- the 8-weight "part" decoders dequant.cu's direct kernel runs on
// global memory (host-compilable: tests/kernels/test_dequant.py runs them on the CPU against
// gguf). Q4_1 and Q6_K use quant.cuh's part() as it is (Q4_1 reads aligned words, Q6_K never
// reads past its block); Q8_0 and Q4_0 have a copy here that reads exactly the part's bytes
// (quant.cuh's reads one aligned word past them), so the tensor's last part reads nothing past it.
#pragma once
#include "quant.cuh"

template <int NW> BC_DEV void dq_words_a2(const u8* p, u32* w) {
    const u64 a = reinterpret_cast<u64>(p);
    const u32* base = reinterpret_cast<const u32*>(a & ~(u64)3);
    const u32 sh = (u32)(a & 2) * 8u;
    u32 raw[NW + 1];
#pragma unroll
    for (int i = 0; i < NW; ++i) raw[i] = base[i];
    // the funnel takes only the low 16 bits of the last word, and only when unaligned: read
    // just those 2 bytes (the part's last two), never a byte past the part
    raw[NW] = sh ? (u32)*reinterpret_cast<const u16*>(base + NW) : 0u;
#pragma unroll
    for (int i = 0; i < NW; ++i) w[i] = __funnelshift_r(raw[i], raw[i + 1], sh);
}
template <int F> BC_DEV void dq_part(const u8* blk, int p, float* q, float& a, float& c) {
    if constexpr (F == BC_Q8_0) {
        a = bc_half_to_float(bcq_u16(blk));
        c = -128.f * a;
        u32 w[2];
        dq_words_a2<2>(blk + 2 + 8 * p, w);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const u32 v = w[i] ^ 0x80808080u;
#pragma unroll
            for (int b = 0; b < 4; ++b) q[4 * i + b] = bcq_u2f((v >> (8 * b)) & 0xffu);
        }
    } else if constexpr (F == BC_Q4_0) {
        a = bc_half_to_float(bcq_u16(blk));
        c = -8.f * a;
        u32 w[2];
        dq_words_a2<2>(blk + 2 + 8 * (p & 1), w);
        const u32 sh = (p >> 1) * 4u;
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int b = 0; b < 4; ++b) q[4 * i + b] = bcq_u2f((w[i] >> (8 * b + sh)) & 15u);
    } else {
        BcQ<F>::part(blk, p, q, a, c);     // Q4_1 (aligned words), Q6_K (never past its block)
    }
}
