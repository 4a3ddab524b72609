/*
 * src/csrc/bc_staging.c -- host<->device copies from pageable memory at pinned speed.
 *
 * The driver copies pageable memory through its own small staging buffers, one
 * core and no overlap, far below what the DMA engines do from page-locked memory
 * (figures: docs/measurements.md). A stager does the staging itself:
 *
 *   - K page-locked chunks (cuMemHostAlloc, PORTABLE), each guarded by an event
 *     (DISABLE_TIMING) recorded after the last DMA that used it: a chunk is written
 *     by the host only after its event completed, so no DMA ever reads or writes a
 *     chunk the host is changing;
 *   - a pool of T-1 worker threads plus the calling thread that split every
 *     host-side memcpy between them (one core cannot keep up with the DMA);
 *   - host->device: memcpy piece i into chunk i % K, cuMemcpyHtoDAsync, record the
 *     chunk's event; the memcpy of piece i+1 overlaps the DMA of piece i. Returns
 *     once every source byte is in a chunk (the caller may reuse its memory; the
 *     DMAs finish in stream order, like the driver's own pageable copy);
 *   - device->host: up to K DMAs in flight into the chunks while the threads copy
 *     the oldest finished chunk out; returns when the destination is written.
 *
 * One stager per context, created on first use, guarded by its own mutex
 * (concurrent copies to one device serialize). Worker threads only ever memcpy:
 * they make no driver call and touch no Python object. Nothing here takes the GIL.
 *
 * Compiled into the barecuda._staging extension (setup.py, C_SOURCES); its API is
 * include/barecuda/bc_staging.h, its threads, locks and atomics come from
 * include/barecuda/bc_thread.h.
 * Every function that calls the driver expects the stager's context to be current
 * on the calling thread.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L   /* clock_gettime, pthreads under -std=c11 */
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "barecuda/bc_clock.h"   /* the package's one clock, shared with the benchmark */
#include "barecuda/bc_staging.h"
#include "barecuda/bc_thread.h"

/* Large copies with streaming (non-temporal) stores: the bytes are headed for a DMA
 * engine or for a buffer the caller will not read for a while, so they need not pass
 * through the cache, and skipping the read-for-ownership of every destination line
 * pays where the destination is the pinned chunks (device->host: see the defaults
 * below). SSE2 is part of x86-64, no dispatch needed. */
