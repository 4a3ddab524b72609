// llama_step.cu -- the per-token bookkeeping of barecuda.models.llama's decode graph:
// the token choice (argmax, or seeded top-k/top-p sampling) and the step that advances
// the device-held position. Self-contained (no CUDA headers, no barecuda.kernels header),
// compiled by NVRTC through barecuda.Program and its persistent cache.
//
// Device state of one sequence (all int32, in one small buffer):
//     pos        position of the token the graph processes next (0-based)
//     tok        that token (the embedding gather reads it)
//     n_prompt   tokens of the prompt: positions < n_prompt are fed, not chosen
//     sampled    the token chosen from the last logits
//     hist[max_seq + 1]   the prompt, then every chosen token
// advance():  p = pos + 1; if p >= n_prompt: hist[p] = sampled; tok = hist[p]; pos = p.
// So one unchanged graph replays both the prompt (token by token) and the generation.

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define NT 1024

__device__ __forceinline__ float h2f(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ float b2f(u16 b) { return __uint_as_float(((u32)b) << 16); }
template <typename T> __device__ __forceinline__ float ld(const T* p, int i);
template <> __device__ __forceinline__ float ld<float>(const float* p, int i) { return p[i]; }
template <> __device__ __forceinline__ float ld<u16>(const u16* p, int i) { return h2f(p[i]); }
struct bf16_t { u16 x; };
template <> __device__ __forceinline__ float ld<bf16_t>(const bf16_t* p, int i) { return b2f(p[i].x); }

// a float's order as an unsigned key (larger float -> larger key; NaN treated as -inf)
__device__ __forceinline__ u32 fkey(float f) {
    if (f != f) return 0u;
    u32 u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ u64 splitmix64(u64 z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ float block_sum(float v, float* sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = l < (NT / 32) ? sh[l] : 0.f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (l == 0) sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

// argmax over n values; ties -> the smaller index. One block of NT threads.
template <typename T> __device__ void argmax_impl(const T* x, int n, int* out) {
    __shared__ float sv[NT / 32];
    __shared__ int si[NT / 32];
    float best = -3.402823466e38f;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += NT) {
        float v = ld<T>(x, i);
        if (v != v) continue;
        if (v > best || (v == best && i < bi)) { best = v; bi = i; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
    }
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) { sv[w] = best; si[w] = bi; }
    __syncthreads();
    if (w == 0) {
        best = l < NT / 32 ? sv[l] : -3.402823466e38f;
        bi = l < NT / 32 ? si[l] : 0x7fffffff;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
        }
        if (l == 0) *out = bi == 0x7fffffff ? 0 : bi;
    }
}

// Seeded sampling: temperature, then top-k (every token whose logit is >= the k-th
// largest: ties kept), then top-p (the largest threshold whose kept mass is >= top_p of
// the top-k mass), then the inverse CDF in token-id order with
// u = (splitmix64(seed + 0x9E3779B97F4A7C15 * (pos + 1)) >> 40) / 2^24.
// inv_temp <= 0: argmax. One block of NT threads; n <= NT * 256.
template <typename T> __device__ void sample_impl(const T* x, int n, const int* state, u64 seed, float inv_temp,
                                                   int top_k, float top_p, int* out) {
    __shared__ float sh[NT / 32];
    __shared__ float chunk[NT];
    if (inv_temp <= 0.f) { argmax_impl<T>(x, n, out); return; }
    const int per = (n + NT - 1) / NT;
    const int lo = threadIdx.x * per, hi = min(n, lo + per);
    // max
    float m = -3.402823466e38f;
    for (int i = lo; i < hi; ++i) { float v = ld<T>(x, i); if (v == v) m = fmaxf(m, v); }
    {
        __shared__ float smx[NT / 32];
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if ((threadIdx.x & 31) == 0) smx[threadIdx.x >> 5] = m;
        __syncthreads();
        m = smx[0];
        for (int w = 1; w < NT / 32; ++w) m = fmaxf(m, smx[w]);
        __syncthreads();
    }
    // top-k threshold on keys: the largest t with count(key >= t) >= k
    u32 tk = 0u;
    if (top_k > 0 && top_k < n) {
        for (int b = 31; b >= 0; --b) {
            const u32 c = tk | (1u << b);
            float cnt = 0.f;
            for (int i = lo; i < hi; ++i) cnt += fkey(ld<T>(x, i)) >= c ? 1.f : 0.f;
            if (block_sum(cnt, sh) >= (float)top_k) tk = c;
        }
    }
    // top-p threshold: the largest t >= tk with mass(key >= t) >= top_p * mass(key >= tk)
    u32 tp = tk;
    if (top_p < 1.f) {
        float z = 0.f;
        for (int i = lo; i < hi; ++i) { float v = ld<T>(x, i); if (fkey(v) >= tk) z += __expf((v - m) * inv_temp); }
        z = block_sum(z, sh);
        const float want = top_p * z;
        u32 t = 0u;
        for (int b = 31; b >= 0; --b) {
            const u32 c = t | (1u << b);
            if (c < tk) { t = c; continue; }        // below the top-k threshold: mass is z
            float s = 0.f;
            for (int i = lo; i < hi; ++i) { float v = ld<T>(x, i); if (fkey(v) >= c) s += __expf((v - m) * inv_temp); }
            if (block_sum(s, sh) >= want) t = c;
        }
        tp = t > tk ? t : tk;
    }
    // inverse CDF in id order over the kept set
    float s = 0.f;
    for (int i = lo; i < hi; ++i) { float v = ld<T>(x, i); if (fkey(v) >= tp) s += __expf((v - m) * inv_temp); }
    chunk[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float run = 0.f;
        for (int t = 0; t < NT; ++t) { float c = chunk[t]; chunk[t] = run; run += c; }
        sh[0] = run;
    }
    __syncthreads();
    const float total = sh[0];
    const int p = state[0];
    const u64 r = splitmix64(seed + 0x9E3779B97F4A7C15ull * (u64)(p + 1));
    const float u = (float)(r >> 40) * (1.0f / 16777216.0f);
    const float target = u * total;
    const float start = chunk[threadIdx.x];
    __shared__ int pick;
    if (threadIdx.x == 0) pick = -1;
    __syncthreads();
    if (s > 0.f && target >= start && target < start + s) {
        float run = start;
        int last = -1;
        for (int i = lo; i < hi; ++i) {
            float v = ld<T>(x, i);
            if (fkey(v) < tp) continue;
            last = i;
            run += __expf((v - m) * inv_temp);
            if (target < run) break;
        }
        atomicMax(&pick, last);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int k = pick;
        if (k < 0) {            // rounding put the target past the end: the last kept token
            for (int i = n - 1; i >= 0; --i) if (fkey(ld<T>(x, i)) >= tp) { k = i; break; }
        }
        *out = k < 0 ? 0 : k;
    }
}

extern "C" __global__ void __launch_bounds__(NT) llama_argmax_f32(const float* x, int n, int* out) { argmax_impl<float>(x, n, out); }
extern "C" __global__ void __launch_bounds__(NT) llama_argmax_f16(const u16* x, int n, int* out) { argmax_impl<u16>(x, n, out); }
extern "C" __global__ void __launch_bounds__(NT) llama_argmax_bf16(const bf16_t* x, int n, int* out) { argmax_impl<bf16_t>(x, n, out); }

extern "C" __global__ void __launch_bounds__(NT) llama_sample_f32(const float* x, int n, const int* state, u64 seed,
        float inv_temp, int top_k, float top_p, int* out) { sample_impl<float>(x, n, state, seed, inv_temp, top_k, top_p, out); }
extern "C" __global__ void __launch_bounds__(NT) llama_sample_f16(const u16* x, int n, const int* state, u64 seed,
        float inv_temp, int top_k, float top_p, int* out) { sample_impl<u16>(x, n, state, seed, inv_temp, top_k, top_p, out); }
extern "C" __global__ void __launch_bounds__(NT) llama_sample_bf16(const bf16_t* x, int n, const int* state, u64 seed,
        float inv_temp, int top_k, float top_p, int* out) { sample_impl<bf16_t>(x, n, state, seed, inv_temp, top_k, top_p, out); }

// state: [0] pos, [1] tok, [2] n_prompt, [3] sampled, [4..] hist (max_seq + 1 entries)
extern "C" __global__ void llama_advance(int* state, int max_seq) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    int p = state[0] + 1;
    if (p > max_seq) p = max_seq;            // the cache is full: stay (the host stops before)
    if (p >= state[2]) state[4 + p] = state[3];
    state[1] = state[4 + p];
    state[0] = p;
}
