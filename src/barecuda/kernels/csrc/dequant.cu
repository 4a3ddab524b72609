// dequant.cu -- GGUF blocks to floats: y[i] = w[i] over a whole tensor.
//
// Entry points dequant_<fmt>_<out> (fmt in q4_0, q4_1, q8_0, q4_k, q6_k; out in f32, f16,
// bf16), parameters (const u8* q, out_t* y, long long nblocks). A tensor's blocks are
// contiguous and its weights are the blocks' weights in order, so the kernel is flat over
// blocks. By default Q4_K, Q8_0 and Q4_1 are read straight from global memory into registers
// (dequant_q4k_direct, dequant_direct below), Q6_K too, 4 parts sharing bytes a thread
// (dequant_q6k_quads), Q4_0 staged. The staged kernel (DQ_DIRECT=0 /
// DQ_DIRECT_ALL=0): each warp takes segments of blocks (grid-stride), stages them into shared memory
// (cp.async, double-buffered; quant.cuh), and each lane decodes 8 consecutive weights (the
// warp's lanes covering blocks contiguously) and writes them with one 16-byte store
// (DQ_P8=0: a lane decodes 32-weight units).
#include "common.cuh"
#include "quant.cuh"
#include "dequant_direct.cuh"

#ifndef DQ_WARPS
#define DQ_WARPS 4      // warps a block (the host launches 32 * _dequant._WARPS threads: sweeps bind their own)
#endif
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
// DQ_ST (sweeps): the direct kernels' store instruction where DQ_CS leaves them plain: 0 as DQ_CS
// says, 2 st.global with an L2 evict_first cache policy, 3 with an L2 evict_last policy
// (dq_st16's OP: 0 plain, 1 .cs, 2 / 3 those policies)
#ifndef DQ_ST
#define DQ_ST 0
#endif
#define DQ_STOP (DQ_ST ? DQ_ST : (DQ_CS == 1 ? 1 : 0))
template <int OP> BC_DEV void dq_st16(void* p, uint4 v) {
    if constexpr (OP == 1) {
        asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
    } else if constexpr (OP == 2 || OP == 3) {
        u64 pol;
        if constexpr (OP == 2) asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
        else asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
        asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
                     :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(pol) : "memory");
    } else {
        *reinterpret_cast<uint4*>(p) = v;
    }
}
// DQ_F32P=1 (f32 outputs): a part's 8 floats are 32 bytes = one L2 sector, written by two 16-byte
// stores; from one thread (the plain form) each store instruction covers half of every sector it
// touches, and the L2 fills each sector from memory before merging (measured 2026-11-27 09:4x:
// f32 outputs ran at 42-45% of spec counting 4-byte outputs, as if the output were read as
// well). With it, the two threads of a lane pair (consecutive parts in every kernel here, both
// present or both past the end) swap halves (one shuffle of 16 bytes), so each store
// instruction writes whole sectors.
// DQ_F32P: 1 (the default since 2026-11-27 10:1x: H200 14336x4096 -> f32, three rounds, same run:
// Q4_K 78.6-78.8% of spec against 41.8-42.2, Q6_K 78.0-78.1 / 44.7, Q8_0 79.9-80.3 / 45.0-45.1, Q4_0
// 78.1 / 42.0), 0 the plain form; runs written through shared memory (DQ_TMA: Q4_1) keep the plain
// form (PAIR = false: Q4_1 78.6-79.0 so, 76.6-77.0 with the pairs)
#ifndef DQ_F32P
#define DQ_F32P 1
#endif
template <int OP = 0, bool PAIR = DQ_F32P != 0, typename OT> BC_DEV void dq_store8(OT* yp, float* q, float a, float c) {
#pragma unroll
    for (int i = 0; i < 8; ++i) q[i] = fmaf(a, q[i], c);
    if constexpr (PAIR && sizeof(OT) == 4) {
        // lanes 2k, 2k+1 hold parts P, P+1; the first store writes P's sector (the even lane its
        // first half, the odd lane P's second half, received), the second P+1's
        const uint4 v0 = make_uint4(__float_as_uint(q[0]), __float_as_uint(q[1]), __float_as_uint(q[2]), __float_as_uint(q[3]));
        const uint4 v1 = make_uint4(__float_as_uint(q[4]), __float_as_uint(q[5]), __float_as_uint(q[6]), __float_as_uint(q[7]));
        const bool odd = (threadIdx.x & 1) != 0;
        const uint4 snd = odd ? v0 : v1;
        const unsigned m = 3u << (threadIdx.x & 30);       // the pair: both present or both past the end
        const uint4 r = make_uint4(__shfl_xor_sync(m, snd.x, 1), __shfl_xor_sync(m, snd.y, 1),
                                   __shfl_xor_sync(m, snd.z, 1), __shfl_xor_sync(m, snd.w, 1));
        dq_st16<OP>(odd ? yp - 4 : yp, odd ? r : v0);
        dq_st16<OP>(odd ? yp + 4 : yp + 8, odd ? v1 : r);
    } else {
#pragma unroll
        for (int i = 0; i < 8 / BcVec<OT>::N; ++i) {
            BcVec<OT> v;
            bc_vpack(v, q + i * BcVec<OT>::N);
            if constexpr (OP == 0)
                bc_vstore(yp + i * BcVec<OT>::N, v);
            else
                dq_st16<OP>(yp + i * BcVec<OT>::N, v.raw);
        }
    }
}