#if BC_STAGING_HAVE_NT
static void bc_copy_nt(void *dst_, const void *src_, size_t n) {
    char *dst = (char *)dst_;
    const char *src = (const char *)src_;
    size_t head = (size_t)(-(intptr_t)dst) & 15;
    if (n < 256) {
        memcpy(dst, src, n);
        return;
    }
    if (head) {
        memcpy(dst, src, head);
        dst += head;
        src += head;
        n -= head;
    }
    while (n >= 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)src);
        __m128i b = _mm_loadu_si128((const __m128i *)(src + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
        _mm_stream_si128((__m128i *)dst, a);
        _mm_stream_si128((__m128i *)(dst + 16), b);
        _mm_stream_si128((__m128i *)(dst + 32), c);
        _mm_stream_si128((__m128i *)(dst + 48), d);
        dst += 64;
        src += 64;
        n -= 64;
    }
    if (n) memcpy(dst, src, n);
    _mm_sfence();   /* streamed bytes visible before anyone is told the copy is done */
}
#else
static void bc_copy_nt(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
#endif

static inline void bc_copy(void *dst, const void *src, size_t n, int nt) {
    if (nt) bc_copy_nt(dst, src, n);
    else memcpy(dst, src, n);
}

/* After a job, workers (and the caller waiting for them) spin spin_ns (config,
 * default 50 us) before sleeping: the next chunk of a large copy comes within
 * microseconds. */

/* Defaults: 8 chunks of 8 MiB, streaming stores for device->host only, staging from
 * 8 MiB up, 50 us of spin. Why each (measured with python -m barecuda.bench.staging_sweep):
 * docs/architecture.md, "Copies from pageable memory go through pinned chunks". */
static bc_staging_config bc_staging_cfg = {
    (size_t)8 << 20, 8, 8, (size_t)8 << 20, (size_t)256 << 10, (size_t)512 << 10, 0, BC_STAGING_HAVE_NT, 50000LL};
static long bc_staging_cfg_gen = 1;             /* bumped by every configure */
static bc_mutex_t bc_staging_registry_mu = BC_MUTEX_INIT;

/* ------------------------------------------------------------ statistics */

/* Plain-path counters: updated without a lock by any copying thread. */
static struct {
    bc_atomic_i64 htod_plain, htod_plain_bytes, dtoh_plain, dtoh_plain_bytes;
} bc_staging_stats_global;

/* ------------------------------------------------------------ thread pool */
struct bc_pool;
typedef struct bc_worker_arg {
    struct bc_pool *pool;
    int index;                 /* 1..nworkers; the caller is part 0 */
} bc_worker_arg;

/* A job is cut into grains that the participants (caller and workers) take one at
 * a time from a shared counter: a participant that is slow to wake, or descheduled
 * by the hypervisor, holds up at most one grain instead of a fixed 1/T share. */
enum { BC_JOB_COPY = 0, BC_JOB_TOUCH = 1 };

typedef struct bc_pool {
    int nworkers;
    bc_thread_t th[BC_STAGING_MAX_THREADS];
    bc_worker_arg args[BC_STAGING_MAX_THREADS];
    bc_mutex_t mu;
    bc_cond_t cv_work, cv_done;
    bc_atomic_long gen;        /* job number; a worker runs each job exactly once */
    bc_atomic_long remaining;  /* workers that have not finished the current job */
    bc_atomic_long stop;
    bc_atomic_long next_grain; /* the next grain of the current job to take */
    long long spin_ns;         /* spin after a job before sleeping (set at start) */
    /* the current job: written by the caller only while no worker reads it
       (between remaining reaching 0 and the next gen increment) */
    int op;                    /* BC_JOB_COPY or BC_JOB_TOUCH */
    char *dst;
    const char *src;
    size_t n, grain;
    int nt;
} bc_pool;

/* Page-size stride for touching: a larger page is just touched more than once. */
#define BC_STAGING_TOUCH_STRIDE 4096
/* Touch grains are whole 2 MiB-aligned blocks of the address space, so that no two
 * threads fault pages under one page-table page (whose lock they would share). */
#define BC_STAGING_TOUCH_GRAIN ((size_t)2 << 20)

/* Write a zero into every page of [p, p + n): the kernel maps (and zeroes) them
 * now, in parallel, rather than one fault at a time inside the copy. Only for
 * destinations whose bytes are all about to be overwritten. */
static void bc_touch_pages(char *p, size_t n) {
    char *end = p + n;
    volatile char *q = p;
    while ((char *)q < end) {
        *q = 0;
        q = (volatile char *)(((uintptr_t)q & ~(uintptr_t)(BC_STAGING_TOUCH_STRIDE - 1)) + BC_STAGING_TOUCH_STRIDE);
    }
}

/* Take grains until none is left. */
static void bc_pool_run(bc_pool *p) {
    for (;;) {
        size_t g = (size_t)BC_AFETCHINC(&p->next_grain);
        if (p->op == BC_JOB_TOUCH) {
            /* grain g is the g-th 2 MiB block counted from the one holding dst */
            uintptr_t base = (uintptr_t)p->dst & ~(uintptr_t)(BC_STAGING_TOUCH_GRAIN - 1);
            uintptr_t lo = base + g * BC_STAGING_TOUCH_GRAIN, hi = lo + BC_STAGING_TOUCH_GRAIN;
            uintptr_t first = (uintptr_t)p->dst, last = first + p->n;
            if (lo >= last) return;
            if (lo < first) lo = first;
            if (hi > last) hi = last;
            bc_touch_pages((char *)lo, (size_t)(hi - lo));
        } else {
            size_t off = g * p->grain;
            size_t len;
            if (off >= p->n) return;
            len = p->n - off < p->grain ? p->n - off : p->grain;
            bc_copy(p->dst + off, p->src + off, len, p->nt);
        }
    }
}

/* Wait while `cond` holds: spin (a clock read every 256 turns) for up to p->spin_ns,
 * then sleep on the condition variable `cv` under p->mu (whoever makes `cond` false
 * broadcasts `cv` under p->mu). A macro, so that each wait keeps its own inlined test. */
#define BC_POOL_WAIT_WHILE(p, cond, cv) do {                          \
        long long t0_ = 0;                                            \
        int spins_ = 0;                                               \
        while (cond) {                                                \
            BC_CPU_RELAX();                                           \
            if ((++spins_ & 255) == 0) {                              \
                long long now_ = (long long)bc_now_ns();              \
                if (!t0_) t0_ = now_;                                 \
                else if (now_ - t0_ > (p)->spin_ns) break;            \
            }                                                         \
        }                                                             \
        bc_mutex_lock(&(p)->mu);                                      \
        while (cond) bc_cond_wait(&(p)->cv, &(p)->mu);                \
        bc_mutex_unlock(&(p)->mu);                                    \
    } while (0)

