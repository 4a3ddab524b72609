/*
 * barecuda/bc_kinds.h -- the one table of kernel parameter kinds.
 *
 * A kind says how a Python argument is packed into one parameter slot: its size,
 * alignment, the accepted integer range and which Python objects it takes. The
 * C packer (bc_pack.h, _launch.pyx) and the signature module (_signature.pyx:
 * PTX parser, user signatures, messages) both read the arrays generated here
 * from BC_KINDS, so a kind's facts are written once.
 *
 * Three families of integer kinds:
 *   - strict kinds (U32, S32, ...) come from an explicit signature= entry and
 *     take exactly the C type's range;
 *   - PTX integer kinds (X8..X64): a PTX .u32/.s32 parameter has no signedness
 *     (nvcc declares C `int` as .u32), so any value in [-2^(n-1), 2^n - 1] is
 *     packed as two's complement;
 *   - width-only slots (W8..W64): the driver reported a size and nothing else
 *     (cubin without signature=): integers of either sign in range, pointers for
 *     8 bytes, numpy/ctypes scalars only of exactly the slot's width; Python
 *     floats and bools are refused (their width would be a guess).
 */
#ifndef BARECUDA_BC_KINDS_H
#define BARECUDA_BC_KINDS_H

#include <stdint.h>

/* What a kind takes (bc_kind_flags). */
#define BC_F_INT   0x01   /* Python ints, range-checked against min/max */
#define BC_F_FLOAT 0x02   /* Python floats (stored by width: f16/f32/f64) */
#define BC_F_FCONV 0x04   /* a float type: ints are converted to float */
#define BC_F_PTR   0x08   /* pointer-like objects: DeviceBuffer, CAI, DLPack */
#define BC_F_BOOL  0x10   /* Python bool (stored as 0/1) */
#define BC_F_EXACT 0x20   /* numpy/ctypes scalars only of exactly the slot's width */
#define BC_F_BYTES 0x40   /* a bytes-like object of exactly the parameter's size */

#define BC_F_ANYINT (BC_F_INT | BC_F_BOOL)
#define BC_F_FLT (BC_F_FLOAT | BC_F_FCONV)

/* X(ID, name, size, align, min, max, flags). size -1: given per parameter. */
#define BC_KINDS(X) \
    X(PTR,   "ptr",   8, 8, 0,          UINT64_MAX, BC_F_ANYINT | BC_F_PTR) \
    X(U64,   "u64",   8, 8, 0,          UINT64_MAX, BC_F_ANYINT | BC_F_PTR) \
    X(S64,   "s64",   8, 8, INT64_MIN,  INT64_MAX,  BC_F_ANYINT) \
    X(F64,   "f64",   8, 8, 0,          0,          BC_F_FLT) \
    X(U32,   "u32",   4, 4, 0,          UINT32_MAX, BC_F_ANYINT) \
    X(S32,   "s32",   4, 4, INT32_MIN,  INT32_MAX,  BC_F_ANYINT) \
    X(F32,   "f32",   4, 4, 0,          0,          BC_F_FLT) \
    X(U16,   "u16",   2, 2, 0,          UINT16_MAX, BC_F_ANYINT) \
    X(S16,   "s16",   2, 2, INT16_MIN,  INT16_MAX,  BC_F_ANYINT) \
    X(F16,   "f16",   2, 2, 0,          0,          BC_F_FLT) \
    X(U8,    "u8",    1, 1, 0,          UINT8_MAX,  BC_F_ANYINT) \
    X(S8,    "s8",    1, 1, INT8_MIN,   INT8_MAX,   BC_F_ANYINT) \
    X(BOOL,  "bool",  1, 1, 0,          1,          BC_F_ANYINT) \
    X(B8,    "b8",    1, 1, INT8_MIN,   UINT8_MAX,  BC_F_ANYINT) \
    X(B16,   "b16",   2, 2, INT16_MIN,  UINT16_MAX, BC_F_ANYINT | BC_F_FLOAT) \
    X(B32,   "b32",   4, 4, INT32_MIN,  UINT32_MAX, BC_F_ANYINT | BC_F_FLOAT) \
    X(B64,   "b64",   8, 8, INT64_MIN,  UINT64_MAX, BC_F_ANYINT | BC_F_FLOAT | BC_F_PTR) \
    X(X8,    "x8",    1, 1, INT8_MIN,   UINT8_MAX,  BC_F_ANYINT) \
    X(X16,   "x16",   2, 2, INT16_MIN,  UINT16_MAX, BC_F_ANYINT) \
    X(X32,   "x32",   4, 4, INT32_MIN,  UINT32_MAX, BC_F_ANYINT) \
    X(X64,   "x64",   8, 8, INT64_MIN,  UINT64_MAX, BC_F_ANYINT | BC_F_PTR) \
    X(W8,    "w8",    1, 1, INT8_MIN,   UINT8_MAX,  BC_F_INT | BC_F_EXACT) \
    X(W16,   "w16",   2, 2, INT16_MIN,  UINT16_MAX, BC_F_INT | BC_F_EXACT) \
    X(W32,   "w32",   4, 4, INT32_MIN,  UINT32_MAX, BC_F_INT | BC_F_EXACT) \
    X(W64,   "w64",   8, 8, INT64_MIN,  UINT64_MAX, BC_F_INT | BC_F_EXACT | BC_F_PTR) \
    X(BYTES, "bytes", -1, 1, 0,         0,          BC_F_BYTES)

