// softmax.cu -- softmax over rows with a scale and an optional causal mask.
//
//   y[r, j] = exp(s*x[r, j] - m) / sum_j' exp(s*x[r, j'] - m)   over the unmasked j
//   causal (qlen > 0): row r is query q = r % qlen; columns j > q + offset are masked
//   (offset = keys - queries for a query block at the end of the keys); masked -> 0.
// A row with every column masked is written as zeros. fp32 math; a block per row at a
// time, looping over rows (rowwise.cuh; the host launches a block a row); the vector path
// keeps a row's raw vectors in registers, with a register cap on the 16-elements-a-thread
// entries (SOFTMAX_PIPE, SOFTMAX_MINB below). Entries: softmax_{f32,f16,bf16}_{v1,v2,v4,v8,s8}
// (as norms.cu).
// A block a row has no row ahead to prefetch, but the prefetch code still costs registers:
// with ROW_PF=1 (rowwise.cuh's default, which softmax took until 2026-11-27) the SOFTMAX_PIPE=1
// build held 68 registers, 3 blocks a multiprocessor, against 64 and 4 with 0 (H200 bf16
// 32768x4096, same run: 58.2% against 69.3% of spec; the bench row's 58.3 and the sweep's 70.0
// of 2026-11-26 were these two builds). So softmax's default is 0.
#ifndef ROW_PF
#define ROW_PF 0
#endif
#include "rowwise.cuh"

// merge (max, sum of exp(. - max)) pairs: the block's max and the sum rescaled to it
// (L2: both in log2 units, as the pipelined path keeps them: it scales by log2(e) up front)
// 2^x, flushing denormal results to 0 (one MUFU op; exp2f without fast math adds a range fix-up)
BC_DEV float softmax_ex2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
template <bool L2> BC_DEV float2 softmax_merge(float2 a, float2 b) {
    const float M = fmaxf(a.x, b.x);
    if (M == bc_neg_inf()) return make_float2(L2 ? M : bc_neg_inf(), 0.f);
    if (L2) return make_float2(M, a.y * softmax_ex2(a.x - M) + b.y * softmax_ex2(b.x - M));
    return make_float2(M, a.y * bc_exp(a.x - M) + b.y * bc_exp(b.x - M));
}
template <bool L2> BC_DEV float2 softmax_warp_merge(float2 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float2 w;
        w.x = __shfl_xor_sync(BC_FULL_MASK, v.x, o);
        w.y = __shfl_xor_sync(BC_FULL_MASK, v.y, o);
        v = softmax_merge<L2>(v, w);
    }
    return v;
}
BC_DEV float2 softmax_block_merge(float m, float s) {
    // a thread's s is relative to max(m, 0-if-masked): express it relative to m exactly
    return bc_block_reduce(make_float2(m, m == bc_neg_inf() ? 0.f : s),
                           [](float2 v) { return softmax_warp_merge<false>(v); }, make_float2(bc_neg_inf(), 0.f));
}

#ifndef SOFTMAX_PIPE
#define SOFTMAX_PIPE 2   // the vector path in log2 units with ex2.approx.ftz (0: the load-at-use loop with
                         // exp2f, H200 bf16 32768x4096 50.3% of spec); 1: the next row's loads in flight
                         // when the block loops (rowwise.cuh), 69.3% a block a row; 2: one row a turn,
                         // its raw vectors loaded first (no next-row registers: the register cap below
                         // needs no spills), 81.2% with the cap (67.6 without; 2026-11-27 02:2x UTC)
#endif
#ifndef SOFTMAX_NOMASK
#define SOFTMAX_NOMASK 1 // the vector paths take a mask-free copy of the max pass when qlen <= 0
#endif                   // (no compare and select an element; 0: one path for both)

// The cached paths' steps, shared by softmax_rows_pipe (log2 units: L2) and softmax_rows.
// softmax_mask_max: the thread's chunks into v (ld(k, c, p): chunk c, the thread's k-th, to p),
// each element scaled by sc, columns >= lim masked to -inf (MASK; without it every column is
// visible: no compare and select an element); returns the thread's max.
template <int VN, int KV, bool MASK = true, typename LD>
BC_DEV float softmax_mask_max(float* v, LD ld, int lim, float sc, int tid, int bd, int nch) {
    const float NEG = bc_neg_inf();
    float m = NEG;
#pragma unroll
    for (int k = 0; k < KV; ++k) {
        const int c = tid + k * bd;
        if (c < nch) {
            ld(k, c, v + k * VN);
#pragma unroll
            for (int i = 0; i < VN; ++i) {
                const float t = !MASK || c * VN + i < lim ? v[k * VN + i] * sc : NEG;
                v[k * VN + i] = t;
                m = fmaxf(m, t);
            }
        }
    }
    return m;
}
// softmax_exp_sum: v = e^(v - mloc) (2^ with L2) in place; returns the thread's sum
template <int VN, int KV, bool L2>
BC_DEV float softmax_exp_sum(float* v, float mloc, int tid, int bd, int nch) {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < KV; ++k)
        if (tid + k * bd < nch) {
#pragma unroll
            for (int i = 0; i < VN; ++i) {
                const float e = L2 ? softmax_ex2(v[k * VN + i] - mloc) : bc_exp(v[k * VN + i] - mloc);
                v[k * VN + i] = e;
                s += e;
            }
        }
    return s;
}
// softmax_scale_store: y's row = v * f
template <typename T, int VN, int KV>
BC_DEV void softmax_scale_store(float* v, float f, T* y, i64 row, i64 sy, int tid, int bd, int nch) {
#pragma unroll
    for (int k = 0; k < KV; ++k) {
        const int c = tid + k * bd;
        if (c < nch) {
#pragma unroll
            for (int i = 0; i < VN; ++i) v[k * VN + i] *= f;
            BcChunk<T, VN>::store(y + row * sy, c, v + k * VN);
        }
    }
}