// DQ_FLOOR=1: a timing floor, NOT a dequantize: the direct kernels issue the same loads and
// stores but write the raw words (no decode, no conversion), so a sweep can time what this
// load/store structure reaches at the format's read:write byte mix
#ifndef DQ_FLOOR
#define DQ_FLOOR 0
#endif
template <int OP = 0, typename OT> BC_DEV void dq_store_raw8(OT* yp, uint4 v) {
#pragma unroll
    for (int i = 0; i < 8 / BcVec<OT>::N; ++i) {
        BcVec<OT> o;
        o.raw = make_uint4(v.x, v.y, v.z, v.w ^ (u32)i);
        if constexpr (OP == 0)
            bc_vstore(yp + i * BcVec<OT>::N, o);
        else
            dq_st16<OP>(yp + i * BcVec<OT>::N, o.raw);
    }
}

// DQ_TMA=1 (sm_90; ignored below): the direct kernels put a block's run of decoded parts into
// shared memory and thread 0 writes the run with one bulk copy (cp.async.bulk, the TMA's
// 1-D form) instead of 16-byte stores from every thread. DqRunOut<OT, NP>: a run of NP parts
// (8 weights each); put() takes part i of the run, flush() writes the first n parts to y.
// DQ_TMA: 0 off, 1 every direct kernel, 2 per format as measured: Q4_1 only (H200 14336x4096 -> f16,
// 2026-11-27 06:0x UTC, two rounds of one run: Q4_1 78.9-79.0% of spec against 77.8-78.0; Q4_K
// 73.1-73.3 against 78.2-78.4, Q6_K by quads 77.1-77.5 against 79.6-79.7, Q4_0 direct 71.8-73.0,
// Q8_0 79.1-79.2 against 79.0-79.4; a second run, 06:1x, gave Q4_1 with it 77.4-77.9, no
// comparison row: a point at most)
#ifndef DQ_TMA
#define DQ_TMA 2
#endif
#if DQ_TMA && __CUDA_ARCH__ >= 900
#define DQ_TMA_ON 1
#else
#define DQ_TMA_ON 0
#endif
template <int F> struct DqTma { static constexpr bool value = DQ_TMA_ON && (DQ_TMA == 1 || F == BC_Q4_1); };
template <typename OT, int NP, bool ON> struct DqRunOut;
template <typename OT, int NP> struct DqRunOut<OT, NP, true> {
    static constexpr bool ON = true;
    OT* s;
    BC_DEV explicit DqRunOut(OT* smem) : s(smem) {}
    // before the run's puts: the previous run's bulk copy has read the buffer (after its loads
    // are issued, so the wait overlaps them)
    BC_DEV void begin() const {
        if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
        __syncthreads();
    }
    BC_DEV void put(OT*, long long j, float* q, float a, float c) const { dq_store8<0, false>(s + j * 8, q, a, c); }
    BC_DEV void put_raw(OT*, long long j, uint4 v) const { dq_store_raw8(s + j * 8, v); }
    BC_DEV void flush(OT* y, int n) const {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (threadIdx.x == 0 && n > 0) {
            const u32 sa = (u32)__cvta_generic_to_shared(s);
            asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                         :: "l"(y), "r"(sa), "r"((u32)(n * 8 * (int)sizeof(OT))) : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
    }
    BC_DEV void end() const {
        if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    }
};
// without DQ_TMA (and for runs over 32 KB: f32 output at 8 warps): 16-byte stores from each thread
template <typename OT, int NP> struct DqRunOut<OT, NP, false> {
    static constexpr bool ON = false;
    BC_DEV explicit DqRunOut(OT*) {}
    BC_DEV void begin() const {}
    BC_DEV void put(OT* yp, long long, float* q, float a, float c) const { dq_store8<DQ_STOP>(yp, q, a, c); }
    BC_DEV void put_raw(OT* yp, long long, uint4 v) const { dq_store_raw8<DQ_STOP>(yp, v); }
    BC_DEV void flush(OT*, int) const {}
    BC_DEV void end() const {}
};
// `out`, the run writer of a kernel of format F: through shared memory where DqTma<F> and the run
// fits in 32 KB (f32 runs at 8 warps do not), else plain stores
#define DQ_RUN_ON(F, OT, NP) (DqTma<F>::value && (NP) * 8 * sizeof(OT) <= 32768)
#if DQ_TMA_ON
#define DQ_RUN_SMEM(F, OT, NP)                                                                   \
    __shared__ __align__(128) OT dq_run_s[DQ_RUN_ON(F, OT, NP) ? (NP) * 8 : 1];                \
    DqRunOut<OT, (NP), DQ_RUN_ON(F, OT, NP)> out(dq_run_s)
#else
#define DQ_RUN_SMEM(F, OT, NP) DqRunOut<OT, (NP), false> out(nullptr)
#endif

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
            dq_store8<DQ_CS != 0 ? 1 : 0>(y + ((sg * SEGB + blk) * Q::QK + pi * 8), q, a, c);
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
// DQ_LDH (sweeps): Q4_K's loads with 0 no hint, 1 an L2 prefetch size of 256 bytes (.L2::256B),
// 2 its quant bytes with an L2 evict_first cache policy
#ifndef DQ_LDH
#define DQ_LDH 0
#endif
BC_DEV uint4 dq_ld16(const u8* p) {
    uint4 v;
    if (DQ_LDH == 1)
        asm volatile("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    else
        asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
BC_DEV uint2 dq_ld8(const u8* p) {
    uint2 v;
    if (DQ_LDH == 1) {
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    } else if (DQ_LDH == 2) {
        u64 pol;
        asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
        asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(pol));
    } else {
        asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    }
    return v;
}

// DQ_PIPE=1 (sweeps; a grid smaller than the tensor's runs, e.g. a few blocks a multiprocessor):
// the direct kernels' grid-stride loop pipelined in registers: a block's next run's loads are
// issued before its current run is decoded and stored, so each thread keeps loads in flight
// while it stores (two runs' raw words a thread)
#ifndef DQ_PIPE
#define DQ_PIPE 0
#endif
template <typename OT>
BC_DEV void dequant_q4k_direct(const u8* __restrict__ qb, OT* __restrict__ y, long long nblocks) {
    using Q = BcQ<BC_Q4_K>;
    constexpr int U = DQ_K4U, T = 32 * DQ_WARPS;
    const long long nparts = nblocks * 32;
    DQ_RUN_SMEM(BC_Q4_K, OT, U * T);
#if DQ_PIPE
    const long long stride = (long long)gridDim.x * (U * T);
    uint4 h[U], hn[U];
    uint2 w[U], wn[U];
    auto load = [&](long long base, uint4* hh, uint2* ww) {
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i < nparts) {
                const u8* b = qb + (i >> 5) * 144;
                const int p = (int)(i & 31);
                hh[j] = dq_ld16(b);
                ww[j] = dq_ld8(b + 16 + 32 * (p >> 3) + 8 * (p & 3));
            }
        }
    };
    if ((long long)blockIdx.x * (U * T) < nparts) load((long long)blockIdx.x * (U * T), h, w);
    for (long long base = (long long)blockIdx.x * (U * T); base < nparts; base += stride) {
        if (base + stride < nparts) load(base + stride, hn, wn);
        out.begin();
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i >= nparts) break;
#if DQ_FLOOR
            out.put_raw(y + i * 8, threadIdx.x + j * T, make_uint4(h[j].x ^ w[j].x, h[j].y ^ w[j].y, h[j].z, h[j].w));
#else
            float q[8], a, c;
            Q::part_r(h[j], w[j], (int)(i & 31), q, a, c);
            out.put(y + i * 8, threadIdx.x + j * T, q, a, c);
#endif
        }
        out.flush(y + base * 8, (int)min((long long)(U * T), nparts - base));
