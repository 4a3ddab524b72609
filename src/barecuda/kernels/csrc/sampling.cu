// sampling.cu -- argmax over rows; temperature / top-k / top-p sampling with Philox.
//
// argmax_{f32,f16,bf16}(out, x, rows, cols, stride): out[r] = the first index of the row's
// maximum (NaN is never the maximum; an all-NaN row gives 0). One block per row.
//
// sample_{f32,f16,bf16}(out, logits, rows, vocab, stride, inv_temp, top_k, top_p, seed,
// offset, offset_ptr): one token a row from softmax(logits / T) restricted to
//   top-k: the tokens whose logit is >= the k-th largest (ties at the k-th are all kept)
//   top-p: then the fewest largest tokens whose mass reaches top_p of what is left
// The uniform number is Philox4x32-10 (Random123) with key = seed and counter =
// (offset + *offset_ptr, row): the same seed and counter give the same token, and a
// captured graph advances by reading offset_ptr (e.g. the decode position).
// Thresholds are exact order statistics found by a 4-pass radix select over the
// logits' order-preserving 32-bit keys (counts for top-k, probability mass for top-p);
// the token is then found by a prefix sum in index order. One block of 512 a row.
#include "common.cuh"

// float -> u32 whose unsigned order is the float order (NaN -> 0, below -inf)
BC_DEV u32 sm_key(float f) {
    if (f != f) return 0u;
    const u32 b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// f(j, value) for every element of a row, this thread's share (j = tid, tid + blockDim,
// ... in 16-byte vectors when the row allows): loads are wide and several are in flight
template <typename T, typename F>
BC_DEV void sm_row(const T* p, i32 V, F&& f) {
    constexpr int N = BcVec<T>::N;
    i32 done = 0;
    if (bc_aligned16(p)) {
        const i32 nv = V / N;
#pragma unroll 4
        for (i32 c = threadIdx.x; c < nv; c += blockDim.x) {
            float v[N];
            bc_vunpack(bc_vload(p + (i64)c * N), v);
#pragma unroll
            for (int i = 0; i < N; ++i) f(c * N + i, v[i]);
        }
        done = nv * N;
    }
#pragma unroll 4
    for (i32 j = done + threadIdx.x; j < V; j += blockDim.x) f(j, bc_to_float(p[j]));
}

// f(j, value) for j in [j0, j1) in order (j0 a multiple of 16/sizeof(T)): one thread's chunk
template <typename T, typename F>
BC_DEV void sm_chunk(const T* p, i32 j0, i32 j1, F&& f) {
    constexpr int N = BcVec<T>::N;
    i32 j = j0;
    if (bc_aligned16(p)) {
#pragma unroll 4
        for (; j + N <= j1; j += N) {
            float v[N];
            bc_vunpack(bc_vload(p + j), v);
#pragma unroll
            for (int i = 0; i < N; ++i) f(j + i, v[i]);
        }
    }
    for (; j < j1; ++j) f(j, bc_to_float(p[j]));
}

// ------------------------------------------------------------------ argmax
template <typename T>
__device__ void argmax_impl(i32* out, const T* x, i64 rows, i32 cols, i64 stride) {
    __shared__ float sv[32];
    __shared__ i32 si[32];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* p = x + r * stride;
        float bv = bc_neg_inf();
        i32 bi = 0x7fffffff;
        // a thread sees its indices in increasing order: the first of equal values is kept
        sm_row(p, cols, [&](i32 j, float v) { if (v > bv || (bi == 0x7fffffff && v == v)) { bv = v; bi = j; } });
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(BC_FULL_MASK, bv, o);
            const i32 oi = __shfl_xor_sync(BC_FULL_MASK, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
        }
        const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
        __syncthreads();
        if (lane == 0) { sv[w] = bv; si[w] = bi; }
        __syncthreads();
        if (w == 0) {
            bv = lane < nw ? sv[lane] : bc_neg_inf();
            bi = lane < nw ? si[lane] : 0x7fffffff;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(BC_FULL_MASK, bv, o);
                const i32 oi = __shfl_xor_sync(BC_FULL_MASK, bi, o);
                if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
            }
            if (lane == 0) out[r] = bi == 0x7fffffff ? 0 : bi;
        }
    }
}

