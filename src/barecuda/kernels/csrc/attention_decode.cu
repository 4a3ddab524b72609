// attention_decode.cu -- decode attention on tensor cores (mma.sync m16n8k16) and the KV-cache append.
//
// Entry points (IS_BF16 0/1 -> f16/bf16; the head dim is a -D define, the GQA group a run-time argument):
//   attn_decode_<dt>          one query token per head over a contiguous or paged KV cache,
//                             split-KV (flash-decoding); the length is read from device memory
//   kv_append_<dt>            writes one token's K and V into the cache at a device-held position
//   attn_decode_f32, kv_append_f32   the same for a float32 cache (a plain SIMT kernel, no split:
//                             the models' fp32 reference mode)
//
// Defines: HEAD_DIM (attention_tile.cuh), DEC_WARPS, DEC_STAGES, DEC_L2PF, DEC_KPW, DEC_WPIPE, DEC_PDL,
//          DEC_MERGE, DEC_SYNC, DEC_CLUSTER, DEC_MINCHUNK, DEC_ONESPLIT,
//          DEC_PROBE (probe builds only).
#include "attention_tile.cuh"

#ifndef DEC_WARPS
#define DEC_WARPS 4
#endif
#ifndef DEC_STAGES
#define DEC_STAGES 4
#endif
#ifndef DEC_L2PF
#define DEC_L2PF 0   // 1: decode copies carry the L2 256-byte prefetch hint
#endif
#ifndef DEC_KPW
#define DEC_KPW 16   // decode: keys per warp per pipeline stage (16 or 32)
#endif
#ifndef DEC_WPIPE
#define DEC_WPIPE 3  // decode (default 3): 1 = each warp streams its own contiguous share of the split through its
                     // own DEC_STAGES-deep ring (no block-wide barrier per tile); 2 = the block's ring and key
                     // order, but each warp copies and waits for its own DEC_KPW keys of a stage alone (no
                     // block-wide barrier per tile: a warp runs ahead of the others); 3 = 2, and a warp refills a
                     // stage right after reading it (DEC_STAGES tiles in flight while it waits, not
                     // DEC_STAGES - 1); 0 = one block-wide ring
#endif
#ifndef DEC_MERGE
#define DEC_MERGE 2  // decode: the last block's split merge. 2 (default) = one online log-sum-exp pass over 4
                     // consecutive elements a thread (float4 partials), 16 splits a round; 0 = one element a
                     // thread, 8 splits a round (1, the weights in shared memory first, was slower on the H200
                     // and is gone since 2026-11-27 10:1x). H200 timings: docs/kernels.md
#endif
static_assert(DEC_MERGE == 0 || DEC_MERGE == 2, "DEC_MERGE: 0 or 2");
#ifndef DEC_SYNC
#define DEC_SYNC 2   // decode: how a split block signals it is done (default 2). 0 = every thread __threadfence(), barrier, one
                     // atomic (threadFenceReduction); 1 = barrier, then thread 0 alone fences and counts (the
                     // cooperative-groups grid-sync pattern: the barrier orders the block's partial writes before
                     // thread 0's fence, which is cumulative), the last block's thread 0 fences again before the
                     // barrier that releases its merge; 2 = barrier, then thread 0 counts with one
                     // atom.acq_rel.gpu (release: the block's partials, ordered before it by the barrier;
                     // acquire: every other block's, for the merge) instead of two fence.sc (__threadfence)
#endif
#ifndef DEC_CLUSTER
#define DEC_CLUSTER 0    // decode, sm_90, plans only (_attention.DEC_CLUSTER = 1): 1 = the splits of a KV head form one
                         // thread-block cluster (grid.x = n_splits <= 16) that merges through distributed shared
                         // memory (no workspace, fence, counter or L2 round trip). Correct (H200 tests, 2026-11-27
                         // 09:51) but slower everywhere: at 1 block/SM only 7 clusters of 12-16 fit the H200 at once
#endif
#ifndef DEC_PROBE
#define DEC_PROBE 0  // decode, PROBE BUILDS ONLY (the bench's --floor-probe; never in the KERNELS table or a plan's
                     // defaults; the answers of 1-3 are wrong): 1 = no merge (every block writes its partials and
                     // returns: no fence, counter or merge); 2 = 1 and no softmax math (the cp.async ring alone);
                     // 3 = 2 and no Q load, the length taken as max_ctx (no load before the first cp.async);
                     // 4 = the length taken as max_ctx (correct only when length == max_ctx)
#endif
#ifndef DEC_TMA
#define DEC_TMA 0    // decode, DEC_WPIPE 3, sm_90 (cp.async elsewhere): 1 = a warp's rows of a stage come by bulk copy,
                     // one cp.async.bulk of a K or V row a lane counted on an mbarrier (one a stage and warp); rows
                     // past the length are zeroed by their lane
#endif
#if DEC_TMA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DEC_BULK 1
#else
#define DEC_BULK 0
#endif
#ifndef DEC_PDL
#define DEC_PDL 0    // decode: 1 = the build of pdl=True plans: griddepcontrol (programmatic dependent launch),
                     // the optional pre-wait L2 prefetch, Q and the length read through L2 (plain plans keep 0)
