// dequant.cu -- GGUF blocks to floats: y[i] = w[i] over a whole tensor.
//
// Entry points dequant_<fmt>_<out> (fmt in q4_0, q4_1, q8_0, q4_k, q6_k; out in f32, f16,
// bf16), parameters (const u8* q, out_t* y, long long nblocks). A tensor's blocks are
// contiguous and its weights are the blocks' weights in order, so the kernel is flat over
// blocks. By default Q4_K, Q8_0 and Q4_1 are read straight from global memory into registers
// (dequant_q4k_direct, dequant_direct below), Q4_0 and Q6_K staged. The staged kernel (DQ_DIRECT=0 /
// DQ_DIRECT_ALL=0): each warp takes segments of blocks (grid-stride), stages them into shared memory
// (cp.async, double-buffered; quant.cuh), and each lane decodes 8 consecutive weights (the
// warp's lanes covering blocks contiguously) and writes them with one 16-byte store
// (DQ_P8=0: a lane decodes 32-weight units).
#include "common.cuh"
#include "quant.cuh"
#include "dequant_direct.cuh"

#define DQ_WARPS 4
#ifndef DQ_P8
#define DQ_P8 1         // 1 = 8 weights per lane (BcQ::part: coalesced stores), 0 = 32 (BcQ::unit)
#endif                  // (H200, 14336x4096 -> f16: 56-59% of spec against 29-44% with 0)

template <typename OT> BC_DEV void dq_store32(OT* y, const float* w) {
#pragma unroll
    for (int i = 0; i < 32 / BcVec<OT>::N; ++i) {
        BcVec<OT> v;
        bc_vpack(v, w + i * BcVec<OT>::N);
        bc_vstore(y + i * BcVec<OT>::N, v);
    }
}

// 8 decoded weights q as a q + c, written to yp with 16-byte stores (a part: every kernel here);
// CS: streaming stores (st.global.cs: evict-first in L2). DQ_CS: 0 none, 1 every kernel, 2 the
// staged kernel only (H200 14336x4096 -> f16, 2026-11-27 02:2x UTC, same run: staged Q6_K 64.4%
// of spec with them against 62.7, staged Q4_0 76.4 against 68.4; the direct kernels the same or
// up to 0.8 points slower)
#ifndef DQ_CS
#define DQ_CS 2
#endif
template <bool CS = false, typename OT> BC_DEV void dq_store8(OT* yp, float* q, float a, float c) {
#pragma unroll
    for (int i = 0; i < 8; ++i) q[i] = fmaf(a, q[i], c);
#pragma unroll
    for (int i = 0; i < 8 / BcVec<OT>::N; ++i) {
        BcVec<OT> v;
        bc_vpack(v, q + i * BcVec<OT>::N);
        if (CS)
            asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" :: "l"(yp + i * BcVec<OT>::N),
                     "r"(v.raw.x), "r"(v.raw.y), "r"(v.raw.z), "r"(v.raw.w) : "memory");
        else
            bc_vstore(yp + i * BcVec<OT>::N, v);
    }
}

