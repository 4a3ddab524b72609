// fused.cu -- the decode loop's fused matvecs (barecuda.models.llama; issue 25).
//
// A Llama layer in five graph nodes (six when V has another type than Q/K, as in Q4_K_M):
//     fmv_qkv   h = rmsnorm(x); qkv = h Wqkv^T; RoPE on q, k; k, v -> KV cache at pos
//     attention_decode (attention_decode.cu)
//     fmv_res   x += o Wo^T;  ss_ffn += sum(x^2);  xg = x * g_ffn
//     fmv_glu   a = silu(s Wg xg) * (s Wu xg)                (s = rsqrt(ss_ffn / dim + eps))
//     fmv_res   x += a Wd^T;  ss_next += sum(x^2); xg = x * g_next
// and fembed (embedding + the first norm's inputs) / fmv_scale (the output head).
//
// The RMSNorm is split between producer and consumer: the residual matvec that writes x
// also accumulates sum(x^2) (one atomic add per block) and writes xg = x * g (the norm's
// weight, elementwise); the consumer matvec reads xg and multiplies its dot products by
// s = rsqrt(sum / dim + eps), which is linear: rmsnorm(x) W^T = s * (x * g) W^T. So no
// node of its own and no grid-wide reduction. fembed zeroes the token's accumulators.
//
// Entry points fmv_<x>_<epi>, x in f16, bf16 (activations), epi in
//     scale   y = s * (x W^T)                      (s = 1 when ss_in is null)
//     res     y += x W^T; *ss_out += sum(y^2); xg = y * g      (y rounded first)
//     glu     y = silu(s * x W^T) * (s * x W2^T)
//     qkv     y = s * x W^T (rows row0.. of the fused Q|K|V output), RoPE on adjacent
//             row pairs of Q and K (llama layout, inv_freq table, position *pos), and the
//             K, V rows written into the caches at *pos
// all with one parameter list (unused pointers may be null):
//     (W, W2, x, y, ss_in, ss_out, xg, g, k_cache, v_cache, pos, inv_freq,
//      N, K, vec, inv_dim, eps, row0, nq, nkv, hd, n_rot, cache_pos_stride, cache_head_stride, pf)
// (pf = 1: launched with programmatic serialization; prefetch the first weights before waiting)
//
// The matvec cores are matvec.cu's CUDA-core row loops (matvec_core.cuh) at batch 1: dense
// weights stream 16-byte vectors per lane (FM_U loads in flight per row, FM_R rows per
// warp); quantized weights are staged by cp.async into shared memory per warp and
// decoded a 32-weight unit at a time (quant.cuh). WFMT is ggml's type number.
#ifndef WFMT
#define WFMT 1
#endif
#include "common.cuh"
#include "quant.cuh"
#include "matvec_core.cuh"

#ifndef FM_R
#define FM_R 1          // rows per warp (qkv: at least 2, even; quantized glu: 1)
#endif
#ifndef FM_U
#define FM_U 4          // dense: 16-byte loads in flight per row per lane
#endif
#define FM_WARPS 4      // warps per block (the Python side launches 32 * FM_WARPS threads)
#ifndef FM_TCD
#define FM_TCD 0        // Q4_K, Q6_K: 1 = the direct tensor-core loop (mvc_tcd, mvc_tcd6), blockDim.x / 32 warps a 16-row tile
#endif
#ifndef FM_PF
#define FM_PF 2         // FM_TCD: super-blocks in flight a warp
#endif
#define FM_TCD_MAXW 16  // FM_TCD: most warps a block (gate/up: half)
#ifndef FM_V
#define FM_V 2          // FM_TCD: mvc_tcd's variant (matvec_core.cuh)
#endif

#define FE_SCALE 0
#define FE_RES 1
#define FE_GLU 2
#define FE_QKV 3

#define FM_DENSE (WFMT == 0 || WFMT == 1 || WFMT == 30)

// Programmatic dependent launch (sm_90+): a matvec launched with programmatic serialization
// starts while the previous node finishes, streams (prefetches) its first weights, then
// waits for the previous grid's results (griddepcontrol.wait: full completion and memory
// flush of the primary) before it reads x or any state; each block lets the dependents
// launch once its rows are stored (so they launch as the last blocks drain, and never
// take a multiprocessor from a block of this grid still waiting to run). Without a programmatic launch both instructions are no-ops.
BC_DEV void fm_grid_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
BC_DEV void fm_grid_launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
BC_DEV void fm_prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" :: "l"(p)); }