#endif

namespace {

// ------------------------------------------------------------------------------------------
// decode
// ------------------------------------------------------------------------------------------
static_assert(DEC_KPW == 16 || DEC_KPW == 32, "DEC_KPW: 16 or 32");
constexpr int DEC_BN = DEC_KPW * DEC_WARPS;   // keys per pipeline stage (DEC_KPW per warp); splits are multiples

// How the length read from the device is cut into splits (the grid is sized for the cache's
// capacity; splits past the length exit at once). A context of <= DEC_ONESPLIT keys runs in one
// split, which writes its answer directly (no partials, no threadfence/atomic merge); longer
// ones in splits of >= DEC_MINCHUNK keys (H200 timings of the choice: docs/kernels.md).
#ifndef DEC_MINCHUNK
#define DEC_MINCHUNK 128
#endif
#ifndef DEC_ONESPLIT
#define DEC_ONESPLIT 256
#endif
constexpr int DEC_MINC = ((DEC_MINCHUNK + DEC_BN - 1) / DEC_BN) * DEC_BN;

BC_DEV int dec_chunk(int len, int n_splits) {
    int per = len <= DEC_ONESPLIT ? len : (len + n_splits - 1) / n_splits;
    int chunk = ((per + DEC_BN - 1) / DEC_BN) * DEC_BN;
    return chunk < DEC_MINC ? DEC_MINC : chunk;
}

BC_DEV void dec_range(const int* len_ptr, int len_offset, int max_ctx, int n_splits, int& len, int& chunk) {
#if DEC_PROBE == 3 || DEC_PROBE == 4
    len = max_ctx;   // probe: no load before the first cp.async
#elif DEC_PDL
    len = __ldcg(len_ptr) + len_offset;   // L2: never a line cached before griddepcontrol.wait
#else
    len = __ldg(len_ptr) + len_offset;
#endif
    len = len < 0 ? 0 : (len > max_ctx ? max_ctx : len);
    chunk = dec_chunk(len, n_splits);
}

#if DEC_PDL
// Programmatic dependent launch (sm_90+; every instruction here is a no-op, or compiled out,
// when the launch has no programmatic attribute). A PDL launch of the decode kernel may start
// while the previous kernel on the stream still runs. Before griddepcontrol.wait (full
// completion and memory flush of that kernel) a block reads nothing the previous kernel may
// write: it reads the length speculatively through L2 (a stale value only misplaces the
// prefetch) and asks the L2 to prefetch the first pf_keys keys of its split's K and V
// (cp.async.bulk.prefetch: a hint, never a read into the SM, so correct whatever the previous
// kernel writes to the cache, the newest token included); after the wait it reads Q, the
// length and the cache as without PDL. launch_dependents is issued at once: the next PDL
// node's blocks may then take the multiprocessors this grid's blocks leave (all of this grid's
// blocks have started by then, so none waits behind them) and prefetch in turn.
BC_DEV void dec_grid_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
BC_DEV void dec_launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
// L2 prefetch of token rows [t0, t1) of one head (rows tok_stride elements apart, D each):
// one bulk prefetch of up to 16 KB a thread over a contiguous run, else one a row
BC_DEV void dec_prefetch_rows(const bc_u16* base, long long tok_stride, int t0, int t1, int tid, int nthr) {
#if __CUDA_ARCH__ >= 900
    if (t1 <= t0) return;
    if (tok_stride == D) {
        constexpr int PIECE = 16384;
        const long long bytes = (long long)(t1 - t0) * D * 2;
        const unsigned char* p = (const unsigned char*)(base + (long long)t0 * D);
        for (long long o = (long long)tid * PIECE; o < bytes; o += (long long)nthr * PIECE) {
            const unsigned n = (unsigned)(bytes - o < PIECE ? bytes - o : PIECE);
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + o), "r"(n) : "memory");
        }
    } else {
        for (int t = t0 + tid; t < t1; t += nthr)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + (long long)t * tok_stride),
                         "r"((unsigned)(D * 2)) : "memory");
    }
#endif
}
#endif

#if DEC_BULK
static_assert(DEC_WPIPE == 3, "DEC_TMA: with DEC_WPIPE 3 (a warp fills and reads its own rows)");
// the mbarriers of the bulk-copy ring: init (+ the fences that make it visible to the copy engine),
// one row's copy with its bytes expected first, a row of zeros with a plain arrival, the wait for a phase
BC_DEV void dec_mbar_init(bc_u32 bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
BC_DEV void dec_mbar_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
}
BC_DEV void dec_row_bulk(bc_u32 dst, const bc_u16* src, bc_u32 bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(D * 2) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(D * 2), "r"(bar) : "memory");
}
BC_DEV void dec_row_zero(bc_u32 dst, bc_u32 bar) {
#pragma unroll
    for (int c = 0; c < CPR; ++c) asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(dst + c * 16), "r"(0) : "memory");
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
BC_DEV void dec_mbar_wait(bc_u32 bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}
#endif