// The cached vector path, pipelined: row r is computed from registers loaded during row
// r - gridDim.x's turn; row r + gridDim.x's loads are issued before row r's reduction.
// Math in log2 units: t = x * scale * log2(e), e = 2^(t - m): one FMUL, one FADD, one MUFU
// an element. nch, bd, tid and NEG: softmax_rows's.
// ONE (SOFTMAX_PIPE=2): no next row; each turn loads its own row's raw vectors first.
// MASK = false: qlen <= 0 (every column visible).
template <typename T, int VN, int KV, bool ONE, bool MASK>
__device__ void softmax_rows_pipe(T* __restrict__ y, const T* __restrict__ x, i32 cols, i64 sy, i64 sx,
                                  float scale, i32 qlen, i32 offset, i64 rows, int nch, int bd, int tid,
                                  float NEG) {
    const float sl2 = scale * 1.4426950408889634f;
    i64 row = blockIdx.x;
    if (row >= rows) return;
    for (int a = 2; a <= ROW_PF; ++a) bc_prefetch_ahead<T, VN>(x, row, rows, sx, cols, a);
    BcRowRaw<T, KV> cur, nxt;
    if (!ONE) cur.load(x + row * sx, tid, bd, nch);
    for (; row < rows; row += gridDim.x) {
        const i64 nrow = row + gridDim.x;
        if (ONE) cur.load(x + row * sx, tid, bd, nch);
        else if (nrow < rows) nxt.load(x + nrow * sx, tid, bd, nch);
        if (ROW_PF > 0) bc_prefetch_ahead<T, VN>(x, row, rows, sx, cols, ROW_PF + 1);
        int lim = cols;
        if (MASK && qlen > 0) {
            const long long l = (long long)(row % qlen) + offset + 1;
            lim = l < 0 ? 0 : (l > cols ? cols : (int)l);
        }
        float v[KV * VN];
        const float m =
            softmax_mask_max<VN, KV, MASK>(v, [&](int k, int, float* p) { cur.unpack(k, p); }, lim, sl2, tid, bd, nch);
        const float mloc = m == NEG ? 0.f : m;
        const float s = softmax_exp_sum<VN, KV, true>(v, mloc, tid, bd, nch);
        const float2 ms = bc_block_reduce(make_float2(m, m == NEG ? 0.f : s),
                                          [](float2 q) { return softmax_warp_merge<true>(q); }, make_float2(NEG, 0.f));
        const float f = (ms.y > 0.f && m != NEG) ? softmax_ex2(mloc - ms.x) / ms.y : 0.f;
        softmax_scale_store<T, VN, KV>(v, f, y, row, sy, tid, bd, nch);
        if (!ONE) {
#pragma unroll
            for (int k = 0; k < KV; ++k) cur.r[k] = nxt.r[k];
        }
    }
}