#pragma unroll
        for (int j = 0; j < U; ++j) {
            h[j] = hn[j];
            w[j] = wn[j];
        }
    }
    out.end();
#else
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
        out.begin();
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i >= nparts) break;
#if DQ_FLOOR
            out.put_raw(y + i * 8, threadIdx.x + j * T, make_uint4(h[j].x ^ w[j].x, h[j].y ^ w[j].y, h[j].z, h[j].w));
#else
            float q[8], a, c;
            Q::part_r(h[j], w[j], (int)(i & 31), q, a, c);
            out.put(y + i * 8, threadIdx.x + j * T, q, a, c);
#endif
        }
        out.flush(y + base * 8, (int)min((long long)(U * T), nparts - base));
    }
    out.end();
#endif
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
// 76.2-76.4 (staged without them 68.4, direct 74.9-75.5); Q6_K by quads (DQ6_Q below: 79.6-79.7
// at 06:0x; the staged kernel, the default before it, 64.2-64.6; part-wise direct with DQ_RAW 63.4
// at U=3, 59.4 at 4, 41.3 at 8). 1 = every format direct (Q6_K part-wise); 0 = every format staged. DQ_U: parts a thread; DQ_RAW=1 loads their raw words first and
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
    DQ_RUN_SMEM(F, OT, U * T);