// ------------------------------------------------------------------ Philox4x32-10
BC_DEV uint4 philox4x32_10(uint4 c, u32 k0, u32 k1) {
#pragma unroll
    for (int i = 0; i < 10; ++i) {
        if (i) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        const u32 lo0 = 0xD2511F53u * c.x, hi0 = __umulhi(0xD2511F53u, c.x);
        const u32 lo1 = 0xCD9E8D57u * c.z, hi1 = __umulhi(0xCD9E8D57u, c.z);
        c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    }
    return c;
}

// ------------------------------------------------------------------ sampling
// one block of SM_THREADS a row (the host launches exactly that many)
#define SM_THREADS 512
#define SM_WARPS (SM_THREADS / 32)

// the top-k candidate path: a histogram of the distance below the row's maximum, then the
// candidates (key << 32 | ~index) sorted in shared memory
#define SM_NB 2048                // histogram bins over [0, SM_DR) logits below the maximum
#define SM_DR 8.f
#define SM_CAP 2048               // most candidates (a power of two)
struct SmTopK {
    u32 hist[SM_NB];
    u64 cand[SM_CAP];
    float cum[SM_CAP];
};

struct SmRadix {
    u32 wcnt[SM_WARPS][256];      // per-warp histograms: no contention between warps (a float
    float wmass[SM_WARPS][256];   // atomicAdd in shared memory is a CAS loop that contention stalls)
};

struct SmShared {
    union {
        SmRadix rx;
        SmTopK tk;
    };
    u32 cnt[256];
    float mass[256];
    float wsum[32];
    float stage[SM_WARPS][32];
    u32 sel_digit;
    u32 sel_above_cnt;
    float sel_above_mass;
    int pick;
    int last_thread;
};

// one pass of the radix select: histogram (count and mass) of digit `shift` among keys
// with (key & mask) == prefix and key >= floor_key; warp-aggregated shared atomics.
template <typename T>
__device__ void sm_hist(SmShared& sh, const T* p, i32 V, u32 prefix, u32 mask, int shift, u32 floor_key,
                        float m, float inv_t) {
    for (int i = threadIdx.x; i < SM_WARPS * 256; i += blockDim.x) { (&sh.rx.wcnt[0][0])[i] = 0; (&sh.rx.wmass[0][0])[i] = 0.f; }
    __syncthreads();
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    sm_row(p, V, [&](i32, float l) {
        const u32 k = sm_key(l);
        int d = -1;
        float e = 0.f;
        if ((k & mask) == prefix && k >= floor_key && k != 0u) {
            d = (int)((k >> shift) & 255u);
            e = bc_exp((l - m) * inv_t);
        }
        // warp aggregation: logits share few leading digits, so many lanes hit one bin;
        // the lowest lane of each group of equal digits adds the group's count and mass
        const unsigned act = __activemask();
        const unsigned peers = __match_any_sync(act, d);
        sh.stage[w][lane] = e;
        __syncwarp(act);
        if (peers == BC_FULL_MASK) {
            // the whole warp in one bin (logits sharing their leading digits): a butterfly sum
            const float sum = bc_warp_sum(e);
            if (d >= 0 && lane == 0) {
                atomicAdd(&sh.rx.wcnt[w][d], 32u);
                atomicAdd(&sh.rx.wmass[w][d], sum);
            }
        } else if (d >= 0 && lane == __ffs(peers) - 1) {
            float sum = 0.f;
            for (unsigned q = peers; q; q &= q - 1) sum += sh.stage[w][__ffs(q) - 1];
            atomicAdd(&sh.rx.wcnt[w][d], (u32)__popc(peers));
            atomicAdd(&sh.rx.wmass[w][d], sum);
        }
        __syncwarp(act);
    });
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        u32 c = 0;
        float ms = 0.f;
#pragma unroll
        for (int i = 0; i < SM_WARPS; ++i) { c += sh.rx.wcnt[i][b]; ms += sh.rx.wmass[i][b]; }
        sh.cnt[b] = c;
        sh.mass[b] = ms;
    }
    __syncthreads();
}

