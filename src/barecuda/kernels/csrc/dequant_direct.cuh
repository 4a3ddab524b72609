// dequant_direct.cuh -- the 8-weight "part" decoders dequant.cu's direct kernel runs on
// global memory (host-compilable: tests/kernels/test_dequant.py runs them on the CPU against
// gguf). Q4_1 and Q6_K use quant.cuh's part() as it is (Q4_1 reads aligned words, Q6_K never
// reads past its block); Q8_0 and Q4_0 take its exact form (part<true>: it reads exactly the
// part's bytes, where the plain form reads one aligned word past them), so the tensor's last
// part reads nothing past it.
#pragma once
#include "quant.cuh"

template <int F> BC_DEV void dq_part(const u8* blk, int p, float* q, float& a, float& c) {
    if constexpr (F == BC_Q8_0 || F == BC_Q4_0)
        BcQ<F>::template part<true>(blk, p, q, a, c);   // exact reads (quant.cuh's bcq_words_a2)
    else
        BcQ<F>::part(blk, p, q, a, c);     // Q4_1 (aligned words), Q6_K (never past its block)
}

// The same parts split in two (DQ_RAW=1 in dequant.cu): load() issues a part's loads into a
// few raw words, decode() turns them into the 8 weights later, so a thread holds U parts'
// raw words (3-9 registers each) instead of U x 8 floats while the loads are in flight.
// Every read stays inside the part's block (the unaligned tail word is read as its 2 bytes).
BC_DEV u32 dq_sh(const u8* p) { return (u32)(reinterpret_cast<u64>(p) & 2) * 8u; }
BC_DEV const u32* dq_base(const u8* p) { return reinterpret_cast<const u32*>(reinterpret_cast<u64>(p) & ~(u64)3); }
BC_DEV u32 dq_tail16(const u32* w, u32 sh) { return sh ? (u32)*reinterpret_cast<const u16*>(w) : 0u; }

template <int F> struct DqRaw {          // Q8_0, Q4_0: d, then 8 quant bytes at 2-byte alignment
    u32 d, w0, w1, w2, sh;
    BC_DEV void load(const u8* blk, int p) {
        const u8* s = blk + 2 + 8 * (F == BC_Q8_0 ? p : (p & 1));
        const u32* b = dq_base(s);
        sh = dq_sh(s);
        d = bcq_u16(blk);
        w0 = b[0];
        w1 = b[1];
        w2 = dq_tail16(b + 2, sh);
    }
    BC_DEV uint4 fold() const { return make_uint4(d ^ w0, w1, w2, sh); }   // DQ_FLOOR: the raw words, no decode
    BC_DEV void decode(int p, float* q, float& a, float& c) const {
        a = bc_half_to_float((u16)d);
        const u32 w[2] = {__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh)};
        if constexpr (F == BC_Q8_0) {
            c = -128.f * a;
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const u32 v = w[i] ^ 0x80808080u;
#pragma unroll
                for (int b = 0; b < 4; ++b) q[4 * i + b] = bcq_u2f((v >> (8 * b)) & 0xffu);
            }
        } else {
            c = -8.f * a;
            const u32 ns = (p >> 1) * 4u;
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int b = 0; b < 4; ++b) q[4 * i + b] = bcq_u2f((w[i] >> (8 * b + ns)) & 15u);
        }
    }
};
template <> struct DqRaw<BC_Q4_1> {      // d and m in one aligned word, 8 quant bytes aligned
    u32 dm, w0, w1;
    BC_DEV void load(const u8* blk, int p) {
        dm = *reinterpret_cast<const u32*>(blk);
        const u32* qs = reinterpret_cast<const u32*>(blk + 4 + 8 * (p & 1));
        w0 = qs[0];
        w1 = qs[1];
    }
    BC_DEV uint4 fold() const { return make_uint4(dm, w0, w1, 0u); }
    BC_DEV void decode(int p, float* q, float& a, float& c) const {
        a = bc_half_to_float((u16)(dm & 0xffffu));
        c = bc_half_to_float((u16)(dm >> 16));
        const u32 ns = (p >> 1) * 4u;
        const u32 w[2] = {w0 >> ns, w1 >> ns};
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int b = 0; b < 4; ++b) q[4 * i + b] = bcq_u2f((w[i] >> (8 * b)) & 15u);
    }
};
template <> struct DqRaw<BC_Q6_K> {      // quant.cuh's Q6_K part(): ql, qh (8 bytes each, 2-aligned), scale, d
    u32 d, sc, l0, l1, l2, h0, h1, h2, sh;
    BC_DEV void load(const u8* blk, int p) {
        const int hf = p >> 4, qt = (p >> 2) & 3, o = 8 * (p & 3);
        d = bcq_u16(blk + 208);
        sc = (u32)(int)reinterpret_cast<const i8*>(blk)[192 + 8 * hf + 2 * qt + (o >> 4)];
        const u8* ql = blk + 64 * hf + 32 * (qt & 1) + o;       // same 4-byte phase as blk, as qh
        const u8* qh = blk + 128 + 32 * hf + o;
        sh = dq_sh(ql);
        const u32* bl = dq_base(ql);
        const u32* bh = dq_base(qh);
        l0 = bl[0];
        l1 = bl[1];
        l2 = dq_tail16(bl + 2, sh);
        h0 = bh[0];
        h1 = bh[1];
        h2 = dq_tail16(bh + 2, sh);
    }
    BC_DEV uint4 fold() const { return make_uint4(d ^ sc ^ l0, l1 ^ h0, l2 ^ h1, h2 ^ sh); }
    BC_DEV void decode(int p, float* q, float& a, float& c) const {
        const int qt = (p >> 2) & 3;
        a = bc_half_to_float((u16)d) * (float)(int)sc;
        c = -32.f * a;
        const u32 ql[2] = {__funnelshift_r(l0, l1, sh), __funnelshift_r(l1, l2, sh)};
        const u32 qh[2] = {__funnelshift_r(h0, h1, sh), __funnelshift_r(h1, h2, sh)};
        bcq_q6<2>(ql, qh, (qt >> 1) * 4u, 2u * qt, q);
    }
};