template <int EPI> struct FmRows {
    static constexpr int NS = EPI == FE_GLU ? 2 : 1;
    static constexpr int R = EPI == FE_QKV ? (FM_R < 2 ? 2 : FM_R) : ((!FM_DENSE && EPI == FE_GLU) ? 1 : FM_R);
};

template <typename XT> struct FmP {
    XT* y; const float* ss_in; float* ss_out; XT* xg; const XT* g; XT* kc; XT* vc; const int* pos;
    const float* inv_freq;
    int N; float inv_dim, eps; int row0, nq, nkv, hd, n_rot; long long cps, chs; int pf;
};

// What the epilogue reads besides the dot products (the norm scale, the residual and the
// norm weight of its rows, the position and its RoPE angles), loaded by lane 0 right after
// the grid dependency wait, so the latency of these reads hides behind the main loop
// instead of adding dependent L2 round trips to every warp's tail.
template <int R> struct FmPre {
    float s;
    float r[R], g[R];
    int pos;
    float cs[(R + 1) / 2], sn[(R + 1) / 2];
};

template <typename XT, int R, int EPI>
BC_DEV void fm_preload(FmPre<R>& q, int n0, const FmP<XT>& p) {
    if ((threadIdx.x & 31) != 0) return;
    q.s = 1.f;
    if constexpr (EPI == FE_RES) {
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const int n = min(n0 + i, p.N - 1);
            q.r[i] = bc_load(p.y + n);
            q.g[i] = bc_load(p.g + n);
        }
    } else {
        if (p.ss_in) q.s = rsqrtf(*p.ss_in * p.inv_dim + p.eps);
    }
    if constexpr (EPI == FE_QKV) {
        q.pos = *p.pos;
        const int nqk = p.nq + p.nkv;
#pragma unroll
        for (int i = 0; i < R; i += 2) {
            const int r = p.row0 + n0 + i;
            const int d = (r < p.nq ? r : r - p.nq) % p.hd;
            q.cs[i / 2] = 1.f;
            q.sn[i / 2] = 0.f;
            if (r < nqk && d < p.n_rot)
                sincosf(__fmul_rn((float)q.pos, p.inv_freq[d >> 1]), &q.sn[i / 2], &q.cs[i / 2]);
        }
    }
}

// ------------------------------------------------------------------ epilogues (lane 0 writes)
// The res epilogue's sum(y^2): one global atomic a block, not one a warp (same-address
// atomics serialize in L2: 4096 of them, one a warp of a 4096-row node, cost microseconds at
// the end of a 10 us node). The warps add into shared memory; the last active warp of the
// block adds the block's sum. fm_ss_init() zeroes the shared pair before any warp may leave.
struct FmSS { float sum; unsigned cnt; };
BC_DEV FmSS& fm_ss() { __shared__ FmSS v; return v; }
BC_DEV void fm_ss_init() {
    if (threadIdx.x == 0) { fm_ss().sum = 0.f; fm_ss().cnt = 0u; }
    __syncthreads();
}
// lane 0 of each active warp (rows n0.. of R a warp)
BC_DEV void fm_block_ss(float sq, float* out, int n0, int N, int R) {
    FmSS& v = fm_ss();
    const int first = n0 - (int)(threadIdx.x >> 5) * R;              // the block's first row
    const unsigned active = (unsigned)min((int)(blockDim.x >> 5), (N - first + R - 1) / R);
    atomicAdd(&v.sum, sq);
    __threadfence_block();
    if (atomicAdd(&v.cnt, 1u) == active - 1u) {
        __threadfence_block();
        atomicAdd(out, atomicAdd(&v.sum, 0.f));
    }
}
template <typename XT, int R, int EPI>
BC_DEV void fm_store(float (&acc)[R][2], int n0, const FmP<XT>& p, const FmPre<R>& q) {
    float v[R][2];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        v[i][0] = bc_warp_sum(acc[i][0]);
        if constexpr (EPI == FE_GLU) v[i][1] = bc_warp_sum(acc[i][1]);
    }
    if ((threadIdx.x & 31) != 0) return;
    const int N = p.N;
    if constexpr (EPI == FE_RES) {
        float sq = 0.f;
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const int n = n0 + i;
            if (n >= N) break;
            const XT yv = bc_from_float<XT>(v[i][0] + q.r[i]);
            p.y[n] = yv;
            const float f = bc_to_float(yv);
            sq = fmaf(f, f, sq);
            bc_store(p.xg + n, f * q.g[i]);
        }
        fm_block_ss(sq, p.ss_out, n0, N, R);
        return;
    }
    const float s = q.s;
    if constexpr (EPI == FE_GLU) {
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const int n = n0 + i;
            if (n >= N) break;
            const float gt = s * v[i][0], up = s * v[i][1];
            bc_store(p.y + n, gt / (1.f + bc_exp(-gt)) * up);
        }
        return;
    }
    if constexpr (EPI == FE_SCALE) {
#pragma unroll
        for (int i = 0; i < R; ++i)
            if (n0 + i < N) bc_store(p.y + n0 + i, s * v[i][0]);
        return;
    }
    if constexpr (EPI == FE_QKV) {
        const int pos = q.pos;
        const int nqk = p.nq + p.nkv;
#pragma unroll
        for (int i = 0; i < R; i += 2) {
            float a = s * v[i][0], b = s * v[i + 1][0];
            const int r = p.row0 + n0 + i;                  // even: a RoPE pair (r, r + 1)
            {                                               // rows past Q|K or n_rot: cs 1, sn 0
                const float cs = q.cs[i / 2], sn = q.sn[i / 2];
                const float a2 = a * cs - b * sn;
                b = b * cs + a * sn;
                a = a2;
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int n = n0 + i + j;
                if (n >= N) break;
                const float f = j ? b : a;
                bc_store(p.y + n, f);
                const int row = r + j;
                if (row >= p.nq) {
                    const int kv = row < nqk ? row - p.nq : row - nqk;
                    XT* c = row < nqk ? p.kc : p.vc;
                    bc_store(c + (long long)pos * p.cps + (long long)(kv / p.hd) * p.chs + kv % p.hd, f);
                }
            }
        }
    }
}

