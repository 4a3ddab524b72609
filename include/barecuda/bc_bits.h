/*
 * barecuda/bc_bits.h -- portable bit helpers (no compiler builtin without a fallback).
 */
#ifndef BARECUDA_BC_BITS_H
#define BARECUDA_BC_BITS_H

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif

/* Number of leading zero bits of a 64-bit value; 64 for x == 0. */
static inline int bc_clz64(unsigned long long x) {
    if (x == 0) return 64;
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_clzll(x);
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_ARM64))
    {
        unsigned long i;
        _BitScanReverse64(&i, x);
        return 63 - (int)i;
    }
#else
    {
        int n = 0;
        while (!(x & (1ULL << 63))) {
            x <<= 1;
            n++;
        }
        return n;
    }
#endif
}

#endif /* BARECUDA_BC_BITS_H */