#if DEC_CLUSTER
// thread-block clusters (sm_90): the barrier of all threads of the cluster (release/acquire:
// shared-memory writes before it are visible to every block after it), this block's rank in
// the cluster and the cluster's size (0 and 1 below sm_90), and a float load from block
// `rank`'s shared memory at this block's address `a` (the same layout in every block)
BC_DEV void dec_cluster_sync() {
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
    __trap();
#endif
}
BC_DEV void dec_cluster_place(unsigned& rank, unsigned& size) {
    rank = 0;
    size = 1;
#if __CUDA_ARCH__ >= 900
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
#endif
}
BC_DEV float dec_dsmem_ld(bc_u32 a, unsigned rank) {
    float v = 0.f;
#if __CUDA_ARCH__ >= 900
    bc_u32 ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ra) : "memory");
#endif
    return v;
}
#endif

template <int IS_BF16>
BC_DEV void attn_decode_impl(const bc_u16* __restrict__ q, const bc_u16* __restrict__ kc, const bc_u16* __restrict__ vc,
                             bc_u16* __restrict__ out, float* __restrict__ part, int* __restrict__ counters, const int* __restrict__ len_ptr,
                             int len_offset, int max_ctx, long long tok_stride, long long head_stride, int q_head_stride,
                             int o_head_stride, const int* __restrict__ block_table, int page_size, int n_heads,
                             int n_splits, float scale_log2, int group, int pf_keys) {
    // group: query heads per KV head (1..16, checked by the host); one MMA tile holds 16 rows
    // pf_keys: keys of the split to prefetch into L2 before griddepcontrol.wait (PDL plans; 0: none)
    extern __shared__ __align__(16) unsigned char smem[];
    const int kvh = blockIdx.y, split = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
#if DEC_PDL
    if (pf_keys > 0 && block_table == nullptr) {
        int slen, schunk;
        dec_range(len_ptr, len_offset, max_ctx, n_splits, slen, schunk);   // speculative (see above)
        const int s0 = split * schunk, s1 = min(slen, s0 + min(schunk, pf_keys));
        const long long ho = (long long)kvh * head_stride;
        dec_prefetch_rows(kc + ho, tok_stride, s0, s1, tid, DEC_WARPS * 32);
        dec_prefetch_rows(vc + ho, tok_stride, s0, s1, tid, DEC_WARPS * 32);
    }
    dec_launch_dependents();
    dec_grid_wait();
#endif

    // Q fragments: rows 0..group-1 are the group's heads, the rest zero (loaded before the
    // length so that both loads are in flight together)
    bc_u32 qf[D / 16][4];
    {
        const int g = lane >> 2, t = lane & 3;
        const bc_u16* q0 = q + (long long)(kvh * group + g) * q_head_stride + 2 * t;
        const bc_u16* q1 = q + (long long)(kvh * group + g + 8) * q_head_stride + 2 * t;
#if DEC_PDL
#define DEC_QLD(p) __ldcg((const unsigned int*)(p))   // L2: Q may be the previous (PDL) kernel's output
#else
#define DEC_QLD(p) (*(const bc_u32*)(p))
#endif
#if DEC_PROBE == 3
        if (q0 == q1 + 1) qf[0][0] = 1u;   // probe: no Q load (q0/q1 kept used)
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) qf[kk][0] = qf[kk][1] = qf[kk][2] = qf[kk][3] = 0u;
#else
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            qf[kk][0] = g < group ? DEC_QLD(q0 + kk * 16) : 0u;
            qf[kk][1] = g + 8 < group ? DEC_QLD(q1 + kk * 16) : 0u;
            qf[kk][2] = g < group ? DEC_QLD(q0 + kk * 16 + 8) : 0u;
            qf[kk][3] = g + 8 < group ? DEC_QLD(q1 + kk * 16 + 8) : 0u;
        }
#endif
#undef DEC_QLD
    }
    int len, chunk;
    dec_range(len_ptr, len_offset, max_ctx, n_splits, len, chunk);
    const int start = split * chunk;
    const int end = min(len, start + chunk);
#if DEC_CLUSTER
    // every block of a cluster that merges (more than one split used) stays for its barriers:
    // an empty split leaves an empty partial (log-sum-exp -inf)
    if (start >= end && split != 0 && (len > 0 ? (len + chunk - 1) / chunk : 1) == 1) return;
#else
    if (start >= end && split != 0) return;   // empty split: not counted (split 0 runs even when len == 0)
#endif
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};

    const bc_u32 sbase = bc_smem_addr(smem);
#if DEC_BULK
    // this warp's mbarriers, one a stage, after the pipeline memory; 2 * DEC_KPW arrivals a phase (a row each)
    const bc_u32 bars = sbase + (bc_u32)(DEC_STAGES * 2 * DEC_BN * RS + warp * DEC_STAGES * 8);
    if (lane == 0)
        for (int s = 0; s < DEC_STAGES; ++s) dec_mbar_init(bars + 8 * s, 2 * DEC_KPW);
    dec_mbar_fence();
    __syncwarp();
