/*
 * barecuda/bc_pack.h -- C helpers for the launch hot path: the parameter kinds,
 * the per-kernel parameter descriptor, scalar stores, IEEE half conversion, and
 * the launch record that plans and plan lists issue from a C loop.
 *
 * Everything here is static inline and free of Python: _launch.pyx does the
 * Python-object side (type dispatch, range checks that raise) and calls these to
 * move bytes.
 */
#ifndef BARECUDA_BC_PACK_H
#define BARECUDA_BC_PACK_H

#include <stdint.h>
#include <string.h>
#include "barecuda/cuda_abi.h"

/* Whether kernel launches release the GIL around cuLaunchKernel by default.
 * DESIGN.md measured 1.016x of raw C with the GIL held and 1.05x when released
 * (release + re-take costs ~130-200 ns), so the default keeps it. The benchmark
 * flips it at run time with barecuda._launch.set_launch_releases_gil(). */
#ifndef BC_LAUNCH_RELEASES_GIL
#define BC_LAUNCH_RELEASES_GIL 0
#endif

/* Parameters up to this many bytes (and this many parameters) are packed on the
 * C stack; bigger blocks (CUDA 12.1+ allows 32 KiB) go to the heap. */
#define BC_SMALL_ARGBYTES 4096
#define BC_SMALL_NPARAMS 256

/* Parameter kinds. The order is the order of the range tables below. */
enum {
    BC_K_PTR = 0,   /* .u64 .ptr / "ptr": DeviceBuffer, int address, CAI, DLPack */
    BC_K_U64,       /* .u64: like PTR (nvcc declares pointers as plain .u64) */
    BC_K_S64,
    BC_K_F64,
    BC_K_U32,
    BC_K_S32,
    BC_K_F32,
    BC_K_U16,
    BC_K_S16,
    BC_K_F16,
    BC_K_U8,
    BC_K_S8,
    BC_K_BOOL,      /* 1 byte, 0 or 1 */
    BC_K_B8,        /* untyped bits: ints of either signedness; floats by width */
    BC_K_B16,
    BC_K_B32,
    BC_K_B64,       /* also takes pointer-like objects */
    BC_K_BYTES,     /* .b8 name[N] arrays (structs): bytes-like of exactly N bytes */
    BC_K_COUNT
};

typedef struct bc_param {
    uint32_t offset;   /* in the parameter block */
    uint32_t size;     /* bytes */
    uint32_t align;
    int32_t kind;      /* BC_K_* */
} bc_param;

/* Accepted integer range per kind (BC_K_BYTES: none). */
static const long long bc_kind_min[BC_K_COUNT] = {
    0, 0, INT64_MIN, 0, 0, INT32_MIN, 0, 0, INT16_MIN, 0, 0, INT8_MIN, 0,
    INT8_MIN, INT16_MIN, INT32_MIN, INT64_MIN, 0
};
static const unsigned long long bc_kind_max[BC_K_COUNT] = {
    UINT64_MAX, UINT64_MAX, INT64_MAX, 0, UINT32_MAX, INT32_MAX, 0, UINT16_MAX, INT16_MAX, 0,
    UINT8_MAX, INT8_MAX, 1, UINT8_MAX, UINT16_MAX, UINT32_MAX, UINT64_MAX, 0
};
/* 1 for kinds that take Python ints, 2 for float kinds, 0 otherwise. */
static const int bc_kind_class[BC_K_COUNT] = {
    1, 1, 1, 2, 1, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 0
};

static inline int bc_kind_is_pointer(int kind) {
    return kind == BC_K_PTR || kind == BC_K_U64 || kind == BC_K_B64;
}

static inline int bc_kind_is_float(int kind) {
    return kind == BC_K_F32 || kind == BC_K_F64 || kind == BC_K_F16;
}

/* Store the low `size` bytes of v (two's complement, little-endian host). */
static inline void bc_store_int(char *slot, uint32_t size, unsigned long long v) {
    switch (size) {
    case 1: { uint8_t x = (uint8_t)v; memcpy(slot, &x, 1); break; }
    case 2: { uint16_t x = (uint16_t)v; memcpy(slot, &x, 2); break; }
    case 4: { uint32_t x = (uint32_t)v; memcpy(slot, &x, 4); break; }
    default: memcpy(slot, &v, 8); break;
    }
}

