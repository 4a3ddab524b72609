/*
 * state.c -- driver double (tests/fakecuda/): the shared state: the one lock, call counters and fault injection, handle registries,
 * the allocation table, the launch ring, helpers, and the opt-in pending-work model.
 */
#include "fake_internal.h"

#include <time.h>

const char *const fk_sym_names[FK_NSYM] = {
#define FK_X_NAME(name, version, required, params) #name,
    BC_DRIVER_SYMBOLS(FK_X_NAME)
#undef FK_X_NAME
    "cuGetProcAddress_v2",
};

/* ------------------------------------------------------------------ state */
pthread_mutex_t g_mu;
pthread_once_t g_once = PTHREAD_ONCE_INIT;

void fk_init_mutex(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&g_mu, &a);
    pthread_mutexattr_destroy(&a);
}

void fk_unlock_cleanup(int *unused) {
    (void)unused;
    pthread_mutex_unlock(&g_mu);
}

long long g_calls[FK_NSYM];
fk_fault g_faults[FK_NSYM];
/* Injected failures that fired, per entry point, since load (never reset). */
long long g_faults_fired[FK_NSYM];
int g_delay_us[FK_NSYM];
int g_version_requested[FK_NSYM];

int g_initialized;
int g_ndev;

fk_device g_dev[FK_MAX_DEV];
__thread CUcontext tls_ctx;

fk_vec g_streams, g_events, g_modules, g_funcs, g_pools;
fk_alloc *g_allocs;
size_t g_nallocs, g_capallocs;
unsigned long long g_next_alloc_id = 1;

int vec_add(fk_vec *v, void *p) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 16;
        void **nv = realloc(v->v, nc * sizeof(void *));
        if (!nv) return -1;
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n++] = p;
    return 0;
}

int vec_has(const fk_vec *v, const void *p) {
    size_t i;
    if (!p) return 0;
    for (i = 0; i < v->n; i++)
        if (v->v[i] == p) return 1;
    return 0;
}

int vec_remove(fk_vec *v, const void *p) {
    size_t i;
    for (i = 0; i < v->n; i++) {
        if (v->v[i] == p) {
            v->v[i] = v->v[--v->n];
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------- launch recording */

fk_launch g_ring[FK_RING];
long long g_launch_count;

/* Why the last launch was rejected (fakecuda_last_reason); echoed to stderr when
 * FAKECUDA_TRACE is set. */
char g_reason[256];

CUresult fk_reject(CUresult rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_reason, sizeof(g_reason), fmt, ap);
    va_end(ap);
    if (getenv("FAKECUDA_TRACE")) fprintf(stderr, "fakecuda: rejected (%d): %s\n", rc, g_reason);
    return rc;
}

/* --------------------------------------------------------------- helpers */
int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    char *end;
    long v;
    if (!s || !*s) return dflt;
    v = strtol(s, &end, 0);
    if (*end) return dflt;
    return (int)v;
}

double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int sym_index(const char *name) {
    int i;
    if (!name) return -1;
    for (i = 0; i < FK_NSYM; i++)
        if (strcmp(fk_sym_names[i], name) == 0) return i;
    return -1;
}

void default_attrs(int d) {
    int *a = g_dev[d].attrs;
    memset(g_dev[d].attrs, 0, sizeof(g_dev[d].attrs));
    a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024;
    a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X] = 1024;
    a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y] = 1024;
    a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z] = 64;
    a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X] = 2147483647;
    a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y] = 65535;
    a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z] = 65535;
    a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK] = 49152;
    a[CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY] = 65536;
    a[CU_DEVICE_ATTRIBUTE_WARP_SIZE] = 32;
    a[CU_DEVICE_ATTRIBUTE_MAX_PITCH] = 2147483647;
    a[CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK] = 65536;
    a[CU_DEVICE_ATTRIBUTE_CLOCK_RATE] = 1980000;
    a[CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT] = 512;
    a[CU_DEVICE_ATTRIBUTE_GPU_OVERLAP] = 1;
    a[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = 132;
    a[CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY] = 1;
    a[CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS] = 1;
    a[CU_DEVICE_ATTRIBUTE_ECC_ENABLED] = 1;
    a[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] = d;
    a[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID] = 0;
    a[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID] = 0;
    a[CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE] = 2619000;
    a[CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH] = 6144;
    a[CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE] = 52428800;
    a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR] = 2048;
    a[CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT] = 3;
    a[CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING] = 1;
    a[CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT] = 32;
    a[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = 9;
    a[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR] = 0;
    a[CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED] = 1;
    a[CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED] = 1;
    a[CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED] = 1;
    a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR] = FK_SMEM_PER_SM;
    a[CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR] = 65536;
    a[CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY] = 1;
    a[CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID] = d;
    a[CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO] = 2;
    a[CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS] = 1;
    a[CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED] = 1;
    a[CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH] = 1;
    a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] = 232448;
    a[CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES] = 0;
    a[CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED] = 1;
    a[CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED] = 1;
    a[CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED] = 1;
    a[CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR] = 32;
    a[CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE] = 32505856;
    a[CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE] = 134213632;
    a[CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK] = FK_RESERVED_SMEM;
    a[CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED] = 1;
    a[CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED] = 1;
    a[CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES] = 1;
    a[CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH] = 1;
    a[CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS] = 1;
    a[CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR] = 1;
    a[CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT] = 4;
    a[CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED] = 1;
    a[CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS] = 1;
    a[CU_DEVICE_ATTRIBUTE_NUMA_ID] = -1;
    a[CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID] = -1;
    a[CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID] = 0x233510de;
    a[CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID] = 0x180910de;
}

