// common.cuh -- shared by every barecuda kernel source (compiled by NVRTC, no CUDA headers).
//
// Owns: fixed-width integer names, the 16-bit float storage types and their
// conversions (inline PTX; bf16 widening is a shift), load/store of any element type
// as float, 16-byte vector loads/stores, warp and block reductions (sum, max), and the
// macro that stamps out extern "C" entry points per dtype.
//
// Element types: `float`, `bc_half` (IEEE fp16 bits), `bc_bf16` (bfloat16 bits). Math is
// always fp32; the 16-bit types are storage only.
#pragma once

typedef unsigned char      u8;
typedef unsigned short     u16;
typedef unsigned int       u32;
typedef unsigned long long u64;
typedef signed char        i8;
typedef short              i16;
typedef int                i32;
typedef long long          i64;

#define BC_DEV __device__ __forceinline__
#define BC_FULL_MASK 0xffffffffu

struct bc_half { u16 x; };
struct bc_bf16 { u16 x; };

// ------------------------------------------------------------------ conversions
BC_DEV float bc_half_to_float(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
BC_DEV u16 bc_float_to_half(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
BC_DEV float bc_bf16_to_float(u16 b) { return __uint_as_float(((u32)b) << 16); }
BC_DEV u16 bc_float_to_bf16(float f) {
    u16 b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));      // sm_80+: round to nearest even, NaN kept
    return b;
}
// two floats -> packed pair (lo in the low half)
BC_DEV u32 bc_pack_half2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
BC_DEV u32 bc_pack_bf162(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// to_float / from_float over the three element types
BC_DEV float bc_to_float(float v) { return v; }
BC_DEV float bc_to_float(bc_half v) { return bc_half_to_float(v.x); }
BC_DEV float bc_to_float(bc_bf16 v) { return bc_bf16_to_float(v.x); }

template <typename T> BC_DEV T bc_from_float(float f);
template <> BC_DEV float bc_from_float<float>(float f) { return f; }
template <> BC_DEV bc_half bc_from_float<bc_half>(float f) { bc_half h; h.x = bc_float_to_half(f); return h; }
template <> BC_DEV bc_bf16 bc_from_float<bc_bf16>(float f) { bc_bf16 h; h.x = bc_float_to_bf16(f); return h; }

template <typename T> BC_DEV float bc_load(const T* p) { return bc_to_float(*p); }
template <typename T> BC_DEV void bc_store(T* p, float f) { *p = bc_from_float<T>(f); }

// ------------------------------------------------------------------ 16-byte vectors
// BcVec<T>: one 16-byte load of 16/sizeof(T) elements (4 floats or 8 halves/bf16s).
template <typename T> struct BcVec {
    static constexpr int N = 16 / sizeof(T);
    uint4 raw;
};

template <typename T> BC_DEV BcVec<T> bc_vload(const T* p) {        // p 16-byte aligned
    BcVec<T> v;
    v.raw = *reinterpret_cast<const uint4*>(p);
    return v;
}
// read-only, no L1 allocation: for data streamed once (weights, activations read once)
template <typename T> BC_DEV BcVec<T> bc_vload_stream(const T* p) {
    BcVec<T> v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.raw.x), "=r"(v.raw.y), "=r"(v.raw.z), "=r"(v.raw.w) : "l"(p));
    return v;
}
template <typename T> BC_DEV void bc_vstore(T* p, const BcVec<T>& v) {
    *reinterpret_cast<uint4*>(p) = v.raw;
}

