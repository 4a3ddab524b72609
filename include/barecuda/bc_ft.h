/*
 * barecuda/bc_ft.h -- what a free-threaded CPython (PEP 703: 3.13t, 3.14t, built with
 * Py_GIL_DISABLED) needs beyond Cython's critical sections: a mutex for C tables that
 * every thread reaches, and atomic counters. On a GIL build every piece is empty (the
 * GIL already serialises the callers), so that build's code is unchanged.
 *
 * Included after Python.h (every Cython module includes it first): Py_GIL_DISABLED
 * comes from pyconfig.h. What is protected, and how: docs/architecture.md, "Free-threaded
 * CPython: what is protected".
 */
#ifndef BARECUDA_BC_FT_H
#define BARECUDA_BC_FT_H

#ifdef Py_GIL_DISABLED
#define BC_FREE_THREADED 1
/* PyMutex (public since 3.13): one byte, no init, detaches the thread while it waits
 * (so a stop-the-world pause never deadlocks on it). Hold it over C work only. */
typedef PyMutex bc_mutex;
#define bc_mutex_lock(m) PyMutex_Lock(m)
#define bc_mutex_unlock(m) PyMutex_Unlock(m)
#else
#define BC_FREE_THREADED 0
typedef struct { char unused; } bc_mutex;
#define bc_mutex_lock(m) ((void)(m))
#define bc_mutex_unlock(m) ((void)(m))
#endif

/* A counter several threads may bump (statistics, invalidation epochs). */
#if BC_FREE_THREADED && !(defined(_MSC_VER) && !defined(__clang__))
static inline void bc_count_add(size_t *n, size_t d) { __atomic_add_fetch(n, d, __ATOMIC_RELAXED); }
static inline size_t bc_count_get(const size_t *n) { return __atomic_load_n(n, __ATOMIC_ACQUIRE); }
#else
static inline void bc_count_add(size_t *n, size_t d) { *n += d; }
static inline size_t bc_count_get(const size_t *n) { return *n; }
#endif

#endif /* BARECUDA_BC_FT_H */