#endif
    const long long head_off = (long long)kvh * head_stride;
    // one 16-byte chunk of token tok (row `row` of the stage at ks/vs)
    auto copy_chunk = [&](bc_u32 ks, bc_u32 vs, int row, int col, int tok, bool ok) {
        long long phys = tok;
        if (block_table != nullptr && ok) phys = (long long)__ldg(block_table + tok / page_size) * page_size + tok % page_size;
        const long long off = ok ? phys * tok_stride + head_off + col * 8 : 0;
        if (DEC_L2PF) {
            bc_cp_async16_pf(ks + (bc_u32)(row * RS + col * 16), kc + off, ok);
            bc_cp_async16_pf(vs + (bc_u32)(row * RS + col * 16), vc + off, ok);
        } else {
            bc_cp_async16(ks + (bc_u32)(row * RS + col * 16), kc + off, ok);
            bc_cp_async16(vs + (bc_u32)(row * RS + col * 16), vc + off, ok);
        }
    };
    // The ring: tiles of `tile` keys (K rows, then V rows, RS bytes each) from token `first` up to `last`,
    // copied by threads t, t + ts, ... (DEC_WPIPE >= 2: this warp's rows alone); each stage is made visible by a
    // block barrier (block_sync) or a warp one, then this warp reads its DEC_KPW keys at key offset `wofs` of
    // the tile (the last tile masked at `last`). (A plain lambda: NVRTC 13.0 rejects generic ones.)
    auto ring = [&](bc_u32 base, int tile, int first, int last, int t, int ts, int wofs, bool block_sync) {
        const int stage = 2 * tile * RS;
        const int ntile = last > first ? (last - first + tile - 1) / tile : 0;
#if DEC_BULK
        auto load = [&](int it) {   // a K or V row of this warp's keys a lane (none past the length)
            if (first + it * tile + wofs >= last) return;
            const bc_u32 ks = base + (bc_u32)((it % DEC_STAGES) * stage), bar = bars + (bc_u32)(8 * (it % DEC_STAGES));
            for (int r = t; r < 2 * DEC_KPW; r += ts) {
                const int row = wofs + r % DEC_KPW, tok = first + it * tile + row;
                const bc_u32 dst = ks + (bc_u32)((r < DEC_KPW ? 0 : tile * RS) + row * RS);
                if (tok < last) {
                    long long phys = tok;
                    if (block_table != nullptr) phys = (long long)__ldg(block_table + tok / page_size) * page_size + tok % page_size;
                    dec_row_bulk(dst, (r < DEC_KPW ? kc : vc) + phys * tok_stride + head_off, bar);
                } else {
                    dec_row_zero(dst, bar);
                }
            }
        };
#else
        auto load = [&](int it) {
            const bc_u32 ks = base + (bc_u32)((it % DEC_STAGES) * stage);
#if DEC_WPIPE >= 2
            if (first + it * tile + wofs >= last) return;   // this warp's keys of the tile lie past the length
            for (int c = t; c < DEC_KPW * CPR; c += ts) {   // this warp's own DEC_KPW rows of the stage
                const int row = wofs + c / CPR, col = c % CPR;
#else
            for (int c = t; c < tile * CPR; c += ts) {
                const int row = c / CPR, col = c % CPR;
#endif
                const int tok = first + it * tile + row;
                copy_chunk(ks, ks + tile * RS, row, col, tok, tok < last);
            }
        };
#endif
#if DEC_WPIPE == 3
        // a warp refills a stage as soon as it has read it: DEC_STAGES tiles in flight while it waits
#pragma unroll
        for (int s = 0; s < DEC_STAGES; ++s) {
            if (s < ntile) load(s);
            bc_cp_async_commit();
        }
        for (int it = 0; it < ntile; ++it) {
            const int col0 = first + it * tile + wofs;
            if (col0 >= last) break;   // this warp's keys of this tile (and of every later one) lie past the length
#if DEC_BULK
            dec_mbar_wait(bars + (bc_u32)(8 * (it % DEC_STAGES)), (unsigned)(it / DEC_STAGES) & 1u);
#else
            bc_cp_async_wait<DEC_STAGES - 1>();
#endif
            __syncwarp();
#if DEC_PROBE != 2 && DEC_PROBE != 3   // (probe builds 2-3: the ring alone, no softmax math)
            const bc_u32 ks = base + (bc_u32)((it % DEC_STAGES) * stage + wofs * RS);
            const bc_u32 vs = ks + (bc_u32)(tile * RS);
            if (col0 + DEC_KPW <= last)
                attn_tile<IS_BF16, DEC_KPW, false>(qf, ks, vs, o, m, l, scale_log2, lane, 0, col0, last, false, 0);
            else
                attn_tile<IS_BF16, DEC_KPW, true>(qf, ks, vs, o, m, l, scale_log2, lane, 0, col0, last, false, 0);
#endif
            __syncwarp();   // every lane's reads of the stage done before it is refilled
#if DEC_BULK
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // ... and ordered before the copy engine's writes
#endif
            if (it + DEC_STAGES < ntile) load(it + DEC_STAGES);
            bc_cp_async_commit();
        }
        (void)block_sync;
#else
#pragma unroll
        for (int s = 0; s < DEC_STAGES - 1; ++s) {
            if (s < ntile) load(s);
            bc_cp_async_commit();
        }
        for (int it = 0; it < ntile; ++it) {
            bc_cp_async_wait<DEC_STAGES - 2>();
            if (block_sync)
                __syncthreads();
            else
                __syncwarp();
            if (it + DEC_STAGES - 1 < ntile) load(it + DEC_STAGES - 1);
            bc_cp_async_commit();
            const bc_u32 ks = base + (bc_u32)((it % DEC_STAGES) * stage + wofs * RS);
            const bc_u32 vs = ks + (bc_u32)(tile * RS);
            const int col0 = first + it * tile + wofs;
            if (col0 >= last) continue;
#if DEC_PROBE == 2 || DEC_PROBE == 3
            continue;   // probe: the ring alone, no softmax math
#endif
            if (col0 + DEC_KPW <= last)
                attn_tile<IS_BF16, DEC_KPW, false>(qf, ks, vs, o, m, l, scale_log2, lane, 0, col0, last, false, 0);
            else
                attn_tile<IS_BF16, DEC_KPW, true>(qf, ks, vs, o, m, l, scale_log2, lane, 0, col0, last, false, 0);
        }
#endif
    };
#if DEC_WPIPE >= 2
    // the block's stages and key order; warp w copies, waits for and reads its own DEC_KPW keys of each
    ring(sbase, DEC_BN, start, end, lane, 32, warp * DEC_KPW, false);
#elif DEC_WPIPE
    // warp w streams keys [wstart, wend) (a DEC_KPW multiple of the split) through its own ring
    const int wchunk = chunk / DEC_WARPS;
    const int wstart = start + warp * wchunk, wend = min(end, wstart + wchunk);
    ring(sbase + (bc_u32)(warp * DEC_STAGES * 2 * DEC_KPW * RS), DEC_KPW, wstart, wend, lane, 32, 0, false);
#else
    // the block streams [start, end) in stages of DEC_BN keys, DEC_KPW of them per warp
    ring(sbase, DEC_BN, start, end, tid, DEC_WARPS * 32, warp * DEC_KPW, true);
#endif
    bc_cp_async_wait<0>();
    __syncthreads();

    // merge the warps: shared float wm[W][16], wl[W][16], wo[W][group][D]
    float* wm = (float*)smem;
    float* wl = wm + DEC_WARPS * 16;
    float* wo = wl + DEC_WARPS * 16;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    {
        const int g = lane >> 2, t = lane & 3;
        if (t == 0) {
            wm[warp * 16 + g] = m[0];
            wm[warp * 16 + g + 8] = m[1];
            wl[warp * 16 + g] = l[0];
            wl[warp * 16 + g + 8] = l[1];
        }
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
            if (g < group) {
                wo[(warp * group + g) * D + j * 8 + 2 * t] = o[j][0];
                wo[(warp * group + g) * D + j * 8 + 2 * t + 1] = o[j][1];
            }
            if (g + 8 < group) {
                wo[(warp * group + g + 8) * D + j * 8 + 2 * t] = o[j][2];
                wo[(warp * group + g + 8) * D + j * 8 + 2 * t + 1] = o[j][3];
            }
        }
    }
    __syncthreads();
    // splits that hold tokens; with one (len <= chunk: short contexts) this block has the
    // whole answer and writes it straight out (no partials, no merge, counter untouched)
    const int used = len > 0 ? (len + chunk - 1) / chunk : 1;