#if DQ_PIPE && DQ_RAW
    const long long stride = (long long)gridDim.x * (U * T);
    DqRaw<F> r[U], rn[U];
    auto load = [&](long long base, DqRaw<F>* rr) {
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i < nparts) rr[j].load(qb + (i / P) * Q::BYTES, (int)(i % P));
        }
    };
    if ((long long)blockIdx.x * (U * T) < nparts) load((long long)blockIdx.x * (U * T), r);
    for (long long base = (long long)blockIdx.x * (U * T); base < nparts; base += stride) {
        if (base + stride < nparts) load(base + stride, rn);
        out.begin();
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i >= nparts) break;
#if DQ_FLOOR
            out.put_raw(y + i * 8, threadIdx.x + j * T, r[j].fold());
#else
            float q[8], a, c;
            r[j].decode((int)(i % P), q, a, c);
            out.put(y + i * 8, threadIdx.x + j * T, q, a, c);
#endif
        }
        out.flush(y + base * 8, (int)min((long long)(U * T), nparts - base));
#pragma unroll
        for (int j = 0; j < U; ++j) r[j] = rn[j];
    }
    out.end();
#else
    for (long long base = (long long)blockIdx.x * (U * T); base < nparts; base += (long long)gridDim.x * (U * T)) {
#if DQ_RAW
        // the U parts' raw words loaded first, each decoded and stored after (dequant_direct.cuh)
        DqRaw<F> r[U];
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i < nparts) r[j].load(qb + (i / P) * Q::BYTES, (int)(i % P));
        }
        out.begin();
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i >= nparts) break;
#if DQ_FLOOR
            out.put_raw(y + i * 8, threadIdx.x + j * T, r[j].fold());