/* double -> IEEE binary16 bits, round to nearest even, overflow to inf (numpy's
 * behaviour), NaN -> quiet NaN with the sign kept (0x7e00, as struct's 'e'). */
static inline uint16_t bc_double_to_half(double d) {
    uint64_t x, ax, m;
    uint16_t sign;
    int e;
    memcpy(&x, &d, 8);
    sign = (uint16_t)((x >> 48) & 0x8000u);
    ax = x & 0x7fffffffffffffffULL;
    if (ax >= 0x7ff0000000000000ULL)                     /* inf or NaN */
        return (uint16_t)(sign | (ax == 0x7ff0000000000000ULL ? 0x7c00u : 0x7e00u));
    if (ax >= 0x40effe0000000000ULL)                     /* >= 65520: rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    e = (int)(ax >> 52) - 1023;
    m = ax & 0x000fffffffffffffULL;
    if (e >= -14) {                                      /* normal half */
        uint64_t h = ((uint64_t)(e + 15) << 10) | (m >> 42);
        uint64_t rem = m & ((1ULL << 42) - 1), half = 1ULL << 41;
        if (rem > half || (rem == half && (h & 1))) h++;  /* carry may bump the exponent */
        return (uint16_t)(sign | h);
    } else {                                             /* subnormal half or zero */
        uint64_t full, h, rem, halfway;
        int shift;
        if (ax == 0) return sign;
        full = m | (e > -1023 ? (1ULL << 52) : 0);       /* double subnormals: tiny, give 0 */
        if (e == -1023) e = -1022;
        shift = 28 - e;                                  /* value * 2^24 = full >> shift */
        if (shift >= 64) return sign;
        h = full >> shift;
        rem = full & ((1ULL << shift) - 1);
        halfway = 1ULL << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
}

static inline void bc_store_f16(char *slot, double d) {
    uint16_t h = bc_double_to_half(d);
    memcpy(slot, &h, 2);
}

static inline void bc_store_f32(char *slot, double d) {
    /* IEEE conversion (Annex F): out-of-range values become +-inf, as in numpy. */
    float f = (float)d;
    memcpy(slot, &f, 4);
}

static inline void bc_store_f64(char *slot, double d) {
    memcpy(slot, &d, 8);
}

static inline uint32_t bc_align_up(uint32_t v, uint32_t a) {
    return a > 1 ? (v + a - 1) / a * a : v;
}

/* One launch, ready to issue: what a plan stores and a plan list points at.
 * `pfunc` points at the Kernel's own CUfunction field, so a kernel whose module
 * was closed (func set to NULL) is refused instead of launched. */
typedef struct bc_launch_rec {
    CUfunction const *pfunc;
    CUcontext ctx;
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int smem;
    CUstream stream;
    void **params;
    unsigned int nattrs;         /* > 0: issue through cuLaunchKernelEx */
    CUlaunchAttribute attrs[4];
} bc_launch_rec;

static inline CUresult bc_issue(const bc_driver_t *D, const bc_launch_rec *r) {
    if (r->nattrs == 0) {
        return D->cuLaunchKernel(*r->pfunc, r->grid[0], r->grid[1], r->grid[2],
                                 r->block[0], r->block[1], r->block[2],
                                 r->smem, r->stream, r->params, NULL);
    } else {
        CUlaunchConfig cfg;
        cfg.gridDimX = r->grid[0]; cfg.gridDimY = r->grid[1]; cfg.gridDimZ = r->grid[2];
        cfg.blockDimX = r->block[0]; cfg.blockDimY = r->block[1]; cfg.blockDimZ = r->block[2];
        cfg.sharedMemBytes = r->smem;
        cfg.hStream = r->stream;
        cfg.attrs = (CUlaunchAttribute *)r->attrs;
        cfg.numAttrs = r->nattrs;
        return D->cuLaunchKernelEx(&cfg, *r->pfunc, r->params, NULL);
    }
}

#endif /* BARECUDA_BC_PACK_H */
