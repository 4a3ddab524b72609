/*
 * barecuda/bc_sizeclass.h -- the size classes of the caching allocators
 * (MemoryPool in src/barecuda/_pool.pyx, PinnedMemoryPool in _pinned_pool.pyx).
 *
 * 512-byte multiples up to 8 KiB (classes 0..15), then 16 classes per power of two
 * (at most 6.25% rounding). A block is only ever reused for its own class.
 */
#ifndef BARECUDA_BC_SIZECLASS_H
#define BARECUDA_BC_SIZECLASS_H

#include <stddef.h>
#include "barecuda/bc_bits.h"

/* 16 small classes + 16 per power of two from 2**13 to 2**63. */
#define BC_NCLASSES 832

/* Class index and rounded size for a request of n bytes (n > 0); -1 (rounded 0) above
 * 2**63, where rounding up would not fit in 64 bits. */
static inline int bc_size_class(size_t n, size_t *rounded) {
    size_t k, m;
    int e;
    if (n > ((size_t)1 << 63)) {
        *rounded = 0;
        return -1;
    }
    if (n <= 8192) {
        k = (n + 511) >> 9;
        *rounded = k << 9;
        return (int)k - 1;                                   /* 0..15 */
    }
    e = 63 - bc_clz64((unsigned long long)n);                /* floor(log2 n) >= 13 */
    m = (n + (((size_t)1 << (e - 4)) - 1)) >> (e - 4);      /* 16..32 */
    if (m == 32) {
        e += 1;
        m = 16;
    }
    *rounded = m << (e - 4);
    return 16 + (e - 13) * 16 + (int)(m - 16);
}

#endif /* BARECUDA_BC_SIZECLASS_H */