static void bc_pool_worker_loop(bc_worker_arg *a) {
    bc_pool *p = a->pool;
    long seen = 0;
    for (;;) {
        BC_POOL_WAIT_WHILE(p, BC_ALOAD(&p->gen) == seen && !BC_ALOAD(&p->stop), cv_work);
        if (BC_ALOAD(&p->stop)) return;
        seen = BC_ALOAD(&p->gen);
        bc_pool_run(p);
        if (BC_ADEC(&p->remaining) == 0) {
            bc_mutex_lock(&p->mu);
            bc_cond_broadcast(&p->cv_done);
            bc_mutex_unlock(&p->mu);
        }
    }
}

BC_THREAD_PROC(bc_pool_thread, arg) {
    bc_pool_worker_loop((bc_worker_arg *)arg);
    BC_THREAD_PROC_RETURN;
}

/* Start up to `nworkers` threads; fewer if the system refuses (the copy still
 * works, with less parallelism). */
static void bc_pool_start(bc_pool *p, int nworkers, long long spin_ns) {
    int i;
    memset(p, 0, sizeof(*p));
    p->spin_ns = spin_ns;      /* before any worker exists to read it */
    bc_mutex_init(&p->mu);
    bc_cond_init(&p->cv_work);
    bc_cond_init(&p->cv_done);
    if (nworkers > BC_STAGING_MAX_THREADS) nworkers = BC_STAGING_MAX_THREADS;
    for (i = 0; i < nworkers; i++) {
        p->args[i].pool = p;
        p->args[i].index = i + 1;
        if (bc_thread_start(&p->th[i], bc_pool_thread, &p->args[i]) != 0) break;
    }
    p->nworkers = i;
}

static void bc_pool_stop(bc_pool *p) {
    int i;
    bc_mutex_lock(&p->mu);
    BC_ASTORE(&p->stop, 1);
    bc_cond_broadcast(&p->cv_work);
    bc_mutex_unlock(&p->mu);
    for (i = 0; i < p->nworkers; i++) bc_thread_join(p->th[i]);
    p->nworkers = 0;
    bc_cond_destroy(&p->cv_work);
    bc_cond_destroy(&p->cv_done);
    bc_mutex_destroy(&p->mu);
}

/* Run one job on the caller and every worker; returns when all grains are done. */
static void bc_pool_job(bc_pool *p, int op, void *dst, const void *src, size_t n, size_t grain, int nt) {
    p->op = op;
    p->dst = (char *)dst;
    p->src = (const char *)src;
    p->n = n;
    p->grain = grain;
    p->nt = nt;
    BC_ASTORE(&p->next_grain, 0);
    /* Every worker takes part in every job (one that wakes late finds no grain
       left): no worker can be left reading a job the caller is already overwriting. */
    BC_ASTORE(&p->remaining, (long)p->nworkers);
    bc_mutex_lock(&p->mu);
    BC_ASTORE(&p->gen, p->gen + 1);
    bc_cond_broadcast(&p->cv_work);
    bc_mutex_unlock(&p->mu);
    bc_pool_run(p);
    BC_POOL_WAIT_WHILE(p, BC_ALOAD(&p->remaining) > 0, cv_done);
}