template <int F, typename OT>
BC_DEV void dequant(const u8* __restrict__ qb, OT* __restrict__ y, long long nblocks) {
    using Q = BcQ<F>;
    constexpr int SEGB = Q::QK == 256 ? 8 : 64;
    constexpr int SB = BCQ_STAGE_BYTES(SEGB * Q::BYTES);
    __shared__ __align__(16) u8 stage[DQ_WARPS][2][SB];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    const long long gw = (long long)blockIdx.x * DQ_WARPS + wi, tw = (long long)gridDim.x * DQ_WARPS;
    const long long nseg = (nblocks + SEGB - 1) / SEGB;
    const u8* end = qb + nblocks * Q::BYTES;
    if (gw >= nseg) return;
    auto stage_seg = [&](long long sg, int buf) {
        const int nb = (int)min((long long)SEGB, nblocks - sg * SEGB);
        bcq_stage(stage[wi][buf], qb + sg * SEGB * Q::BYTES, nb * Q::BYTES, end, lane);
    };
    stage_seg(gw, 0);
    bcq_commit();
    int buf = 0;
    for (long long sg = gw; sg < nseg; sg += tw, buf ^= 1) {
        if (sg + tw < nseg) stage_seg(sg + tw, buf ^ 1);
        bcq_commit();
        bcq_wait<1>();
        __syncwarp();
        const int nbk = (int)min((long long)SEGB, nblocks - sg * SEGB);
        const u8* g = qb + sg * SEGB * Q::BYTES;
        const u8* s0 = stage[wi][buf] + (reinterpret_cast<u64>(g) & 15);
#if DQ_P8
        // 8 weights per lane, lanes covering blocks contiguously: coalesced 16-byte stores
        constexpr int P = Q::QK / 8;
        for (int gp = lane; gp < nbk * P; gp += 32) {
            const int blk = gp / P, pi = gp % P;
            float q[8], a, c;
            Q::part(s0 + blk * Q::BYTES, pi, q, a, c);
            dq_store8<DQ_CS != 0>(y + ((sg * SEGB + blk) * Q::QK + pi * 8), q, a, c);
        }
#else
        for (int u = lane; u < nbk * Q::UNITS; u += 32) {
            const int blk = u / Q::UNITS, ui = u % Q::UNITS;
            float q[32], a[2], c[2];
            Q::unit(s0 + blk * Q::BYTES, ui, q, a, c);
#pragma unroll
            for (int i = 0; i < 32; ++i) q[i] = fmaf(a[i >> 4], q[i], c[i >> 4]);
            dq_store32(y + ((sg * SEGB + blk) * Q::QK + ui * 32), q);
        }
#endif
        __syncwarp();
    }
}

// Q4_K (16-byte aligned blocks) straight from global memory, no staging (DQ_DIRECT=1): a
// block of threads takes runs of DQ_K4U x 4 Q4_K blocks (DQ_K4U x 128 parts of 8 weights), thread
// i the parts i, i + 128, ...: a part's 8 quant bytes and its block's 16-byte head (the 32
// threads of a block read the same one) in registers, all DQ_K4U parts' loads issued before any
// is used.
#ifndef DQ_DIRECT
#define DQ_DIRECT 1
#endif
#ifndef DQ_K4U
#define DQ_K4U 6        // parts a thread of the Q4_K direct kernel (H200 2026-11-27 02:2x, same run:
#endif                  // 6: 77.5% of spec, 56 registers; 4: 76.5; 8: 75.8, 68; 12: 71.5, 128; 02:3x:
                        // 6: 76.9-77.4, 8: 75.6-75.8, 4: 76.3-76.4)
BC_DEV uint4 dq_ld16(const u8* p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
BC_DEV uint2 dq_ld8(const u8* p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
template <typename OT>
BC_DEV void dequant_q4k_direct(const u8* __restrict__ qb, OT* __restrict__ y, long long nblocks) {
    using Q = BcQ<BC_Q4_K>;
    constexpr int U = DQ_K4U, T = 32 * DQ_WARPS;
    const long long nparts = nblocks * 32;
    for (long long base = (long long)blockIdx.x * (U * T); base < nparts; base += (long long)gridDim.x * (U * T)) {
        uint4 h[U];
        uint2 w[U];
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i < nparts) {
                const u8* b = qb + (i >> 5) * 144;
                const int p = (int)(i & 31);
                h[j] = dq_ld16(b);
                w[j] = dq_ld8(b + 16 + 32 * (p >> 3) + 8 * (p & 3));
            }
        }
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i >= nparts) break;
            float q[8], a, c;
            Q::part_r(h[j], w[j], (int)(i & 31), q, a, c);
            dq_store8<DQ_CS == 1>(y + i * 8, q, a, c);
        }
    }
}