#else
            float q[8], a, c;
            r[j].decode((int)(i % P), q, a, c);
            out.put(y + i * 8, threadIdx.x + j * T, q, a, c);
#endif
        }
        out.flush(y + base * 8, (int)min((long long)(U * T), nparts - base));
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
            dq_store8<DQ_CS == 1 ? 1 : 0>(y + i * 8, q[j], a[j], c[j]);
        }
#endif
    }
    out.end();
#endif
}

// Q6_K by quads (DQ6_Q > 0: quads a thread, with DQ_DIRECT_ALL=2, the default: 0 and 1 keep Q6_K
// staged / part-wise direct as for the other formats): the 4 parts of a Q6_K half-block that share their
// bytes are one thread's (dequant_direct.cuh's DqQ6Quad): 12 aligned words and d give 32
// weights, where the part-wise direct kernel loads 6 words, a scale byte and d for each 8. Quad
// index = 8 block + 4 h + o / 8 (a warp's 32 lanes cover 4 blocks; each of a quad's 4 store
// instructions writes 8 runs of 64 bytes); thread i of a block takes quads base + i + j T.
#ifndef DQ6_Q
#define DQ6_Q 1         // H200 14336x4096 -> f16, 2026-11-27 06:0x UTC, two rounds: 1 quad a thread (48 registers,
#endif                  // 10 blocks/SM, a block a run) 79.6-79.7% of spec; 2: 78.1-78.3, 3: 77.8, the staged
                        // kernel (DQ6_Q=0, the default before) 64.4-64.6. The host's grid: _dequant._CTA_BLOCKS
template <typename OT>
BC_DEV void dequant_q6k_quads(const u8* __restrict__ qb, OT* __restrict__ y, long long nblocks) {
    constexpr int U = DQ6_Q > 0 ? DQ6_Q : 1, T = 32 * DQ_WARPS;
    const long long nq = nblocks * 8;
    DQ_RUN_SMEM(BC_Q6_K, OT, 4 * U * T);
#if DQ_PIPE
    const long long stride = (long long)gridDim.x * (U * T);
    DqQ6Quad r[U], rn[U];
    auto load = [&](long long base, DqQ6Quad* rr) {
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i < nq) rr[j].load(qb + (i >> 3) * 210, (int)(i >> 2) & 1, (int)i & 3);
        }
    };
    if ((long long)blockIdx.x * (U * T) < nq) load((long long)blockIdx.x * (U * T), r);
    for (long long base = (long long)blockIdx.x * (U * T); base < nq; base += stride) {
        if (base + stride < nq) load(base + stride, rn);
#else
    for (long long base = (long long)blockIdx.x * (U * T); base < nq; base += (long long)gridDim.x * (U * T)) {
        DqQ6Quad r[U];
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i < nq) r[j].load(qb + (i >> 3) * 210, (int)(i >> 2) & 1, (int)i & 3);
        }
#endif
        out.begin();
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const long long i = base + threadIdx.x + j * T;
            if (i >= nq) break;
            const long long p0 = (i >> 3) * 32 + ((i >> 2) & 1) * 16 + (i & 3);   // its quarter-0 part
