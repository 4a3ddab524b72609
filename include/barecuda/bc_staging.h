/*
 * barecuda/bc_staging.h -- host<->device copies from pageable memory at pinned speed:
 * the API of the staging pipeline, whose body is src/csrc/bc_staging.c (compiled
 * into the barecuda._staging extension only; other modules reach it through
 * src/barecuda/_staging.pxd).
 *
 * The driver copies pageable memory through its own small staging buffers, one
 * core and no overlap: ~9 GB/s host->device on an H200 whose DMA engines do 55 GB/s
 * from page-locked memory. A stager does the staging itself, with K page-locked
 * chunks guarded by events and a pool of memcpy threads (the design is described at
 * the top of src/csrc/bc_staging.c).
 *
 * One stager per context, created on first use, guarded by its own mutex
 * (concurrent copies to one device serialize). Nothing here takes the GIL. Every
 * function that calls the driver expects the stager's context to be current on the
 * calling thread.
 */
#ifndef BARECUDA_BC_STAGING_H
#define BARECUDA_BC_STAGING_H

#include <stddef.h>
#include "barecuda/cuda_abi.h"

/* Streaming (non-temporal) stores are available (x86-64: SSE2 is always there). */
#if defined(__x86_64__) || defined(_M_X64)
#define BC_STAGING_HAVE_NT 1
#else
#define BC_STAGING_HAVE_NT 0
#endif

/* ------------------------------------------------------------ configuration */
typedef struct bc_staging_config {
    size_t chunk_bytes;   /* bytes per pinned chunk */
    int chunks;           /* K */
    int threads;          /* T: memcpy participants, the calling thread included */
    size_t threshold;     /* copies below this many bytes take the driver's plain path */
    size_t min_piece;     /* smallest pipeline piece (a copy of a few chunks is cut finer) */
    size_t min_part;      /* smallest share of a memcpy given to one thread */
    int nt_htod;          /* host->device memcpy into the chunks with streaming stores */
    int nt_dtoh;          /* device->host memcpy into the destination with streaming stores */
    long long spin_ns;    /* spin this long after a job before sleeping */
} bc_staging_config;

typedef struct bc_staging_counters {
    long long htod_plain, htod_plain_bytes;     /* below the threshold: the driver's copy */
    long long dtoh_plain, dtoh_plain_bytes;
    long long htod_staged, htod_staged_bytes;   /* through the chunks */
    long long dtoh_staged, dtoh_staged_bytes;
    long long pinned_direct;                    /* source/destination already page-locked */
    long long fallbacks;                        /* chunks could not be set up: plain path */
    long long chunk_waits;                      /* a chunk's previous DMA had to be waited for */
    long long builds;                           /* chunk sets allocated */
} bc_staging_counters;

#define BC_STAGING_MAX_CHUNKS 64
#define BC_STAGING_MAX_THREADS 64
#define BC_STAGING_MAX_STAGERS 256

/* The per-context stager (opaque). */
typedef struct bc_stager bc_stager;

/* Register the fork handler (call once, at import). */
void bc_staging_init(void);
/* The stager of ctx, created (without chunks) on first use; NULL if out of memory
 * or too many contexts. */
bc_stager *bc_stager_for(CUcontext ctx);
CUcontext bc_stager_context(const bc_stager *s);

/* Staged copies. On failure *call names the driver entry point that failed. */
bc_stager *bc_stager_for(CUcontext ctx);
CUresult bc_stager_htod(const bc_driver_t *D, bc_stager *s, CUdeviceptr dst, const void *src_,
    size_t n, CUstream stream, const char **call);
CUresult bc_stager_dtoh(const bc_driver_t *D, bc_stager *s, void *dst_, CUdeviceptr src,
    size_t n, CUstream stream, int fresh, const char **call);
CUresult bc_staging_plain_htod(const bc_driver_t *D, CUdeviceptr dst, const void *src, size_t n,
    CUstream stream, const char **call);
CUresult bc_staging_plain_dtoh(const bc_driver_t *D, void *dst, CUdeviceptr src, size_t n,
    CUstream stream, const char **call);
int bc_stager_release(const bc_driver_t *D, bc_stager *s, int try_only, CUresult *rc);
void bc_stager_counters(bc_stager *s, bc_staging_counters *sum, long long *pinned_bytes, int *threads);
int bc_staging_count(void);
bc_stager *bc_staging_at(int i);
void bc_staging_get_config(bc_staging_config *out);
void bc_staging_set_config(const bc_staging_config *cfg);
size_t bc_staging_threshold(void);
void bc_staging_global_counters(bc_staging_counters *sum);
void bc_staging_init(void);
#endif /* BARECUDA_BC_STAGING_H */