// The other formats straight from global memory too (DQ_DIRECT_ALL=1): thread i of a block
// takes parts (8 weights) base + i, base + i + 128, ... (DQ_U of them, all decoded from
// loads issued together); a warp's 32 parts are contiguous bytes, so its loads share L1
// sectors and its 16-byte stores are coalesced. Blocks of Q6_K/Q8_0/Q4_0 are 2-byte aligned:
// words are read aligned and funnel-shifted (quant.cuh's decoders; for Q8_0/Q4_0 a copy here
// that reads the word past the part only when the part is unaligned, so the tensor's last
// part reads nothing past the tensor).
// DQ_DIRECT_ALL: 2 = per format, as measured (H200, 14336x4096 -> f16, % of spec, 2026-11-27
// 02:2x and 02:3x UTC, two runs): Q8_0 78.0-78.9 direct (DQ_RAW=1 DQ_U=8; 66.8 direct U=4 without
// DQ_RAW, the earlier default), Q4_1 76.5-77.2 direct (64.9); Q4_0 staged with streaming stores
// 76.2-76.4 (staged without them 68.4, direct 74.9-75.5); Q6_K staged 64.2-64.4 (62.8 without
// streaming stores; direct with DQ_RAW 63.4 at U=3, 59.4 at 4, 41.3 at 8). 1 = every format direct;
// 0 = every format staged. DQ_U: parts a thread; DQ_RAW=1 loads their raw words first and
// decodes each after (dequant_direct.cuh): 46-63 registers at U=8 for the 32-weight formats
// where U=8 without it took ~94 (45-53% of spec); U 4 / 6 / 12 measured within a point of 8.
#ifndef DQ_DIRECT_ALL
#define DQ_DIRECT_ALL 2
#endif
#ifndef DQ_U
#define DQ_U 8
#endif
#ifndef DQ_RAW
#define DQ_RAW 1
#endif
template <int F> struct DqDirect {
    static constexpr bool value = DQ_DIRECT_ALL == 1 || (DQ_DIRECT_ALL == 2 && (F == BC_Q8_0 || F == BC_Q4_1));
};
template <int F, typename OT>
BC_DEV void dequant_direct(const u8* __restrict__ qb, OT* __restrict__ y, long long nblocks) {
    using Q = BcQ<F>;
    constexpr int P = Q::QK / 8, U = DQ_U, T = 32 * DQ_WARPS;
    const long long nparts = nblocks * P;
    for (long long base = (long long)blockIdx.x * (U * T); base < nparts; base += (long long)gridDim.x * (U * T)) {
#if DQ_RAW
        // the U parts' raw words loaded first, each decoded and stored after (dequant_direct.cuh)
        DqRaw<F> r[U];
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i < nparts) r[j].load(qb + (i / P) * Q::BYTES, (int)(i % P));
        }
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i >= nparts) break;
            float q[8], a, c;
            r[j].decode((int)(i % P), q, a, c);
            dq_store8<DQ_CS == 1>(y + i * 8, q, a, c);
        }
#else
        float q[U][8], a[U], c[U];
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i < nparts) dq_part<F>(qb + (i / P) * Q::BYTES, (int)(i % P), q[j], a[j], c[j]);
        }
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i >= nparts) break;
            dq_store8<DQ_CS == 1>(y + i * 8, q[j], a[j], c[j]);
        }
#endif
    }
}

template <int F, typename OT> BC_DEV void dequant_entry(const u8* q, OT* y, long long nblocks) {
    if constexpr (F == BC_Q4_K && DQ_DIRECT) dequant_q4k_direct<OT>(q, y, nblocks);
    else if constexpr (F != BC_Q4_K && DqDirect<F>::value) dequant_direct<F, OT>(q, y, nblocks);
    else dequant<F, OT>(q, y, nblocks);
}

#define DQ_ENTRY(fname, F, code, OT)                                                             \
    extern "C" __global__ void __launch_bounds__(32 * DQ_WARPS)                                 \
    dequant_##fname##_##code(const u8* q, OT* y, long long nblocks) { dequant_entry<F, OT>(q, y, nblocks); }
#define DQ_OUTS(fname, F) DQ_ENTRY(fname, F, f32, float) DQ_ENTRY(fname, F, f16, bc_half) DQ_ENTRY(fname, F, bf16, bc_bf16)
DQ_OUTS(q4_0, BC_Q4_0)
DQ_OUTS(q4_1, BC_Q4_1)
DQ_OUTS(q8_0, BC_Q8_0)
DQ_OUTS(q4_k, BC_Q4_K)
DQ_OUTS(q6_k, BC_Q6_K)