#if DEC_CLUSTER
    const bool direct = used == 1;   // uniform over the cluster
    float* cl_o = wo + DEC_WARPS * group * D;   // this block's partial [group][D], then its log-sum-exp [group]
    float* cl_lse = cl_o + group * D;
#else
    const bool direct = part == nullptr || used == 1;
#endif
    for (int idx = tid; idx < group * D; idx += DEC_WARPS * 32) {
        const int r = idx / D, d = idx % D;
        float M = neg_inf();
#pragma unroll
        for (int w = 0; w < DEC_WARPS; ++w) M = fmaxf(M, wm[w * 16 + r]);
        float L = 0.f, acc = 0.f;
        if (M != neg_inf()) {
#pragma unroll
            for (int w = 0; w < DEC_WARPS; ++w) {
                const float f = bc_exp2(wm[w * 16 + r] - M);
                L += wl[w * 16 + r] * f;
                acc += wo[(w * group + r) * D + d] * f;
            }
        }
        const int head = kvh * group + r;
        if (direct) {
            out[(long long)head * o_head_stride + d] = bc_from_f<IS_BF16>(L > 0.f ? acc / L : 0.f);
        } else {
#if DEC_CLUSTER
            cl_o[r * D + d] = L > 0.f ? acc / L : 0.f;
            if (d == 0) cl_lse[r] = L > 0.f ? M + __log2f(L) : neg_inf();
            continue;
#endif
            part[((long long)head * n_splits + split) * D + d] = L > 0.f ? acc / L : 0.f;
            if (d == 0) {
                float* lse = part + (long long)n_heads * n_splits * D;
                lse[head * n_splits + split] = L > 0.f ? M + __log2f(L) : neg_inf();
            }
        }
    }
    if (direct) return;