/* memcpy(dst, src, n) shared between the caller and the workers: about four grains
 * per participant (a participant gets at least min_part bytes' worth of work),
 * grains in whole pages. */
static void bc_pool_memcpy(bc_pool *p, void *dst, const void *src, size_t n, size_t min_part, int nt) {
    size_t nparts, grain;
    if (min_part == 0) min_part = 1;
    nparts = n / min_part;
    if (nparts > (size_t)p->nworkers + 1) nparts = (size_t)p->nworkers + 1;
    if (nparts <= 1) {
        bc_copy(dst, src, n, nt);
        return;
    }
    grain = n / (nparts * 4);
    grain = (grain + 4095) & ~(size_t)4095;
    if (grain < 4096) grain = 4096;
    bc_pool_job(p, BC_JOB_COPY, dst, src, n, grain, nt);
}

/* Fault in every page of [dst, dst + n) with all threads (see bc_touch_pages). */
static void bc_pool_touch(bc_pool *p, void *dst, size_t n) {
    if (p->nworkers == 0 || n <= BC_STAGING_TOUCH_GRAIN) {
        bc_touch_pages((char *)dst, n);
        return;
    }
    bc_pool_job(p, BC_JOB_TOUCH, dst, NULL, n, BC_STAGING_TOUCH_GRAIN, 0);
}

/* ------------------------------------------------------------ the stager */
struct bc_stager {
    CUcontext ctx;
    bc_mutex_t mu;
    int built;                 /* chunks, events and pool exist */
    int poisoned;              /* a DMA may use a chunk with no event guarding it */
    long cfg_gen;              /* configuration the chunks were built with */
    bc_staging_config cfg;
    int next;                  /* round-robin chunk cursor (kept across copies) */
    void *chunk[BC_STAGING_MAX_CHUNKS];
    CUevent ev[BC_STAGING_MAX_CHUNKS];
    int pending[BC_STAGING_MAX_CHUNKS];   /* ev[i] recorded after a DMA on chunk[i] */
    bc_pool pool;
    bc_staging_counters st;    /* updated under mu */
};

static bc_stager *bc_stagers[BC_STAGING_MAX_STAGERS];
static int bc_nstagers;

/* The stager of ctx, created (without chunks) on first use; NULL if out of memory
 * or too many contexts. */
bc_stager * bc_stager_for(CUcontext ctx) {
    int i;
    bc_stager *s = NULL;
    bc_mutex_lock(&bc_staging_registry_mu);
    for (i = 0; i < bc_nstagers; i++) {
        if (bc_stagers[i]->ctx == ctx) {
            s = bc_stagers[i];
            break;
        }
    }
    if (!s && bc_nstagers < BC_STAGING_MAX_STAGERS) {
        s = (bc_stager *)calloc(1, sizeof(bc_stager));
        if (s) {
            s->ctx = ctx;
            bc_mutex_init(&s->mu);
            bc_stagers[bc_nstagers++] = s;
        }
    }
    bc_mutex_unlock(&bc_staging_registry_mu);
    return s;
}

/* Wait for every chunk's last DMA. Returns the first failure. */
static CUresult bc_stager_drain(const bc_driver_t *D, bc_stager *s) {
    int i;
    CUresult first = CUDA_SUCCESS, rc;
    for (i = 0; i < s->cfg.chunks; i++) {
        if (!s->pending[i]) continue;
        rc = D->cuEventSynchronize(s->ev[i]);
        if (rc == CUDA_SUCCESS) s->pending[i] = 0;
        else if (first == CUDA_SUCCESS) first = rc;
    }
    return first;
}

/* Give back chunks, events and threads (s->mu held). A chunk whose DMA cannot be
 * shown complete is leaked, never freed under a running DMA. */
