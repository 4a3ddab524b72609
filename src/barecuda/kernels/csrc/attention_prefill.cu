// attention_prefill.cu -- causal or full flash attention on tensor cores (mma.sync m16n8k16),
// online softmax, GQA.
//
// Entry points: attn_prefill_<dt> (IS_BF16 0/1 -> f16/bf16).
// Defines: HEAD_DIM (attention_tile.cuh), PF_WARPS, PF_STAGES, PF_QREG, PF_MINB.
#include "attention_tile.cuh"

#ifndef PF_WARPS
#define PF_WARPS 4
#endif
#ifndef PF_QREG
#define PF_QREG 1    // 1: prefill reads Q straight into registers (no shared Q tile)
#endif
#ifndef PF_MINB
#define PF_MINB 2    // prefill __launch_bounds__ minimum blocks per SM
#endif
#ifndef PF_STAGES
#define PF_STAGES 2
#endif

namespace {

// ------------------------------------------------------------------------------------------
// prefill
// ------------------------------------------------------------------------------------------
constexpr int PF_BM = 16 * PF_WARPS;
constexpr int PF_BN = 64;

template <int IS_BF16>
BC_DEV void attn_prefill_impl(const bc_u16* __restrict__ q, const bc_u16* __restrict__ k, const bc_u16* __restrict__ v,
                              bc_u16* __restrict__ out, int sq, int skv, int group, long long q_tok, long long q_head,
                              long long q_batch, long long k_tok, long long k_head, long long k_batch, long long v_tok,
                              long long v_head, long long v_batch, long long o_tok, long long o_head, long long o_batch,
                              int causal, int causal_off, float scale_log2) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int mb = gridDim.x - 1 - blockIdx.x;   // heavy (late, causal) blocks first
    const int head = blockIdx.y, b = blockIdx.z, kvh = head / group;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const bc_u16* qb = q + b * q_batch + head * q_head;
    const bc_u16* kb = k + b * k_batch + kvh * k_head;
    const bc_u16* vb = v + b * v_batch + kvh * v_head;
    const bc_u32 sq_s = bc_smem_addr(smem);
    const bc_u32 skv_s = sq_s + (PF_QREG ? 0 : PF_BM * RS);
    constexpr int STAGE_BYTES = 2 * PF_BN * RS;
    const int m0 = mb * PF_BM;
    bc_u32 qf[D / 16][4];

    if (PF_QREG) {
        const int r0 = m0 + warp * 16 + (lane >> 2), r1 = r0 + 8;
        const bc_u16* q0 = qb + (long long)r0 * q_tok + 2 * (lane & 3);
        const bc_u16* q1 = qb + (long long)r1 * q_tok + 2 * (lane & 3);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            qf[kk][0] = r0 < sq ? *(const bc_u32*)(q0 + kk * 16) : 0u;
            qf[kk][1] = r1 < sq ? *(const bc_u32*)(q1 + kk * 16) : 0u;
            qf[kk][2] = r0 < sq ? *(const bc_u32*)(q0 + kk * 16 + 8) : 0u;
            qf[kk][3] = r1 < sq ? *(const bc_u32*)(q1 + kk * 16 + 8) : 0u;
        }
    } else {
        for (int c = tid; c < PF_BM * CPR; c += PF_WARPS * 32) {
            const int row = c / CPR, col = c % CPR;
            const bool ok = m0 + row < sq;
            bc_cp_async16(sq_s + (bc_u32)(row * RS + col * 16), ok ? qb + (m0 + row) * q_tok + col * 8 : q, ok);
        }
    }
    bc_cp_async_commit();

    int kv_lim = skv;
    if (causal) kv_lim = min(skv, max(0, m0 + PF_BM + causal_off));
    const int ntile = (kv_lim + PF_BN - 1) / PF_BN;
    auto load = [&](int it) {
        const bc_u32 ks = skv_s + (bc_u32)((it % PF_STAGES) * STAGE_BYTES);
        const bc_u32 vs = ks + PF_BN * RS;
        for (int c = tid; c < PF_BN * CPR; c += PF_WARPS * 32) {
            const int row = c / CPR, col = c % CPR;
            const int tok = it * PF_BN + row;
            const bool ok = tok < skv;
            bc_cp_async16(ks + (bc_u32)(row * RS + col * 16), ok ? kb + tok * k_tok + col * 8 : k, ok);
            bc_cp_async16(vs + (bc_u32)(row * RS + col * 16), ok ? vb + tok * v_tok + col * 8 : v, ok);
        }
    };