#pragma unroll
            for (int qt = 0; qt < 4; ++qt) {
                const long long p = p0 + 4 * qt;
#if DQ_FLOOR
                out.put_raw(y + p * 8, p - 4 * base, r[j].fold());
#else
                float q[8], a, c;
                r[j].decode(qt, q, a, c);
                out.put(y + p * 8, p - 4 * base, q, a, c);
#endif
            }
        }
        out.flush(y + base * 32, (int)min((long long)(4 * U * T), 4 * (nq - base)));
#if DQ_PIPE
#pragma unroll
        for (int j = 0; j < U; ++j) r[j] = rn[j];
#endif
    }
    out.end();
}

// DQ_BULK=1 (sweeps; sm_90, ignored below): a block reads tiles of RB GGUF blocks (Q4_K/Q6_K 16,
// the 32-weight formats 128: 2.3-4.4 KB in, 8 KB of f16 out) with bulk copies (cp.async.bulk,
// thread 0) into a ring of DQ_BNS shared-memory stages completing on mbarriers, DQ_BNS - 1 tiles
// ahead, and decodes each from shared memory (quant.cuh's part(); Q6_K by quads) into plain
// 16-byte stores; the reads are the copy engine's, the threads only decode and store. Grid: a
// persistent one (tiles grid-stride); the blocks past the last full tile: parts straight from
// global memory (dq_part).
#ifndef DQ_BULK
#define DQ_BULK 0
#endif
#ifndef DQ_BNS
#define DQ_BNS 3
#endif
#if DQ_BULK && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DQ_BULK_ON 1
#else
#define DQ_BULK_ON 0
#endif
BC_DEV u32 dq_sa(const void* p) { return (u32)__cvta_generic_to_shared(p); }
template <int F, typename OT>
BC_DEV void dequant_bulk(const u8* __restrict__ qb, OT* __restrict__ y, long long nblocks) {
#if DQ_BULK_ON
    using Q = BcQ<F>;
    constexpr int RB = Q::QK == 256 ? 16 : 128, TB = RB * Q::BYTES, T = 32 * DQ_WARPS, P = Q::QK / 8;
    static_assert(TB % 16 == 0, "a tile's bytes: a multiple of 16 (bulk copies)");
    __shared__ __align__(128) u8 st[DQ_BNS][TB + 16];     // + 16: part() may read a word past a block
    __shared__ __align__(8) u64 bar[DQ_BNS];
    const int tid = threadIdx.x;
    const long long ntiles = nblocks / RB;
    if (tid == 0) {
#pragma unroll
        for (int i = 0; i < DQ_BNS; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(dq_sa(&bar[i])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    auto issue = [&](long long t, int sg) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(dq_sa(&bar[sg])), "r"((u32)TB) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(dq_sa(st[sg])), "l"(qb + t * TB), "r"((u32)TB), "r"(dq_sa(&bar[sg])) : "memory");
    };
    if (tid == 0) {
#pragma unroll
        for (int i = 0; i < DQ_BNS; ++i) {
            const long long t = blockIdx.x + (long long)i * gridDim.x;
            if (t < ntiles) issue(t, i);
        }
    }
    long long k = 0;
    for (long long t = blockIdx.x; t < ntiles; t += gridDim.x, ++k) {
        const int sg = (int)(k % DQ_BNS);
        const u32 ph = (u32)((k / DQ_BNS) & 1);
        u32 done = 0;
        while (!done)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done) : "r"(dq_sa(&bar[sg])), "r"(ph) : "memory");
        const u8* s0 = st[sg];
        OT* yt = y + t * (long long)(RB * Q::QK);
        if constexpr (F == BC_Q6_K) {
#pragma unroll
            for (int j = 0; j < RB * 8 / T; ++j) {          // quads: 8 a block
                const int i = tid + j * T;
                DqQ6Quad r;
                r.load(s0 + (i >> 3) * 210, (i >> 2) & 1, i & 3);
                const int p0 = (i >> 3) * 32 + ((i >> 2) & 1) * 16 + (i & 3);
#pragma unroll
                for (int qt = 0; qt < 4; ++qt) {
                    float q[8], a, c;
                    r.decode(qt, q, a, c);
                    dq_store8<DQ_STOP>(yt + (p0 + 4 * qt) * 8, q, a, c);
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < RB * P / T; ++j) {
                const int i = tid + j * T;
                float q[8], a, c;
                Q::part(s0 + (i / P) * Q::BYTES, i % P, q, a, c);
                dq_store8<DQ_STOP>(yt + i * 8, q, a, c);
            }
        }
        __syncthreads();                                   // stage sg read by every thread
        if (tid == 0) {
            const long long tn = t + (long long)DQ_BNS * gridDim.x;
            if (tn < ntiles) issue(tn, sg);
        }
    }
    // the blocks after the last full tile: parts from global memory
    for (long long i = ntiles * RB * P + (long long)blockIdx.x * T + tid; i < nblocks * P; i += (long long)gridDim.x * T) {
        float q[8], a, c;
        dq_part<F>(qb + (i / P) * Q::BYTES, (int)(i % P), q, a, c);
        dq_store8<DQ_STOP>(y + i * 8, q, a, c);
    }
#endif
}

