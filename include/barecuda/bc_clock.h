/*
 * barecuda/bc_clock.h -- the one monotonic clock of the package.
 *
 * bc_now_ns() is CLOCK_MONOTONIC (QueryPerformanceCounter on Windows) in
 * nanoseconds; only differences mean anything. The staging pipeline uses it for its
 * spin-before-sleep timing (src/csrc/bc_staging.c) and the benchmark for
 * every figure it reports (include/barecuda/bc_baseline.h,
 * src/barecuda/bench/_baseline.pyx, read from Python as
 * barecuda.bench.harness.now_ns), so a raw C row, a Python row and a staged copy
 * of one run are timed with one clock.
 */
#ifndef BARECUDA_BC_CLOCK_H
#define BARECUDA_BC_CLOCK_H

#include <stdint.h>

#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
static inline int64_t bc_now_ns(void) {
    /* The frequency is constant after boot; a racy first fill writes the same value. */
    static LARGE_INTEGER freq;
    LARGE_INTEGER c;
    if (freq.QuadPart == 0) QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&c);
    /* whole seconds and the remainder apart: no overflow, no rounding through double */
    return (int64_t)(c.QuadPart / freq.QuadPart) * 1000000000LL
         + (int64_t)((c.QuadPart % freq.QuadPart) * 1000000000LL / freq.QuadPart);
}
#else
#include <time.h>
static inline int64_t bc_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + (int64_t)ts.tv_nsec;
}
#endif

#endif /* BARECUDA_BC_CLOCK_H */