// ------------------------------------------------------------------ dense weights
template <typename WT, typename XT, int EPI>
BC_DEV void fm_dense(const WT* __restrict__ W, const WT* __restrict__ W2, const XT* __restrict__ x, int K, int vec,
                     const FmP<XT>& p) {
    constexpr int R = FmRows<EPI>::R, NS = FmRows<EPI>::NS, U = FM_U;
    constexpr int VW = 16 / (int)sizeof(WT);
    const int lane = threadIdx.x & 31;
    const int N = p.N;
    const int n0 = (blockIdx.x * FM_WARPS + (threadIdx.x >> 5)) * R;
    if constexpr (EPI == FE_RES) fm_ss_init();
    if (n0 >= N) { fm_grid_launch_dependents(); return; }
    const WT* const src[2] = {W, W2};
    if (p.pf) {   // PDL: the first loop iteration's weights into L2 while the previous node finishes
        const int nv = vec ? K / VW : 0;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int v = lane + 32 * u;
            if (v < nv)
#pragma unroll
                for (int s = 0; s < NS; ++s)
#pragma unroll
                    for (int i = 0; i < R; ++i)
                        fm_prefetch_l2(src[s] + (long long)min(n0 + i, N - 1) * K + (long long)v * VW);
        }
    }
    fm_grid_wait();
    FmPre<R> pre;
    fm_preload<XT, R, EPI>(pre, n0, p);
    float acc3[R][2][1];
#pragma unroll
    for (int i = 0; i < R; ++i) acc3[i][0][0] = acc3[i][1][0] = 0.f;
    mvc_dense<WT, XT, R, NS, U, 1>(src, x, n0, N, K, 1, vec, acc3);
    float acc[R][2];
#pragma unroll
    for (int i = 0; i < R; ++i) { acc[i][0] = acc3[i][0][0]; acc[i][1] = acc3[i][1][0]; }
    fm_store<XT, R, EPI>(acc, n0, p, pre);
    fm_grid_launch_dependents();
}