template <typename T, int VN, int KV>
__device__ void softmax_rows(T* __restrict__ y, const T* __restrict__ x, i32 cols, i64 sy, i64 sx,
                             float scale, i32 qlen, i32 offset, i64 rows) {
    const int nch = cols / VN;
    const int bd = blockDim.x, tid = threadIdx.x;
    const float NEG = bc_neg_inf();
    // columns < lim(row) are visible
    auto limit = [&](i64 row) {
        if (qlen <= 0) return cols;
        const long long l = (long long)(row % qlen) + offset + 1;
        return l < 0 ? 0 : (l > cols ? cols : (int)l);
    };
    if constexpr (VN > 1 && SOFTMAX_PIPE) {
        if (nch <= KV * bd) {
            constexpr bool ONE = SOFTMAX_PIPE == 2;
            if (SOFTMAX_NOMASK && qlen <= 0)
                softmax_rows_pipe<T, VN, KV, ONE, false>(y, x, cols, sy, sx, scale, qlen, offset, rows, nch, bd, tid, NEG);
            else
                softmax_rows_pipe<T, VN, KV, ONE, true>(y, x, cols, sy, sx, scale, qlen, offset, rows, nch, bd, tid, NEG);
            return;
        }
    }
    if (nch <= KV * bd) {
        // this thread's max and sum of exp(v - max) in registers, then ONE block reduction
        // of (max, sum) pairs: sum_total = sum_t s_t * exp(m_t - M)
        for (int a = 1; a < ROW_PF; ++a) bc_prefetch_ahead<T, VN>(x, blockIdx.x, rows, sx, cols, a);
        for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
            bc_prefetch_ahead<T, VN>(x, row, rows, sx, cols);
            float v[KV * VN];
            const int lim = limit(row);
            const float m = softmax_mask_max<VN, KV>(
                v, [&](int, int c, float* p) { BcChunk<T, VN>::load(x + row * sx, c, p); }, lim, scale, tid, bd, nch);
            // one exp an element: e = exp(v - m_thread) kept, rescaled by exp(m_thread - M) / S
            const float mloc = m == NEG ? 0.f : m;
            const float s = softmax_exp_sum<VN, KV, false>(v, mloc, tid, bd, nch);
            const float2 ms = softmax_block_merge(m, s);
            const float f = (ms.y > 0.f && m != NEG) ? bc_exp(mloc - ms.x) / ms.y : 0.f;
            softmax_scale_store<T, VN, KV>(v, f, y, row, sy, tid, bd, nch);
        }
        return;
    }
    // streaming path (long rows): online max/sum in one pass, then the output pass
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * sx;
        T* yr = y + row * sy;
        const int lim = limit(row);
        float m = NEG, s = 0.f;
        for (int c = tid; c < nch; c += bd) {
            float v[VN];
            BcChunk<T, VN>::load(xr, c, v);
#pragma unroll
            for (int i = 0; i < VN; ++i) {
                const float t = c * VN + i < lim ? v[i] * scale : NEG;
                if (t > m) { s = s * bc_exp(m - t); m = t; }
                if (t != NEG) s += bc_exp(t - m);
            }
        }
        const float bm = bc_block_max(m);
        s = bm == NEG || m == NEG ? 0.f : s * bc_exp(m - bm);
        s = bc_block_sum(s);
        const float ms = bm == NEG ? 0.f : bm;
        const float inv = s > 0.f ? 1.f / s : 0.f;
        for (int c = tid; c < nch; c += bd) {
            float v[VN];
            BcChunk<T, VN>::load(xr, c, v);
#pragma unroll
            for (int i = 0; i < VN; ++i) v[i] = c * VN + i < lim ? bc_exp(v[i] * scale - ms) * inv : 0.f;
            BcChunk<T, VN>::store(yr, c, v);
        }
    }
}

// rowwise.cuh's register caps, blocks a multiprocessor for the 16-elements-a-thread entries
// (f16/bf16 v2, f32 v4): H200 32768x4096 (2026-11-27 02:2x UTC, with SOFTMAX_PIPE=2 and
// SOFTMAX_NOMASK=1), bf16 81.2% of spec at 6 (40 registers) against 76.3 at 5 (45) and 67.6
// uncapped (59, 4 blocks); f32 86.2 at 4 (62) against 85.5 at 5 (48) and 83.6 uncapped (72, 3)
#ifndef SOFTMAX_MINB
#define SOFTMAX_MINB 6
#endif
#ifndef SOFTMAX_MINB32
#define SOFTMAX_MINB32 4
#endif
#if SOFTMAX_MINB > 0
#define SOFTMAX_BOUNDS_f16(var) BC_ROW_BOUNDS2_##var(SOFTMAX_MINB)
#define SOFTMAX_BOUNDS_bf16(var) BC_ROW_BOUNDS2_##var(SOFTMAX_MINB)
#else
#define SOFTMAX_BOUNDS_f16(var)
#define SOFTMAX_BOUNDS_bf16(var)
#endif
#if SOFTMAX_MINB32 > 0
#define SOFTMAX_BOUNDS_f32(var) BC_ROW_BOUNDS4_##var(SOFTMAX_MINB32)
#else
#define SOFTMAX_BOUNDS_f32(var)
#endif
#define SOFTMAX_ENTRY(code, T, var, VN, KV)                                                        \
    extern "C" __global__ void SOFTMAX_BOUNDS_##code(var) softmax_##code##_##var(T* y, const T* x, i32 cols, i64 sy, i64 sx,    \
                                                      float scale, i32 qlen, i32 offset, i64 rows) { \
        softmax_rows<T, VN, KV>(y, x, cols, sy, sx, scale, qlen, offset, rows); }
#define SOFTMAX_ENTRIES(code, T)                                                                      \
    SOFTMAX_ENTRY(code, T, v1, 16 / sizeof(T), 1) SOFTMAX_ENTRY(code, T, v2, 16 / sizeof(T), 2)       \
    SOFTMAX_ENTRY(code, T, v4, 16 / sizeof(T), 4) SOFTMAX_ENTRY(code, T, v8, 16 / sizeof(T), 8)       \
    SOFTMAX_ENTRY(code, T, s8, 1, 8)

BC_FOR_FLOATS(SOFTMAX_ENTRIES)