#if DEC_CLUSTER
    dec_cluster_sync();   // every block's partial written (release) and visible (acquire)
    {
        unsigned rank, cs;
        dec_cluster_place(rank, cs);
        const bc_u32 o_s = bc_smem_addr(cl_o), l_s = bc_smem_addr(cl_lse);
        for (int e = (int)rank * (DEC_WARPS * 32) + tid; e < group * D; e += (int)cs * (DEC_WARPS * 32)) {
            const int r = e / D, d = e % D;
            float lv[16], pv[16];
#pragma unroll
            for (int u = 0; u < 16; ++u) {   // every split's partial at once (used <= n_splits <= 16)
                const bool in = u < used;
                lv[u] = in ? dec_dsmem_ld(l_s + (bc_u32)(r * 4), (unsigned)u) : neg_inf();
                pv[u] = in ? dec_dsmem_ld(o_s + (bc_u32)(e * 4), (unsigned)u) : 0.f;
            }
            float mx = neg_inf();
#pragma unroll
            for (int u = 0; u < 16; ++u) mx = fmaxf(mx, lv[u]);
            float L = 0.f, acc = 0.f;
            if (mx != neg_inf()) {
#pragma unroll
                for (int u = 0; u < 16; ++u) {
                    const float w = bc_exp2(lv[u] - mx);   // -inf: 0
                    L += w;
                    acc += pv[u] * w;
                }
            }
            out[(long long)(kvh * group + r) * o_head_stride + d] = bc_from_f<IS_BF16>(L > 0.f ? acc / L : 0.f);
        }
    }
    dec_cluster_sync();   // no block leaves while another still reads its shared memory
    return;
#endif
#if DEC_PROBE >= 1 && DEC_PROBE <= 3
    return;   // probe: no merge (the answer is not written)
#endif
    // The last block of this KV head to finish merges the splits (threadFenceReduction
    // pattern) and re-arms the counter for the next launch or graph replay.
    __shared__ int s_last;
#if DEC_SYNC == 2
    __syncthreads();
    if (tid == 0) {
        int done;
        asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(done) : "l"(counters + kvh) : "memory");
        s_last = done == used - 1;
    }
    __syncthreads();
    if (!s_last) return;
#elif DEC_SYNC
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        const int last = atomicAdd(counters + kvh, 1) == used - 1;
        if (last) __threadfence();
        s_last = last;
    }
    __syncthreads();
    if (!s_last) return;
#else
    __threadfence();
    __syncthreads();
    if (tid == 0) s_last = atomicAdd(counters + kvh, 1) == used - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
#endif
    const float* lse_all = part + (long long)n_heads * n_splits * D;
#if DEC_MERGE == 2
    // four consecutive elements of one row a thread: each split's float4 partial and its
    // log-sum-exp, 16 splits a round, all loads of a round independent; an online
    // log-sum-exp over the rounds (one round at <= 16 splits)
    for (int i = tid; i < group * (D / 4); i += DEC_WARPS * 32) {
        const int r = i / (D / 4), d = (i % (D / 4)) * 4;
        const int head = kvh * group + r;
        const float* lse = lse_all + (long long)head * n_splits;
        const float4* po = (const float4*)(part + (long long)head * n_splits * D + d);
        float M = neg_inf(), L = 0.f, a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
        for (int s0 = 0; s0 < used; s0 += 16) {
            float lv[16];
            float4 pv[16];
#pragma unroll
            for (int u = 0; u < 16; ++u) {
                const bool in = s0 + u < used;
                lv[u] = in ? __ldcg(lse + s0 + u) : neg_inf();
                pv[u] = in ? __ldcg(po + (long long)(s0 + u) * (D / 4)) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
            float mn = M;
#pragma unroll
            for (int u = 0; u < 16; ++u) mn = fmaxf(mn, lv[u]);
            if (mn == neg_inf()) continue;
            const float a = bc_exp2(M - mn);   // M == -inf: 0
            L *= a;
            a0 *= a;
            a1 *= a;
            a2 *= a;
            a3 *= a;
#pragma unroll
            for (int u = 0; u < 16; ++u) {
                const float w = bc_exp2(lv[u] - mn);   // lv == -inf: 0
                L += w;
                a0 += pv[u].x * w;
                a1 += pv[u].y * w;
                a2 += pv[u].z * w;
                a3 += pv[u].w * w;
            }
            M = mn;
        }
        const float inv = L > 0.f ? 1.f / L : 0.f;
        bc_u16* o = out + (long long)head * o_head_stride + d;
        o[0] = bc_from_f<IS_BF16>(a0 * inv);
        o[1] = bc_from_f<IS_BF16>(a1 * inv);
        o[2] = bc_from_f<IS_BF16>(a2 * inv);
        o[3] = bc_from_f<IS_BF16>(a3 * inv);
    }
    if (tid == 0) counters[kvh] = 0;
#else
    // one pass per output element: every split's log-sum-exp and partial output are loaded
    // together (8 splits at a time, independent loads: one L2 round trip per 8 splits) and
    // folded with an online log-sum-exp (no block-wide reduction, no second pass)
    for (int idx = tid; idx < group * D; idx += DEC_WARPS * 32) {
        const int r = idx / D, d = idx % D;
        const int head = kvh * group + r;
        const float* lse = lse_all + (long long)head * n_splits;
        const float* po = part + (long long)head * n_splits * D + d;
        float M = neg_inf(), L = 0.f, acc = 0.f;
        for (int s0 = 0; s0 < used; s0 += 8) {
            float lv[8], pv[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const bool in = s0 + u < used;
                lv[u] = in ? __ldcg(lse + s0 + u) : neg_inf();
                pv[u] = in ? __ldcg(po + (long long)(s0 + u) * D) : 0.f;
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                if (lv[u] == neg_inf()) continue;
                const float mn = fmaxf(M, lv[u]);
                const float a = bc_exp2(M - mn), w = bc_exp2(lv[u] - mn);
                L = L * a + w;
                acc = acc * a + pv[u] * w;
                M = mn;
            }
        }
        out[(long long)head * o_head_stride + d] = bc_from_f<IS_BF16>(L > 0.f ? acc / L : 0.f);
    }
    if (tid == 0) counters[kvh] = 0;
#endif
}

