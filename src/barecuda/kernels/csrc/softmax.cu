// softmax.cu -- softmax over rows with a scale and an optional causal mask.
//
//   y[r, j] = exp(s*x[r, j] - m) / sum_j' exp(s*x[r, j'] - m)   over the unmasked j
//   causal (qlen > 0): row r is query q = r % qlen; columns j > q + offset are masked
//   (offset = keys - queries for a query block at the end of the keys); masked -> 0.
// A row with every column masked is written as zeros. fp32 math; one block per row
// (rowwise.cuh). Entries: softmax_{f32,f16,bf16}_{vec,scalar}.
#include "rowwise.cuh"

template <typename T, int VN>
__device__ void softmax_row(T* __restrict__ y, const T* __restrict__ x, i32 cols, i64 sy, i64 sx,
                            float scale, i32 qlen, i32 offset) {
    constexpr int KV = BcRowKV<VN>::KV;
    const i64 row = blockIdx.x;
    const int nch = cols / VN;
    const int bd = blockDim.x, tid = threadIdx.x;
    x += row * sx;
    y += row * sy;
    // columns < lim are visible
    int lim = cols;
    if (qlen > 0) {
        const long long l = (long long)(row % qlen) + offset + 1;
        lim = l < 0 ? 0 : (l > cols ? cols : (int)l);
    }
    const float NEG = bc_neg_inf();
    if (nch <= KV * bd) {
        float v[KV * VN];
        float m = NEG;
#pragma unroll
        for (int k = 0; k < KV; ++k) {
            const int c = tid + k * bd;
            if (c < nch) {
                BcChunk<T, VN>::load(x, c, v + k * VN);
#pragma unroll
                for (int i = 0; i < VN; ++i) {
                    const float t = c * VN + i < lim ? v[k * VN + i] * scale : NEG;
                    v[k * VN + i] = t;
                    m = fmaxf(m, t);
                }
            }
        }
        m = bc_block_max(m);
        const float ms = m == NEG ? 0.f : m;
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < KV; ++k)
            if (tid + k * bd < nch) {
#pragma unroll
                for (int i = 0; i < VN; ++i) { const float e = bc_exp(v[k * VN + i] - ms); v[k * VN + i] = e; s += e; }
            }
        s = bc_block_sum(s);
        const float inv = s > 0.f ? 1.f / s : 0.f;
#pragma unroll
        for (int k = 0; k < KV; ++k) {
            const int c = tid + k * bd;
            if (c < nch) {
#pragma unroll
                for (int i = 0; i < VN; ++i) v[k * VN + i] *= inv;
                BcChunk<T, VN>::store(y, c, v + k * VN);
            }
        }
        return;
    }
    // streaming path (long rows): online max/sum in one pass, then the output pass
    float m = NEG, s = 0.f;
    for (int c = tid; c < nch; c += bd) {
        float v[VN];
        BcChunk<T, VN>::load(x, c, v);
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
        BcChunk<T, VN>::load(x, c, v);
#pragma unroll
        for (int i = 0; i < VN; ++i) v[i] = c * VN + i < lim ? bc_exp(v[i] * scale - ms) * inv : 0.f;
        BcChunk<T, VN>::store(y, c, v);
    }
}

#define SOFTMAX_ENTRIES(code, T)                                                                     \
    extern "C" __global__ void softmax_##code##_vec(T* y, const T* x, i32 cols, i64 sy, i64 sx,      \
                                                    float scale, i32 qlen, i32 offset) {             \
        softmax_row<T, 16 / sizeof(T)>(y, x, cols, sy, sx, scale, qlen, offset); }                  \
    extern "C" __global__ void softmax_##code##_scalar(T* y, const T* x, i32 cols, i64 sy, i64 sx,   \
                                                       float scale, i32 qlen, i32 offset) {          \
        softmax_row<T, 1>(y, x, cols, sy, sx, scale, qlen, offset); }

BC_FOR_FLOATS(SOFTMAX_ENTRIES)
