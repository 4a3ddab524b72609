/*
 * barecuda/bc_uses.h -- use counts: an object in use by a driver call made without
 * the GIL is not freed or destroyed under it (docs/architecture.md, "Close versus
 * in-flight use").
 *
 * A DeviceBuffer owner and a Stream carry a `long` use count and an `int` pending
 * flag. An operation that names the object in a driver call made without the GIL
 *   1. enters (bc_use_enter: count + 1), THEN checks that the object is still open,
 *   2. makes the call,
 *   3. leaves (bc_use_leave: count - 1) and, when that left 0, tries to take the
 *      pending flag (bc_flag_take): whoever takes it runs the deferred free.
 * close() marks the object closed and sets the pending flag (bc_flag_set), THEN reads
 * the count: 0 -> it takes the flag and frees now; else the last leave frees.
 *
 * Every operation here is sequentially consistent, so the two "write, then read the
 * other side" sequences cannot both miss each other (a user that entered before the
 * close sees nothing wrong and the closer sees its count; a user that entered after
 * sees the object closed), and the flag is taken at most once: the free runs exactly
 * once, never skipped, never twice. Today the GIL already orders these steps (every
 * enter/leave/close runs with it held); the atomics keep the protocol correct on a
 * free-threaded CPython, where nothing else would. Cost: one locked add per enter and
 * per leave, taken only on paths that release the GIL anyway (~150 ns there).
 */
#ifndef BARECUDA_BC_USES_H
#define BARECUDA_BC_USES_H

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
/* long is 32 bits on Windows: the count cannot overflow (one per thread in flight). */
static inline void bc_use_enter(long *n) { _InterlockedIncrement((volatile long *)n); }
static inline long bc_use_leave(long *n) { return _InterlockedDecrement((volatile long *)n); }
static inline long bc_use_count(long *n) { return _InterlockedOr((volatile long *)n, 0); }
static inline void bc_flag_set(int *f) { _InterlockedExchange((volatile long *)f, 1); }
static inline int bc_flag_take(int *f) { return (int)_InterlockedExchange((volatile long *)f, 0); }
static inline int bc_flag_get(int *f) { return (int)_InterlockedOr((volatile long *)f, 0); }
#else
static inline void bc_use_enter(long *n) { __atomic_add_fetch(n, 1, __ATOMIC_SEQ_CST); }
static inline long bc_use_leave(long *n) { return __atomic_sub_fetch(n, 1, __ATOMIC_SEQ_CST); }
static inline long bc_use_count(long *n) { return __atomic_load_n(n, __ATOMIC_SEQ_CST); }
static inline void bc_flag_set(int *f) { __atomic_store_n(f, 1, __ATOMIC_SEQ_CST); }
static inline int bc_flag_take(int *f) { return __atomic_exchange_n(f, 0, __ATOMIC_SEQ_CST); }
static inline int bc_flag_get(int *f) { return __atomic_load_n(f, __ATOMIC_SEQ_CST); }
#endif

#endif /* BARECUDA_BC_USES_H */