static CUresult bc_stager_teardown(const bc_driver_t *D, bc_stager *s) {
    int i, leak;
    CUresult first;
    if (!s->built) return CUDA_SUCCESS;
    first = bc_stager_drain(D, s);
    leak = s->poisoned;
    for (i = 0; i < s->cfg.chunks; i++) {
        if (s->ev[i]) {
            if (!s->pending[i]) D->cuEventDestroy(s->ev[i]);
            s->ev[i] = NULL;
        }
        if (s->chunk[i]) {
            if (!leak && !s->pending[i]) {
                CUresult rc = D->cuMemFreeHost(s->chunk[i]);
                if (rc != CUDA_SUCCESS && first == CUDA_SUCCESS) first = rc;
            }
            s->chunk[i] = NULL;
        }
        s->pending[i] = 0;
    }
    bc_pool_stop(&s->pool);
    s->built = 0;
    s->poisoned = 0;
    s->next = 0;
    return first;
}

/* Chunks, events and threads for the current configuration. On failure nothing
 * is left allocated and the caller falls back to the plain path. */
static CUresult bc_stager_build(const bc_driver_t *D, bc_stager *s, const char **call) {
    int i;
    long gen;
    bc_staging_config cfg;
    CUresult rc = CUDA_SUCCESS;
    bc_mutex_lock(&bc_staging_registry_mu);
    cfg = bc_staging_cfg;
    gen = bc_staging_cfg_gen;
    bc_mutex_unlock(&bc_staging_registry_mu);
    if (s->built && s->cfg_gen == gen && !s->poisoned) return CUDA_SUCCESS;
    if (s->built) {
        rc = bc_stager_teardown(D, s);
        if (rc != CUDA_SUCCESS) {
            *call = "cuEventSynchronize";
            return rc;
        }
    }
    s->cfg = cfg;
    for (i = 0; i < cfg.chunks; i++) {
        rc = D->cuMemHostAlloc(&s->chunk[i], cfg.chunk_bytes, CU_MEMHOSTALLOC_PORTABLE);
        if (rc != CUDA_SUCCESS) {
            s->chunk[i] = NULL;
            *call = "cuMemHostAlloc";
            break;
        }
        rc = D->cuEventCreate(&s->ev[i], CU_EVENT_DISABLE_TIMING);
        if (rc != CUDA_SUCCESS) {
            s->ev[i] = NULL;
            *call = "cuEventCreate";
            break;
        }
    }
    if (rc != CUDA_SUCCESS) {
        for (i = 0; i < cfg.chunks; i++) {
            if (s->ev[i]) D->cuEventDestroy(s->ev[i]);
            if (s->chunk[i]) D->cuMemFreeHost(s->chunk[i]);
            s->ev[i] = NULL;
            s->chunk[i] = NULL;
        }
        return rc;
    }
    memset(s->pending, 0, sizeof(s->pending));
    bc_pool_start(&s->pool, cfg.threads - 1, cfg.spin_ns);
    s->next = 0;
    s->cfg_gen = gen;
    s->built = 1;
    s->st.builds++;
    return CUDA_SUCCESS;
}

/* Chunk c is about to be reused: wait for the DMA that used it last. */
static CUresult bc_stager_claim(const bc_driver_t *D, bc_stager *s, int c, const char **call) {
    CUresult rc;
    if (!s->pending[c]) return CUDA_SUCCESS;
    *call = "cuEventQuery";
    rc = D->cuEventQuery(s->ev[c]);
    if (rc == CUDA_ERROR_NOT_READY) {
        s->st.chunk_waits++;
        *call = "cuEventSynchronize";
        rc = D->cuEventSynchronize(s->ev[c]);
    }
    if (rc != CUDA_SUCCESS) return rc;   /* pending stays set: the chunk is not handed out */
    s->pending[c] = 0;
    return CUDA_SUCCESS;
}

/* A DMA on chunk c was queued on `stream`: guard the chunk with its event. If the
 * record fails, wait for the stream instead; if that fails too, the chunk may be in
 * use with nothing to tell when it is free: the chunk set is abandoned (leaked). */
static CUresult bc_stager_guard(const bc_driver_t *D, bc_stager *s, int c, CUstream stream, const char **call) {
    CUresult rc = D->cuEventRecord(s->ev[c], stream);
    if (rc == CUDA_SUCCESS) {
        s->pending[c] = 1;
        return CUDA_SUCCESS;
    }
    *call = "cuEventRecord";
    if (D->cuStreamSynchronize(stream) != CUDA_SUCCESS) s->poisoned = 1;
    return rc;
}