// Q6_K by quads (dequant.cu's DQ6_Q): the 4 parts of a half-block that share their bytes, one
// thread's. Parts (h, quarter qt, o) of half h read ql bytes 64h + 32 (qt & 1) + o (quarters 0, 2:
// low / high nibble; 1, 3 the same) and qh bytes 128 + 32h + o (2 bits a quarter), o = 8 oq:
// load() takes those 3 runs of 8 bytes and the half's 8 scale bytes 192 + 8h (all at the block's
// 2-byte phase: 12 aligned words, 2-byte tails) and d; decode(qt) gives part 16h + 4qt + oq.
struct DqQ6Quad {
    u32 lo0, lo1, lo2, hi0, hi1, hi2, qh0, qh1, qh2, s0, s1, s2, d, sh, so;
    BC_DEV void load(const u8* blk, int h, int oq) {
        const u8* l = blk + 64 * h + 8 * oq;
        sh = dq_sh(l);
        so = (u32)(oq >> 1) * 8u;           // scale byte 2 qt + o / 16 of the half's 8
        const u32* bl = dq_base(l);
        const u32* bh = dq_base(l + 32);
        const u32* bq = dq_base(blk + 128 + 32 * h + 8 * oq);
        const u32* bs = dq_base(blk + 192 + 8 * h);
        lo0 = bl[0]; lo1 = bl[1]; lo2 = dq_tail16(bl + 2, sh);
        hi0 = bh[0]; hi1 = bh[1]; hi2 = dq_tail16(bh + 2, sh);
        qh0 = bq[0]; qh1 = bq[1]; qh2 = dq_tail16(bq + 2, sh);
        s0 = bs[0]; s1 = bs[1]; s2 = dq_tail16(bs + 2, sh);
        d = bcq_u16(blk + 208);
    }
    BC_DEV uint4 fold() const { return make_uint4(lo0 ^ hi0 ^ qh0 ^ s0, lo1 ^ hi1 ^ qh1 ^ s1, lo2 ^ hi2 ^ qh2 ^ s2, d ^ sh ^ so); }
    BC_DEV void decode(int qt, float* q, float& a, float& c) const {
        const u32 l[2] = {qt & 1 ? __funnelshift_r(hi0, hi1, sh) : __funnelshift_r(lo0, lo1, sh),
                          qt & 1 ? __funnelshift_r(hi1, hi2, sh) : __funnelshift_r(lo1, lo2, sh)};
        const u32 hb[2] = {__funnelshift_r(qh0, qh1, sh), __funnelshift_r(qh1, qh2, sh)};
        const u32 sw = qt >> 1 ? __funnelshift_r(s1, s2, sh) : __funnelshift_r(s0, s1, sh);
        a = bc_half_to_float((u16)d) * (float)(int)(i8)(u8)((sw >> (16 * (qt & 1) + so)) & 0xffu);
        c = -32.f * a;
        bcq_q6<2>(l, hb, (qt >> 1) * 4u, 2u * qt, q);
    }
};
