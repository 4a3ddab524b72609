// norms.cu -- rmsnorm and layernorm over rows, with an optional fused residual add.
//
//   h = x + r            (when r is given; h is written to hout, which may alias x or r)
//   rmsnorm:   y = h / sqrt(mean(h^2) + eps) * w
//   layernorm: y = (h - mean(h)) / sqrt(var(h) + eps) * w + b     (w, b optional: null)
//
// fp32 math throughout; a block per row at a time, looping over rows (rowwise.cuh). Entries:
//   {rmsnorm,layernorm}_{f32,f16,bf16}_{v1,v2,v4,v8,s8}
// vK: 16-byte vectors, K of them kept a thread; needs cols % (16/sizeof(T)) == 0 and every
// pointer and row stride 16-byte aligned. s8: scalar, 8 elements kept a thread. The host
// checks and picks the variant.
#include "rowwise.cuh"

// rowwise.cuh's register pipeline for the vector path (1), or load at use (0, the default):
// H200 bf16 32768x4096, % of spec (2026-11-26 22:58 UTC): rmsnorm 86.5 a block a row without it
// (40 registers, 6 blocks/SM) against 81.3 at best with it (70 registers, 3 blocks/SM: the wave
// with ROW_PF=1); rmsnorm+residual 87.2 against 86.1; layernorm 77.0 (the wave, ROW_PF=1)
// against 65.7 (94 registers, 2 blocks/SM).
#ifndef RMS_PIPE
#define RMS_PIPE 0
#endif
#ifndef LN_PIPE
#define LN_PIPE 0
#endif
#ifndef LN_RAW
#define LN_RAW 2         // layernorm's vector path keeps the row packed (ln_rows_raw), a row a turn: 1 for
#endif                   // every dtype, 2 for f32 only (the host launches f32 layernorm a block a row).
                         // H200 32768x4096 (2026-11-27 02:3x UTC, same run): f32 85.3% of spec with the
                         // register cap LN_MINB32=4 (64 registers, 4 blocks/SM) against 78.7 for the
                         // looping wave; bf16 54.3 (71 registers) and 48.3 / 25.8 capped at 5 / 6
                         // blocks (spills) against the wave's 77.5
#ifndef LN_LOOP
#define LN_LOOP 0        // layernorm's load-at-use path: 0 a block a row, as rmsnorm (the host launches a
#endif                   // block a row); 1 loops over rows (launched with one resident wave: the default
                         // before 2026-11-27 06:xx, ROW_PF's next row prefetched into L2)
#ifndef LN_PFD
#define LN_PFD 4         // with LN_LOOP=0: each block first prefetches row blockIdx.x + LN_PFD x (the
#endif                   // multiprocessor count, %nsmid) of x (and r) into L2 (rowwise.cuh's bulk prefetch):
                         // the block that takes that row some 0.8 waves later finds it there (0: none).
                         // H200 bf16 32768x4096, 2026-11-27 06:0x UTC, same run, a block a row, % of spec:
                         // 264 / 528 / 792 / 1056 / 1584 rows ahead 76.1 / 76.3 / 76.2 / 74.3 / 63.6 at 4
                         // blocks/SM (55 registers), 528 / 792 / 1056 / 1584: 80.5 / 80.5 / 78.8 / 69.1
                         // at 5 (LN_MINB=5, 48 registers); none 63.8; the looping wave 77.5

