// attention_tile.cuh -- what decode and prefill attention share: the head-dim constants and one
// warp's flash-attention tile on tensor cores (mma.sync m16n8k16), online softmax in the log2 domain.
// Included by attention_decode.cu and attention_prefill.cu (HEAD_DIM: 64, 80, 96, 128; any multiple
// of 16 up to 256 compiles).
//
// Shared-memory tiles hold rows of HEAD_DIM elements padded by 16 bytes, which makes every
// ldmatrix phase (8 rows x 16 bytes) hit 8 distinct bank groups for all head dims above.
#pragma once
#include "mma.cuh"

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif

static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM >= 16 && HEAD_DIM <= 256, "HEAD_DIM: a multiple of 16 up to 256");

namespace {

constexpr int D = HEAD_DIM;
constexpr int RS = D * 2 + 16;       // bytes per shared row (padded)
constexpr int CPR = D / 8;           // 16-byte chunks per row

BC_DEV float neg_inf() { return __int_as_float(0xff800000); }

// One warp: 16 query rows (A fragments qf) against NT keys held in shared memory at k_s/v_s
// (row r at +r*RS). Updates the running max m (log2 domain), the per-lane partial row sums l
// and the unnormalized output o. Keys >= kv_end, and with causal keys > row + causal_off, are masked.
template <int IS_BF16, int NT, bool MASK>
BC_DEV void attn_tile(const bc_u32 (&qf)[D / 16][4], bc_u32 k_s, bc_u32 v_s, float (&o)[D / 8][4], float (&m)[2],
                      float (&l)[2], float scale_log2, int lane, int row0, int col0, int kv_end, bool causal,
                      int causal_off) {
    float s[NT / 8][4];
#pragma unroll
    for (int j = 0; j < NT / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
    const bc_u32 k_lane = k_s + (bc_u32)(((lane & 7) + ((lane >> 4) << 3)) * RS + (((lane >> 3) & 1) << 4));
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
        for (int j = 0; j < NT / 8; j += 2) {
            bc_u32 b0, b1, b2, b3;
            bc_ldsm_x4(k_lane + (bc_u32)(j * 8 * RS + kk * 32), b0, b1, b2, b3);
            bc_mma16816<IS_BF16>(s[j], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b0, b1);
            bc_mma16816<IS_BF16>(s[j + 1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b2, b3);
        }
    }
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < NT / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float x = s[j][e] * scale_log2;
            if (MASK) {
                int key = col0 + j * 8 + 2 * (lane & 3) + (e & 1);
                int row = row0 + (e >> 1) * 8;
                if (key >= kv_end || (causal && key > row + causal_off)) x = neg_inf();
            }
            s[j][e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    float base[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        base[r] = (mx[r] == neg_inf()) ? 0.f : mx[r];
        alpha[r] = bc_exp2(m[r] - base[r]);
        m[r] = mx[r];
        l[r] *= alpha[r];
    }
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
        o[j][0] *= alpha[0];
        o[j][1] *= alpha[0];
        o[j][2] *= alpha[1];
        o[j][3] *= alpha[1];
    }
#pragma unroll
    for (int j = 0; j < NT / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float p = bc_exp2(s[j][e] - base[e >> 1]);
            s[j][e] = p;
            l[e >> 1] += p;
        }
    }
    const bc_u32 v_lane = v_s + (bc_u32)(((lane & 7) + (((lane >> 3) & 1) << 3)) * RS + ((lane >> 4) << 4));
#pragma unroll
    for (int kk = 0; kk < NT / 16; ++kk) {
        bc_u32 a0 = bc_pack2<IS_BF16>(s[2 * kk][0], s[2 * kk][1]);
        bc_u32 a1 = bc_pack2<IS_BF16>(s[2 * kk][2], s[2 * kk][3]);
        bc_u32 a2 = bc_pack2<IS_BF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        bc_u32 a3 = bc_pack2<IS_BF16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int j = 0; j < D / 8; j += 2) {
            bc_u32 b0, b1, b2, b3;
            bc_ldsm_x4_t(v_lane + (bc_u32)(kk * 16 * RS + j * 16), b0, b1, b2, b3);
            bc_mma16816<IS_BF16>(o[j], a0, a1, a2, a3, b0, b1);
            bc_mma16816<IS_BF16>(o[j + 1], a0, a1, a2, a3, b2, b3);
        }
    }
}

}  // namespace