void init_devices(void) {
    int d;
    g_ndev = env_int("FAKECUDA_DEVICES", 1);
    if (g_ndev < 0) g_ndev = 0;
    if (g_ndev > FK_MAX_DEV) g_ndev = FK_MAX_DEV;
    for (d = 0; d < FK_MAX_DEV; d++) {
        default_attrs(d);
        g_dev[d].ctx.magic = 0xC7C7C7C7u;
        g_dev[d].ctx.dev = d;
        g_dev[d].default_pool.magic = 0x900L;
        g_dev[d].default_pool.live = 1;
        g_dev[d].default_pool.dev = d;
        g_dev[d].default_pool.is_default = 1;
        g_dev[d].default_pool.reuse[1] = g_dev[d].default_pool.reuse[2] = g_dev[d].default_pool.reuse[3] = 1;
    }
}

/* Count the call, then apply an injected fault. Returns the injected result or 0. */
static CUresult fk_begin_locked(int sym, int *delay_us) {
    fk_fault *f;
    CUresult rc = CUDA_SUCCESS;
    FK_LOCK_SCOPE;
    g_calls[sym]++;
    *delay_us = g_delay_us[sym];
    f = &g_faults[sym];
    if (f->armed) {
        long long n = f->seen++;
        if (n >= f->after && f->times != 0) {
            rc = f->code;
            g_faults_fired[sym]++;
            if (f->times > 0 && --f->times == 0) f->armed = 0;
        }
    }
    return rc;
}