// thread 0 walks the bins from 255 down: the bin where the running count (BY_MASS: mass)
// plus what is above reaches `need`; the last non-empty bin when none does.
template <bool BY_MASS>
__device__ void sm_pick(SmShared& sh, float need, u32 above_cnt, float above_mass) {
    if (threadIdx.x == 0) {
        u32 c = above_cnt;
        float ms = above_mass;
        int pick = -1;
        u32 pc = c;
        float pm = ms;
        for (int b = 255; b >= 0; --b) {
            if (sh.cnt[b] == 0) continue;
            pick = b; pc = c; pm = ms;
            c += sh.cnt[b];
            ms += sh.mass[b];
            if (BY_MASS ? (ms >= need) : ((float)c >= need)) break;
        }
        sh.sel_digit = pick < 0 ? 0u : (u32)pick;
        sh.sel_above_cnt = pc;
        sh.sel_above_mass = pm;
    }
    __syncthreads();
}

// the largest key t (>= floor_key) with count(keys >= t) >= need (BY_MASS: mass >= need)
template <typename T, bool BY_MASS>
__device__ u32 sm_select(SmShared& sh, const T* p, i32 V, u32 floor_key, float need, float m, float inv_t) {
    u32 prefix = 0, mask = 0, above_c = 0;
    float above_m = 0.f;
    for (int shift = 24; shift >= 0; shift -= 8) {
        sm_hist(sh, p, V, prefix, mask, shift, floor_key, m, inv_t);
        sm_pick<BY_MASS>(sh, need, above_c, above_m);
        prefix |= sh.sel_digit << shift;
        mask |= 255u << shift;
        above_c = sh.sel_above_cnt;
        above_m = sh.sel_above_mass;
        __syncthreads();
    }
    return prefix;
}

// key -> the float it came from (not NaN)
BC_DEV float sm_unkey(u32 k) { return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }

// exclusive scan of v over the block (blockDim.x a multiple of 32); total in *tot
BC_DEV float sm_scan_excl(SmShared& sh, float v, float* tot) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) { const float q = __shfl_up_sync(BC_FULL_MASK, inc, o); if (lane >= o) inc += q; }
    __syncthreads();
    if (lane == 31) sh.wsum[w] = inc;
    __syncthreads();
    if (w == 0) {
        float q = lane < nw ? sh.wsum[lane] : 0.f;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) { const float u = __shfl_up_sync(BC_FULL_MASK, q, o); if (lane >= o) q += u; }
        if (lane < nw) sh.wsum[lane] = q;
    }
    __syncthreads();
    *tot = sh.wsum[nw - 1];
    return inc - v + (w ? sh.wsum[w - 1] : 0.f);
}

// sort a[0, n) (n a power of two <= SM_CAP) descending
BC_DEV void sm_sort_desc(u64* a, int n) {
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const int p = i ^ j;
                if (p > i) {
                    const u64 x = a[i], y = a[p];
                    if (((i & k) == 0) ? (x < y) : (x > y)) { a[i] = y; a[p] = x; }
                }
            }
            __syncthreads();
        }
}

// running sums of the masses of the first n entries of tk.cum (already holding the masses),
// in place; returns the total
BC_DEV float sm_cumsum(SmShared& sh, int n) {
    const int per = SM_CAP / blockDim.x;                  // entries a thread (blockDim.x divides SM_CAP)
    const int i0 = threadIdx.x * per;
    float s = 0.f;
    for (int i = i0; i < i0 + per; ++i) s += i < n ? sh.tk.cum[i] : 0.f;
    float tot;
    float run = sm_scan_excl(sh, s, &tot);
    for (int i = i0; i < i0 + per; ++i) if (i < n) { run += sh.tk.cum[i]; sh.tk.cum[i] = run; }
    __syncthreads();
    return tot;
}

