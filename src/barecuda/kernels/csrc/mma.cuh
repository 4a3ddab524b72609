// mma.cuh -- tensor-core building blocks shared by gemm.cu and attention_tile.cuh (decode and prefill attention; owner: K3).
//
// NVRTC compiles these sources with no CUDA headers, so everything below is inline PTX on
// plain integer storage (common.cuh's conversions): a half or bfloat16 value is an unsigned short, a pair of them an
// unsigned int (low half = lower index). Needs sm_80 or newer (mma.sync m16n8k16 with
// bf16, cp.async, ldmatrix, cvt.rn.bf16x2.f32); every PTX instruction here exists in the
// ISA of CUDA 12.0.
#pragma once

#include "common.cuh"

typedef unsigned short bc_u16;
typedef unsigned int bc_u32;

// ---- conversions by dtype flag (IS_BF16: 0 = IEEE half, 1 = bfloat16), on common.cuh's ----
template <int IS_BF16> BC_DEV float bc_to_f(u16 h) { return IS_BF16 ? bc_bf16_to_float(h) : bc_half_to_float(h); }
template <int IS_BF16> BC_DEV u16 bc_from_f(float f) { return IS_BF16 ? bc_float_to_bf16(f) : bc_float_to_half(f); }
// two floats -> one packed pair (lo in the low 16 bits)
template <int IS_BF16> BC_DEV u32 bc_pack2(float lo, float hi) {
    return IS_BF16 ? bc_pack_bf162(lo, hi) : bc_pack_half2(lo, hi);
}

template <int IS_BF16> BC_DEV void bc_unpack2(u32 v, float& lo, float& hi) {
    lo = bc_to_f<IS_BF16>((u16)(v & 0xffffu));
    hi = bc_to_f<IS_BF16>((u16)(v >> 16));
}

// ---- shared memory addresses, cp.async ----------------------------------------------------
BC_DEV bc_u32 bc_smem_addr(const void* p) { return (bc_u32)__cvta_generic_to_shared(p); }

// 16-byte global -> shared copy; when !pred the destination is zero-filled and nothing is read
// (src must still be a valid address: callers pass the tensor's base then).
BC_DEV void bc_cp_async16(bc_u32 dst, const void* src, bool pred) {
    int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
// the same with an L2 prefetch hint: the L2 fetches the whole 256-byte block around src
BC_DEV void bc_cp_async16_pf(bc_u32 dst, const void* src, bool pred) {
    int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
BC_DEV void bc_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> BC_DEV void bc_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// ---- ldmatrix ------------------------------------------------------------------------------
BC_DEV void bc_ldsm_x4(bc_u32 addr, bc_u32& r0, bc_u32& r1, bc_u32& r2, bc_u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
BC_DEV void bc_ldsm_x4_t(bc_u32 addr, bc_u32& r0, bc_u32& r1, bc_u32& r2, bc_u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

// ---- mma.sync m16n8k16, fp32 accumulate ----------------------------------------------------
template <int IS_BF16>
BC_DEV void bc_mma16816(float* c, bc_u32 a0, bc_u32 a1, bc_u32 a2, bc_u32 a3, bc_u32 b0, bc_u32 b1);
#define BC_MMA16816(IS_BF16, TY)                                                                          \
    template <>                                                                                           \
    BC_DEV void bc_mma16816<IS_BF16>(float* c, bc_u32 a0, bc_u32 a1, bc_u32 a2, bc_u32 a3, bc_u32 b0,     \
                                     bc_u32 b1) {                                                         \
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 {%0,%1,%2,%3}, "            \
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                                           \
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                     \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));                             \
    }
BC_MMA16816(0, "f16")
BC_MMA16816(1, "bf16")
#undef BC_MMA16816

BC_DEV float bc_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
