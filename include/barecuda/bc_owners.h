/*
 * barecuda/bc_owners.h -- the live allocations of our DeviceBuffer owners, by address.
 *
 * Used by src/barecuda/_buffer.pyx only: an import (a CAI dict or a foreign DLPack
 * capsule) that describes memory one of our buffers owns is resolved to that owner,
 * so the import pins it like a view would (docs/errors.md, "Ownership").
 *
 * An unordered array with swap-removal: adding and removing cost a few stores (the
 * allocation hot path pays nothing more); the owner keeps its slot number + 1 in a
 * field the table updates when it moves an entry. Finding an address is a linear scan
 * over contiguous entries (after one envelope test that most foreign memory fails),
 * done only by imports of foreign-described memory. Live
 * allocations never overlap (one virtual address space), so at most one entry matches.
 * Callers hold the GIL. On a free-threaded CPython (bc_ft.h) every operation takes the
 * table's own mutex, and bc_owners_add grows the table itself when another thread used
 * the room a bc_owners_reserve made (if that grow fails, the owner stays unregistered:
 * an import of its memory then pins nothing, as for another library's memory).
 */
#ifndef BARECUDA_BC_OWNERS_H
#define BARECUDA_BC_OWNERS_H

#include <stddef.h>
#include <stdlib.h>
#include "barecuda/bc_ft.h"

typedef struct {
    unsigned long long lo, hi;   /* [lo, hi): the allocation */
    void *obj;                   /* the owner (borrowed: it removes itself before it goes) */
    ptrdiff_t *slot;             /* the owner's field holding index + 1 (0: not here) */
} bc_owner_entry;

typedef struct {
    bc_owner_entry *v;
    ptrdiff_t n, cap;
    unsigned long long lo, hi;   /* an envelope of every entry since the table was last empty
                                    (hi 0: empty); foreign memory outside it is not scanned */
    bc_mutex mu;                 /* free-threaded builds only (bc_ft.h) */
} bc_owners;

static inline int bc_owners_grow_(bc_owners *t) {
    ptrdiff_t cap;
    bc_owner_entry *v;
    if (t->n < t->cap)
        return 0;
    cap = t->cap ? t->cap * 2 : 64;
    v = (bc_owner_entry *)realloc(t->v, (size_t)cap * sizeof(bc_owner_entry));
    if (v == NULL)
        return -1;
    t->v = v;
    t->cap = cap;
    return 0;
}

/* Room for one more entry; -1 when out of memory (nothing changed). */
static inline int bc_owners_reserve(bc_owners *t) {
    int rc;
    bc_mutex_lock(&t->mu);
    rc = bc_owners_grow_(t);
    bc_mutex_unlock(&t->mu);
    return rc;
}

/* Add [p, p + n) owned by obj; needs a bc_owners_reserve first. */
static inline void bc_owners_add(bc_owners *t, unsigned long long p, size_t n, void *obj, ptrdiff_t *slot) {
    bc_owner_entry *e;
    bc_mutex_lock(&t->mu);
    if (BC_FREE_THREADED && bc_owners_grow_(t) != 0) {   /* (another thread took the room) */
        bc_mutex_unlock(&t->mu);
        return;
    }
    e = &t->v[t->n++];
    e->lo = p;
    e->hi = p + n;               /* no wrap: the driver gave [p, p + n) */
    e->obj = obj;
    e->slot = slot;
    *slot = t->n;
    if (t->hi == 0 || p < t->lo)
        t->lo = p;
    if (e->hi > t->hi)
        t->hi = e->hi;
    bc_mutex_unlock(&t->mu);
}

/* Remove the entry whose index + 1 is *slot (no-op when 0); *slot becomes 0. */
static inline void bc_owners_remove(bc_owners *t, ptrdiff_t *slot) {
    ptrdiff_t i;
    bc_mutex_lock(&t->mu);
    i = *slot - 1;
    if (i < 0 || i >= t->n || t->v[i].slot != slot) {
        bc_mutex_unlock(&t->mu);
        return;
    }
    *slot = 0;
    t->n--;
    if (t->n == 0)
        t->hi = 0;
    if (i != t->n) {
        t->v[i] = t->v[t->n];
        *t->v[i].slot = i + 1;
    }
    bc_mutex_unlock(&t->mu);
}

/* The entry's owner moves to another object (and slot field). */
static inline void bc_owners_move(bc_owners *t, ptrdiff_t *from, void *obj, ptrdiff_t *to) {
    ptrdiff_t i;
    bc_mutex_lock(&t->mu);
    i = *from - 1;
    if (i >= 0 && i < t->n && t->v[i].slot == from) {
        *from = 0;
        t->v[i].obj = obj;
        t->v[i].slot = to;
        *to = i + 1;
    }
    bc_mutex_unlock(&t->mu);
}

/* The entry whose allocation contains address p, copied to *out: 1, or 0 when none.
 * (A copy: on a free-threaded build the table may move entries once the lock is gone.) */
static inline int bc_owners_find(bc_owners *t, unsigned long long p, bc_owner_entry *out) {
    ptrdiff_t i;
    int found = 0;
    bc_mutex_lock(&t->mu);
    if (p - t->lo < t->hi - t->lo) {                   /* inside the envelope (and not empty) */
        for (i = 0; i < t->n; i++)
            if (p - t->v[i].lo < t->v[i].hi - t->v[i].lo) {   /* lo <= p < hi, in one compare */
                *out = t->v[i];
                found = 1;
                break;
            }
    }
    bc_mutex_unlock(&t->mu);
    return found;
}

#endif /* BARECUDA_BC_OWNERS_H */