// ------------------------------------------------------------------------------------------
// KV append: one token's K and V ([n_kv, D] each, rows src_head_stride apart) into the cache at
// position *pos_ptr + pos_offset (contiguous, or paged through block_table). One thread per
// 16-byte chunk, CH chunks a row (pointers and strides in 16-bit units: an f32 row is 2 * CPR chunks).
// ------------------------------------------------------------------------------------------
template <int CH>
BC_DEV void kv_append_impl(const bc_u16* __restrict__ kn, const bc_u16* __restrict__ vn, bc_u16* __restrict__ kc,
                           bc_u16* __restrict__ vc, const int* __restrict__ pos_ptr, int pos_offset, int max_ctx,
                           long long tok_stride, long long head_stride, int src_head_stride,
                           const int* __restrict__ block_table, int page_size, int n_kv) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_kv * CH) return;
    const int pos = __ldg(pos_ptr) + pos_offset;
    if (pos < 0 || pos >= max_ctx) return;   // out of the cache: nothing is written
    long long phys = pos;
    if (block_table != nullptr) phys = (long long)__ldg(block_table + pos / page_size) * page_size + pos % page_size;
    const int h = i / CH, c = i % CH;
    const long long dst = phys * tok_stride + h * head_stride + c * 8;
    const long long src = (long long)h * src_head_stride + c * 8;
    *(uint4*)(kc + dst) = *(const uint4*)(kn + src);
    *(uint4*)(vc + dst) = *(const uint4*)(vn + src);
}

// float32 decode (the models' fp32 mode, a correctness reference rather than a fast path):
// one block of DEC_WARPS warps per query head, no split; warp w takes tokens w, w + W, ...,
// each lane holds D / 32 (rounded up) output elements; fp32 exp, not the log2 domain.
constexpr int F32_NJ = (D + 31) / 32;
BC_DEV void attn_decode_f32_impl(const float* __restrict__ q, const float* __restrict__ kc,
                                 const float* __restrict__ vc, float* __restrict__ out, const int* __restrict__ len_ptr,
                                 int len_offset, int max_ctx, long long tok_stride, long long head_stride,
                                 int q_head_stride, int o_head_stride, const int* __restrict__ block_table,
                                 int page_size, int group, float scale) {
    __shared__ float wm[DEC_WARPS], wl[DEC_WARPS], wo[DEC_WARPS][D];
    const int head = blockIdx.x, kvh = head / group;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int len = __ldg(len_ptr) + len_offset;
    len = len < 0 ? 0 : (len > max_ctx ? max_ctx : len);
    float qv[F32_NJ], o[F32_NJ];
#pragma unroll
    for (int j = 0; j < F32_NJ; ++j) {
        const int d = lane + 32 * j;
        qv[j] = d < D ? q[(long long)head * q_head_stride + d] * scale : 0.f;
        o[j] = 0.f;
    }
    float m = neg_inf(), l = 0.f;
    for (int t = warp; t < len; t += DEC_WARPS) {
        long long phys = t;
        if (block_table != nullptr) phys = (long long)__ldg(block_table + t / page_size) * page_size + t % page_size;
        const long long off = phys * tok_stride + (long long)kvh * head_stride;
        float sdot = 0.f;
#pragma unroll
        for (int j = 0; j < F32_NJ; ++j) {
            const int d = lane + 32 * j;
            if (d < D) sdot = fmaf(qv[j], kc[off + d], sdot);
        }
        for (int w = 16; w > 0; w >>= 1) sdot += __shfl_xor_sync(0xffffffffu, sdot, w);
        const float mn = fmaxf(m, sdot);
        const float a = expf(m - mn), p = expf(sdot - mn);
        l = l * a + p;
#pragma unroll
        for (int j = 0; j < F32_NJ; ++j) {
            const int d = lane + 32 * j;
            o[j] = o[j] * a + (d < D ? p * vc[off + d] : 0.f);
        }
        m = mn;
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < F32_NJ; ++j)
        if (lane + 32 * j < D) wo[warp][lane + 32 * j] = o[j];
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += DEC_WARPS * 32) {
        float M = neg_inf();
#pragma unroll
        for (int w = 0; w < DEC_WARPS; ++w) M = fmaxf(M, wm[w]);
        float L = 0.f, acc = 0.f;
        if (M != neg_inf()) {
#pragma unroll
            for (int w = 0; w < DEC_WARPS; ++w) {
                const float f = expf(wm[w] - M);   // a warp without tokens: exp(-inf) = 0
                L += wl[w] * f;
                acc += wo[w][d] * f;
            }
        }
        out[(long long)head * o_head_stride + d] = L > 0.f ? acc / L : 0.f;
    }
}

}  // namespace

