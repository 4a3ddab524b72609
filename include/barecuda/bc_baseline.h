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
#include "barecuda/bc_dlpack.h"

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

/* The raw C form of a launch whose pointer arguments are another library's tensors,
 * read through that library's DLPack C exchange API (bc_dlpack.h) as a C program
 * honouring its stream rule would: each object's address by
 * dltensor_from_py_object_no_sync into parameter slot i, the library's current stream
 * once (current_work_stream), then the launch (or nothing, launch == 0: the reads
 * alone). The library's functions need the GIL: the caller holds it. */
typedef struct bc_bench_dlx {
    const bc_dlpack_exchange_api *api;
    void *const *objs;      /* PyObject* of the tensors, kept alive by the caller */
    int n;                  /* objects, one per leading 8-byte parameter slot */
    int32_t device_id;
} bc_bench_dlx;

/* One launch's reads: 0, or -1 with the library's Python exception set. */
static inline int bc_bench_dlx_read(const bc_bench_dlx *X, void **params) {
    DLTensor dl;
    void *s = NULL;
    int i;
    for (i = 0; i < X->n; i++) {
        if (X->api->dltensor_from_py_object_no_sync(X->objs[i], &dl) != 0) return -1;
        *(uint64_t *)params[i] = (uint64_t)(uintptr_t)dl.data + dl.byte_offset;
    }
    return X->api->current_work_stream(kDLCUDA, X->device_id, &s) != 0 ? -1 : 0;
}

/* nb batches of bs (reads + launch, or reads alone); each batch timed, the sync after
 * it not. *pyerr = 1 when a read failed (the exception is set). */
static CUresult bc_bench_dlx_batches(const bc_driver_t *D, const bc_bench_launch *L, const bc_bench_dlx *X,
                                     int launch, long nb, long bs, int64_t *out, int *pyerr) {
    long i, j;
    CUresult rc;
    int64_t t0, t1;
    *pyerr = 0;
    for (i = 0; i < nb; i++) {
        t0 = bc_now_ns();
        for (j = 0; j < bs; j++) {
            if (bc_bench_dlx_read(X, L->params)) { *pyerr = 1; return CUDA_SUCCESS; }
            if (launch && (rc = bc_bench_launch_once(D, L)) != CUDA_SUCCESS) return rc;
        }
        t1 = bc_now_ns();
        if (launch && (rc = D->cuStreamSynchronize(L->stream)) != CUDA_SUCCESS) return rc;
        out[i] = t1 - t0;
    }
    return CUDA_SUCCESS;
}

#endif /* BARECUDA_BC_BASELINE_H */