#pragma unroll
    for (int s = 0; s < PF_STAGES - 1; ++s) {
        if (s < ntile) load(s);
        bc_cp_async_commit();
    }
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};
    const int row0 = m0 + warp * 16 + (lane >> 2);
    for (int it = 0; it < ntile; ++it) {
        bc_cp_async_wait<PF_STAGES - 2>();
        __syncthreads();
        if (!PF_QREG && it == 0) {
            const bc_u32 a = sq_s + (bc_u32)((warp * 16 + (lane & 15)) * RS + ((lane >> 4) << 4));
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) bc_ldsm_x4(a + kk * 32, qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
        }
        if (it + PF_STAGES - 1 < ntile) load(it + PF_STAGES - 1);
        bc_cp_async_commit();
        const bc_u32 ks = skv_s + (bc_u32)((it % PF_STAGES) * STAGE_BYTES);
        const bc_u32 vs = ks + PF_BN * RS;
        const int col0 = it * PF_BN;
        const bool need_mask = (col0 + PF_BN > skv) || (causal && col0 + PF_BN - 1 > m0 + warp * 16 + causal_off);
        if (need_mask)
            attn_tile<IS_BF16, PF_BN, true>(qf, ks, vs, o, m, l, scale_log2, lane, row0, col0, skv, causal != 0, causal_off);
        else
            attn_tile<IS_BF16, PF_BN, false>(qf, ks, vs, o, m, l, scale_log2, lane, row0, col0, skv, false, 0);
    }
    bc_cp_async_wait<0>();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    const float inv0 = l[0] > 0.f ? 1.f / l[0] : 0.f, inv1 = l[1] > 0.f ? 1.f / l[1] : 0.f;
    bc_u16* ob = out + b * o_batch + head * o_head;
    const int t = lane & 3;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
        if (row0 < sq) *(bc_u32*)(ob + row0 * o_tok + j * 8 + 2 * t) = bc_pack2<IS_BF16>(o[j][0] * inv0, o[j][1] * inv0);
        if (row0 + 8 < sq)
            *(bc_u32*)(ob + (row0 + 8) * o_tok + j * 8 + 2 * t) = bc_pack2<IS_BF16>(o[j][2] * inv1, o[j][3] * inv1);
    }
}

}  // namespace

#define BC_ATTN_ENTRIES(DT, B)                                                                                   \
    extern "C" __global__ void __launch_bounds__(PF_WARPS * 32, PF_MINB) attn_prefill_##DT(                     \
        const bc_u16* q, const bc_u16* k, const bc_u16* v, bc_u16* out, int sq, int skv, int group,             \
        long long q_tok, long long q_head, long long q_batch, long long k_tok, long long k_head,                \
        long long k_batch, long long v_tok, long long v_head, long long v_batch, long long o_tok,               \
        long long o_head, long long o_batch, int causal, int causal_off, float scale_log2) {                    \
        attn_prefill_impl<B>(q, k, v, out, sq, skv, group, q_tok, q_head, q_batch, k_tok, k_head, k_batch,      \
                             v_tok, v_head, v_batch, o_tok, o_head, o_batch, causal, causal_off, scale_log2);   \
    }

BC_ATTN_ENTRIES(f16, 0)
BC_ATTN_ENTRIES(bf16, 1)