/* PTX parameter type spellings -> kind (X(spelling, ID)). Integer PTX types of
 * either spelled signedness map to the either-sign X kinds. */
#define BC_PTX_TYPES(X) \
    X("u8", X8) X("s8", X8) X("b8", B8) X("pred", BOOL) \
    X("u16", X16) X("s16", X16) X("b16", B16) X("f16", F16) X("bf16", B16) \
    X("u32", X32) X("s32", X32) X("b32", B32) X("f32", F32) X("f16x2", B32) X("bf16x2", B32) \
    X("u64", X64) X("s64", X64) X("b64", B64) X("f64", F64)

#define BC_KIND_ENUM_(id, name, size, align, lo, hi, flags) BC_K_##id,
enum { BC_KINDS(BC_KIND_ENUM_) BC_K_COUNT };
#undef BC_KIND_ENUM_

#define BC_KIND_NAME_(id, name, size, align, lo, hi, flags) name,
static const char *const bc_kind_name[BC_K_COUNT] = { BC_KINDS(BC_KIND_NAME_) };
#undef BC_KIND_NAME_
#define BC_KIND_SIZE_(id, name, size, align, lo, hi, flags) size,
static const int bc_kind_size[BC_K_COUNT] = { BC_KINDS(BC_KIND_SIZE_) };
#undef BC_KIND_SIZE_
#define BC_KIND_ALIGN_(id, name, size, align, lo, hi, flags) align,
static const int bc_kind_align[BC_K_COUNT] = { BC_KINDS(BC_KIND_ALIGN_) };
#undef BC_KIND_ALIGN_
#define BC_KIND_MIN_(id, name, size, align, lo, hi, flags) (long long)(lo),
static const long long bc_kind_min[BC_K_COUNT] = { BC_KINDS(BC_KIND_MIN_) };
#undef BC_KIND_MIN_
#define BC_KIND_MAX_(id, name, size, align, lo, hi, flags) (unsigned long long)(hi),
static const unsigned long long bc_kind_max[BC_K_COUNT] = { BC_KINDS(BC_KIND_MAX_) };
#undef BC_KIND_MAX_
#define BC_KIND_FLAGS_(id, name, size, align, lo, hi, flags) (flags),
static const int bc_kind_flags[BC_K_COUNT] = { BC_KINDS(BC_KIND_FLAGS_) };
#undef BC_KIND_FLAGS_

#define BC_PTX_NAME_(spelling, id) spelling,
static const char *const bc_ptx_type_name[] = { BC_PTX_TYPES(BC_PTX_NAME_) };
#undef BC_PTX_NAME_
#define BC_PTX_KIND_(spelling, id) BC_K_##id,
static const int bc_ptx_type_kind[] = { BC_PTX_TYPES(BC_PTX_KIND_) };
#undef BC_PTX_KIND_
#define BC_PTX_TYPE_COUNT ((int)(sizeof(bc_ptx_type_kind) / sizeof(bc_ptx_type_kind[0])))

static inline int bc_kind_is_pointer(int kind) {
    return (bc_kind_flags[kind] & BC_F_PTR) != 0;
}

static inline int bc_kind_is_float(int kind) {
    return (bc_kind_flags[kind] & BC_F_FCONV) != 0;
}

#endif /* BARECUDA_BC_KINDS_H */