// ------------------------------------------------------------------ quantized weights
#if !FM_DENSE
template <typename XT, int EPI>
BC_DEV void fm_quant(const u8* __restrict__ W, const u8* __restrict__ W2, const XT* __restrict__ x, int K,
                     const FmP<XT>& p) {
    constexpr int R = FmRows<EPI>::R, NS = FmRows<EPI>::NS, NT = NS * R;   // row streams: t = s * R + i
    const int N = p.N;
    const int n0 = (blockIdx.x * FM_WARPS + (threadIdx.x >> 5)) * R;
    if constexpr (EPI == FE_RES) fm_ss_init();
    if (n0 >= N) { fm_grid_launch_dependents(); return; }     // whole warps only
    float acc2[NT][1];
    FmPre<R> pre;
    // the first segment's weights are staged before waiting for the previous node
    mvc_quant<WFMT, XT, R, NS, 1, FM_WARPS>(W, W2, x, n0, N, K, 1, acc2, [&] {
        fm_grid_wait();
        fm_preload<XT, R, EPI>(pre, n0, p);
    });
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = acc2[t][0];
    float out[R][2];
#pragma unroll
    for (int i = 0; i < R; ++i) { out[i][0] = acc[i]; out[i][1] = acc[NT - 1 - (R - 1 - i)]; }
    fm_store<XT, R, EPI>(out, n0, p, pre);
    fm_grid_launch_dependents();
}
#endif

// ------------------------------------------------------------------ Q4_K on tensor cores
// FM_TCD: matvec.cu's direct Q4_K / Q6_K loops (mvc_tcd / mvc_tcd6: weights straight into
// registers, mma.sync in the column layout; Q6_K needs K % 512 == 0). A block is a 16-row tile, its warps split K; warp 0 ends with the
// block's sums, lane l holding rows n0 + l / 4 and n0 + l / 4 + 8 (the 4 lanes of a row
// agree), and lanes l % 4 == 0 store. RoPE's row pairs (2j, 2j + 1) are lanes l and l ^ 4.
// The first FM_PF super-blocks of every warp are loaded before the grid dependency wait;
// warp 0 reads the epilogue's inputs right after it.
#if (WFMT == BC_Q4_K || WFMT == BC_Q6_K) && FM_TCD
#define FM_TCD_ON 1
template <typename XT, int EPI>
BC_DEV void fm_tcd(const u8* __restrict__ W, const u8* __restrict__ W2, const XT* __restrict__ x, int K,
                   const FmP<XT>& p) {
    constexpr int NS = EPI == FE_GLU ? 2 : 1;
    __shared__ float red[FM_TCD_MAXW * NS * 2 * 32];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16, N = p.N;
    float s = 1.f, rr[2] = {0.f, 0.f}, gg[2] = {0.f, 0.f}, cs[2] = {1.f, 1.f}, sn[2] = {0.f, 0.f};
    int pos = 0;
    float v[NS][2];
    mvc_tcdf<WFMT, XT, NS, FM_PF, FM_V>(W, W2, x, n0, N, K, wi, blockDim.x >> 5, v, [&] {
        fm_grid_wait();
        if (wi) return;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = min(n0 + g + 8 * h, N - 1);
            if constexpr (EPI == FE_RES) {
                rr[h] = bc_load(p.y + n);
                gg[h] = bc_load(p.g + n);
            }
        }
        if constexpr (EPI != FE_RES)
            if (p.ss_in) s = rsqrtf(*p.ss_in * p.inv_dim + p.eps);
        if constexpr (EPI == FE_QKV) {
            pos = *p.pos;
            const int nqk = p.nq + p.nkv;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = p.row0 + n0 + g + 8 * h;
                const int d = (r < p.nq ? r : r - p.nq) % p.hd;
                if (r < nqk && d < p.n_rot)
                    sincosf(__fmul_rn((float)pos, p.inv_freq[d >> 1]), &sn[h], &cs[h]);
            }
        }
    });
    if (!mvc_tcd_sum<NS>(red, v)) return;
    if constexpr (EPI == FE_RES) {
        float sq = 0.f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + g + 8 * h;
            if (t == 0 && n < N) {
                const XT yv = bc_from_float<XT>(v[0][h] + rr[h]);
                p.y[n] = yv;
                const float f = bc_to_float(yv);
                sq = fmaf(f, f, sq);
                bc_store(p.xg + n, f * gg[h]);
            }
        }
        sq = bc_warp_sum(sq);
        if (lane == 0) atomicAdd(p.ss_out, sq);
    } else {
        const int nqk = p.nq + p.nkv;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + g + 8 * h;
            float f = s * v[0][h];
            if constexpr (EPI == FE_GLU) {
                const float up = s * v[1][h];
                f = f / (1.f + bc_exp(-f)) * up;
            }
            if constexpr (EPI == FE_QKV) {
                const float o = __shfl_xor_sync(BC_FULL_MASK, f, 4);   // the pair's other row
                f = (g & 1) ? f * cs[h] + o * sn[h] : f * cs[h] - o * sn[h];
            }
            if (t == 0 && n < N) {
                bc_store(p.y + n, f);
                if constexpr (EPI == FE_QKV) {
                    const int row = p.row0 + n;
                    if (row >= p.nq) {
                        const int kv = row < nqk ? row - p.nq : row - nqk;
                        XT* c = row < nqk ? p.kc : p.vc;
                        bc_store(c + (long long)pos * p.cps + (long long)(kv / p.hd) * p.chs + kv % p.hd, f);
                    }
                }
            }
        }
    }
    fm_grid_launch_dependents();
}
#else
#define FM_TCD_ON 0
#endif