// The cached paths' steps, shared by norm_rows_pipe and norm_rows: v holds a thread's KV
// chunks of a row's h (chunk k is the row's chunk tid + k * bd, where that is < nch).
// norm_sums: s and s2, the sums of (h - shift) and of its square; with HS, h is first stored
// to hout's row chunk by chunk where r and hout are given.
template <typename T, int VN, int KV, bool HS>
BC_DEV void norm_sums(const float* v, float shift, const T* r, T* hout, i64 row, i64 sh,
                      int tid, int bd, int nch, float& s, float& s2) {
    s = 0.f, s2 = 0.f;
#pragma unroll
    for (int k = 0; k < KV; ++k) {
        const int c = tid + k * bd;
        if (c < nch) {
            if (HS && r && hout) BcChunk<T, VN>::store(hout + row * sh, c, v + k * VN);
#pragma unroll
            for (int i = 0; i < VN; ++i) {
                const float d = v[k * VN + i] - shift;
                s += d;
                s2 += d * d;
            }
        }
    }
}
// norm_stats: mean (layernorm; 0 for rmsnorm) and rstd from the block's sums (one reduction)
template <bool LN>
BC_DEV void norm_stats(float s, float s2, float shift, float inv_n, float eps, float& mean, float& rstd) {
    mean = 0.f;
    if (LN) {
        const float2 t = bc_block_sum2(make_float2(s, s2));
        const float dm = t.x * inv_n;
        mean = shift + dm;
        rstd = rsqrtf(fmaxf(t.y * inv_n - dm * dm, 0.f) + eps);
    } else {
        rstd = rsqrtf(bc_block_sum(s2) * inv_n + eps);
    }
}
// norm_store: y's row = (h - mean) * rstd [* w] [+ b]; with HS, each chunk of h is first
// stored to hout's row where r and hout are given
template <typename T, int VN, int KV, bool LN, bool HS>
BC_DEV void norm_store(const float* v, float mean, float rstd, const T* r, T* hout, i64 row, i64 sh,
                       T* y, i64 sy, const T* w, const T* b, int tid, int bd, int nch) {
#pragma unroll
    for (int k = 0; k < KV; ++k) {
        const int c = tid + k * bd;
        if (c < nch) {
            float wv[VN], bv[VN], o[VN];
            if (HS && r && hout) BcChunk<T, VN>::store(hout + row * sh, c, v + k * VN);
            if (w) BcChunk<T, VN>::load(w, c, wv);
            if (LN && b) BcChunk<T, VN>::load(b, c, bv);
#pragma unroll
            for (int i = 0; i < VN; ++i) {
                float t = (v[k * VN + i] - mean) * rstd;
                if (w) t *= wv[i];
                if (LN && b) t += bv[i];
                o[i] = t;
            }
            BcChunk<T, VN>::store(y + row * sy, c, o);
        }
    }
}

// The cached vector path, pipelined (rowwise.cuh): row r + gridDim.x's x (and r) vectors are
// loaded before row r is reduced and written. Works for any grid (a block a row: one turn).
// nch, bd, tid and inv_n: norm_rows's.
template <typename T, int VN, int KV, bool LN>
__device__ void norm_rows_pipe(T* __restrict__ y, T* hout, const T* x, const T* r,
                               const T* __restrict__ w, const T* __restrict__ b, i32 cols, i64 sy,
                               i64 sh, i64 sx, i64 sr, float eps, i64 rows, int nch, int bd, int tid,
                               float inv_n) {
    i64 row = blockIdx.x;
    if (row >= rows) return;
    for (int a = 2; a <= ROW_PF; ++a) {
        bc_prefetch_ahead<T, VN>(x, row, rows, sx, cols, a);
        bc_prefetch_ahead<T, VN>(r, row, rows, sr, cols, a);
    }
    BcRowRaw<T, KV> cx, cr, nx, nr;
    // layernorm sums (h - shift) with shift = the row's h[0]; it is read with the row's
    // vectors, before any thread can have written h over x or r (in place)
    auto first = [&](i64 q) { return LN ? bc_load(x + q * sx) + (r ? bc_load(r + q * sr) : 0.f) : 0.f; };
    cx.load(x + row * sx, tid, bd, nch);
    if (r) cr.load(r + row * sr, tid, bd, nch);
    float shift = first(row), nshift = 0.f;
    for (; row < rows; row += gridDim.x) {
        const i64 nrow = row + gridDim.x;
        if (nrow < rows) {
            nx.load(x + nrow * sx, tid, bd, nch);
            if (r) nr.load(r + nrow * sr, tid, bd, nch);
            nshift = first(nrow);
        }
        if (ROW_PF > 0) {
            bc_prefetch_ahead<T, VN>(x, row, rows, sx, cols, ROW_PF + 1);
            bc_prefetch_ahead<T, VN>(r, row, rows, sr, cols, ROW_PF + 1);
        }
        float v[KV * VN];
#pragma unroll
        for (int k = 0; k < KV; ++k)
            if (tid + k * bd < nch) {
                cx.unpack(k, v + k * VN);
                if (r) {
                    float rv[VN];
                    cr.unpack(k, rv);
#pragma unroll
                    for (int i = 0; i < VN; ++i) v[k * VN + i] += rv[i];
                }
            }
        float s, s2, mean, rstd;
        norm_sums<T, VN, KV, true>(v, shift, r, hout, row, sh, tid, bd, nch, s, s2);
        norm_stats<LN>(s, s2, shift, inv_n, eps, mean, rstd);
        norm_store<T, VN, KV, LN, false>(v, mean, rstd, r, hout, row, sh, y, sy, w, b, tid, bd, nch);
#pragma unroll
        for (int k = 0; k < KV; ++k) {
            cx.r[k] = nx.r[k];
            if (r) cr.r[k] = nr.r[k];
        }
        shift = nshift;
    }
}

