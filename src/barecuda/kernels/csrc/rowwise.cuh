// rowwise.cuh -- one block per row, the row held in registers (norms, softmax).
//
// A row of `cols` elements is cut into chunks of VN elements (VN = 16/sizeof(T) for the
// 16-byte vector path, 1 for the scalar path). Thread t owns chunks t, t+blockDim, ...,
// up to KV of them (a template parameter: 1, 2, 4, 8), kept as floats in registers: the
// row is read from memory once. The host picks KV and blockDim so that chunks <= KV *
// blockDim ("cached") with about 256 threads a row and few registers; longer rows take
// the streaming path, which reads the row again (from L1/L2) instead.
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
