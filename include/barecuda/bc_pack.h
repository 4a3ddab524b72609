/*
 * barecuda/bc_pack.h -- C helpers for the launch hot path: the parameter kinds,
 * the per-kernel parameter descriptor, scalar stores, IEEE half conversion, and
 * the launch record that plans and plan lists issue from a C loop.
 *
 * Everything here is static inline and free of Python: _launch.pyx does the
 * Python-object side (type dispatch, range checks that raise) and calls these to
 * move bytes. The kinds themselves (sizes, ranges, what each takes) are the one
 * table in bc_kinds.h.
 */
#ifndef BARECUDA_BC_PACK_H
#define BARECUDA_BC_PACK_H

#include <stdint.h>
#include <string.h>
#include "barecuda/cuda_abi.h"
#include "barecuda/bc_kinds.h"   /* BC_K_*, the kind table */

/* Whether kernel launches release the GIL around cuLaunchKernel by default.
 * Off: releasing and re-taking the GIL costs more per launch than the launch gains
 * (the decision and its figures: docs/architecture.md, "Launch: packing in C by the
 * real signature; the GIL is held"). Programs flip it at run time with
 * barecuda.set_launch_releases_gil(). */
#ifndef BC_LAUNCH_RELEASES_GIL
#define BC_LAUNCH_RELEASES_GIL 0
#endif

/* Parameters up to this many bytes (and this many parameters) are packed on the
 * C stack; bigger blocks (CUDA 12.1+ allows 32 KiB) go to the heap. */
#define BC_SMALL_ARGBYTES 4096
#define BC_SMALL_NPARAMS 256

typedef struct bc_param {
    uint32_t offset;   /* in the parameter block */
    uint32_t size;     /* bytes */
    uint32_t align;
    int32_t kind;      /* BC_K_* (bc_kinds.h) */
} bc_param;

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
 * was closed (func set to NULL) is refused instead of launched; `stream_closed` at
 * the Stream's closed flag (NULL: not a barecuda Stream), so a plan whose stream was
 * closed is refused instead of naming the destroyed handle. */
typedef struct bc_launch_rec {
    CUfunction const *pfunc;
    CUcontext ctx;
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int smem;
    CUstream stream;
    const int *stream_closed;
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