// element i of a vector, as float
BC_DEV float bc_vget(const BcVec<float>& v, int i) {
    const u32 w = i == 0 ? v.raw.x : i == 1 ? v.raw.y : i == 2 ? v.raw.z : v.raw.w;
    return __uint_as_float(w);
}
BC_DEV u32 bc_vword(const uint4& r, int i) { return i == 0 ? r.x : i == 1 ? r.y : i == 2 ? r.z : r.w; }
BC_DEV float bc_vget(const BcVec<bc_half>& v, int i) {
    const u32 w = bc_vword(v.raw, i >> 1);
    return bc_half_to_float((u16)((i & 1) ? (w >> 16) : (w & 0xffffu)));
}
BC_DEV float bc_vget(const BcVec<bc_bf16>& v, int i) {
    const u32 w = bc_vword(v.raw, i >> 1);
    return __uint_as_float((i & 1) ? (w & 0xffff0000u) : (w << 16));
}
// all elements to floats (f must hold BcVec<T>::N)
template <typename T> BC_DEV void bc_vunpack(const BcVec<T>& v, float* f) {
#pragma unroll
    for (int i = 0; i < BcVec<T>::N; ++i) f[i] = bc_vget(v, i);
}
// floats to a vector
BC_DEV void bc_vpack(BcVec<float>& v, const float* f) {
    v.raw.x = __float_as_uint(f[0]); v.raw.y = __float_as_uint(f[1]);
    v.raw.z = __float_as_uint(f[2]); v.raw.w = __float_as_uint(f[3]);
}
BC_DEV void bc_vpack(BcVec<bc_half>& v, const float* f) {
    v.raw.x = bc_pack_half2(f[0], f[1]); v.raw.y = bc_pack_half2(f[2], f[3]);
    v.raw.z = bc_pack_half2(f[4], f[5]); v.raw.w = bc_pack_half2(f[6], f[7]);
}
BC_DEV void bc_vpack(BcVec<bc_bf16>& v, const float* f) {
    v.raw.x = bc_pack_bf162(f[0], f[1]); v.raw.y = bc_pack_bf162(f[2], f[3]);
    v.raw.z = bc_pack_bf162(f[4], f[5]); v.raw.w = bc_pack_bf162(f[6], f[7]);
}
// true when p is 16-byte aligned
BC_DEV bool bc_aligned16(const void* p) { return (reinterpret_cast<u64>(p) & 15u) == 0; }

// ------------------------------------------------------------------ reductions
BC_DEV float bc_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(BC_FULL_MASK, v, o);
    return v;
}
BC_DEV float bc_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(BC_FULL_MASK, v, o));
    return v;
}
// Block-wide reductions over blockDim.x threads (a multiple of 32, at most 1024); every
// thread gets the result. Safe to call repeatedly (the leading barrier guards reuse).
// bc_block_reduce: the block-wide form of a warp reduction `wr` (`id` for absent warps).
template <typename V, typename WR> BC_DEV V bc_block_reduce(V v, WR wr, V id) {
    __shared__ V sh[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = wr(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : id;
    return wr(v);
}
BC_DEV float bc_block_sum(float v) { return bc_block_reduce(v, [](float a) { return bc_warp_sum(a); }, 0.f); }
BC_DEV float bc_block_max(float v) {
    return bc_block_reduce(v, [](float a) { return bc_warp_max(a); }, -__int_as_float(0x7f800000));
}

// two sums in one block reduction (one barrier pair instead of two)
BC_DEV float2 bc_warp_sum2(float2 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v.x += __shfl_xor_sync(BC_FULL_MASK, v.x, o);
        v.y += __shfl_xor_sync(BC_FULL_MASK, v.y, o);
    }
    return v;
}
BC_DEV float2 bc_block_sum2(float2 v) {
    return bc_block_reduce(v, [](float2 a) { return bc_warp_sum2(a); }, make_float2(0.f, 0.f));
}

// ------------------------------------------------------------------ math
BC_DEV float bc_exp(float x) {                 // e^x through ex2.approx (rel. error ~2 ulp)
    return exp2f(x * 1.4426950408889634f);
}
BC_DEV float bc_neg_inf() { return -__int_as_float(0x7f800000); }

// ------------------------------------------------------------------ entry points
// BC_FOR_FLOATS(M) calls M(code, T) for the three element types, e.g.
//   #define RMSNORM_ENTRY(code, T) extern "C" __global__ void rmsnorm_##code(...) { rmsnorm<T>(...); }
//   BC_FOR_FLOATS(RMSNORM_ENTRY)
#define BC_FOR_FLOATS(M) M(f32, float) M(f16, bc_half) M(bf16, bc_bf16)