// ------------------------------------------------------------------ entry points
#if WFMT == 0
typedef float fm_w_t;
#elif WFMT == 1
typedef bc_half fm_w_t;
#elif WFMT == 30
typedef bc_bf16 fm_w_t;
#endif

#if FM_DENSE
#define FM_BODY(XT, EPI) fm_dense<fm_w_t, XT, EPI>((const fm_w_t*)W, (const fm_w_t*)W2, x, K, vec, p)
#elif FM_TCD_ON
#define FM_BODY(XT, EPI) fm_tcd<XT, EPI>((const u8*)W, (const u8*)W2, x, K, p)
#else
#define FM_BODY(XT, EPI) fm_quant<XT, EPI>((const u8*)W, (const u8*)W2, x, K, p)
#endif

#if FM_TCD_ON
#define FM_THREADS(EPI) (EPI == FE_GLU ? 16 * FM_TCD_MAXW : 32 * FM_TCD_MAXW)
#else
#define FM_THREADS(EPI) (32 * FM_WARPS)
#endif
#define FM_ENTRY(code, XT, SUF, EPI)                                                                     \
    extern "C" __global__ void __launch_bounds__(FM_THREADS(EPI))                                       \
    fmv_##code##_##SUF(const void* W, const void* W2, const XT* x, XT* y, const float* ss_in,          \
                       float* ss_out, XT* xg, const XT* g, XT* kc, XT* vc, const int* pos,              \
                       const float* inv_freq, int N, int K, int vec, float inv_dim, float eps, int row0, \
                       int nq, int nkv, int hd, int n_rot, long long cps, long long chs, int pf) {      \
        (void)vec;                                                                                      \
        const FmP<XT> p = {y, ss_in, ss_out, xg, g, kc, vc, pos, inv_freq, N, inv_dim, eps, row0,      \
                           nq, nkv, hd, n_rot, cps, chs, pf};                                           \
        FM_BODY(XT, EPI);                                                                               \
    }
#define FM_EPIS(code, XT) FM_ENTRY(code, XT, scale, FE_SCALE) FM_ENTRY(code, XT, res, FE_RES) \
    FM_ENTRY(code, XT, glu, FE_GLU) FM_ENTRY(code, XT, qkv, FE_QKV)
FM_EPIS(f16, bc_half)
FM_EPIS(bf16, bc_bf16)

// ------------------------------------------------------------------ embedding + first norm
// One block: x = table[*tok]; xg = x * g; ss[0] = sum(x^2); ss[1..nss) = 0 (the token's
// other accumulators, summed into by the fmv_res nodes that follow).
#define FE_EMBED(code, XT)                                                                              \
    extern "C" __global__ void fembed_##code(const XT* table, const int* tok, XT* x, XT* xg,          \
                                             const XT* g, float* ss, int nss, int dim) {               \
        const XT* row = table + (long long)(*tok) * dim;                                               \
        float sq = 0.f;                                                                                 \
        for (int i = threadIdx.x; i < dim; i += blockDim.x) {                                           \
            const XT v = row[i];                                                                        \
            x[i] = v;                                                                                   \
            const float f = bc_to_float(v);                                                             \
            sq = fmaf(f, f, sq);                                                                        \
            bc_store(xg + i, f * bc_load(g + i));                                                       \
        }                                                                                               \
        for (int i = 1 + threadIdx.x; i < nss; i += blockDim.x) ss[i] = 0.f;                           \
        sq = bc_block_sum(sq);                                                                          \
        if (threadIdx.x == 0) ss[0] = sq;                                                               \
    }
FE_EMBED(f16, bc_half)
FE_EMBED(bf16, bc_bf16)