/* Pipeline piece: whole chunks for big copies; a copy of only a few chunks is cut
 * into K pieces (not smaller than min_piece) so that memcpy and DMA still overlap. */
static size_t bc_stager_piece(const bc_stager *s, size_t n) {
    size_t k = (size_t)s->cfg.chunks;
    size_t p = (n + k - 1) / k;
    p = (p + 4095) & ~(size_t)4095;
    if (p < s->cfg.min_piece) p = s->cfg.min_piece;
    if (p > s->cfg.chunk_bytes) p = s->cfg.chunk_bytes;
    return p;
}

/* Is [p, p+n) inside one page-locked allocation the driver knows? */
static int bc_staging_is_pinned(const bc_driver_t *D, const void *p, size_t n) {
    unsigned int type = 0;
    CUdeviceptr base = 0;
    size_t size = 0;
    CUdeviceptr a = (CUdeviceptr)(uintptr_t)p;
    if (D->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a) != CUDA_SUCCESS) return 0;
    if (type != CU_MEMORYTYPE_HOST) return 0;
    if (D->cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a) != CUDA_SUCCESS) return 0;
    if (D->cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, a) != CUDA_SUCCESS) return 0;
    return base <= a && a + n <= base + size;
}

/* Plain paths: what the driver does on its own. */
CUresult bc_staging_plain_htod(const bc_driver_t *D, CUdeviceptr dst, const void *src, size_t n,
                                      CUstream stream, const char **call) {
    BC_AADD64(&bc_staging_stats_global.htod_plain, 1);
    BC_AADD64(&bc_staging_stats_global.htod_plain_bytes, (long long)n);
    *call = "cuMemcpyHtoDAsync";
    return D->cuMemcpyHtoDAsync(dst, src, n, stream);
}

/* Synchronous with respect to the host whatever dst is (page-locked memory makes
 * cuMemcpyDtoHAsync truly asynchronous, hence the stream sync there). */
CUresult bc_staging_plain_dtoh(const bc_driver_t *D, void *dst, CUdeviceptr src, size_t n,
                                      CUstream stream, const char **call) {
    CUresult rc;
    BC_AADD64(&bc_staging_stats_global.dtoh_plain, 1);
    BC_AADD64(&bc_staging_stats_global.dtoh_plain_bytes, (long long)n);
    if (stream == NULL) {
        *call = "cuMemcpyDtoH";
        return D->cuMemcpyDtoH(dst, src, n);
    }
    *call = "cuMemcpyDtoHAsync";
    rc = D->cuMemcpyDtoHAsync(dst, src, n, stream);
    if (rc != CUDA_SUCCESS) return rc;
    *call = "cuStreamSynchronize";
    return D->cuStreamSynchronize(stream);
}

/* Host->device, n >= threshold. s->mu is taken here. */
CUresult bc_stager_htod(const bc_driver_t *D, bc_stager *s, CUdeviceptr dst, const void *src_,
                               size_t n, CUstream stream, const char **call) {
    const char *src = (const char *)src_;
    size_t off = 0, piece;
    CUresult rc;
    if (bc_staging_is_pinned(D, src, n)) {
        /* Already page-locked: the DMA engine reads it directly (asynchronous, as
           cuMemcpyHtoDAsync from page-locked memory always is). */
        bc_mutex_lock(&s->mu);
        s->st.pinned_direct++;
        bc_mutex_unlock(&s->mu);
        *call = "cuMemcpyHtoDAsync";
        return D->cuMemcpyHtoDAsync(dst, src, n, stream);
    }
    bc_mutex_lock(&s->mu);
    rc = bc_stager_build(D, s, call);
    if (rc != CUDA_SUCCESS) {
        s->st.fallbacks++;
        bc_mutex_unlock(&s->mu);
        return bc_staging_plain_htod(D, dst, src, n, stream, call);
    }
    s->st.htod_staged++;
    piece = bc_stager_piece(s, n);
    while (off < n) {
        size_t len = n - off < piece ? n - off : piece;
        int c = s->next;
        rc = bc_stager_claim(D, s, c, call);
        if (rc != CUDA_SUCCESS) break;
        bc_pool_memcpy(&s->pool, s->chunk[c], src + off, len, s->cfg.min_part, s->cfg.nt_htod);
        rc = D->cuMemcpyHtoDAsync(dst + off, s->chunk[c], len, stream);
        if (rc != CUDA_SUCCESS) {
            *call = "cuMemcpyHtoDAsync";
            break;
        }
        rc = bc_stager_guard(D, s, c, stream, call);
        if (rc != CUDA_SUCCESS) break;
        s->next = (c + 1) % s->cfg.chunks;
        off += len;
        s->st.htod_staged_bytes += (long long)len;
    }
    bc_mutex_unlock(&s->mu);
    return rc;
}