// Top-k (and top-p) by candidates: the tokens within SM_DR logits of the maximum are counted
// in SM_NB bins of the distance; the bin where the count reaches k bounds the k largest, whose
// bins' tokens (at most SM_CAP) are gathered, sorted and cut exactly. Returns the token, or -1
// when the k-th largest is not within SM_DR of the maximum or the candidates pass SM_CAP
// (the caller then takes the radix path).
template <typename T>
__device__ i32 sm_topk_pick(SmShared& sh, const T* p, i32 V, float m, float inv_t, i32 top_k, float top_p, float u01) {
    const int lane = threadIdx.x & 31;
    for (int i = threadIdx.x; i < SM_NB; i += blockDim.x) sh.tk.hist[i] = 0u;
    if (threadIdx.x == 0) sh.pick = 0;
    __syncthreads();
    const float bscale = (float)SM_NB / SM_DR;
    auto bin = [&](float l) -> int {
        const float d = (m - l) * bscale;             // NaN and far tokens: no bin
        return d < (float)SM_NB ? (int)d : -1;
    };
    sm_row(p, V, [&](i32, float l) {
        const int b = bin(l);
        const unsigned in = __ballot_sync(__activemask(), b >= 0);       // most tokens are far: no match
        if (b >= 0) {
            const unsigned peers = __match_any_sync(in, b);
            if (lane == __ffs(peers) - 1) atomicAdd(&sh.tk.hist[b], (u32)__popc(peers));
        }
    });
    __syncthreads();
    // the first bin where the running count reaches k
    const int per = SM_NB / blockDim.x;
    const int b0 = threadIdx.x * per;
    float c = 0.f;
    for (int b = b0; b < b0 + per; ++b) c += (float)sh.tk.hist[b];
    float tot;
    float run = sm_scan_excl(sh, c, &tot);
    if (threadIdx.x == 0) sh.sel_digit = SM_NB;
    __syncthreads();
    for (int b = b0; b < b0 + per; ++b) {
        const float nx = run + (float)sh.tk.hist[b];
        if (run < (float)top_k && nx >= (float)top_k) { sh.sel_digit = (u32)b; sh.sel_above_cnt = (u32)nx; }
        run = nx;
    }
    __syncthreads();
    const u32 kbin = sh.sel_digit;
    const u32 ncand = sh.sel_above_cnt;
    if (kbin >= (u32)SM_NB || ncand > (u32)SM_CAP) return -1;    // uniform across the block
    // gather the candidates (warp-aggregated slots); pad to a power of two with 0 (sorts last)
    int np = 1;
    while (np < (int)ncand) np <<= 1;
    for (int i = threadIdx.x; i < np; i += blockDim.x) sh.tk.cand[i] = 0ull;
    __syncthreads();
    sm_row(p, V, [&](i32 j, float l) {
        const int b = bin(l);
        const bool want = b >= 0 && (u32)b <= kbin;
        const unsigned act = __activemask();
        const unsigned bal = __ballot_sync(act, want);
        const int leader = __ffs(act) - 1;
        int base = 0;
        if (lane == leader && bal) base = atomicAdd(&sh.pick, __popc(bal));
        base = __shfl_sync(act, base, leader);
        if (want) sh.tk.cand[base + __popc(bal & ((1u << lane) - 1u))] = ((u64)sm_key(l) << 32) | (u64)(u32)~(u32)j;
    });
    __syncthreads();
    sm_sort_desc(sh.tk.cand, np);
    // top-k: the k-th key; n = the candidates with a key at least that (ties kept)
    const u32 kt = (u32)(sh.tk.cand[top_k - 1] >> 32);
    for (int i = threadIdx.x; i < np; i += blockDim.x) {
        const u32 ki = (u32)(sh.tk.cand[i] >> 32);
        if (ki >= kt && (i + 1 == np || (u32)(sh.tk.cand[i + 1] >> 32) < kt)) sh.last_thread = i + 1;
        sh.tk.cum[i] = ki >= kt ? bc_exp((sm_unkey(ki) - m) * inv_t) : 0.f;
    }
    __syncthreads();
    int n = sh.last_thread;
    if (top_p < 1.f) {
        const float z = sm_cumsum(sh, n);
        const float need = top_p * z;
        if (threadIdx.x == 0) sh.last_thread = n - 1;       // rounding: no crossing -> all of them
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            if (sh.tk.cum[i] >= need && (i == 0 || sh.tk.cum[i - 1] < need)) sh.last_thread = i;
        __syncthreads();
        const u32 kp = (u32)(sh.tk.cand[sh.last_thread] >> 32);
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const u32 ki = (u32)(sh.tk.cand[i] >> 32);
            if (ki >= kp && (i + 1 == n || (u32)(sh.tk.cand[i + 1] >> 32) < kp)) sh.last_thread = i + 1;
        }
        __syncthreads();
        n = sh.last_thread;
    }
    // the n eligible tokens in index order (ascending ~index = descending index, so sort
    // (~index) descending with the rest 0), their running masses, and the token where u falls
    for (int i = threadIdx.x; i < np; i += blockDim.x) {
        const u64 e = sh.tk.cand[i];
        sh.tk.cand[i] = i < n ? (((u64)(u32)e << 32) | (e >> 32)) : 0ull;   // (~index, key)
    }
    __syncthreads();
    sm_sort_desc(sh.tk.cand, np);
    for (int i = threadIdx.x; i < n; i += blockDim.x) sh.tk.cum[i] = bc_exp((sm_unkey((u32)sh.tk.cand[i]) - m) * inv_t);
    __syncthreads();
    const float total = sm_cumsum(sh, n);
    const float u = u01 * total;
    if (threadIdx.x == 0) sh.pick = n - 1;                 // rounding: u past every sum -> the last
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (u < sh.tk.cum[i] && (i == 0 || !(u < sh.tk.cum[i - 1]))) sh.pick = i;
    __syncthreads();
    const i32 tok = (i32)~(u32)(sh.tk.cand[sh.pick] >> 32);
    __syncthreads();
    return tok;
}

