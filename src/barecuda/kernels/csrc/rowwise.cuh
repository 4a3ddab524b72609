// rowwise.cuh -- one block per row, the row held in registers (norms, softmax).
//
// A row of `cols` elements is cut into chunks of VN elements (VN = 16/sizeof(T) for the
// 16-byte vector path, 1 for the scalar path). Thread t owns chunks t, t+blockDim, ...,
// up to KV of them (a template parameter: 1, 2, 4, 8), kept in registers (as floats, or as
// the raw 16-byte vectors: softmax's and f32 layernorm's vector paths): the row is read from
// memory once. The host picks KV and blockDim so that chunks <= KV *
// blockDim ("cached") with about 256 threads a row and few registers; longer rows take
// the streaming path, which reads the row again (from L1/L2) instead.
//
// Blocks loop over rows (row = blockIdx.x, += gridDim.x) where a build launches one resident
// wave of blocks (the rows a block will take next are known and prefetched: ROW_PF below);
// rmsnorm, softmax and layernorm launch a block a row (measured faster for them, H100 and
// H200), where the loop runs once; f16/bf16 layernorm's blocks each prefetch a row some 0.8
// waves ahead instead (norms.cu's LN_PFD, through bc_prefetch_row).
#pragma once
#include "common.cuh"

template <typename T, int VN> struct BcChunk;
template <typename T> struct BcChunk<T, 1> {
    static BC_DEV void load(const T* p, int c, float* f) { f[0] = bc_load(p + c); }
    static BC_DEV void store(T* p, int c, const float* f) { bc_store(p + c, f[0]); }
};
template <typename T> struct BcChunk<T, 16 / sizeof(T)> {
    static constexpr int N = 16 / sizeof(T);
    static BC_DEV void load(const T* p, int c, float* f) { bc_vunpack(bc_vload(p + (i64)c * N), f); }
    static BC_DEV void store(T* p, int c, const float* f) { BcVec<T> v; bc_vpack(v, f); bc_vstore(p + (i64)c * N, v); }
};

// Rows ROW_PF ahead of the block's current row are prefetched into L2 (no registers held):
// the row's loads then hit L2, and HBM keeps streaming while the block reduces. sm_90: one
// bulk prefetch by thread 0 (16-byte aligned rows of a multiple of 16 bytes); else a 128-byte
// line a thread. `bytes` = 0: nothing.
#ifndef ROW_PF
#define ROW_PF 1        // H100, softmax bf16 32768x4096 in a looping wave: 75% of spec (0: 63%, 2: 68%)
#endif
BC_DEV void bc_prefetch_row(const void* p, u32 bytes) {
#if __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0 && bytes)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
#else
    for (u32 o = threadIdx.x * 128u; o < bytes; o += blockDim.x * 128u)
        asm volatile("prefetch.global.L2 [%0];" :: "l"(reinterpret_cast<const char*>(p) + o));
#endif
}
// prefetch row `row + ROW_PF * gridDim.x` of a [rows, stride] array (VN > 1: the vector path's rows
// are 16-byte aligned multiples of 16 bytes; the scalar path prefetches nothing)
template <typename T, int VN> BC_DEV void bc_prefetch_ahead(const T* base, i64 row, i64 rows, i64 stride, i32 cols, int ahead = ROW_PF) {
    const i64 nx = row + (i64)ahead * gridDim.x;
    if (VN > 1 && ahead > 0 && base && nx < rows) bc_prefetch_row(base + nx * stride, (u32)cols * (u32)sizeof(T));
}

// Register caps: an op file may compile its entries that keep 16 elements a thread (v2 of
// the 2-byte types, v4 of f32: a 4096-column row at 256 threads; the host launches them with
// at most 256 threads) for m resident blocks a multiprocessor, __launch_bounds__(256, m),
// with its own defines (SOFTMAX_MINB/SOFTMAX_MINB32, LN_MINB/LN_MINB32; 0: no bounds). The
// other entries keep their registers (v4 of bf16 would spill at softmax's cap).
#define BC_ROW_BOUNDS2_v1(m)
#define BC_ROW_BOUNDS2_v2(m) __launch_bounds__(256, m)
#define BC_ROW_BOUNDS2_v4(m)
#define BC_ROW_BOUNDS2_v8(m)
#define BC_ROW_BOUNDS2_s8(m)
#define BC_ROW_BOUNDS4_v1(m)
#define BC_ROW_BOUNDS4_v2(m)
#define BC_ROW_BOUNDS4_v4(m) __launch_bounds__(256, m)
#define BC_ROW_BOUNDS4_v8(m)
#define BC_ROW_BOUNDS4_s8(m)

// ------------------------------------------------------------------ register pipeline
// The vector path of a looping wave can keep the NEXT row's raw 16-byte vectors in flight
// in registers while it reduces and writes the current one (KV uint4 a thread, 8 registers
// for a bf16 4096-column row at 256 threads): HBM sees a load stream that never stops at
// the block's barrier, on top of the L2 prefetch. Each op file picks it with its own
// define (SOFTMAX_PIPE, RMS_PIPE, LN_PIPE: 1 pipelined, 0 the load-at-use loop above).
template <typename T, int KV> struct BcRowRaw {
    uint4 r[KV];
    // chunks tid, tid + bd, ... of the row at p (16-byte aligned), those < nch
    BC_DEV void load(const T* p, int tid, int bd, int nch) {
#pragma unroll
        for (int k = 0; k < KV; ++k) {
            const int c = tid + k * bd;
            if (c < nch) r[k] = *reinterpret_cast<const uint4*>(p + (i64)c * (16 / sizeof(T)));
        }
    }
    BC_DEV void unpack(int k, float* f) const { BcVec<T> v; v.raw = r[k]; bc_vunpack(v, f); }
};