// layernorm's vector path with the row kept as its raw 16-byte vectors (LN_RAW=1): x (and r)
// stay packed in registers (8 a thread for a bf16 4096-column row at 256 threads, where 16
// floats were), h = x + r is unpacked again for the store pass; one row a turn (any grid:
// the host launches a block a row). Same arithmetic, in the same order, as norm_rows's cached
// path; h is written after the reduction's barrier (in place: every thread has read its
// chunks and the shift by then). nch, bd, tid and inv_n: norm_rows's.
template <typename T, int VN, int KV>
__device__ void ln_rows_raw(T* __restrict__ y, T* hout, const T* x, const T* r, const T* __restrict__ w,
                            const T* __restrict__ b, i64 sy, i64 sh, i64 sx, i64 sr, float eps, i64 rows,
                            int nch, int bd, int tid, float inv_n) {
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        BcRowRaw<T, KV> cx, cr;
        cx.load(x + row * sx, tid, bd, nch);
        if (r) cr.load(r + row * sr, tid, bd, nch);
        const float shift = bc_load(x + row * sx) + (r ? bc_load(r + row * sr) : 0.f);
        float s = 0.f, s2 = 0.f;
#pragma unroll
        for (int k = 0; k < KV; ++k)
            if (tid + k * bd < nch) {
                float v[VN];
                cx.unpack(k, v);
                if (r) {
                    float rv[VN];
                    cr.unpack(k, rv);
#pragma unroll
                    for (int i = 0; i < VN; ++i) v[i] += rv[i];
                }
#pragma unroll
                for (int i = 0; i < VN; ++i) {
                    const float d = v[i] - shift;
                    s += d;
                    s2 += d * d;
                }
            }
        float mean, rstd;
        norm_stats<true>(s, s2, shift, inv_n, eps, mean, rstd);
#pragma unroll
        for (int k = 0; k < KV; ++k) {
            const int c = tid + k * bd;
            if (c < nch) {
                float v[VN], wv[VN], bv[VN];
                cx.unpack(k, v);
                if (r) {
                    float rv[VN];
                    cr.unpack(k, rv);
#pragma unroll
                    for (int i = 0; i < VN; ++i) v[i] += rv[i];
                    if (hout) BcChunk<T, VN>::store(hout + row * sh, c, v);
                }
                if (w) BcChunk<T, VN>::load(w, c, wv);
                if (b) BcChunk<T, VN>::load(b, c, bv);
#pragma unroll
                for (int i = 0; i < VN; ++i) {
                    float t = (v[i] - mean) * rstd;
                    if (w) t *= wv[i];
                    if (b) t += bv[i];
                    v[i] = t;
                }
                BcChunk<T, VN>::store(y + row * sy, c, v);
            }
        }
    }
}