// DQ_PDL=1: the build of plan_dequantize(pdl=True) plans (programmatic dependent launch; sm_90,
// compiled out below). Such a launch may start while the previous kernel on the stream still runs
// (in a chain of dequantizes: while its last blocks finish), so before griddepcontrol.wait (that
// kernel's completion and memory flush) a block reads and writes nothing: thread 0 asks the L2
// for the input bytes of the block's first run (cp.async.bulk.prefetch.L2: a hint, never a read
// into the SM, so correct whatever the previous kernel writes), and launch_dependents lets the
// next PDL grid start as soon as every block of this one has (its blocks then take the slots this
// grid's last blocks leave). DqRun<F>: the GGUF blocks of a CUDA block's first run in F's kernel.
#ifndef DQ_PDL
#define DQ_PDL 0
#endif
template <int F> struct DqRun {
    static constexpr long long value =
        (F == BC_Q6_K && DQ6_Q > 0 && DQ_DIRECT_ALL == 2) ? DQ6_Q * 32 * DQ_WARPS / 8
        : (F == BC_Q4_K && DQ_DIRECT) ? DQ_K4U * DQ_WARPS
        : (F != BC_Q4_K && DqDirect<F>::value) ? DQ_U * 32 * DQ_WARPS / (BcQ<F>::QK / 8)
        : (BcQ<F>::QK == 256 ? 8 : 64) * DQ_WARPS;
};
template <int F> BC_DEV void dq_pdl_begin(const u8* qb, long long nblocks) {
#if DQ_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) {
        const long long b0 = (long long)blockIdx.x * DqRun<F>::value;
        if (b0 < nblocks) {
            const long long b1 = min(b0 + DqRun<F>::value, nblocks);
            const u64 lo = (reinterpret_cast<u64>(qb + b0 * BcQ<F>::BYTES) + 15) & ~(u64)15;   // inside the tensor
            const u64 hi = reinterpret_cast<u64>(qb + b1 * BcQ<F>::BYTES) & ~(u64)15;
            if (hi > lo)
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(lo), "r"((u32)(hi - lo)) : "memory");
        }
    }
    asm volatile("griddepcontrol.launch_dependents;" :::);
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <int F, typename OT> BC_DEV void dequant_entry(const u8* q, OT* y, long long nblocks) {
    dq_pdl_begin<F>(q, nblocks);
    if constexpr (DQ_BULK_ON) dequant_bulk<F, OT>(q, y, nblocks);
    else if constexpr (F == BC_Q6_K && DQ6_Q > 0 && DQ_DIRECT_ALL == 2) dequant_q6k_quads<OT>(q, y, nblocks);
    else if constexpr (F == BC_Q4_K && DQ_DIRECT) dequant_q4k_direct<OT>(q, y, nblocks);
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