/* Device->host, n >= threshold; returns when dst is written. `fresh`: dst is newly
 * allocated memory the caller never touched (to_numpy's result): its pages are
 * faulted in by all threads while the first DMAs run, instead of one page fault at
 * a time inside each thread's share of the copies. */
CUresult bc_stager_dtoh(const bc_driver_t *D, bc_stager *s, void *dst_, CUdeviceptr src,
                               size_t n, CUstream stream, int fresh, const char **call) {
    char *dst = (char *)dst_;
    size_t piece, npieces, issued = 0, done = 0;
    int base, k;
    CUresult rc = CUDA_SUCCESS;
    if (bc_staging_is_pinned(D, dst, n)) {
        bc_mutex_lock(&s->mu);
        s->st.pinned_direct++;
        bc_mutex_unlock(&s->mu);
        *call = "cuMemcpyDtoHAsync";
        rc = D->cuMemcpyDtoHAsync(dst, src, n, stream);
        if (rc != CUDA_SUCCESS) return rc;
        *call = "cuStreamSynchronize";
        return D->cuStreamSynchronize(stream);
    }
    bc_mutex_lock(&s->mu);
    rc = bc_stager_build(D, s, call);
    if (rc != CUDA_SUCCESS) {
        s->st.fallbacks++;
        bc_mutex_unlock(&s->mu);
        return bc_staging_plain_dtoh(D, dst, src, n, stream, call);
    }
    s->st.dtoh_staged++;
    k = s->cfg.chunks;
    base = s->next;
    piece = bc_stager_piece(s, n);
    npieces = (n + piece - 1) / piece;
    /* Piece i lives in chunk (base + i) % k; at most k DMAs in flight. */
    while (done < npieces) {
        while (issued < npieces && issued - done < (size_t)k) {
            int c = (int)((base + issued) % (size_t)k);
            size_t off = issued * piece;
            size_t len = n - off < piece ? n - off : piece;
            rc = bc_stager_claim(D, s, c, call);
            if (rc != CUDA_SUCCESS) goto out;
            rc = D->cuMemcpyDtoHAsync(s->chunk[c], src + off, len, stream);
            if (rc != CUDA_SUCCESS) {
                *call = "cuMemcpyDtoHAsync";
                goto out;
            }
            rc = bc_stager_guard(D, s, c, stream, call);
            if (rc != CUDA_SUCCESS) goto out;
            issued++;
        }
        if (fresh) {
            bc_pool_touch(&s->pool, dst, n);
            fresh = 0;
        }
        {
            int c = (int)((base + done) % (size_t)k);
            size_t off = done * piece;
            size_t len = n - off < piece ? n - off : piece;
            rc = bc_stager_claim(D, s, c, call);
            if (rc != CUDA_SUCCESS) goto out;
            bc_pool_memcpy(&s->pool, dst + off, s->chunk[c], len, s->cfg.min_part, s->cfg.nt_dtoh);
            s->st.dtoh_staged_bytes += (long long)len;
            done++;
        }
    }
out:
    s->next = (int)((base + issued) % (size_t)k);
    bc_mutex_unlock(&s->mu);
    return rc;
}

/* Free the stager's chunks, events and threads now (they come back on next use).
 * With `try_only`, give up (return -1) if a copy holds the stager. */
int bc_stager_release(const bc_driver_t *D, bc_stager *s, int try_only, CUresult *rc) {
    if (try_only) {
        if (bc_mutex_trylock(&s->mu) != 0) return -1;
    } else {
        bc_mutex_lock(&s->mu);
    }
    *rc = bc_stager_teardown(D, s);
    bc_mutex_unlock(&s->mu);
    return 0;
}