template <typename T, int VN, int KV, bool LN>
__device__ void norm_rows(T* __restrict__ y, T* hout, const T* x, const T* r,
                          const T* __restrict__ w, const T* __restrict__ b,
                          i32 cols, i64 sy, i64 sh, i64 sx, i64 sr, float eps, i64 rows) {
    const int nch = cols / VN;
    const int bd = blockDim.x, tid = threadIdx.x;
    const float inv_n = 1.f / (float)cols;
    if constexpr (VN > 1 && (LN ? LN_PIPE : RMS_PIPE)) {
        if (nch <= KV * bd) {
            norm_rows_pipe<T, VN, KV, LN>(y, hout, x, r, w, b, cols, sy, sh, sx, sr, eps, rows, nch, bd, tid, inv_n);
            return;
        }
    }
    if constexpr (VN > 1 && LN && (LN_RAW == 1 || (LN_RAW == 2 && sizeof(T) == 4))) {
        if (nch <= KV * bd) {
            ln_rows_raw<T, VN, KV>(y, hout, x, r, w, b, sy, sh, sx, sr, eps, rows, nch, bd, tid, inv_n);
            return;
        }
    }
    if (nch <= KV * bd) {
        // layernorm sums (h - h[0]) and its square in one reduction: the shift by the row's
        // first value keeps E[d^2] - E[d]^2 accurate when |mean| >> std
        // layernorm loops over rows with prefetch (the host launches one wave); rmsnorm takes a
        // block a row (the host launches one a row) and holds no loop state in registers
        constexpr bool LOOP = LN && LN_LOOP;
        if constexpr (LOOP) {
            for (int a = 1; a < ROW_PF; ++a) {
                bc_prefetch_ahead<T, VN>(x, blockIdx.x, rows, sx, cols, a);
                bc_prefetch_ahead<T, VN>(r, blockIdx.x, rows, sr, cols, a);
            }
        } else if constexpr (LN && LN_PFD > 0 && VN > 1) {
            u32 nsm;
            asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
            const i64 pr = (i64)blockIdx.x + (i64)LN_PFD * nsm;
            if (pr < rows) {
                bc_prefetch_row(x + pr * sx, (u32)cols * (u32)sizeof(T));
                if (r) bc_prefetch_row(r + pr * sr, (u32)cols * (u32)sizeof(T));
            }
        }
        for (i64 row = blockIdx.x; row < rows; row = LOOP ? row + gridDim.x : rows) {
            if constexpr (LOOP) {
                bc_prefetch_ahead<T, VN>(x, row, rows, sx, cols);
                bc_prefetch_ahead<T, VN>(r, row, rows, sr, cols);
            }
            const T* xr = x + row * sx;
            const T* rr = r ? r + row * sr : r;
            const float shift = LN ? bc_load(xr) + (rr ? bc_load(rr) : 0.f) : 0.f;
            float v[KV * VN];
#pragma unroll
            for (int k = 0; k < KV; ++k) {
                const int c = tid + k * bd;
                if (c < nch) {
                    BcChunk<T, VN>::load(xr, c, v + k * VN);
                    if (rr) {
                        float rv[VN];
                        BcChunk<T, VN>::load(rr, c, rv);
#pragma unroll
                        for (int i = 0; i < VN; ++i) v[k * VN + i] += rv[i];
                    }
                }
            }
            // layernorm writes h after the reduction's barrier (norm_store, not norm_sums):
            // every thread has read the shift (h[0] from x and r) before h can overwrite x or r
            // (in place)
            float s, s2, mean, rstd;
            norm_sums<T, VN, KV, !LN>(v, shift, r, hout, row, sh, tid, bd, nch, s, s2);
            norm_stats<LN>(s, s2, shift, inv_n, eps, mean, rstd);
            norm_store<T, VN, KV, LN, LN>(v, mean, rstd, r, hout, row, sh, y, sy, w, b, tid, bd, nch);
        }
        return;
    }
    // streaming path: long rows; h is read back from hout (or recomputed from x + r)
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * sx;
        const T* rr = r ? r + row * sr : r;
        T* hr = hout ? hout + row * sh : hout;
        T* yr = y + row * sy;
        float s = 0.f;
        for (int c = tid; c < nch; c += bd) {
            float v[VN];
            BcChunk<T, VN>::load(xr, c, v);
            if (rr) {
                float rv[VN];
                BcChunk<T, VN>::load(rr, c, rv);
#pragma unroll
                for (int i = 0; i < VN; ++i) v[i] += rv[i];
                if (hr) BcChunk<T, VN>::store(hr, c, v);
            }
#pragma unroll
            for (int i = 0; i < VN; ++i) s += LN ? v[i] : v[i] * v[i];
        }
        s = bc_block_sum(s);
        // the same thread reads back the same chunks it wrote: no barrier needed
        const T* hsrc = (rr && hr) ? (const T*)hr : xr;
        const bool add_r = rr && !hr;
        float mean = 0.f, rstd;
        if (LN) {
            mean = s * inv_n;
            float q = 0.f;
            for (int c = tid; c < nch; c += bd) {
                float v[VN], rv[VN];
                BcChunk<T, VN>::load(hsrc, c, v);
                if (add_r) BcChunk<T, VN>::load(rr, c, rv);
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
            if (add_r) BcChunk<T, VN>::load(rr, c, rv);
            if (w) BcChunk<T, VN>::load(w, c, wv);
            if (LN && b) BcChunk<T, VN>::load(b, c, bv);
#pragma unroll
            for (int i = 0; i < VN; ++i) {
                float t = (v[i] + (add_r ? rv[i] : 0.f) - mean) * rstd;
                if (w) t *= wv[i];
                if (LN && b) t += bv[i];
                v[i] = t;
            }
            BcChunk<T, VN>::store(yr, c, v);
        }
    }
}