CUresult fk_begin(int sym) {
    int delay_us = 0;
    CUresult rc = fk_begin_locked(sym, &delay_us);
    /* fakecuda_delay: sleep at the entry, outside the lock and before the call looks at
     * its arguments -- a wide window for races between a caller and another thread. */
    if (delay_us > 0) {
        struct timespec ts = {delay_us / 1000000, (long)(delay_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    return rc;
}

int valid_dev(CUdevice d) { return d >= 0 && d < g_ndev; }

int valid_ctx(CUcontext c) {
    int d;
    for (d = 0; d < g_ndev; d++)
        if (c == &g_dev[d].ctx) return 1;
    return 0;
}

/* The current context if it is usable (its primary context is retained). */
CUcontext cur_ctx(void) {
    CUcontext c = tls_ctx;
    if (!c || !valid_ctx(c) || g_dev[c->dev].retain <= 0) return NULL;
    return c;
}

int valid_stream(CUstream s) {
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || vec_has(&g_streams, s);
}

fk_alloc *find_alloc(uintptr_t p) {
    size_t i;
    for (i = 0; i < g_nallocs; i++)
        if (p >= g_allocs[i].base && p < g_allocs[i].base + (g_allocs[i].size ? g_allocs[i].size : 1))
            return &g_allocs[i];
    return NULL;
}

fk_alloc *find_alloc_exact(uintptr_t p) {
    size_t i;
    for (i = 0; i < g_nallocs; i++)
        if (g_allocs[i].base == p) return &g_allocs[i];
    return NULL;
}

/* A device-accessible range [p, p+n) inside one allocation (any kind). */
int dev_range_ok(uintptr_t p, size_t n) {
    fk_alloc *a;
    if (n == 0) return 1;
    a = find_alloc(p);
    if (!a) return 0;
    return n <= a->size - (p - a->base);
}

fk_alloc *add_alloc(void) {
    if (g_nallocs == g_capallocs) {
        size_t nc = g_capallocs ? g_capallocs * 2 : 64;
        fk_alloc *na = realloc(g_allocs, nc * sizeof(fk_alloc));
        if (!na) return NULL;
        g_allocs = na;
        g_capallocs = nc;
    }
    memset(&g_allocs[g_nallocs], 0, sizeof(fk_alloc));
    g_allocs[g_nallocs].id = g_next_alloc_id++;
    return &g_allocs[g_nallocs++];
}

void remove_alloc(fk_alloc *a) {
    size_t i = (size_t)(a - g_allocs);
    g_allocs[i] = g_allocs[--g_nallocs];
}

void pool_trim(struct CUmemPoolHandle_st *p, unsigned long long keep) {
    unsigned long long floor_ = p->used > keep ? p->used : keep;
    if (p->reserved > floor_) p->reserved = floor_;
}

/* A sync point: pools give memory above their release threshold back. */
void sync_point(void) {
    size_t i;
    int d;
    for (d = 0; d < g_ndev; d++) pool_trim(&g_dev[d].default_pool, g_dev[d].default_pool.threshold);
    for (i = 0; i < g_pools.n; i++) {
        struct CUmemPoolHandle_st *p = g_pools.v[i];
        pool_trim(p, p->threshold);
    }
}

/* Allocate "device" memory: 256-byte aligned host RAM, filled with 0xA5 so that
 * reading memory nobody wrote never looks like zeros. */
CUresult do_alloc(CUdeviceptr *dptr, size_t n, int kind, int dev, struct CUmemPoolHandle_st *pool,
                         unsigned flags) {
    size_t rounded;
    void *p;
    fk_alloc *a;
    if (!dptr || n == 0) return CUDA_ERROR_INVALID_VALUE;
    if (kind != MK_HOST_ALLOC && g_dev[dev].used + n > FK_TOTAL_MEM) return CUDA_ERROR_OUT_OF_MEMORY;
    rounded = (n + 255) & ~(size_t)255;
    if (rounded < n) return CUDA_ERROR_OUT_OF_MEMORY;
    p = aligned_alloc(256, rounded);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(p, 0xA5, rounded);
    a = add_alloc();
    if (!a) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->base = (uintptr_t)p;
    a->size = n;
    a->kind = kind;
    a->dev = dev;
    a->pool = pool;
    a->flags = flags;
    a->raw = p;
    if (kind != MK_HOST_ALLOC) g_dev[dev].used += n;
    if (pool) {
        pool->used += n;
        if (pool->used > pool->used_high) pool->used_high = pool->used;
        if (pool->reserved < pool->used) {
            unsigned long long r = (pool->used + (2ULL << 20) - 1) & ~((2ULL << 20) - 1);
            pool->reserved = r;
        }
        if (pool->reserved > pool->reserved_high) pool->reserved_high = pool->reserved;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult do_free(CUdeviceptr dptr, int allow_host) {
    fk_alloc *a = find_alloc_exact((uintptr_t)dptr);
    if (!a) return CUDA_ERROR_INVALID_VALUE;
    if (a->kind == MK_GLOBAL || a->kind == MK_HOST_REG) return CUDA_ERROR_INVALID_VALUE;
    if ((a->kind == MK_HOST_ALLOC) != (allow_host != 0)) return CUDA_ERROR_INVALID_VALUE;
    if (a->kind != MK_HOST_ALLOC) g_dev[a->dev].used -= a->size;
    if (a->pool) a->pool->used -= a->size;
    free(a->raw);
    remove_alloc(a);
    return CUDA_SUCCESS;
}

int count_allocs(int kind1, int kind2) {
    size_t i;
    int n = 0;
    for (i = 0; i < g_nallocs; i++)
        if (g_allocs[i].kind == kind1 || g_allocs[i].kind == kind2) n++;
    return n;
}

/* ------------------------------------------------- pending-work model (opt-in)
 * Off unless fakecuda_pending_mode(1). Then each launch stays "pending" on its stream
 * until cuStreamSynchronize or cuStreamQuery of that stream, cuCtxSynchronize, or
 * cuEventSynchronize of an event recorded on that stream after it. cuEventQuery of such
 * an event answers CUDA_ERROR_NOT_READY at the first look and completes the work at the
 * next (so polling loops end). cuMemFreeAsync(p, s) of an
 * allocation that pending work on another stream references (cuMemFree: any stream)
 * counts as an early free (fakecuda_early_frees). A launch references every live
 * device/managed allocation that one of its 8-byte-aligned parameter slots points into.
 * The NULL and legacy stream handles are one stream. */
fk_pend g_pend[FK_PEND_MAX];
int g_npend;
int g_pending_mode;
unsigned long long g_pend_seq;
long long g_early_frees;

CUstream pend_norm(CUstream s) { return s == NULL ? CU_STREAM_LEGACY : s; }

void pend_add_launch(CUstream stream, const unsigned char *buf, size_t n) {
    size_t off;
    unsigned long long seq = ++g_pend_seq;
    if (!buf) return;
    for (off = 0; off + 8 <= n; off += 8) {
        unsigned long long v;
        fk_alloc *a;
        memcpy(&v, buf + off, 8);
        a = v ? find_alloc((uintptr_t)v) : NULL;
        if (!a || (a->kind != MK_DEVICE && a->kind != MK_MANAGED)) continue;
        if (g_npend < FK_PEND_MAX) {
            g_pend[g_npend].stream = pend_norm(stream);
            g_pend[g_npend].seq = seq;
            g_pend[g_npend].alloc_id = a->id;
            g_npend++;
        }
    }
}

/* Complete the work on `stream` up to seq (stream NULL with all=1: everything). */
void pend_complete(CUstream stream, unsigned long long upto, int all) {
    int i = 0;
    stream = pend_norm(stream);
    while (i < g_npend) {
        if (all || (g_pend[i].stream == stream && g_pend[i].seq <= upto)) g_pend[i] = g_pend[--g_npend];
        else i++;
    }
}

int pend_refs(unsigned long long alloc_id, CUstream stream, int any_stream) {
    int i, n = 0;
    stream = pend_norm(stream);
    for (i = 0; i < g_npend; i++)
        if (g_pend[i].alloc_id == alloc_id && (any_stream || g_pend[i].stream != stream)) n++;
    return n;
}

void pend_check_free(CUdeviceptr dptr, CUstream stream, int any_stream) {
    fk_alloc *a;
    if (!g_pending_mode) return;
    a = find_alloc_exact((uintptr_t)dptr);
    if (a && pend_refs(a->id, stream, any_stream)) g_early_frees++;
}
