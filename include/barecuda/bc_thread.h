/*
 * barecuda/bc_thread.h -- portable threads, locks, condition variables and atomics.
 *
 * One spelling for POSIX (pthreads) and Windows (Win32 threads, SRW locks,
 * condition variables); atomics are C11 <stdatomic.h> where the compiler has them
 * (GCC, Clang) and the Interlocked functions under MSVC. Used by the staging
 * pipeline (src/csrc/bc_staging.c); everything is static inline, nothing here
 * calls the CUDA driver.
 *
 * Atomic variables are declared with the bc_atomic_long / bc_atomic_i64 types
 * and accessed only through the BC_A* macros.
 */
#ifndef BARECUDA_BC_THREAD_H
#define BARECUDA_BC_THREAD_H

#include <stddef.h>

#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#include <process.h>
#else
#include <pthread.h>
#endif

#if defined(_M_X64) || defined(_M_IX86) || defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>   /* _mm_pause: GCC, Clang and MSVC alike */
#endif

/* ------------------------------------------------------------ mutexes, conditions */
#ifdef _WIN32
typedef SRWLOCK bc_mutex_t;
typedef CONDITION_VARIABLE bc_cond_t;
#define BC_MUTEX_INIT SRWLOCK_INIT
static inline void bc_mutex_init(bc_mutex_t *m) { InitializeSRWLock(m); }
static inline void bc_mutex_destroy(bc_mutex_t *m) { (void)m; }
static inline void bc_mutex_lock(bc_mutex_t *m) { AcquireSRWLockExclusive(m); }
static inline int bc_mutex_trylock(bc_mutex_t *m) { return TryAcquireSRWLockExclusive(m) ? 0 : 1; }
static inline void bc_mutex_unlock(bc_mutex_t *m) { ReleaseSRWLockExclusive(m); }
static inline void bc_cond_init(bc_cond_t *c) { InitializeConditionVariable(c); }
static inline void bc_cond_destroy(bc_cond_t *c) { (void)c; }
static inline void bc_cond_wait(bc_cond_t *c, bc_mutex_t *m) { SleepConditionVariableSRW(c, m, INFINITE, 0); }
static inline void bc_cond_broadcast(bc_cond_t *c) { WakeAllConditionVariable(c); }
#else
typedef pthread_mutex_t bc_mutex_t;
typedef pthread_cond_t bc_cond_t;
#define BC_MUTEX_INIT PTHREAD_MUTEX_INITIALIZER
static inline void bc_mutex_init(bc_mutex_t *m) { pthread_mutex_init(m, NULL); }
static inline void bc_mutex_destroy(bc_mutex_t *m) { pthread_mutex_destroy(m); }
static inline void bc_mutex_lock(bc_mutex_t *m) { pthread_mutex_lock(m); }
static inline int bc_mutex_trylock(bc_mutex_t *m) { return pthread_mutex_trylock(m); }
static inline void bc_mutex_unlock(bc_mutex_t *m) { pthread_mutex_unlock(m); }
static inline void bc_cond_init(bc_cond_t *c) { pthread_cond_init(c, NULL); }
static inline void bc_cond_destroy(bc_cond_t *c) { pthread_cond_destroy(c); }
static inline void bc_cond_wait(bc_cond_t *c, bc_mutex_t *m) { pthread_cond_wait(c, m); }
static inline void bc_cond_broadcast(bc_cond_t *c) { pthread_cond_broadcast(c); }
#endif

/* ------------------------------------------------------------ threads
 * Define a thread body with BC_THREAD_PROC(name, arg) { ...; BC_THREAD_PROC_RETURN; }
 * and start it with bc_thread_start (0 on success). */
#ifdef _WIN32
typedef HANDLE bc_thread_t;
typedef unsigned(__stdcall *bc_thread_proc)(void *);
#define BC_THREAD_PROC(name, arg) static unsigned __stdcall name(void *arg)
#define BC_THREAD_PROC_RETURN return 0
static inline int bc_thread_start(bc_thread_t *t, bc_thread_proc fn, void *arg) {
    *t = (HANDLE)_beginthreadex(NULL, 0, fn, arg, 0, NULL);
    return *t ? 0 : -1;
}
static inline void bc_thread_join(bc_thread_t t) {
    WaitForSingleObject(t, INFINITE);
    CloseHandle(t);
}
#else
typedef pthread_t bc_thread_t;
typedef void *(*bc_thread_proc)(void *);
#define BC_THREAD_PROC(name, arg) static void *name(void *arg)
#define BC_THREAD_PROC_RETURN return NULL
static inline int bc_thread_start(bc_thread_t *t, bc_thread_proc fn, void *arg) {
    return pthread_create(t, NULL, fn, arg) == 0 ? 0 : -1;
}
static inline void bc_thread_join(bc_thread_t t) { pthread_join(t, NULL); }
#endif

/* ------------------------------------------------------------ atomics
 * BC_ALOAD/BC_ASTORE: acquire load / release store of a bc_atomic_long;
 * BC_ADEC: decrement, returns the new value; BC_AFETCHINC: increment, returns the
 * old value (relaxed); BC_AADD64/BC_ALOAD64: relaxed add / load of a bc_atomic_i64. */
#if defined(_MSC_VER) && !defined(__clang__)
typedef volatile LONG bc_atomic_long;
typedef volatile LONG64 bc_atomic_i64;
#define BC_ALOAD(p) InterlockedCompareExchange((p), 0, 0)
#define BC_ASTORE(p, v) ((void)InterlockedExchange((p), (LONG)(v)))
#define BC_ADEC(p) InterlockedDecrement((p))
#define BC_AFETCHINC(p) (InterlockedIncrement((p)) - 1)
#define BC_AADD64(p, v) ((void)InterlockedExchangeAdd64((p), (LONG64)(v)))
#define BC_ALOAD64(p) InterlockedCompareExchange64((p), 0, 0)
#elif !defined(__STDC_NO_ATOMICS__) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#include <stdatomic.h>
typedef _Atomic long bc_atomic_long;
typedef _Atomic long long bc_atomic_i64;
#define BC_ALOAD(p) atomic_load_explicit((p), memory_order_acquire)
#define BC_ASTORE(p, v) atomic_store_explicit((p), (v), memory_order_release)
#define BC_ADEC(p) (atomic_fetch_sub_explicit((p), 1, memory_order_acq_rel) - 1)
#define BC_AFETCHINC(p) atomic_fetch_add_explicit((p), 1, memory_order_relaxed)
#define BC_AADD64(p, v) ((void)atomic_fetch_add_explicit((p), (v), memory_order_relaxed))
#define BC_ALOAD64(p) atomic_load_explicit((p), memory_order_relaxed)
#else
#error "barecuda needs C11 atomics (GCC >= 4.9, Clang >= 3.6) or MSVC"
#endif

/* A pause inside spin-wait loops. */
#if defined(_M_X64) || defined(_M_IX86) || defined(__x86_64__) || defined(__i386__)
#define BC_CPU_RELAX() _mm_pause()
#elif defined(_MSC_VER) && defined(_M_ARM64)
#define BC_CPU_RELAX() __yield()
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define BC_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define BC_CPU_RELAX() ((void)0)
#endif

#endif /* BARECUDA_BC_THREAD_H */