// rowwise.cuh's register caps for layernorm's 16-elements-a-thread entries (f16/bf16 v2,
// f32 v4); 0: none. LN_MINB=5: 48 registers, 5 blocks/SM, no spills (bf16 a block a row: 80.5% of
// spec with LN_PFD's prefetch, 69.2 without, against 76.3 uncapped with it); 6 spills (40
// registers, 152 bytes); LN_RAW spills at 5 and 6
#ifndef LN_MINB
#define LN_MINB 5
#endif
#ifndef LN_MINB32
#define LN_MINB32 4      // f32 v4 with LN_RAW: 64 registers, 4 blocks/SM (see LN_RAW)
#endif
#if LN_MINB > 0
#define LN_BOUNDS_f16(var) BC_ROW_BOUNDS2_##var(LN_MINB)
#define LN_BOUNDS_bf16(var) BC_ROW_BOUNDS2_##var(LN_MINB)
#else
#define LN_BOUNDS_f16(var)
#define LN_BOUNDS_bf16(var)
#endif
#if LN_MINB32 > 0
#define LN_BOUNDS_f32(var) BC_ROW_BOUNDS4_##var(LN_MINB32)
#else
#define LN_BOUNDS_f32(var)
#endif
#define NORM_ENTRY(code, T, var, VN, KV)                                                              \
    extern "C" __global__ void rmsnorm_##code##_##var(T* y, T* hout, const T* x, const T* r, const T* w,   \
            i32 cols, i64 sy, i64 sh, i64 sx, i64 sr, float eps, i64 rows) {                               \
        norm_rows<T, VN, KV, false>(y, hout, x, r, w, nullptr, cols, sy, sh, sx, sr, eps, rows); }           \
    extern "C" __global__ void LN_BOUNDS_##code(var) layernorm_##code##_##var(T* y, T* hout, const T* x, const T* r, const T* w, \
            const T* b, i32 cols, i64 sy, i64 sh, i64 sx, i64 sr, float eps, i64 rows) {                   \
        norm_rows<T, VN, KV, true>(y, hout, x, r, w, b, cols, sy, sh, sx, sr, eps, rows); }
#define NORM_ENTRIES(code, T)                                                                             \
    NORM_ENTRY(code, T, v1, 16 / sizeof(T), 1) NORM_ENTRY(code, T, v2, 16 / sizeof(T), 2)                 \
    NORM_ENTRY(code, T, v4, 16 / sizeof(T), 4) NORM_ENTRY(code, T, v8, 16 / sizeof(T), 8)                 \
    NORM_ENTRY(code, T, s8, 1, 8)

BC_FOR_FLOATS(NORM_ENTRIES)