// Batches of sequences: grid.z (decode) / grid.y (append) is the sequence b, and every entry
// first moves its pointers to sequence b's -- q, out and the new K/V rows by their sequence
// strides, the length / position by b, a contiguous cache by seq_stride (0 for a paged pool,
// which the sequences share), the block table by bt_stride entries, the decode workspace (its
// partials, log-sum-exps and counters) by ws_stride 4-byte words -- so one launch serves B
// sequences of their own lengths, and the body is the single sequence's (b = 0 moves nothing).
#define BC_ATTN_ENTRIES(DT, B)                                                                                   \
    extern "C" __global__ void __launch_bounds__(DEC_WARPS * 32) attn_decode_##DT(                               \
        const bc_u16* q, const bc_u16* kc, const bc_u16* vc, bc_u16* out, float* part, int* counters,            \
        const int* len_ptr, int len_offset, int max_ctx, long long tok_stride, long long head_stride,           \
        int q_head_stride, int o_head_stride, const int* block_table, int page_size, int n_heads, int n_splits, \
        float scale_log2, int group, int pf_keys, long long q_seq, long long o_seq, long long seq_stride,        \
        int bt_stride, long long ws_stride) {                                                                    \
        const int b = blockIdx.z;                                                                                \
        if (block_table != nullptr) block_table += (long long)b * bt_stride;                                     \
        if (part != nullptr) part += b * ws_stride;                                                              \
        if (counters != nullptr) counters += b * ws_stride;                                                      \
        attn_decode_impl<B>(q + b * q_seq, kc + b * seq_stride, vc + b * seq_stride, out + b * o_seq, part,     \
                            counters, len_ptr + b, len_offset, max_ctx, tok_stride, head_stride, q_head_stride,  \
                            o_head_stride, block_table, page_size, n_heads, n_splits, scale_log2, group,        \
                            pf_keys);                                                                            \
    }                                                                                                            \
    extern "C" __global__ void kv_append_##DT(const bc_u16* kn, const bc_u16* vn, bc_u16* kc, bc_u16* vc,       \
                                              const int* pos_ptr, int pos_offset, int max_ctx,                  \
                                              long long tok_stride, long long head_stride, int src_head_stride, \
                                              const int* block_table, int page_size, int n_kv, long long src_seq,\
                                              long long seq_stride, int bt_stride) {                             \
        const int b = blockIdx.y;                                                                                \
        if (block_table != nullptr) block_table += (long long)b * bt_stride;                                     \
        kv_append_impl<CPR>(kn + b * src_seq, vn + b * src_seq, kc + b * seq_stride, vc + b * seq_stride,       \
                            pos_ptr + b, pos_offset, max_ctx, tok_stride, head_stride, src_head_stride,          \
                            block_table, page_size, n_kv);                                                       \
    }

BC_ATTN_ENTRIES(f16, 0)
BC_ATTN_ENTRIES(bf16, 1)

extern "C" __global__ void __launch_bounds__(DEC_WARPS * 32) attn_decode_f32(
    const float* q, const float* kc, const float* vc, float* out, const int* len_ptr, int len_offset, int max_ctx,
    long long tok_stride, long long head_stride, int q_head_stride, int o_head_stride, const int* block_table,
    int page_size, int group, float scale, long long q_seq, long long o_seq, long long seq_stride, int bt_stride) {
    const int b = blockIdx.z;   // the sequence (see BC_ATTN_ENTRIES)
    if (block_table != nullptr) block_table += (long long)b * bt_stride;
    attn_decode_f32_impl(q + b * q_seq, kc + b * seq_stride, vc + b * seq_stride, out + b * o_seq, len_ptr + b,
                         len_offset, max_ctx, tok_stride, head_stride, q_head_stride, o_head_stride, block_table,
                         page_size, group, scale);
}
// strides in float32 elements, as the 16-bit entries take theirs in elements
extern "C" __global__ void kv_append_f32(const float* kn, const float* vn, float* kc, float* vc, const int* pos_ptr,
                                         int pos_offset, int max_ctx, long long tok_stride, long long head_stride,
                                         int src_head_stride, const int* block_table, int page_size, int n_kv,
                                         long long src_seq, long long seq_stride, int bt_stride) {
    const int b = blockIdx.y;
    if (block_table != nullptr) block_table += (long long)b * bt_stride;
    kv_append_impl<2 * CPR>((const bc_u16*)(kn + b * src_seq), (const bc_u16*)(vn + b * src_seq),
                            (bc_u16*)(kc + b * seq_stride), (bc_u16*)(vc + b * seq_stride), pos_ptr + b, pos_offset,
                            max_ctx, 2 * tok_stride, 2 * head_stride, 2 * src_head_stride, block_table, page_size,
                            n_kv);
}