void bc_stager_counters(bc_stager *s, bc_staging_counters *sum, long long *pinned_bytes, int *threads) {
    bc_mutex_lock(&s->mu);
    sum->htod_staged += s->st.htod_staged;
    sum->htod_staged_bytes += s->st.htod_staged_bytes;
    sum->dtoh_staged += s->st.dtoh_staged;
    sum->dtoh_staged_bytes += s->st.dtoh_staged_bytes;
    sum->pinned_direct += s->st.pinned_direct;
    sum->fallbacks += s->st.fallbacks;
    sum->chunk_waits += s->st.chunk_waits;
    sum->builds += s->st.builds;
    if (s->built) {
        *pinned_bytes += (long long)s->cfg.chunk_bytes * s->cfg.chunks;
        *threads += s->pool.nworkers;
    }
    bc_mutex_unlock(&s->mu);
}

int bc_staging_count(void) {
    int n;
    bc_mutex_lock(&bc_staging_registry_mu);
    n = bc_nstagers;
    bc_mutex_unlock(&bc_staging_registry_mu);
    return n;
}

bc_stager * bc_staging_at(int i) {
    bc_stager *s;
    bc_mutex_lock(&bc_staging_registry_mu);
    s = i < bc_nstagers ? bc_stagers[i] : NULL;
    bc_mutex_unlock(&bc_staging_registry_mu);
    return s;
}

void bc_staging_get_config(bc_staging_config *out) {
    bc_mutex_lock(&bc_staging_registry_mu);
    *out = bc_staging_cfg;
    bc_mutex_unlock(&bc_staging_registry_mu);
}

/* Stagers rebuild with the new configuration at their next large copy. */
static int bc_staging_config_same(const bc_staging_config *a, const bc_staging_config *b) {
    return a->chunk_bytes == b->chunk_bytes && a->chunks == b->chunks && a->threads == b->threads
        && a->threshold == b->threshold && a->min_piece == b->min_piece && a->min_part == b->min_part
        && a->nt_htod == b->nt_htod && a->nt_dtoh == b->nt_dtoh && a->spin_ns == b->spin_ns;
}

/* An unchanged configuration keeps the stagers' chunks and threads: setting the
 * same values again (a test restoring what it saved) costs no rebuild. */
void bc_staging_set_config(const bc_staging_config *cfg) {
    bc_mutex_lock(&bc_staging_registry_mu);
    if (!bc_staging_config_same(&bc_staging_cfg, cfg)) {
        bc_staging_cfg = *cfg;
        bc_staging_cfg_gen++;
    }
    bc_mutex_unlock(&bc_staging_registry_mu);
}

size_t bc_staging_threshold(void) {
    /* read racily on the hot path: a concurrent configure() may or may not be seen */
    return *(volatile size_t *)&bc_staging_cfg.threshold;
}

void bc_staging_global_counters(bc_staging_counters *sum) {
    sum->htod_plain = BC_ALOAD64(&bc_staging_stats_global.htod_plain);
    sum->htod_plain_bytes = BC_ALOAD64(&bc_staging_stats_global.htod_plain_bytes);
    sum->dtoh_plain = BC_ALOAD64(&bc_staging_stats_global.dtoh_plain);
    sum->dtoh_plain_bytes = BC_ALOAD64(&bc_staging_stats_global.dtoh_plain_bytes);
}

#ifndef _WIN32
/* A forked child inherits stagers whose threads do not exist and whose mutexes may
 * be held by threads that do not exist either: forget them all (leaked, never
 * touched) and start with a fresh registry lock. The driver is unusable in the
 * child anyway; this keeps configure()/stats() working there. */
static void bc_staging_atfork_child(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&bc_staging_registry_mu, &fresh, sizeof(fresh));
    bc_nstagers = 0;
}
#endif

void bc_staging_init(void) {
#ifndef _WIN32
    pthread_atfork(NULL, NULL, bc_staging_atfork_child);
#endif
}


CUcontext bc_stager_context(const bc_stager *s) { return s->ctx; }
