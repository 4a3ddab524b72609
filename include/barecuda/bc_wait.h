/*
 * barecuda/bc_wait.h -- waiting for a stream or event without giving up Ctrl-C.
 *
 * cuStreamSynchronize cannot be interrupted: a Python program blocked in it ignores
 * Ctrl-C until the GPU finishes. barecuda waits in three phases instead, all without
 * the GIL:
 *   1. spin on the query call for up to BC_WAIT_SPIN_NS: the common case of a short
 *      wait returns as fast as the driver's own spin-wait (the query is what the
 *      driver polls too);
 *   2. then poll with short sleeps (BC_WAIT_SLEEP_NS), so a long wait does not burn
 *      a core;
 *   3. every BC_WAIT_SIGNAL_NS the caller gets control back (BC_WAIT_TIMESLICE) to
 *      check for pending signals (KeyboardInterrupt) with the GIL.
 * A wait may also have a deadline (bc_wait_now_ns() based): at the deadline the slice
 * returns BC_WAIT_DEADLINE and the caller raises TimeoutError.
 * Queued GPU work is never cancelled; an interrupted or timed-out wait just stops
 * waiting.
 *
 * Portable C99 plus the package's clock (bc_clock.h) and a platform nap: it compiles
 * with GCC, Clang and MSVC.
 */
#ifndef BARECUDA_BC_WAIT_H
#define BARECUDA_BC_WAIT_H

#include "barecuda/cuda_abi.h"    /* and cuda_errors.h: CUDA_ERROR_NOT_READY */
#include "barecuda/bc_clock.h"   /* bc_now_ns: the package's one clock */
#ifdef _WIN32
#include <windows.h>
#else
#include <time.h>
#endif

#define BC_WAIT_SPIN_NS 200000LL      /* 200 us of pure spinning */
#define BC_WAIT_SLEEP_NS 20000LL      /* then 20 us naps */
#define BC_WAIT_SIGNAL_NS 50000000LL  /* signal check every 50 ms */
#define BC_WAIT_TIMESLICE (-1)        /* not a CUresult: "check signals and call again" */
#define BC_WAIT_DEADLINE (-2)         /* not a CUresult: "the deadline passed, still not ready" */

/* Deadlines and slices are read on the package's one clock (bc_clock.h). */
static inline long long bc_wait_now_ns(void) {
    return (long long)bc_now_ns();
}

static inline void bc_wait_nap(void) {
#ifdef _WIN32
    SwitchToThread();
#else
    struct timespec ts = {0, BC_WAIT_SLEEP_NS};
    nanosleep(&ts, NULL);
#endif
}

typedef CUresult (CUDAAPI *bc_query_fn)(void *handle);

/* One time slice of waiting. `first` is nonzero on the first slice (spin phase
 * allowed). `deadline_ns` is an absolute bc_wait_now_ns() time, or 0 for none.
 * Returns the query's CUresult when done or failed, BC_WAIT_DEADLINE when the
 * deadline passed first, or BC_WAIT_TIMESLICE when the caller should check signals
 * and call again with first = 0. */
static inline CUresult bc_wait_slice_until(bc_query_fn query, void *handle, int first,
                                           long long deadline_ns) {
    long long start = bc_wait_now_ns(), now;
    CUresult rc;
    for (;;) {
        rc = query(handle);
        if (rc != CUDA_ERROR_NOT_READY) return rc;
        now = bc_wait_now_ns();
        if (deadline_ns && now >= deadline_ns) return (CUresult)BC_WAIT_DEADLINE;
        if (now - start >= BC_WAIT_SIGNAL_NS) return (CUresult)BC_WAIT_TIMESLICE;
        if (!first || now - start >= BC_WAIT_SPIN_NS) bc_wait_nap();
    }
}

static inline CUresult bc_wait_slice(bc_query_fn query, void *handle, int first) {
    return bc_wait_slice_until(query, handle, first, 0);
}
#endif
