// norms.cu -- rmsnorm and layernorm over rows, with an optional fused residual add.
//
//   h = x + r            (when r is given; h is written to hout, which may alias x or r)
//   rmsnorm:   y = h / sqrt(mean(h^2) + eps) * w
//   layernorm: y = (h - mean(h)) / sqrt(var(h) + eps) * w + b     (w, b optional: null)
//
// fp32 math throughout; one block per row (rowwise.cuh). Entries:
//   {rmsnorm,layernorm}_{f32,f16,bf16}_{vec,scalar}
// `vec` needs cols % (16/sizeof(T)) == 0 and every pointer and row stride 16-byte aligned
// (the host checks and picks the variant).
#include "rowwise.cuh"

template <typename T, int VN, bool LN>
__device__ void norm_row(T* __restrict__ y, T* hout, const T* x, const T* r,
                         const T* __restrict__ w, const T* __restrict__ b,
                         i32 cols, i64 sy, i64 sh, i64 sx, i64 sr, float eps) {
    constexpr int KV = BcRowKV<VN>::KV;
    const i64 row = blockIdx.x;
    const int nch = cols / VN;
    const int bd = blockDim.x, tid = threadIdx.x;
    x += row * sx;
    y += row * sy;
    if (r) { r += row * sr; }
    if (hout) { hout += row * sh; }
    const float inv_n = 1.f / (float)cols;
    float mean = 0.f, rstd;
    if (nch <= KV * bd) {
        float v[KV * VN];
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < KV; ++k) {
            const int c = tid + k * bd;
            if (c < nch) {
                BcChunk<T, VN>::load(x, c, v + k * VN);
                if (r) {
                    float rv[VN];
                    BcChunk<T, VN>::load(r, c, rv);
#pragma unroll
                    for (int i = 0; i < VN; ++i) v[k * VN + i] += rv[i];
                    if (hout) BcChunk<T, VN>::store(hout, c, v + k * VN);
                }
#pragma unroll
                for (int i = 0; i < VN; ++i) s += LN ? v[k * VN + i] : v[k * VN + i] * v[k * VN + i];
            }
        }
        s = bc_block_sum(s);
        if (LN) {
            mean = s * inv_n;
            float q = 0.f;
#pragma unroll
            for (int k = 0; k < KV; ++k)
                if (tid + k * bd < nch) {
#pragma unroll
                    for (int i = 0; i < VN; ++i) { const float d = v[k * VN + i] - mean; q += d * d; }
                }
            q = bc_block_sum(q);
            rstd = rsqrtf(q * inv_n + eps);
        } else {
            rstd = rsqrtf(s * inv_n + eps);
        }
#pragma unroll
        for (int k = 0; k < KV; ++k) {
            const int c = tid + k * bd;
            if (c < nch) {
                float wv[VN], bv[VN], o[VN];
                if (w) BcChunk<T, VN>::load(w, c, wv);
                if (LN && b) BcChunk<T, VN>::load(b, c, bv);
#pragma unroll
                for (int i = 0; i < VN; ++i) {
                    float t = (v[k * VN + i] - mean) * rstd;
                    if (w) t *= wv[i];
                    if (LN && b) t += bv[i];
                    o[i] = t;
                }
                BcChunk<T, VN>::store(y, c, o);
            }
        }
        return;
    }
    // streaming path: long rows; h is read back from hout (or recomputed from x + r)
    float s = 0.f;
    for (int c = tid; c < nch; c += bd) {
        float v[VN];
        BcChunk<T, VN>::load(x, c, v);
        if (r) {
            float rv[VN];
            BcChunk<T, VN>::load(r, c, rv);
#pragma unroll
            for (int i = 0; i < VN; ++i) v[i] += rv[i];
            if (hout) BcChunk<T, VN>::store(hout, c, v);
        }
#pragma unroll
        for (int i = 0; i < VN; ++i) s += LN ? v[i] : v[i] * v[i];
    }
    s = bc_block_sum(s);
    // the same thread reads back the same chunks it wrote: no barrier needed
    const T* hsrc = (r && hout) ? (const T*)hout : x;
    const bool add_r = r && !hout;
    if (LN) {
        mean = s * inv_n;
        float q = 0.f;
        for (int c = tid; c < nch; c += bd) {
            float v[VN], rv[VN];
            BcChunk<T, VN>::load(hsrc, c, v);
            if (add_r) BcChunk<T, VN>::load(r, c, rv);
#pragma unroll
            for (int i = 0; i < VN; ++i) { const float d = v[i] + (add_r ? rv[i] : 0.f) - mean; q += d * d; }
        }
        q = bc_block_sum(q);
        rstd = rsqrtf(q * inv_n + eps);
    } else {
        rstd = rsqrtf(s * inv_n + eps);
    }
    for (int c = tid; c < nch; c += bd) {
        float v[VN], rv[VN], wv[VN], bv[VN];
        BcChunk<T, VN>::load(hsrc, c, v);
        if (add_r) BcChunk<T, VN>::load(r, c, rv);
        if (w) BcChunk<T, VN>::load(w, c, wv);
        if (LN && b) BcChunk<T, VN>::load(b, c, bv);
#pragma unroll
        for (int i = 0; i < VN; ++i) {
            float t = (v[i] + (add_r ? rv[i] : 0.f) - mean) * rstd;
            if (w) t *= wv[i];
            if (LN && b) t += bv[i];
            v[i] = t;
        }
        BcChunk<T, VN>::store(y, c, v);
    }
}

#define NORM_ENTRIES(code, T)                                                                        \
    extern "C" __global__ void rmsnorm_##code##_vec(T* y, T* hout, const T* x, const T* r, const T* w, \
            i32 cols, i64 sy, i64 sh, i64 sx, i64 sr, float eps) {                                     \
        norm_row<T, 16 / sizeof(T), false>(y, hout, x, r, w, nullptr, cols, sy, sh, sx, sr, eps); }      \
    extern "C" __global__ void rmsnorm_##code##_scalar(T* y, T* hout, const T* x, const T* r, const T* w, \
            i32 cols, i64 sy, i64 sh, i64 sx, i64 sr, float eps) {                                     \
        norm_row<T, 1, false>(y, hout, x, r, w, nullptr, cols, sy, sh, sx, sr, eps); }                  \
    extern "C" __global__ void layernorm_##code##_vec(T* y, T* hout, const T* x, const T* r, const T* w, \
            const T* b, i32 cols, i64 sy, i64 sh, i64 sx, i64 sr, float eps) {                         \
        norm_row<T, 16 / sizeof(T), true>(y, hout, x, r, w, b, cols, sy, sh, sx, sr, eps); }             \
    extern "C" __global__ void layernorm_##code##_scalar(T* y, T* hout, const T* x, const T* r,        \
            const T* w, const T* b, i32 cols, i64 sy, i64 sh, i64 sx, i64 sr, float eps) {             \
        norm_row<T, 1, true>(y, hout, x, r, w, b, cols, sy, sh, sx, sr, eps); }

BC_FOR_FLOATS(NORM_ENTRIES)