template <typename T>
__device__ void sample_impl(i32* out, const T* logits, i64 rows, i32 V, i64 stride, float inv_t,
                            i32 top_k, float top_p, u64 seed, u64 offset, const i32* offset_ptr) {
    __shared__ SmShared sh;
    const u64 off = offset + (offset_ptr ? (u64)(i64)*offset_ptr : 0ull);
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* p = logits + r * stride;
        // 1. the maximum
        float m = bc_neg_inf();
        sm_row(p, V, [&](i32, float l) { m = fmaxf(m, l); });
        m = bc_block_max(m);
        if (!(m > bc_neg_inf())) { if (threadIdx.x == 0) out[r] = 0; continue; }
        const uint4 rnd = philox4x32_10(make_uint4((u32)off, (u32)(off >> 32), (u32)r, (u32)(r >> 32)),
                                        (u32)seed, (u32)(seed >> 32));
        const float u01 = (float)(rnd.x >> 8) * (1.f / 16777216.f);
        // 2. top-k (and top-p) over the candidates near the maximum, when they are few
        if (top_k > 0 && top_k < V) {
            const i32 tok = sm_topk_pick(sh, p, V, m, inv_t, top_k, top_p, u01);
            if (tok >= 0) {
                if (threadIdx.x == 0) out[r] = tok;
                __syncthreads();
                continue;
            }
        }
        // else: exact thresholds by radix select over the whole row
        u32 floor_key = 1u;
        if (top_k > 0 && top_k < V) floor_key = sm_select<T, false>(sh, p, V, 1u, (float)top_k, m, inv_t);
        // 3. top-p threshold among what is left
        if (top_p < 1.f) {
            float z = 0.f;
            sm_row(p, V, [&](i32, float l) { if (sm_key(l) >= floor_key) z += bc_exp((l - m) * inv_t); });
            z = bc_block_sum(z);
            floor_key = sm_select<T, true>(sh, p, V, floor_key, top_p * z, m, inv_t);
        }
        // 4. the token by a prefix sum in index order
        constexpr int NV = BcVec<T>::N;
        const i32 chunk = ((V + blockDim.x - 1) / blockDim.x + NV - 1) / NV * NV;   // whole vectors a thread
        const i32 j0 = min(V, (i32)threadIdx.x * chunk), j1 = min(V, j0 + chunk);
        float s = 0.f;
        sm_chunk(p, j0, j1, [&](i32, float l) { if (sm_key(l) >= floor_key) s += bc_exp((l - m) * inv_t); });
        // where this thread's tokens sit in the row's running mass
        float total;
        const float excl = sm_scan_excl(sh, s, &total);
        const float inc = excl + s;
        const float u = u01 * total;
        if (threadIdx.x == 0) { sh.pick = 0x7fffffff; sh.last_thread = -1; }
        __syncthreads();
        if (s > 0.f) atomicMax(&sh.last_thread, (int)threadIdx.x);
        if (s > 0.f && excl <= u && u < inc) {
            float acc = excl;
            i32 pick = -1, last = -1;
            sm_chunk(p, j0, j1, [&](i32 j, float l) {
                if (pick < 0 && sm_key(l) >= floor_key) {
                    acc += bc_exp((l - m) * inv_t);
                    last = j;
                    if (u < acc) pick = j;
                }
            });
            atomicMin(&sh.pick, pick >= 0 ? pick : last);
        }
        __syncthreads();
        // rounding can leave u in no thread's [excl, inc): then the last eligible token
        if (sh.pick == 0x7fffffff) {
            if ((int)threadIdx.x == sh.last_thread) {
                i32 last = j0;
                for (i32 j = j1 - 1; j >= j0; --j)
                    if (sm_key(bc_to_float(p[j])) >= floor_key) { last = j; break; }
                out[r] = last;
            }
        } else if (threadIdx.x == 0) {
            out[r] = sh.pick;
        }
        __syncthreads();
    }
}

