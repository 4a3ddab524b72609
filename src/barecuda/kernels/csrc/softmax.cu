// softmax.cu -- softmax over rows with a scale and an optional causal mask.
//
//   y[r, j] = exp(s*x[r, j] - m) / sum_j' exp(s*x[r, j'] - m)   over the unmasked j
//   causal (qlen > 0): row r is query q = r % qlen; columns j > q + offset are masked
//   (offset = keys - queries for a query block at the end of the keys); masked -> 0.
// A row with every column masked is written as zeros. fp32 math; a block per row at a
// time, looping over rows (rowwise.cuh); the vector path pipelines the next row's loads
// (SOFTMAX_PIPE). Entries: softmax_{f32,f16,bf16}_{v1,v2,v4,v8,s8} (as norms.cu).
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
#define SOFTMAX_PIPE 1   // the vector path: log2 units and ex2.approx.ftz, the next row's loads in flight
                         // when the block loops (rowwise.cuh). The host launches a block a row, where
                         // the math is the gain: H200 bf16 32768x4096 70.0% of spec against 50.3% (0)
#endif

// The cached paths' steps, shared by softmax_rows_pipe (log2 units: L2) and softmax_rows.
// softmax_mask_max: the thread's chunks into v (ld(k, c, p): chunk c, the thread's k-th, to p),
// each element scaled by sc, columns >= lim masked to -inf; returns the thread's max.
template <int VN, int KV, typename LD>
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
                const float t = c * VN + i < lim ? v[k * VN + i] * sc : NEG;
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
template <typename T, int VN, int KV>
__device__ void softmax_rows_pipe(T* __restrict__ y, const T* __restrict__ x, i32 cols, i64 sy, i64 sx,
                                  float scale, i32 qlen, i32 offset, i64 rows, int nch, int bd, int tid,
                                  float NEG) {
    const float sl2 = scale * 1.4426950408889634f;
    i64 row = blockIdx.x;
    if (row >= rows) return;
    for (int a = 2; a <= ROW_PF; ++a) bc_prefetch_ahead<T, VN>(x, row, rows, sx, cols, a);
    BcRowRaw<T, KV> cur, nxt;
    cur.load(x + row * sx, tid, bd, nch);
    for (; row < rows; row += gridDim.x) {
        const i64 nrow = row + gridDim.x;
        if (nrow < rows) nxt.load(x + nrow * sx, tid, bd, nch);
        if (ROW_PF > 0) bc_prefetch_ahead<T, VN>(x, row, rows, sx, cols, ROW_PF + 1);
        int lim = cols;
        if (qlen > 0) {
            const long long l = (long long)(row % qlen) + offset + 1;
            lim = l < 0 ? 0 : (l > cols ? cols : (int)l);
        }
        float v[KV * VN];
        const float m =
            softmax_mask_max<VN, KV>(v, [&](int k, int, float* p) { cur.unpack(k, p); }, lim, sl2, tid, bd, nch);
        const float mloc = m == NEG ? 0.f : m;
        const float s = softmax_exp_sum<VN, KV, true>(v, mloc, tid, bd, nch);
        const float2 ms = bc_block_reduce(make_float2(m, m == NEG ? 0.f : s),
                                          [](float2 q) { return softmax_warp_merge<true>(q); }, make_float2(NEG, 0.f));
        const float f = (ms.y > 0.f && m != NEG) ? softmax_ex2(mloc - ms.x) / ms.y : 0.f;
        softmax_scale_store<T, VN, KV>(v, f, y, row, sy, tid, bd, nch);
#pragma unroll
        for (int k = 0; k < KV; ++k) cur.r[k] = nxt.r[k];
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
            softmax_rows_pipe<T, VN, KV>(y, x, cols, sy, sx, scale, qlen, offset, rows, nch, bd, tid, NEG);
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

#define SOFTMAX_ENTRY(code, T, var, VN, KV)                                                        \
    extern "C" __global__ void softmax_##code##_##var(T* y, const T* x, i32 cols, i64 sy, i64 sx,    \
                                                      float scale, i32 qlen, i32 offset, i64 rows) { \
        softmax_rows<T, VN, KV>(y, x, cols, sy, sx, scale, qlen, offset, rows); }
#define SOFTMAX_ENTRIES(code, T)                                                                      \
    SOFTMAX_ENTRY(code, T, v1, 16 / sizeof(T), 1) SOFTMAX_ENTRY(code, T, v2, 16 / sizeof(T), 2)       \
    SOFTMAX_ENTRY(code, T, v4, 16 / sizeof(T), 4) SOFTMAX_ENTRY(code, T, v8, 16 / sizeof(T), 8)       \
    SOFTMAX_ENTRY(code, T, s8, 1, 8)

BC_FOR_FLOATS(SOFTMAX_ENTRIES)
