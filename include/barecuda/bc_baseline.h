/*
 * barecuda/bc_baseline.h -- the raw C loops of the benchmark wing.
 *
 * Every figure of `python -m barecuda.bench` is taken with bc_now_ns()
 * (barecuda/bc_clock.h), both around C loops and around Python loops, so that a raw
 * C row and a Python row of the same run are measured with one clock. The loops
 * below call the driver exactly as a C program would: a pre-packed kernelParams
 * array, no checks but the returned CUresult. Included by
 * src/barecuda/bench/_baseline.pyx only.
 */
#ifndef BARECUDA_BC_BASELINE_H
#define BARECUDA_BC_BASELINE_H

#include <stdint.h>
#include <string.h>
#include "barecuda/cuda_abi.h"

#include "barecuda/bc_clock.h"

/* One launch description: either plain cuLaunchKernel (ex == 0) or cuLaunchKernelEx
 * with the attributes in cfg (ex == 1). */
typedef struct bc_bench_launch {
    CUfunction f;
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int shared_mem;
    CUstream stream;
    void **params;
    int ex;
    CUlaunchConfig cfg;
    CUlaunchAttribute attrs[4];
} bc_bench_launch;

static inline CUresult bc_bench_launch_once(const bc_driver_t *D, const bc_bench_launch *L) {
    if (L->ex)
        return D->cuLaunchKernelEx(&L->cfg, L->f, L->params, NULL);
    return D->cuLaunchKernel(L->f, L->grid[0], L->grid[1], L->grid[2],
                             L->block[0], L->block[1], L->block[2],
                             L->shared_mem, L->stream, L->params, NULL);
}

/* n launches back to back, nothing else; returns the first failure. */
static CUresult bc_bench_launch_n(const bc_driver_t *D, const bc_bench_launch *L, long n) {
    long i;
    CUresult rc;
    if (L->ex) {
        for (i = 0; i < n; i++) {
            rc = D->cuLaunchKernelEx(&L->cfg, L->f, L->params, NULL);
            if (rc != CUDA_SUCCESS) return rc;
        }
    } else {
        for (i = 0; i < n; i++) {
            rc = D->cuLaunchKernel(L->f, L->grid[0], L->grid[1], L->grid[2],
                                   L->block[0], L->block[1], L->block[2],
                                   L->shared_mem, L->stream, L->params, NULL);
            if (rc != CUDA_SUCCESS) return rc;
        }
    }
    return CUDA_SUCCESS;
}

/* Issue cost: nb batches of bs launches; each batch timed, the sync after it not. */
static CUresult bc_bench_launch_batches(const bc_driver_t *D, const bc_bench_launch *L,
                                        long nb, long bs, int64_t *out) {
    long i;
    CUresult rc;
    int64_t t0, t1;
    for (i = 0; i < nb; i++) {
        t0 = bc_now_ns();
        rc = bc_bench_launch_n(D, L, bs);
        t1 = bc_now_ns();
        if (rc != CUDA_SUCCESS) return rc;
        rc = D->cuStreamSynchronize(L->stream);
        if (rc != CUDA_SUCCESS) return rc;
        out[i] = t1 - t0;
    }
    return CUDA_SUCCESS;
}

/* Throughput: n launches then one sync, all timed. */
static CUresult bc_bench_launch_throughput(const bc_driver_t *D, const bc_bench_launch *L,
                                           long n, int64_t *out) {
    CUresult rc;
    int64_t t0 = bc_now_ns();
    rc = bc_bench_launch_n(D, L, n);
    if (rc != CUDA_SUCCESS) return rc;
    rc = D->cuStreamSynchronize(L->stream);
    if (rc != CUDA_SUCCESS) return rc;
    *out = bc_now_ns() - t0;
    return CUDA_SUCCESS;
}

/* Round trip: launch + cuStreamSynchronize, each one timed. */
static CUresult bc_bench_launch_roundtrip(const bc_driver_t *D, const bc_bench_launch *L,
                                          long n, int64_t *out) {
    long i;
    CUresult rc;
    int64_t t0;
    for (i = 0; i < n; i++) {
        t0 = bc_now_ns();
        rc = bc_bench_launch_once(D, L);
        if (rc != CUDA_SUCCESS) return rc;
        rc = D->cuStreamSynchronize(L->stream);
        if (rc != CUDA_SUCCESS) return rc;
        out[i] = bc_now_ns() - t0;
    }
    return CUDA_SUCCESS;
}

/* nb batches of bs cuMemAlloc + cuMemFree pairs of `size` bytes; each batch timed. */
static CUresult bc_bench_alloc_free(const bc_driver_t *D, size_t size, long nb, long bs, int64_t *out) {
    long i, j;
    CUresult rc;
    CUdeviceptr p;
    int64_t t0;
    for (i = 0; i < nb; i++) {
        t0 = bc_now_ns();
        for (j = 0; j < bs; j++) {
            rc = D->cuMemAlloc(&p, size);
            if (rc != CUDA_SUCCESS) return rc;
            rc = D->cuMemFree(p);
            if (rc != CUDA_SUCCESS) return rc;
        }
        out[i] = bc_now_ns() - t0;
    }
    return CUDA_SUCCESS;
}

/* The same with cuMemAllocAsync + cuMemFreeAsync on `stream`; the sync after each
 * batch is not timed. */
static CUresult bc_bench_alloc_free_async(const bc_driver_t *D, size_t size, CUstream stream,
                                          long nb, long bs, int64_t *out) {
    long i, j;
    CUresult rc;
    CUdeviceptr p;
    int64_t t0, t1;
    for (i = 0; i < nb; i++) {
        t0 = bc_now_ns();
        for (j = 0; j < bs; j++) {
            rc = D->cuMemAllocAsync(&p, size, stream);
            if (rc != CUDA_SUCCESS) return rc;
            rc = D->cuMemFreeAsync(p, stream);
            if (rc != CUDA_SUCCESS) return rc;
        }
        t1 = bc_now_ns();
        rc = D->cuStreamSynchronize(stream);
        if (rc != CUDA_SUCCESS) return rc;
        out[i] = t1 - t0;
    }
    return CUDA_SUCCESS;
}

/* reps synchronous copies of nbytes, each timed up to cuCtxSynchronize (a pageable
 * host->device cuMemcpyHtoD may return once the data is staged, before the DMA has
 * landed). dir 0: host->device, 1: device->host. */
static CUresult bc_bench_memcpy(const bc_driver_t *D, int dir, CUdeviceptr dptr, void *host,
                                size_t nbytes, long reps, int64_t *out) {
    long i;
    CUresult rc;
    int64_t t0;
    for (i = 0; i < reps; i++) {
        t0 = bc_now_ns();
        if (dir == 0)
            rc = D->cuMemcpyHtoD(dptr, host, nbytes);
        else
            rc = D->cuMemcpyDtoH(host, dptr, nbytes);
        if (rc != CUDA_SUCCESS) return rc;
        rc = D->cuCtxSynchronize();
        if (rc != CUDA_SUCCESS) return rc;
        out[i] = bc_now_ns() - t0;
    }
    return CUDA_SUCCESS;
}

#endif /* BARECUDA_BC_BASELINE_H */