#define SAMPLING_ENTRIES(code, T)                                                                     \
    extern "C" __global__ void argmax_##code(i32* out, const T* x, i64 rows, i32 cols, i64 stride) {  \
        argmax_impl<T>(out, x, rows, cols, stride); }                                                 \
    extern "C" __global__ void __launch_bounds__(SM_THREADS) sample_##code(i32* out, const T* logits,       \
            i64 rows, i32 vocab, i64 stride, float inv_temp, i32 top_k, float top_p, u64 seed,        \
            u64 offset, const i32* offset_ptr) {                                                       \
        sample_impl<T>(out, logits, rows, vocab, stride, inv_temp, top_k, top_p, seed, offset, offset_ptr); }

BC_FOR_FLOATS(SAMPLING_ENTRIES)

// the raw generator, for tests: out[4*i..4*i+3] = Philox4x32-10(counter (ctr_lo + i, ctr_hi, c2, c3), key)
extern "C" __global__ void philox_raw(u32* out, i32 n, u64 seed, u32 ctr_lo, u32 ctr_hi, u32 c2, u32 c3) {
    const i32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const uint4 v = philox4x32_10(make_uint4(ctr_lo + (u32)i, ctr_hi, c2, c3), (u32)seed, (u32)(seed >> 32));
        out[4 * i] = v.x; out[4 * i + 1] = v.y; out[4 * i + 2] = v.z; out[4 * i + 3] = v.w;
    }
}
