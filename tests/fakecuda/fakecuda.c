/*
 * fakecuda.c -- a test double of the CUDA driver, for CPU-only test runs.
 *
 * It implements every entry point listed in BC_DRIVER_SYMBOLS (our own ABI header,
 * so building this file also checks that the header compiles and that each
 * prototype here matches the PFN_ typedef barecuda calls through), and exports
 * cuGetProcAddress_v2 to hand them out. "Device" memory is host RAM (a
 * CUdeviceptr is the host address), kernels never run: a launch is validated and
 * recorded, with the exact parameter bytes the GPU would have received.
 *
 * It exists to exercise barecuda's loader, argument packing, error paths and
 * lifetime rules; it says nothing about GPU correctness or speed.
 *
 * The control API (fakecuda_*) at the end is for tests, through ctypes.
 * Build:  cc -shared -fPIC -O1 -Wall -Wextra -std=gnu11 -I include -pthread \
 *            tests/fakecuda/fakecuda.c -o libfakecuda.so
 * Add -DFAKECUDA_NO_GPA for a variant that does not export cuGetProcAddress_v2.
 */
#include <ctype.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "barecuda/cuda_abi.h"
#include "barecuda/cuda_errors.h"

#define FK_EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------ result codes */
enum {
    E_INVALID_VALUE = 1,
    E_OUT_OF_MEMORY = 2,
    E_NOT_INITIALIZED = 3,
    E_NO_DEVICE = 100,
    E_INVALID_DEVICE = 101,
    E_INVALID_IMAGE = 200,
    E_INVALID_CONTEXT = 201,
    E_PEER_ACCESS_UNSUPPORTED = 217,
    E_INVALID_PTX = 218,
    E_INVALID_HANDLE = 400,
    E_NOT_FOUND = 500,
    E_PEER_ACCESS_ALREADY_ENABLED = 704,
    E_PEER_ACCESS_NOT_ENABLED = 705,
    E_HOST_MEMORY_ALREADY_REGISTERED = 712,
    E_HOST_MEMORY_NOT_REGISTERED = 713,
    E_COOPERATIVE_LAUNCH_TOO_LARGE = 720,
    E_INVALID_CLUSTER_SIZE = 912,
};

/* Every entry point, declared from the ABI header: a definition below whose
 * signature differs from what barecuda calls is a compile error. */
#define FK_X_PROTO(name, version, required, params) FK_EXPORT CUresult CUDAAPI name params;
BC_DRIVER_SYMBOLS(FK_X_PROTO)
#undef FK_X_PROTO

enum {
#define FK_X_ENUM(name, version, required, params) FK_##name,
    BC_DRIVER_SYMBOLS(FK_X_ENUM)
#undef FK_X_ENUM
    FK_cuGetProcAddress_v2,
    FK_NSYM
};

static const char *const fk_sym_names[FK_NSYM] = {
#define FK_X_NAME(name, version, required, params) #name,
    BC_DRIVER_SYMBOLS(FK_X_NAME)
#undef FK_X_NAME
    "cuGetProcAddress_v2",
};

/* ------------------------------------------------------------------ state */
static pthread_mutex_t g_mu;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fk_init_mutex(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&g_mu, &a);
    pthread_mutexattr_destroy(&a);
}

static void fk_unlock_cleanup(int *unused) {
    (void)unused;
    pthread_mutex_unlock(&g_mu);
}

/* Holds the one mutex until the enclosing scope ends (every return unlocks). */
#define FK_LOCK_SCOPE                                                              \
    pthread_once(&g_once, fk_init_mutex);                                          \
    pthread_mutex_lock(&g_mu);                                                     \
    __attribute__((cleanup(fk_unlock_cleanup))) int fk_guard_ = 0;                 \
    (void)fk_guard_

typedef struct fk_fault {
    int armed;
    int code;
    long long after;   /* calls to let through first */
    long long times;   /* failures left; -1 forever */
    long long seen;    /* calls since armed */
} fk_fault;

static long long g_calls[FK_NSYM];
static fk_fault g_faults[FK_NSYM];
static int g_version_requested[FK_NSYM];

static int g_initialized;
static int g_ndev;

#define FK_MAX_DEV 16
#define FK_TOTAL_MEM (80ULL << 30)
#define FK_PRIO_LEAST 0
#define FK_PRIO_GREATEST (-5)
#define FK_SMEM_PER_SM 233472
#define FK_RESERVED_SMEM 1024
#define FK_MAX_PARAM_BYTES 32764

struct CUctx_st {
    unsigned magic;
    int dev;
    unsigned peers; /* bit i: peer access to device i enabled */
};

struct CUmemPoolHandle_st {
    unsigned magic;
    int live;
    int dev;
    int is_default;
    int reuse[4];
    unsigned long long threshold;
    unsigned long long used, used_high, reserved, reserved_high;
};

typedef struct fk_device {
    int attrs[CU_DEVICE_ATTRIBUTE_MAX];
    int retain;
    struct CUctx_st ctx;
    struct CUmemPoolHandle_st default_pool;
    unsigned long long used;
} fk_device;

static fk_device g_dev[FK_MAX_DEV];
static __thread CUcontext tls_ctx;

struct CUstream_st {
    unsigned magic;
    unsigned flags;
    int priority;
    CUcontext ctx;
};

struct CUevent_st {
    unsigned magic;
    unsigned flags;
    int recorded;
    double t_ms;
    CUstream pend_stream;            /* pending-work model: where and when it was recorded, */
    unsigned long long pend_seq;
    int pend_polls;                  /* and how often it was found not ready */
};

typedef struct fk_param {
    size_t offset, size, align;
} fk_param;

struct CUfunc_st {
    unsigned magic;
    CUmodule mod;
    char name[256];
    int nparams;
    fk_param *params;
    size_t param_bytes;
    int max_threads;          /* from .maxntid/.reqntid, else 1024 */
    int static_smem;          /* sum of .shared declarations */
    int max_dyn_smem;         /* settable up to optin - static */
    int carveout;
    int cluster[3];
    int non_portable_cluster;
    int cluster_policy;
};

typedef struct fk_global {
    char name[256];
    unsigned char *data;
    size_t size;
} fk_global;

struct CUmod_st {
    unsigned magic;
    CUcontext ctx;
    int nfuncs;
    struct CUfunc_st *funcs;
    int nglobals;
    fk_global *globals;
};

/* Memory kinds */
enum { MK_DEVICE = 1, MK_MANAGED, MK_HOST_ALLOC, MK_HOST_REG, MK_GLOBAL };

typedef struct fk_alloc {
    uintptr_t base;
    size_t size;
    int kind;
    int dev;
    struct CUmemPoolHandle_st *pool;
    unsigned flags;
    unsigned long long id;
    void *raw; /* what to free(); NULL for registrations and module globals */
} fk_alloc;

/* Live handle registries: arrays of pointers, linear search (tests hold few). */
typedef struct fk_vec {
    void **v;
    size_t n, cap;
} fk_vec;

static fk_vec g_streams, g_events, g_modules, g_funcs, g_pools;
static fk_alloc *g_allocs;
static size_t g_nallocs, g_capallocs;
static unsigned long long g_next_alloc_id = 1;

static int vec_add(fk_vec *v, void *p) {
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

static int vec_has(const fk_vec *v, const void *p) {
    size_t i;
    if (!p) return 0;
    for (i = 0; i < v->n; i++)
        if (v->v[i] == p) return 1;
    return 0;
}

static int vec_remove(fk_vec *v, const void *p) {
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
typedef struct fk_launch {
    char name[256];
    unsigned int grid[3], block[3];
    unsigned int shared;
    CUstream stream;
    int kind;               /* 0 cuLaunchKernel, 1 cuLaunchCooperativeKernel, 2 cuLaunchKernelEx */
    unsigned int cluster[3];
    int cooperative;
    int priority;
    int prog_serial;
    int num_attrs;
    int used_extra;
    unsigned char *params;
    size_t nparams_bytes;
} fk_launch;

#define FK_RING 256
static fk_launch g_ring[FK_RING];
static long long g_launch_count;

/* Why the last launch was rejected (fakecuda_last_reason); echoed to stderr when
 * FAKECUDA_TRACE is set. */
static char g_reason[256];

static CUresult fk_reject(CUresult rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static CUresult fk_reject(CUresult rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_reason, sizeof(g_reason), fmt, ap);
    va_end(ap);
    if (getenv("FAKECUDA_TRACE")) fprintf(stderr, "fakecuda: rejected (%d): %s\n", rc, g_reason);
    return rc;
}

/* --------------------------------------------------------------- helpers */
static int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    char *end;
    long v;
    if (!s || !*s) return dflt;
    v = strtol(s, &end, 0);
    if (*end) return dflt;
    return (int)v;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int sym_index(const char *name) {
    int i;
    if (!name) return -1;
    for (i = 0; i < FK_NSYM; i++)
        if (strcmp(fk_sym_names[i], name) == 0) return i;
    return -1;
}

static void default_attrs(int d) {
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

static void init_devices(void) {
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
static CUresult fk_begin(int sym) {
    fk_fault *f;
    CUresult rc = CUDA_SUCCESS;
    FK_LOCK_SCOPE;
    g_calls[sym]++;
    f = &g_faults[sym];
    if (f->armed) {
        long long n = f->seen++;
        if (n >= f->after && f->times != 0) {
            rc = f->code;
            if (f->times > 0 && --f->times == 0) f->armed = 0;
        }
    }
    return rc;
}

/* Entry of every driver function: count, inject, require cuInit, lock for the rest. */
#define FK_ENTER_NOINIT(name)                                                      \
    do {                                                                           \
        CUresult fk_rc_ = fk_begin(FK_##name);                                     \
        if (fk_rc_ != CUDA_SUCCESS) return fk_rc_;                                 \
    } while (0);                                                                   \
    FK_LOCK_SCOPE

#define FK_ENTER(name)                                                             \
    FK_ENTER_NOINIT(name);                                                         \
    if (!g_initialized) return E_NOT_INITIALIZED

static int valid_dev(CUdevice d) { return d >= 0 && d < g_ndev; }

static int valid_ctx(CUcontext c) {
    int d;
    for (d = 0; d < g_ndev; d++)
        if (c == &g_dev[d].ctx) return 1;
    return 0;
}

/* The current context if it is usable (its primary context is retained). */
static CUcontext cur_ctx(void) {
    CUcontext c = tls_ctx;
    if (!c || !valid_ctx(c) || g_dev[c->dev].retain <= 0) return NULL;
    return c;
}

#define FK_NEED_CTX(var)                                                           \
    CUcontext var = cur_ctx();                                                     \
    if (!var) return E_INVALID_CONTEXT

static int valid_stream(CUstream s) {
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || vec_has(&g_streams, s);
}

static fk_alloc *find_alloc(uintptr_t p) {
    size_t i;
    for (i = 0; i < g_nallocs; i++)
        if (p >= g_allocs[i].base && p < g_allocs[i].base + (g_allocs[i].size ? g_allocs[i].size : 1))
            return &g_allocs[i];
    return NULL;
}

static fk_alloc *find_alloc_exact(uintptr_t p) {
    size_t i;
    for (i = 0; i < g_nallocs; i++)
        if (g_allocs[i].base == p) return &g_allocs[i];
    return NULL;
}

/* A device-accessible range [p, p+n) inside one allocation (any kind). */
static int dev_range_ok(uintptr_t p, size_t n) {
    fk_alloc *a;
    if (n == 0) return 1;
    a = find_alloc(p);
    if (!a) return 0;
    return n <= a->size - (p - a->base);
}

static fk_alloc *add_alloc(void) {
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

static void remove_alloc(fk_alloc *a) {
    size_t i = (size_t)(a - g_allocs);
    g_allocs[i] = g_allocs[--g_nallocs];
}

static void pool_trim(struct CUmemPoolHandle_st *p, unsigned long long keep) {
    unsigned long long floor_ = p->used > keep ? p->used : keep;
    if (p->reserved > floor_) p->reserved = floor_;
}

/* A sync point: pools give memory above their release threshold back. */
static void sync_point(void) {
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
static CUresult do_alloc(CUdeviceptr *dptr, size_t n, int kind, int dev, struct CUmemPoolHandle_st *pool,
                         unsigned flags) {
    size_t rounded;
    void *p;
    fk_alloc *a;
    if (!dptr || n == 0) return E_INVALID_VALUE;
    if (kind != MK_HOST_ALLOC && g_dev[dev].used + n > FK_TOTAL_MEM) return E_OUT_OF_MEMORY;
    rounded = (n + 255) & ~(size_t)255;
    if (rounded < n) return E_OUT_OF_MEMORY;
    p = aligned_alloc(256, rounded);
    if (!p) return E_OUT_OF_MEMORY;
    memset(p, 0xA5, rounded);
    a = add_alloc();
    if (!a) {
        free(p);
        return E_OUT_OF_MEMORY;
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

static CUresult do_free(CUdeviceptr dptr, int allow_host) {
    fk_alloc *a = find_alloc_exact((uintptr_t)dptr);
    if (!a) return E_INVALID_VALUE;
    if (a->kind == MK_GLOBAL || a->kind == MK_HOST_REG) return E_INVALID_VALUE;
    if ((a->kind == MK_HOST_ALLOC) != (allow_host != 0)) return E_INVALID_VALUE;
    if (a->kind != MK_HOST_ALLOC) g_dev[a->dev].used -= a->size;
    if (a->pool) a->pool->used -= a->size;
    free(a->raw);
    remove_alloc(a);
    return CUDA_SUCCESS;
}

static int count_allocs(int kind1, int kind2) {
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
#define FK_PEND_MAX 65536
typedef struct fk_pend {
    CUstream stream;
    unsigned long long seq;
    unsigned long long alloc_id;
} fk_pend;
static fk_pend g_pend[FK_PEND_MAX];
static int g_npend;
static int g_pending_mode;
static unsigned long long g_pend_seq;
static long long g_early_frees;

static CUstream pend_norm(CUstream s) { return s == NULL ? CU_STREAM_LEGACY : s; }

static void pend_add_launch(CUstream stream, const unsigned char *buf, size_t n) {
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
static void pend_complete(CUstream stream, unsigned long long upto, int all) {
    int i = 0;
    stream = pend_norm(stream);
    while (i < g_npend) {
        if (all || (g_pend[i].stream == stream && g_pend[i].seq <= upto)) g_pend[i] = g_pend[--g_npend];
        else i++;
    }
}

static int pend_refs(unsigned long long alloc_id, CUstream stream, int any_stream) {
    int i, n = 0;
    stream = pend_norm(stream);
    for (i = 0; i < g_npend; i++)
        if (g_pend[i].alloc_id == alloc_id && (any_stream || g_pend[i].stream != stream)) n++;
    return n;
}

static void pend_check_free(CUdeviceptr dptr, CUstream stream, int any_stream) {
    fk_alloc *a;
    if (!g_pending_mode) return;
    a = find_alloc_exact((uintptr_t)dptr);
    if (a && pend_refs(a->id, stream, any_stream)) g_early_frees++;
}

/* ================================================================= driver */
CUresult CUDAAPI cuInit(unsigned int Flags) {
    int forced;
    FK_ENTER_NOINIT(cuInit);
    forced = env_int("FAKECUDA_INIT_RESULT", 0);
    if (forced) return forced;
    if (Flags != 0) return E_INVALID_VALUE;
    if (!g_initialized) {
        init_devices();
        if (g_ndev == 0) return E_NO_DEVICE;
        g_initialized = 1;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
    FK_ENTER_NOINIT(cuDriverGetVersion);
    if (!driverVersion) return E_INVALID_VALUE;
    *driverVersion = env_int("FAKECUDA_DRIVER_VERSION", 13000);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
    const bc_error_info *e;
    FK_ENTER_NOINIT(cuGetErrorName);
    if (!pStr) return E_INVALID_VALUE;
    e = bc_error_lookup(error);
    *pStr = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : E_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
    const bc_error_info *e;
    FK_ENTER_NOINIT(cuGetErrorString);
    if (!pStr) return E_INVALID_VALUE;
    e = bc_error_lookup(error);
    *pStr = e ? e->description : NULL;
    return e ? CUDA_SUCCESS : E_INVALID_VALUE;
}

/* ---------------------------------------------------------------- devices */
CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
    FK_ENTER(cuDeviceGet);
    if (!device) return E_INVALID_VALUE;
    if (!valid_dev(ordinal)) return E_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count) {
    FK_ENTER(cuDeviceGetCount);
    if (!count) return E_INVALID_VALUE;
    *count = g_ndev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
    FK_ENTER(cuDeviceGetName);
    if (!name || len <= 0) return E_INVALID_VALUE;
    if (!valid_dev(dev)) return E_INVALID_DEVICE;
    snprintf(name, (size_t)len, "FakeCUDA Device %d", dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
    static const unsigned char base[16] = {0xfa, 0xce, 0xc0, 0xda, 0x00, 0x00, 0x40, 0x00,
                                           0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    FK_ENTER(cuDeviceGetUuid);
    if (!uuid) return E_INVALID_VALUE;
    if (!valid_dev(dev)) return E_INVALID_DEVICE;
    memcpy(uuid->bytes, base, 16);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
    FK_ENTER(cuDeviceTotalMem);
    if (!bytes) return E_INVALID_VALUE;
    if (!valid_dev(dev)) return E_INVALID_DEVICE;
    *bytes = (size_t)FK_TOTAL_MEM;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    FK_ENTER(cuDeviceGetAttribute);
    if (!pi) return E_INVALID_VALUE;
    if (!valid_dev(dev)) return E_INVALID_DEVICE;
    if ((int)attrib <= 0 || (int)attrib >= CU_DEVICE_ATTRIBUTE_MAX) return E_INVALID_VALUE;
    *pi = g_dev[dev].attrs[attrib];
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
    FK_ENTER(cuDeviceGetPCIBusId);
    if (!pciBusId || len <= 0) return E_INVALID_VALUE;
    if (!valid_dev(dev)) return E_INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.0", g_dev[dev].attrs[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID],
             g_dev[dev].attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID], g_dev[dev].attrs[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID]);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
    FK_ENTER(cuDeviceCanAccessPeer);
    if (!canAccessPeer) return E_INVALID_VALUE;
    if (!valid_dev(dev) || !valid_dev(peerDev)) return E_INVALID_DEVICE;
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}

/* --------------------------------------------------------------- contexts */
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    FK_ENTER(cuDevicePrimaryCtxRetain);
    if (!pctx) return E_INVALID_VALUE;
    if (!valid_dev(dev)) return E_INVALID_DEVICE;
    g_dev[dev].retain++;
    *pctx = &g_dev[dev].ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
    FK_ENTER(cuDevicePrimaryCtxRelease);
    if (!valid_dev(dev)) return E_INVALID_DEVICE;
    if (g_dev[dev].retain <= 0) return E_INVALID_CONTEXT;
    if (--g_dev[dev].retain == 0) g_dev[dev].ctx.peers = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    FK_ENTER(cuDevicePrimaryCtxGetState);
    if (!flags || !active) return E_INVALID_VALUE;
    if (!valid_dev(dev)) return E_INVALID_DEVICE;
    *flags = 0;
    *active = g_dev[dev].retain > 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
    FK_ENTER(cuCtxSetCurrent);
    if (ctx && !valid_ctx(ctx)) return E_INVALID_CONTEXT;
    tls_ctx = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
    FK_ENTER(cuCtxGetCurrent);
    if (!pctx) return E_INVALID_VALUE;
    *pctx = tls_ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
    FK_ENTER(cuCtxGetDevice);
    if (!device) return E_INVALID_VALUE;
    {
        FK_NEED_CTX(c);
        *device = c->dev;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void) {
    FK_ENTER(cuCtxSynchronize);
    {
        FK_NEED_CTX(c);
        (void)c;
    }
    sync_point();
    pend_complete(NULL, 0, 1);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
    FK_ENTER(cuCtxEnablePeerAccess);
    FK_NEED_CTX(c);
    if (Flags != 0) return E_INVALID_VALUE;
    if (!valid_ctx(peerContext) || g_dev[peerContext->dev].retain <= 0) return E_INVALID_CONTEXT;
    if (peerContext == c) return E_PEER_ACCESS_UNSUPPORTED;
    if (c->peers & (1u << peerContext->dev)) return E_PEER_ACCESS_ALREADY_ENABLED;
    c->peers |= 1u << peerContext->dev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext) {
    FK_ENTER(cuCtxDisablePeerAccess);
    FK_NEED_CTX(c);
    if (!valid_ctx(peerContext)) return E_INVALID_CONTEXT;
    if (!(c->peers & (1u << peerContext->dev))) return E_PEER_ACCESS_NOT_ENABLED;
    c->peers &= ~(1u << peerContext->dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
    FK_ENTER(cuCtxGetStreamPriorityRange);
    if (leastPriority) *leastPriority = FK_PRIO_LEAST;
    if (greatestPriority) *greatestPriority = FK_PRIO_GREATEST;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo(size_t *free_, size_t *total) {
    FK_ENTER(cuMemGetInfo);
    FK_NEED_CTX(c);
    if (!free_ || !total) return E_INVALID_VALUE;
    *total = (size_t)FK_TOTAL_MEM;
    *free_ = (size_t)(FK_TOTAL_MEM - g_dev[c->dev].used);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- modules */
typedef struct tok {
    const char *s;
    int n;
} tok;

typedef struct toks {
    tok *t;
    int n, cap;
} toks;

static int tok_is(const tok *t, const char *s) {
    return (int)strlen(s) == t->n && memcmp(t->s, s, (size_t)t->n) == 0;
}

static int tok_push(toks *ts, const char *s, int n) {
    if (ts->n == ts->cap) {
        int nc = ts->cap ? ts->cap * 2 : 64;
        tok *nt = realloc(ts->t, (size_t)nc * sizeof(tok));
        if (!nt) return -1;
        ts->t = nt;
        ts->cap = nc;
    }
    ts->t[ts->n].s = s;
    ts->t[ts->n].n = n;
    ts->n++;
    return 0;
}

/* Split text (comments already blanked) into words and single punctuation marks. */
static int tokenize(const char *s, size_t len, toks *out) {
    size_t i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        if (isspace(c)) {
            i++;
        } else if (strchr("(),[]={};:<>+-*", c)) {
            if (tok_push(out, s + i, 1)) return -1;
            i++;
        } else {
            size_t j = i;
            while (j < len && !isspace((unsigned char)s[j]) && !strchr("(),[]={};:<>+*", s[j])) j++;
            if (tok_push(out, s + i, (int)(j - i))) return -1;
            i = j;
        }
    }
    return 0;
}

static int type_size(const tok *t) {
    static const struct { const char *n; int s; } types[] = {
        {".u8", 1}, {".s8", 1}, {".b8", 1}, {".pred", 1},
        {".u16", 2}, {".s16", 2}, {".b16", 2}, {".f16", 2}, {".bf16", 2},
        {".u32", 4}, {".s32", 4}, {".b32", 4}, {".f32", 4}, {".f16x2", 4}, {".bf16x2", 4},
        {".u64", 8}, {".s64", 8}, {".b64", 8}, {".f64", 8},
    };
    size_t i;
    for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (tok_is(t, types[i].n)) return types[i].s;
    return 0;
}

static int is_float_type(const tok *t) { return tok_is(t, ".f32") || tok_is(t, ".f64"); }

static long long tok_ll(const tok *t, int *ok) {
    char buf[64];
    char *end;
    long long v;
    if (t->n <= 0 || t->n >= (int)sizeof(buf)) { *ok = 0; return 0; }
    memcpy(buf, t->s, (size_t)t->n);
    buf[t->n] = 0;
    v = strtoll(buf, &end, 0);
    *ok = *end == 0 || ((*end == 'U' || *end == 'u') && end[1] == 0);
    return v;
}

typedef struct parse_ctx {
    char err[512];
    int nentries;
} parse_ctx;

/* Parse [.align N] [.vN] .type name [K]... starting at *i; fills size/align/count.
 * `is_param` allows the .ptr [.space] [.align N] decorations of kernel parameters. */
static int parse_decl(const toks *ts, int *pi, int end, size_t *size, size_t *align, tok *name, tok *type,
                      parse_ctx *pc) {
    int i = *pi, ok, ptr = 0, vec = 1;
    size_t explicit_align = 0, count = 1;
    int tsize = 0;
    name->s = NULL;
    name->n = 0;
    for (; i < end; i++) {
        const tok *t = &ts->t[i];
        if (tok_is(t, ".align")) {
            long long a;
            if (i + 1 >= end) break;
            a = tok_ll(&ts->t[i + 1], &ok);
            if (!ok || a <= 0 || (a & (a - 1))) {
                snprintf(pc->err, sizeof(pc->err), "bad .align value '%.*s'", ts->t[i + 1].n, ts->t[i + 1].s);
                return -1;
            }
            if (!ptr) explicit_align = (size_t)a; /* after .ptr it describes the pointee */
            i++;
        } else if (tok_is(t, ".ptr")) {
            ptr = 1;
        } else if (tok_is(t, ".v2")) {
            vec = 2;
        } else if (tok_is(t, ".v4")) {
            vec = 4;
        } else if (tok_is(t, ".global") || tok_is(t, ".const") || tok_is(t, ".local") || tok_is(t, ".shared") ||
                   tok_is(t, ".param") || tok_is(t, ".visible") || tok_is(t, ".extern") || tok_is(t, ".weak")) {
            continue;
        } else if (t->n > 0 && t->s[0] == '.' && !tsize) {
            tsize = type_size(t);
            if (!tsize) {
                snprintf(pc->err, sizeof(pc->err), "unknown type '%.*s'", t->n, t->s);
                return -1;
            }
            *type = *t;
        } else if (tsize && !name->s && t->n > 0 && t->s[0] != '[' && t->s[0] != '=') {
            *name = *t;
        } else if (name->s && tok_is(t, "[")) {
            long long k;
            if (i + 2 >= end || !tok_is(&ts->t[i + 2], "]")) {
                snprintf(pc->err, sizeof(pc->err), "bad array size after '%.*s'", name->n, name->s);
                return -1;
            }
            k = tok_ll(&ts->t[i + 1], &ok);
            if (!ok || k <= 0) {
                snprintf(pc->err, sizeof(pc->err), "bad array size '%.*s'", ts->t[i + 1].n, ts->t[i + 1].s);
                return -1;
            }
            count *= (size_t)k;
            i += 2;
        } else {
            break;
        }
    }
    if (!tsize || !name->s) {
        snprintf(pc->err, sizeof(pc->err), "malformed declaration near '%.*s'",
                 i < end ? ts->t[i].n : 0, i < end ? ts->t[i].s : "");
        return -1;
    }
    *size = (size_t)tsize * (size_t)vec * count;
    *align = explicit_align ? explicit_align : (size_t)tsize * (size_t)vec;
    *pi = i;
    return 0;
}

static void copy_name(char dst[256], const tok *t) {
    int n = t->n < 255 ? t->n : 255;
    memcpy(dst, t->s, (size_t)n);
    dst[n] = 0;
}

/* .entry NAME ( params ) [directives] { body } -- tokens [i, end) of one statement
 * plus the body range. */
static int parse_entry(const toks *ts, int i, int end, const toks *body, struct CUfunc_st *f, parse_ctx *pc) {
    int ok;
    size_t off = 0, cap = 0;
    memset(f, 0, sizeof(*f));
    f->magic = 0xF00Cu;
    f->max_threads = 1024;
    f->carveout = -1;
    if (i >= end) {
        snprintf(pc->err, sizeof(pc->err), ".entry without a name");
        return -1;
    }
    copy_name(f->name, &ts->t[i]);
    i++;
    if (i < end && tok_is(&ts->t[i], "(")) {
        i++;
        while (i < end && !tok_is(&ts->t[i], ")")) {
            size_t size, align;
            tok name, type;
            fk_param *p;
            if (tok_is(&ts->t[i], ",")) { i++; continue; }
            if (!tok_is(&ts->t[i], ".param")) {
                snprintf(pc->err, sizeof(pc->err), "kernel %s: expected .param, got '%.*s'", f->name, ts->t[i].n,
                         ts->t[i].s);
                return -1;
            }
            if (parse_decl(ts, &i, end, &size, &align, &name, &type, pc)) return -1;
            if (f->nparams == (int)cap) {
                size_t nc = cap ? cap * 2 : 8;
                fk_param *np = realloc(f->params, nc * sizeof(fk_param));
                if (!np) return -1;
                f->params = np;
                cap = nc;
            }
            p = &f->params[f->nparams++];
            off = (off + align - 1) & ~(align - 1);
            p->offset = off;
            p->size = size;
            p->align = align;
            off += size;
        }
        if (i >= end) {
            snprintf(pc->err, sizeof(pc->err), "kernel %s: unterminated parameter list", f->name);
            return -1;
        }
        i++;
    }
    f->param_bytes = off;
    if (off > FK_MAX_PARAM_BYTES) {
        snprintf(pc->err, sizeof(pc->err), "kernel %s: %zu bytes of parameters exceed %d", f->name, off,
                 FK_MAX_PARAM_BYTES);
        return -1;
    }
    /* performance directives */
    for (; i < end; i++) {
        if (tok_is(&ts->t[i], ".maxntid") || tok_is(&ts->t[i], ".reqntid")) {
            long long prod = 1;
            int j = i + 1;
            while (j < end) {
                long long v = tok_ll(&ts->t[j], &ok);
                if (!ok) break;
                prod *= v;
                j++;
                if (j < end && tok_is(&ts->t[j], ",")) j++;
                else break;
            }
            if (prod > 0 && prod < f->max_threads) f->max_threads = (int)prod;
            i = j - 1;
        }
    }
    /* static shared memory declared in the body */
    if (body) {
        int b = 0, stmt = 1;
        size_t total = 0;
        for (b = 0; b < body->n; b++) {
            const tok *t = &body->t[b];
            if (tok_is(t, ";") || tok_is(t, "{") || tok_is(t, "}")) { stmt = 1; continue; }
            if (stmt && tok_is(t, ".shared")) {
                size_t size, align;
                tok name, type;
                int j = b;
                if (parse_decl(body, &j, body->n, &size, &align, &name, &type, pc) == 0) {
                    total = (total + align - 1) & ~(align - 1);
                    total += size;
                }
                pc->err[0] = 0;
            }
            stmt = 0;
        }
        f->static_smem = (int)total;
    }
    f->max_dyn_smem = 49152 - f->static_smem;
    if (f->max_dyn_smem < 0) f->max_dyn_smem = 0;
    return 0;
}

static int parse_float_tok(const tok *t, double *out, int is_f32) {
    char buf[64];
    char *end;
    if (t->n <= 0 || t->n >= (int)sizeof(buf)) return -1;
    memcpy(buf, t->s, (size_t)t->n);
    buf[t->n] = 0;
    if ((buf[0] == '0') && (buf[1] == 'f' || buf[1] == 'F') && t->n == 10) {
        uint32_t u = (uint32_t)strtoul(buf + 2, &end, 16);
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return *end ? -1 : 0;
    }
    if ((buf[0] == '0') && (buf[1] == 'd' || buf[1] == 'D') && t->n == 18) {
        uint64_t u = strtoull(buf + 2, &end, 16);
        memcpy(out, &u, 8);
        return *end ? -1 : 0;
    }
    (void)is_f32;
    *out = strtod(buf, &end);
    return *end ? -1 : 0;
}

/* .global/.const variable at module scope: tokens [i, end). */
static int parse_global(const toks *ts, int i, int end, fk_global *g, parse_ctx *pc) {
    size_t size, align, esize, k = 0;
    tok name, type;
    int neg = 0;
    memset(g, 0, sizeof(*g));
    if (parse_decl(ts, &i, end, &size, &align, &name, &type, pc)) return -1;
    copy_name(g->name, &name);
    g->size = size;
    g->data = aligned_alloc(256, (size + 255) & ~(size_t)255);
    if (!g->data) return -1;
    memset(g->data, 0, size);
    esize = (size_t)type_size(&type);
    if (i < end && tok_is(&ts->t[i], "=")) {
        for (i++; i < end && k * esize < size; i++) {
            const tok *t = &ts->t[i];
            unsigned char *dst = g->data + k * esize;
            if (tok_is(t, "{") || tok_is(t, "}") || tok_is(t, ",")) continue;
            if (tok_is(t, "-")) { neg = 1; continue; }
            if (is_float_type(&type)) {
                double d;
                if (parse_float_tok(t, &d, esize == 4)) break;
                if (neg) d = -d;
                if (esize == 4) { float f = (float)d; memcpy(dst, &f, 4); }
                else memcpy(dst, &d, 8);
            } else {
                int ok;
                long long v = tok_ll(t, &ok);
                if (!ok) {
                    char buf[32];
                    if (t->n < (int)sizeof(buf)) {
                        memcpy(buf, t->s, (size_t)t->n);
                        buf[t->n] = 0;
                        v = (long long)strtoull(buf, NULL, 0);
                    }
                }
                if (neg) v = -v;
                memcpy(dst, &v, esize); /* little endian: low bytes */
            }
            neg = 0;
            k++;
        }
    }
    return 0;
}

static void free_module(struct CUmod_st *m) {
    int i;
    if (!m) return;
    for (i = 0; i < m->nfuncs; i++) free(m->funcs[i].params);
    free(m->funcs);
    for (i = 0; i < m->nglobals; i++) free(m->globals[i].data);
    free(m->globals);
    free(m);
}

/* Blank out // and block comments (keeping newlines), remembering whether the
 * FAKECUDA invalid marker was seen. */
static char *strip_comments(const char *src, size_t len, int *invalid, int *invalid_line) {
    char *s = malloc(len + 1);
    size_t i = 0;
    int line = 1;
    if (!s) return NULL;
    memcpy(s, src, len);
    s[len] = 0;
    *invalid = 0;
    while (i < len) {
        if (s[i] == '\n') line++;
        if (s[i] == '/' && i + 1 < len && s[i + 1] == '/') {
            size_t j = i;
            while (j < len && s[j] != '\n') j++;
            if (strstr(src + i, "// FAKECUDA: invalid") == src + i) {
                *invalid = 1;
                *invalid_line = line;
            }
            memset(s + i, ' ', j - i);
            i = j;
        } else if (s[i] == '/' && i + 1 < len && s[i + 1] == '*') {
            size_t j = i + 2;
            while (j + 1 < len && !(s[j] == '*' && s[j + 1] == '/')) j++;
            j = j + 2 <= len ? j + 2 : len;
            for (; i < j; i++)
                if (s[i] != '\n') s[i] = ' ';
                else line++;
        } else {
            i++;
        }
    }
    return s;
}

static int find_kw(const toks *ts, int from, int to, int *which) {
    static const char *kws[] = {".entry", ".func", ".global", ".const"};
    int i, k;
    for (i = from; i < to; i++)
        for (k = 0; k < 4; k++)
            if (tok_is(&ts->t[i], kws[k])) {
                *which = k;
                return i;
            }
    return -1;
}

static int add_func(struct CUmod_st *m, struct CUfunc_st *f, int *cap) {
    if (m->nfuncs == *cap) {
        int nc = *cap ? *cap * 2 : 8;
        struct CUfunc_st *nf = realloc(m->funcs, (size_t)nc * sizeof(*nf));
        if (!nf) return -1;
        m->funcs = nf;
        *cap = nc;
    }
    m->funcs[m->nfuncs++] = *f;
    return 0;
}

/* Parse PTX(-like) text into a module. Returns 0, or a CUresult with pc->err set. */
static CUresult parse_module(const char *text, struct CUmod_st *m, parse_ctx *pc) {
    int invalid = 0, invalid_line = 0, fcap = 0, gcap = 0;
    size_t len = strlen(text);
    char *s = strip_comments(text, len, &invalid, &invalid_line);
    toks ts = {0};
    int i, start;
    CUresult rc = CUDA_SUCCESS;
    if (!s) return E_OUT_OF_MEMORY;
    if (invalid) {
        snprintf(pc->err, sizeof(pc->err),
                 "ptxas fatal   : fakecuda: PTX rejected on request ('// FAKECUDA: invalid' at line %d)",
                 invalid_line);
        free(s);
        return E_INVALID_PTX;
    }
    if (tokenize(s, len, &ts)) {
        free(s);
        return E_OUT_OF_MEMORY;
    }
    /* walk statements at brace depth 0 */
    i = 0;
    start = 0;
    while (i < ts.n) {
        const tok *t = &ts.t[i];
        if (tok_is(t, ";") || tok_is(t, "{")) {
            int which = -1, kw = find_kw(&ts, start, i, &which);
            int has_eq = 0, j, extern_ = 0, body_start = -1, body_end = -1;
            for (j = start; j < i; j++) {
                if (tok_is(&ts.t[j], "=")) has_eq = 1;
                if (kw >= 0 && j < kw && tok_is(&ts.t[j], ".extern")) extern_ = 1;
            }
            if (tok_is(t, "{") && has_eq) {
                /* initializer braces of a variable: continue to the ';' */
                int depth = 0;
                for (; i < ts.n; i++) {
                    if (tok_is(&ts.t[i], "{")) depth++;
                    else if (tok_is(&ts.t[i], "}")) depth--;
                    else if (tok_is(&ts.t[i], ";") && depth == 0) break;
                }
            } else if (tok_is(t, "{")) {
                int depth = 0;
                body_start = i + 1;
                for (; i < ts.n; i++) {
                    if (tok_is(&ts.t[i], "{")) depth++;
                    else if (tok_is(&ts.t[i], "}") && --depth == 0) break;
                }
                if (i >= ts.n) {
                    snprintf(pc->err, sizeof(pc->err), "unbalanced braces");
                    rc = E_INVALID_PTX;
                    break;
                }
                body_end = i;
            }
            if (kw >= 0 && which == 0 && !extern_) {
                struct CUfunc_st f;
                toks body = {0};
                const toks *bp = NULL;
                if (body_start >= 0) {
                    body.t = ts.t + body_start;
                    body.n = body_end - body_start;
                    bp = &body;
                }
                if (parse_entry(&ts, kw + 1, body_start >= 0 ? body_start - 1 : i, bp, &f, pc) ||
                    add_func(m, &f, &fcap)) {
                    free(f.params);
                    if (!pc->err[0]) snprintf(pc->err, sizeof(pc->err), "out of memory");
                    rc = E_INVALID_PTX;
                    break;
                }
                f.mod = m;
                m->funcs[m->nfuncs - 1].mod = m;
                pc->nentries++;
            } else if (kw >= 0 && (which == 2 || which == 3) && !extern_ && body_start < 0) {
                fk_global g;
                if (parse_global(&ts, kw + 1, i, &g, pc)) {
                    rc = E_INVALID_PTX;
                    break;
                }
                if (m->nglobals == gcap) {
                    int nc = gcap ? gcap * 2 : 8;
                    fk_global *ng = realloc(m->globals, (size_t)nc * sizeof(*ng));
                    if (!ng) { free(g.data); rc = E_OUT_OF_MEMORY; break; }
                    m->globals = ng;
                    gcap = nc;
                }
                m->globals[m->nglobals++] = g;
            }
            i++;
            start = i;
        } else if (tok_is(t, "}")) {
            snprintf(pc->err, sizeof(pc->err), "unbalanced braces");
            rc = E_INVALID_PTX;
            break;
        } else {
            i++;
        }
    }
    free(ts.t);
    free(s);
    return rc;
}

static void write_log(void *buf, void **size_slot, const char *msg) {
    size_t cap, n;
    if (!buf || !size_slot) return;
    cap = (size_t)(uintptr_t)*size_slot;
    if (cap == 0) return;
    n = strlen(msg);
    if (n > cap - 1) n = cap - 1;
    memcpy(buf, msg, n);
    ((char *)buf)[n] = 0;
    *size_slot = (void *)(uintptr_t)n; /* the driver writes back how much it filled */
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues) {
    void *info_buf = NULL, *err_buf = NULL;
    void **info_size = NULL, **err_size = NULL;
    float *wall = NULL;
    unsigned int k;
    const char *text;
    struct CUmod_st *m;
    parse_ctx pc;
    CUresult rc;
    char msg[700];
    double t0 = now_ms();
    FK_ENTER(cuModuleLoadDataEx);
    FK_NEED_CTX(c);
    if (!module || !image) return E_INVALID_VALUE;
    if (numOptions && (!options || !optionValues)) return E_INVALID_VALUE;
    for (k = 0; k < numOptions; k++) {
        switch ((int)options[k]) {
        case CU_JIT_INFO_LOG_BUFFER: info_buf = optionValues[k]; break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: info_size = &optionValues[k]; break;
        case CU_JIT_ERROR_LOG_BUFFER: err_buf = optionValues[k]; break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: err_size = &optionValues[k]; break;
        case CU_JIT_WALL_TIME: wall = (float *)&optionValues[k]; break;
        default:
            if ((int)options[k] < 0 || (int)options[k] >= CU_JIT_NUM_OPTIONS) return E_INVALID_VALUE;
        }
    }
    text = (const char *)image;
    if (strncmp(text, "FAKECUBIN\n", 10) == 0) {
        text += 10;
    } else if (strncmp(text, "FAKEFATBIN\n", 11) == 0) {
        text += 11;
    } else {
        /* PTX: optional whitespace/comments, then a directive; .version or .entry somewhere. */
        const char *p = text;
        for (;;) {
            while (*p && isspace((unsigned char)*p)) p++;
            if (p[0] == '/' && p[1] == '/') { while (*p && *p != '\n') p++; continue; }
            if (p[0] == '/' && p[1] == '*') { const char *e = strstr(p + 2, "*/"); p = e ? e + 2 : p + strlen(p); continue; }
            break;
        }
        if (*p != '.' || (!strstr(p, ".version") && !strstr(p, ".entry"))) {
            write_log(err_buf, err_size, "fakecuda: image is neither PTX nor a FAKECUBIN/FAKEFATBIN image");
            return E_INVALID_IMAGE;
        }
    }
    m = calloc(1, sizeof(*m));
    if (!m) return E_OUT_OF_MEMORY;
    m->magic = 0x30D0u;
    m->ctx = c;
    memset(&pc, 0, sizeof(pc));
    rc = parse_module(text, m, &pc);
    if (rc != CUDA_SUCCESS) {
        snprintf(msg, sizeof(msg), "%s", pc.err);
        write_log(err_buf, err_size, msg);
        write_log(info_buf, info_size, "fakecuda: compilation failed, see the error log");
        free_module(m);
        return rc;
    }
    {
        int i;
        for (i = 0; i < m->nfuncs; i++) vec_add(&g_funcs, &m->funcs[i]);
        for (i = 0; i < m->nglobals; i++) {
            fk_alloc *a = add_alloc();
            if (!a) break;
            a->base = (uintptr_t)m->globals[i].data;
            a->size = m->globals[i].size;
            a->kind = MK_GLOBAL;
            a->dev = c->dev;
        }
    }
    vec_add(&g_modules, m);
    snprintf(msg, sizeof(msg), "info    : fakecuda: loaded %d entry function(s), %d global(s) for sm_90",
             m->nfuncs, m->nglobals);
    write_log(info_buf, info_size, msg);
    write_log(err_buf, err_size, "");
    if (wall) *wall = (float)(now_ms() - t0);
    *module = m;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
    int i;
    FK_ENTER(cuModuleUnload);
    if (!vec_has(&g_modules, hmod)) return E_INVALID_HANDLE;
    for (i = 0; i < hmod->nfuncs; i++) vec_remove(&g_funcs, &hmod->funcs[i]);
    for (i = 0; i < hmod->nglobals; i++) {
        fk_alloc *a = find_alloc_exact((uintptr_t)hmod->globals[i].data);
        if (a && a->kind == MK_GLOBAL) remove_alloc(a);
    }
    vec_remove(&g_modules, hmod);
    free_module(hmod);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    int i;
    FK_ENTER(cuModuleGetFunction);
    if (!hfunc || !name) return E_INVALID_VALUE;
    if (!vec_has(&g_modules, hmod)) return E_INVALID_HANDLE;
    for (i = 0; i < hmod->nfuncs; i++)
        if (strcmp(hmod->funcs[i].name, name) == 0) {
            *hfunc = &hmod->funcs[i];
            return CUDA_SUCCESS;
        }
    return E_NOT_FOUND;
}

CUresult CUDAAPI cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name) {
    int i;
    FK_ENTER(cuModuleGetGlobal);
    if (!name) return E_INVALID_VALUE;
    if (!vec_has(&g_modules, hmod)) return E_INVALID_HANDLE;
    for (i = 0; i < hmod->nglobals; i++)
        if (strcmp(hmod->globals[i].name, name) == 0) {
            if (dptr) *dptr = (CUdeviceptr)(uintptr_t)hmod->globals[i].data;
            if (bytes) *bytes = hmod->globals[i].size;
            return CUDA_SUCCESS;
        }
    return E_NOT_FOUND;
}

static int optin_limit(const struct CUfunc_st *f) {
    return g_dev[f->mod->ctx->dev].attrs[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] - f->static_smem;
}

CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
    FK_ENTER(cuFuncGetAttribute);
    if (!pi) return E_INVALID_VALUE;
    if (!vec_has(&g_funcs, hfunc)) return E_INVALID_HANDLE;
    switch ((int)attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = hfunc->max_threads; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = hfunc->static_smem; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = hfunc->max_dyn_smem; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = hfunc->carveout; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: *pi = hfunc->cluster[0]; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT: *pi = hfunc->cluster[1]; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *pi = hfunc->cluster[2]; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = hfunc->non_portable_cluster; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = hfunc->cluster_policy; break;
    default: return E_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
    FK_ENTER(cuFuncSetAttribute);
    if (!vec_has(&g_funcs, hfunc)) return E_INVALID_HANDLE;
    switch ((int)attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || value > optin_limit(hfunc)) return E_INVALID_VALUE;
        hfunc->max_dyn_smem = value;
        break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (value < -1 || value > 100) return E_INVALID_VALUE;
        hfunc->carveout = value;
        break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
        if (value < 0) return E_INVALID_VALUE;
        hfunc->cluster[attrib - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] = value;
        break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
        if (value != 0 && value != 1) return E_INVALID_VALUE;
        hfunc->non_portable_cluster = value;
        break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        if (value < 0 || value > 2) return E_INVALID_VALUE;
        hfunc->cluster_policy = value;
        break;
    default:
        return E_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize) {
    FK_ENTER(cuFuncGetParamInfo);
    if (!vec_has(&g_funcs, func)) return E_INVALID_HANDLE;
    if (paramIndex >= (size_t)func->nparams) return E_INVALID_VALUE;
    if (paramOffset) *paramOffset = func->params[paramIndex].offset;
    if (paramSize) *paramSize = func->params[paramIndex].size;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc) {
    FK_ENTER(cuFuncGetName);
    if (!name) return E_INVALID_VALUE;
    if (!vec_has(&g_funcs, hfunc)) return E_INVALID_HANDLE;
    *name = hfunc->name;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- occupancy */
typedef struct occ_info {
    int max_threads, static_smem, max_dyn, sms, max_blocks_sm, threads_sm, smem_sm, regs_sm, optin;
} occ_info;

static void get_occ_info(const struct CUfunc_st *f, occ_info *o) {
    const int *a = g_dev[f->mod->ctx->dev].attrs;
    o->max_threads = f->max_threads;
    o->static_smem = f->static_smem;
    o->max_dyn = f->max_dyn_smem;
    o->sms = a[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT];
    o->max_blocks_sm = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR];
    o->threads_sm = a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR];
    o->smem_sm = a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR];
    o->regs_sm = a[CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR];
    o->optin = a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN];
}

static int occ_blocks(const occ_info *o, int block, size_t dyn) {
    int warps_threads, by_threads, by_regs, by_smem, n;
    size_t smem;
    if (block <= 0 || block > o->max_threads) return 0;
    warps_threads = (block + 31) / 32 * 32;
    by_threads = o->threads_sm / warps_threads;
    by_regs = o->regs_sm / (warps_threads * 32);
    smem = (size_t)o->static_smem + dyn + FK_RESERVED_SMEM;
    by_smem = (int)((size_t)o->smem_sm / smem);
    n = o->max_blocks_sm;
    if (by_threads < n) n = by_threads;
    if (by_regs < n) n = by_regs;
    if (by_smem < n) n = by_smem;
    return n;
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                             size_t dynamicSMemSize) {
    occ_info o;
    FK_ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessor);
    if (!numBlocks || blockSize <= 0) return E_INVALID_VALUE;
    if (!vec_has(&g_funcs, func)) return E_INVALID_HANDLE;
    get_occ_info(func, &o);
    *numBlocks = occ_blocks(&o, blockSize, dynamicSMemSize);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                                  CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                  size_t dynamicSMemSize, int blockSizeLimit) {
    occ_info o;
    int b, best_b = 0, best_occ = 0, best_blocks = 0, limit;
    {
        FK_ENTER(cuOccupancyMaxPotentialBlockSize);
        if (!minGridSize || !blockSize) return E_INVALID_VALUE;
        if (!vec_has(&g_funcs, func)) return E_INVALID_HANDLE;
        get_occ_info(func, &o);
    }
    /* outside the lock: the callback may be anything */
    limit = o.max_threads;
    if (blockSizeLimit > 0 && blockSizeLimit < limit) limit = blockSizeLimit;
    for (b = (limit / 32) * 32; b >= 32; b -= 32) {
        size_t dyn = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(b) : dynamicSMemSize;
        int n = occ_blocks(&o, b, dyn);
        if (n * b > best_occ) {
            best_occ = n * b;
            best_b = b;
            best_blocks = n;
        }
    }
    if (!best_b) {
        *blockSize = 0;
        *minGridSize = 0;
        return CUDA_SUCCESS;
    }
    *blockSize = best_b;
    *minGridSize = best_blocks * o.sms;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks,
                                                         int blockSize) {
    occ_info o;
    long long per;
    FK_ENTER(cuOccupancyAvailableDynamicSMemPerBlock);
    if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0) return E_INVALID_VALUE;
    if (!vec_has(&g_funcs, func)) return E_INVALID_HANDLE;
    get_occ_info(func, &o);
    if (blockSize > o.max_threads) return E_INVALID_VALUE;
    per = (long long)o.smem_sm / numBlocks - FK_RESERVED_SMEM - o.static_smem;
    if (per > o.optin - o.static_smem) per = o.optin - o.static_smem;
    if (per < 0) per = 0;
    *dynamicSmemSize = (size_t)per;
    return CUDA_SUCCESS;
}

static int cluster_size_of(const CUlaunchConfig *cfg, unsigned int dims[3]) {
    unsigned int i;
    dims[0] = dims[1] = dims[2] = 1;
    for (i = 0; i < cfg->numAttrs; i++)
        if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            dims[0] = cfg->attrs[i].value.clusterDim.x;
            dims[1] = cfg->attrs[i].value.clusterDim.y;
            dims[2] = cfg->attrs[i].value.clusterDim.z;
            return 1;
        }
    return 0;
}

CUresult CUDAAPI cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config) {
    occ_info o;
    unsigned int cd[3];
    unsigned long long csize, block;
    int per_sm;
    FK_ENTER(cuOccupancyMaxActiveClusters);
    if (!numClusters || !config || (config->numAttrs && !config->attrs)) return E_INVALID_VALUE;
    if (!vec_has(&g_funcs, func)) return E_INVALID_HANDLE;
    get_occ_info(func, &o);
    cluster_size_of(config, cd);
    csize = (unsigned long long)cd[0] * cd[1] * cd[2];
    if (csize == 0) return E_INVALID_VALUE;
    if (csize > (func->non_portable_cluster ? 16u : 8u)) return E_INVALID_CLUSTER_SIZE;
    block = (unsigned long long)config->blockDimX * config->blockDimY * config->blockDimZ;
    per_sm = occ_blocks(&o, (int)block, config->sharedMemBytes);
    *numClusters = (int)((unsigned long long)o.sms * (unsigned long long)per_sm / csize);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ launch */
typedef struct launch_req {
    int kind;
    unsigned int grid[3], block[3], shared;
    CUstream stream;
    unsigned int cluster[3];
    int cooperative, priority, prog_serial, num_attrs, has_cluster;
} launch_req;

static CUresult do_launch(CUfunction f, const launch_req *r, void **kernelParams, void **extra) {
    const int *a;
    unsigned long long threads;
    unsigned char *buf = NULL;
    int used_extra = 0, i;
    fk_launch *rec;
    CUcontext c = cur_ctx();
    if (!c) return fk_reject(E_INVALID_CONTEXT, "no current context");
    if (!vec_has(&g_funcs, f)) return fk_reject(E_INVALID_HANDLE, "unknown function handle");
    if (f->mod->ctx != c) return fk_reject(E_INVALID_CONTEXT, "function belongs to another context");
    if (!valid_stream(r->stream)) return fk_reject(E_INVALID_HANDLE, "unknown stream handle");
    a = g_dev[c->dev].attrs;
    for (i = 0; i < 3; i++) {
        if (r->grid[i] == 0 || r->grid[i] > (unsigned int)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X + i])
            return fk_reject(E_INVALID_VALUE, "grid dim %d = %u out of range", i, r->grid[i]);
        if (r->block[i] == 0 || r->block[i] > (unsigned int)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X + i])
            return fk_reject(E_INVALID_VALUE, "block dim %d = %u out of range", i, r->block[i]);
    }
    threads = (unsigned long long)r->block[0] * r->block[1] * r->block[2];
    if (threads > (unsigned long long)f->max_threads ||
        threads > (unsigned long long)a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK])
        return fk_reject(E_INVALID_VALUE, "%llu threads per block > %d", threads, f->max_threads);
    if (r->shared > (unsigned int)f->max_dyn_smem)
        return fk_reject(E_INVALID_VALUE, "%u bytes of dynamic shared memory > %d", r->shared, f->max_dyn_smem);
    if (r->has_cluster) {
        unsigned long long cs = (unsigned long long)r->cluster[0] * r->cluster[1] * r->cluster[2];
        if (cs == 0 || cs > (f->non_portable_cluster ? 16u : 8u))
            return fk_reject(E_INVALID_CLUSTER_SIZE, "cluster size %llu", cs);
        for (i = 0; i < 3; i++)
            if (r->grid[i] % r->cluster[i]) return fk_reject(E_INVALID_CLUSTER_SIZE, "grid not divisible by cluster");
    }
    if (r->cooperative) {
        occ_info o;
        get_occ_info(f, &o);
        if ((unsigned long long)r->grid[0] * r->grid[1] * r->grid[2] >
            (unsigned long long)occ_blocks(&o, (int)threads, r->shared) * (unsigned long long)o.sms)
            return fk_reject(E_COOPERATIVE_LAUNCH_TOO_LARGE, "cooperative grid too large");
    }
    if (kernelParams && extra) return fk_reject(E_INVALID_VALUE, "both kernelParams and extra");
    if (f->param_bytes) {
        buf = calloc(1, f->param_bytes);
        if (!buf) return E_OUT_OF_MEMORY;
    }
    if (extra) {
        void *pbuf = NULL;
        size_t *psize = NULL;
        int k;
        for (k = 0; extra[k] != NULL; k += 2) {
            if (extra[k] == (void *)1) pbuf = extra[k + 1];
            else if (extra[k] == (void *)2) psize = (size_t *)extra[k + 1];
            else { free(buf); return fk_reject(E_INVALID_VALUE, "unknown extra key"); }
            if (k > 64) { free(buf); return fk_reject(E_INVALID_VALUE, "extra not terminated"); }
        }
        if (f->param_bytes && (!pbuf || !psize || *psize < f->param_bytes)) {
            free(buf);
            return fk_reject(E_INVALID_VALUE, "extra buffer missing or smaller than %zu bytes", f->param_bytes);
        }
        if (f->param_bytes) memcpy(buf, pbuf, f->param_bytes);
        used_extra = 1;
    } else if (f->nparams) {
        if (!kernelParams) { free(buf); return fk_reject(E_INVALID_VALUE, "kernelParams is NULL for %d parameters", f->nparams); }
        for (i = 0; i < f->nparams; i++) {
            if (!kernelParams[i]) { free(buf); return fk_reject(E_INVALID_VALUE, "kernelParams[%d] is NULL", i); }
            memcpy(buf + f->params[i].offset, kernelParams[i], f->params[i].size);
        }
    }
    rec = &g_ring[g_launch_count % FK_RING];
    free(rec->params);
    memset(rec, 0, sizeof(*rec));
    memcpy(rec->name, f->name, sizeof(rec->name));
    memcpy(rec->grid, r->grid, sizeof(rec->grid));
    memcpy(rec->block, r->block, sizeof(rec->block));
    rec->shared = r->shared;
    rec->stream = r->stream;
    rec->kind = r->kind;
    memcpy(rec->cluster, r->cluster, sizeof(rec->cluster));
    rec->cooperative = r->cooperative;
    rec->priority = r->priority;
    rec->prog_serial = r->prog_serial;
    rec->num_attrs = r->num_attrs;
    rec->used_extra = used_extra;
    rec->params = buf;
    rec->nparams_bytes = f->param_bytes;
    g_launch_count++;
    if (g_pending_mode) pend_add_launch(r->stream, buf, f->param_bytes);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra) {
    launch_req r = {0, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}, sharedMemBytes, hStream,
                    {1, 1, 1}, 0, 0, 0, 0, 0};
    FK_ENTER(cuLaunchKernel);
    return do_launch(f, &r, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                           void **kernelParams) {
    launch_req r = {1, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}, sharedMemBytes, hStream,
                    {1, 1, 1}, 1, 0, 0, 0, 0};
    FK_ENTER(cuLaunchCooperativeKernel);
    return do_launch(f, &r, kernelParams, NULL);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) {
    launch_req r;
    unsigned int i;
    FK_ENTER(cuLaunchKernelEx);
    if (!config || (config->numAttrs && !config->attrs)) return fk_reject(E_INVALID_VALUE, "config or attrs NULL");
    memset(&r, 0, sizeof(r));
    r.kind = 2;
    r.grid[0] = config->gridDimX;
    r.grid[1] = config->gridDimY;
    r.grid[2] = config->gridDimZ;
    r.block[0] = config->blockDimX;
    r.block[1] = config->blockDimY;
    r.block[2] = config->blockDimZ;
    r.shared = config->sharedMemBytes;
    r.stream = config->hStream;
    r.cluster[0] = r.cluster[1] = r.cluster[2] = 1;
    r.num_attrs = (int)config->numAttrs;
    for (i = 0; i < config->numAttrs; i++) {
        const CUlaunchAttribute *at = &config->attrs[i];
        switch ((int)at->id) {
        case CU_LAUNCH_ATTRIBUTE_IGNORE: break;
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE: r.cooperative = at->value.cooperative != 0; break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            r.has_cluster = 1;
            r.cluster[0] = at->value.clusterDim.x;
            r.cluster[1] = at->value.clusterDim.y;
            r.cluster[2] = at->value.clusterDim.z;
            break;
        case CU_LAUNCH_ATTRIBUTE_PRIORITY: r.priority = at->value.priority; break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
            r.prog_serial = at->value.programmaticStreamSerializationAllowed;
            break;
        default:
            if ((int)at->id < 0 || (int)at->id > 32) return fk_reject(E_INVALID_VALUE, "launch attribute id %d", (int)at->id);
        }
    }
    return do_launch(f, &r, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
    {
        FK_ENTER(cuLaunchHostFunc);
        if (!fn) return E_INVALID_VALUE;
        if (!cur_ctx()) return E_INVALID_CONTEXT;
        if (!valid_stream(hStream)) return E_INVALID_HANDLE;
    }
    /* outside the lock: the callback may take the GIL */
    fn(userData);
    return CUDA_SUCCESS;
}

/* ----------------------------------------------------------------- streams */
static CUresult make_stream(CUstream *ph, unsigned int flags, int priority) {
    struct CUstream_st *s;
    FK_NEED_CTX(c);
    if (!ph) return E_INVALID_VALUE;
    if (flags & ~1u) return E_INVALID_VALUE;
    s = calloc(1, sizeof(*s));
    if (!s) return E_OUT_OF_MEMORY;
    if (priority < FK_PRIO_GREATEST) priority = FK_PRIO_GREATEST;
    if (priority > FK_PRIO_LEAST) priority = FK_PRIO_LEAST;
    s->magic = 0x57EAu;
    s->flags = flags;
    s->priority = priority;
    s->ctx = c;
    if (vec_add(&g_streams, s)) { free(s); return E_OUT_OF_MEMORY; }
    *ph = s;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) {
    FK_ENTER(cuStreamCreate);
    return make_stream(phStream, Flags, 0);
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
    FK_ENTER(cuStreamCreateWithPriority);
    return make_stream(phStream, flags, priority);
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
    FK_ENTER(cuStreamDestroy);
    if (!vec_remove(&g_streams, hStream)) return E_INVALID_HANDLE;
    hStream->magic = 0xDEADu;
    free(hStream);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
    FK_ENTER(cuStreamSynchronize);
    if (!cur_ctx()) return E_INVALID_CONTEXT;
    if (!valid_stream(hStream)) return E_INVALID_HANDLE;
    sync_point();
    pend_complete(hStream, ~0ULL, 0);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
    FK_ENTER(cuStreamQuery);
    if (!cur_ctx()) return E_INVALID_CONTEXT;
    if (!valid_stream(hStream)) return E_INVALID_HANDLE;
    pend_complete(hStream, ~0ULL, 0);   /* reported idle: its pending work is done */
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
    FK_ENTER(cuStreamWaitEvent);
    if (!cur_ctx()) return E_INVALID_CONTEXT;
    if (Flags & ~1u) return E_INVALID_VALUE;
    if (!valid_stream(hStream) || !vec_has(&g_events, hEvent)) return E_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int *priority) {
    FK_ENTER(cuStreamGetPriority);
    if (!priority) return E_INVALID_VALUE;
    if (!valid_stream(hStream)) return E_INVALID_HANDLE;
    *priority = vec_has(&g_streams, hStream) ? hStream->priority : 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags) {
    FK_ENTER(cuStreamGetFlags);
    if (!flags) return E_INVALID_VALUE;
    if (!valid_stream(hStream)) return E_INVALID_HANDLE;
    *flags = vec_has(&g_streams, hStream) ? hStream->flags : 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx) {
    FK_ENTER(cuStreamGetCtx);
    if (!pctx) return E_INVALID_VALUE;
    if (!valid_stream(hStream)) return E_INVALID_HANDLE;
    if (vec_has(&g_streams, hStream)) {
        *pctx = hStream->ctx;
    } else {
        FK_NEED_CTX(c);
        *pctx = c;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ events */
CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags) {
    struct CUevent_st *e;
    FK_ENTER(cuEventCreate);
    FK_NEED_CTX(c);
    (void)c;
    if (!phEvent) return E_INVALID_VALUE;
    if (Flags & ~7u) return E_INVALID_VALUE;
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)) return E_INVALID_VALUE;
    e = calloc(1, sizeof(*e));
    if (!e) return E_OUT_OF_MEMORY;
    e->magic = 0xE7E7u;
    e->flags = Flags;
    if (vec_add(&g_events, e)) { free(e); return E_OUT_OF_MEMORY; }
    *phEvent = e;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent) {
    FK_ENTER(cuEventDestroy);
    if (!vec_remove(&g_events, hEvent)) return E_INVALID_HANDLE;
    hEvent->magic = 0xDEADu;
    free(hEvent);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
    FK_ENTER(cuEventRecord);
    if (!cur_ctx()) return E_INVALID_CONTEXT;
    if (!vec_has(&g_events, hEvent) || !valid_stream(hStream)) return E_INVALID_HANDLE;
    hEvent->recorded = 1;
    hEvent->t_ms = now_ms();
    hEvent->pend_stream = pend_norm(hStream);
    hEvent->pend_seq = g_pend_seq;
    hEvent->pend_polls = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
    FK_ENTER(cuEventQuery);
    if (!vec_has(&g_events, hEvent)) return E_INVALID_HANDLE;
    if (g_pending_mode && hEvent->recorded) {
        int i;
        for (i = 0; i < g_npend; i++)
            if (g_pend[i].stream == hEvent->pend_stream && g_pend[i].seq <= hEvent->pend_seq) break;
        if (i < g_npend) {
            /* Not ready at the first look; the work finishes before the next one (so that
             * polling loops end). Completion is recorded either way. */
            if (hEvent->pend_polls++ == 0) return (CUresult)600; /* CUDA_ERROR_NOT_READY */
            pend_complete(hEvent->pend_stream, hEvent->pend_seq, 0);
        }
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
    FK_ENTER(cuEventSynchronize);
    if (!vec_has(&g_events, hEvent)) return E_INVALID_HANDLE;
    sync_point();
    if (hEvent->recorded) pend_complete(hEvent->pend_stream, hEvent->pend_seq, 0);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    FK_ENTER(cuEventElapsedTime);
    if (!pMilliseconds) return E_INVALID_VALUE;
    if (!vec_has(&g_events, hStart) || !vec_has(&g_events, hEnd)) return E_INVALID_HANDLE;
    if (!hStart->recorded || !hEnd->recorded) return E_INVALID_HANDLE;
    if ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING) return E_INVALID_HANDLE;
    *pMilliseconds = (float)(hEnd->t_ms - hStart->t_ms);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ memory */
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
    FK_ENTER(cuMemAlloc);
    FK_NEED_CTX(c);
    return do_alloc(dptr, bytesize, MK_DEVICE, c->dev, NULL, 0);
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
    FK_ENTER(cuMemFree);
    if (!cur_ctx()) return E_INVALID_CONTEXT;
    if (dptr == 0) return CUDA_SUCCESS;
    pend_check_free(dptr, NULL, 1);
    return do_free(dptr, 0);
}

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                 unsigned int ElementSizeBytes) {
    size_t pitch;
    CUresult rc;
    FK_ENTER(cuMemAllocPitch);
    FK_NEED_CTX(c);
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0) return E_INVALID_VALUE;
    if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return E_INVALID_VALUE;
    pitch = (WidthInBytes + 511) & ~(size_t)511;
    rc = do_alloc(dptr, pitch * Height, MK_DEVICE, c->dev, NULL, 0);
    if (rc == CUDA_SUCCESS) *pPitch = pitch;
    return rc;
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    FK_ENTER(cuMemAllocManaged);
    FK_NEED_CTX(c);
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return E_INVALID_VALUE;
    return do_alloc(dptr, bytesize, MK_MANAGED, c->dev, NULL, flags);
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
    CUdeviceptr d = 0;
    CUresult rc;
    FK_ENTER(cuMemHostAlloc);
    FK_NEED_CTX(c);
    if (!pp) return E_INVALID_VALUE;
    if (Flags & ~7u) return E_INVALID_VALUE;
    rc = do_alloc(&d, bytesize, MK_HOST_ALLOC, c->dev, NULL, Flags);
    if (rc == CUDA_SUCCESS) *pp = (void *)(uintptr_t)d;
    return rc;
}

CUresult CUDAAPI cuMemFreeHost(void *p) {
    FK_ENTER(cuMemFreeHost);
    if (!cur_ctx()) return E_INVALID_CONTEXT;
    return do_free((CUdeviceptr)(uintptr_t)p, 1);
}

CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags) {
    fk_alloc *a;
    FK_ENTER(cuMemHostGetDevicePointer);
    if (!cur_ctx()) return E_INVALID_CONTEXT;
    if (!pdptr || Flags != 0) return E_INVALID_VALUE;
    a = find_alloc((uintptr_t)p);
    if (!a || (a->kind != MK_HOST_ALLOC && a->kind != MK_HOST_REG)) return E_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags) {
    size_t i;
    uintptr_t lo = (uintptr_t)p, hi = lo + bytesize;
    fk_alloc *a;
    FK_ENTER(cuMemHostRegister);
    FK_NEED_CTX(c);
    if (!p || bytesize == 0 || (Flags & ~0xFu)) return E_INVALID_VALUE;
    for (i = 0; i < g_nallocs; i++) {
        fk_alloc *b = &g_allocs[i];
        if (lo < b->base + b->size && b->base < hi) {
            if (b->kind == MK_HOST_REG || b->kind == MK_HOST_ALLOC) return E_HOST_MEMORY_ALREADY_REGISTERED;
            return E_INVALID_VALUE;
        }
    }
    a = add_alloc();
    if (!a) return E_OUT_OF_MEMORY;
    a->base = lo;
    a->size = bytesize;
    a->kind = MK_HOST_REG;
    a->dev = c->dev;
    a->flags = Flags;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostUnregister(void *p) {
    fk_alloc *a;
    FK_ENTER(cuMemHostUnregister);
    if (!cur_ctx()) return E_INVALID_CONTEXT;
    a = find_alloc_exact((uintptr_t)p);
    if (!a || a->kind != MK_HOST_REG) return E_HOST_MEMORY_NOT_REGISTERED;
    remove_alloc(a);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
    fk_alloc *a;
    FK_ENTER(cuMemGetAddressRange);
    if (!cur_ctx()) return E_INVALID_CONTEXT;
    a = find_alloc((uintptr_t)dptr);
    if (!a) return E_NOT_FOUND;
    if (pbase) *pbase = (CUdeviceptr)a->base;
    if (psize) *psize = a->size;
    return CUDA_SUCCESS;
}

/* Booleans (SYNC_MEMOPS, IS_MANAGED, MAPPED) are written as one byte, like the driver's bool. */
CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
    fk_alloc *a;
    int host_side;
    FK_ENTER(cuPointerGetAttribute);
    if (!data) return E_INVALID_VALUE;
    a = find_alloc((uintptr_t)ptr);
    if (!a) return E_INVALID_VALUE;
    host_side = a->kind == MK_HOST_ALLOC || a->kind == MK_HOST_REG;
    switch ((int)attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = &g_dev[a->dev].ctx; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = host_side ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (a->kind == MK_DEVICE || a->kind == MK_GLOBAL) return E_INVALID_VALUE;
        *(void **)data = (void *)(uintptr_t)ptr;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(unsigned char *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = a->id; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned char *)data = a->kind == MK_MANAGED; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = a->dev; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = (CUdeviceptr)a->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a->size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(unsigned char *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        if (!a->pool) return E_INVALID_VALUE;
        *(CUmemoryPool *)data = a->pool;
        break;
    default: return E_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

#define FK_COPY_PRELUDE(stream)                                                    \
    if (!cur_ctx()) return E_INVALID_CONTEXT;                                      \
    if (!valid_stream(stream)) return E_INVALID_HANDLE

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
    FK_ENTER(cuMemcpy);
    FK_COPY_PRELUDE(NULL);
    if (ByteCount && (!dst || !src)) return E_INVALID_VALUE;
    if (ByteCount) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, ByteCount);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
    FK_ENTER(cuMemcpyAsync);
    FK_COPY_PRELUDE(hStream);
    if (ByteCount && (!dst || !src)) return E_INVALID_VALUE;
    if (ByteCount) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, ByteCount);
    return CUDA_SUCCESS;
}

static CUresult htod(CUdeviceptr dst, const void *src, size_t n) {
    if (!n) return CUDA_SUCCESS;
    if (!src || !dev_range_ok((uintptr_t)dst, n)) return E_INVALID_VALUE;
    memmove((void *)(uintptr_t)dst, src, n);
    return CUDA_SUCCESS;
}

static CUresult dtoh(void *dst, CUdeviceptr src, size_t n) {
    if (!n) return CUDA_SUCCESS;
    if (!dst || !dev_range_ok((uintptr_t)src, n)) return E_INVALID_VALUE;
    memmove(dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    if (!n) return CUDA_SUCCESS;
    if (!dev_range_ok((uintptr_t)dst, n) || !dev_range_ok((uintptr_t)src, n)) return E_INVALID_VALUE;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
    FK_ENTER(cuMemcpyHtoD);
    FK_COPY_PRELUDE(NULL);
    sync_point();
    return htod(dstDevice, srcHost, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    FK_ENTER(cuMemcpyDtoH);
    FK_COPY_PRELUDE(NULL);
    sync_point();
    return dtoh(dstHost, srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
    FK_ENTER(cuMemcpyDtoD);
    FK_COPY_PRELUDE(NULL);
    return dtod(dstDevice, srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream) {
    FK_ENTER(cuMemcpyHtoDAsync);
    FK_COPY_PRELUDE(hStream);
    return htod(dstDevice, srcHost, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
    FK_ENTER(cuMemcpyDtoHAsync);
    FK_COPY_PRELUDE(hStream);
    return dtoh(dstHost, srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
    FK_ENTER(cuMemcpyDtoDAsync);
    FK_COPY_PRELUDE(hStream);
    return dtod(dstDevice, srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                   CUcontext srcContext, size_t ByteCount, CUstream hStream) {
    FK_ENTER(cuMemcpyPeerAsync);
    FK_COPY_PRELUDE(hStream);
    if (!valid_ctx(dstContext) || !valid_ctx(srcContext)) return E_INVALID_CONTEXT;
    return dtod(dstDevice, srcDevice, ByteCount);
}

/* Address of (x, y, z) for one side of a 2D/3D copy; NULL when the side is unusable. */
static unsigned char *side_addr(CUmemorytype t, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t z,
                                size_t pitch, size_t height, size_t width, size_t rows, size_t depth, int *err) {
    unsigned char *base;
    size_t last;
    if (t == CU_MEMORYTYPE_HOST) base = (unsigned char *)host;
    else if (t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED) base = (unsigned char *)(uintptr_t)dev;
    else { *err = 1; return NULL; }
    if (!base) { *err = 1; return NULL; }
    if (rows > 1 || depth > 1) {
        if (pitch < x + width) { *err = 1; return NULL; }
    }
    if (depth > 1 && height < y + rows) { *err = 1; return NULL; }
    last = ((z + depth - 1) * height + (y + rows - 1)) * pitch + x + width;
    if (t == CU_MEMORYTYPE_DEVICE) {
        size_t first = (z * height + y) * pitch + x;
        if (!dev_range_ok((uintptr_t)base + first, last - first)) { *err = 1; return NULL; }
    }
    return base;
}

static CUresult copy3d(CUmemorytype st, const void *sh, CUdeviceptr sd, size_t sx, size_t sy, size_t sz,
                       size_t sp, size_t shgt, CUmemorytype dt, void *dh, CUdeviceptr dd, size_t dx, size_t dy,
                       size_t dz, size_t dp, size_t dhgt, size_t w, size_t h, size_t d) {
    int err = 0;
    unsigned char *s, *t;
    size_t y, z;
    if (w == 0 || h == 0 || d == 0) return CUDA_SUCCESS;
    s = side_addr(st, sh, sd, sx, sy, sz, sp, shgt, w, h, d, &err);
    t = side_addr(dt, dh, dd, dx, dy, dz, dp, dhgt, w, h, d, &err);
    if (err) return E_INVALID_VALUE;
    for (z = 0; z < d; z++)
        for (y = 0; y < h; y++)
            memmove(t + ((dz + z) * dhgt + dy + y) * dp + dx, s + ((sz + z) * shgt + sy + y) * sp + sx, w);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D *c, CUstream hStream) {
    FK_ENTER(cuMemcpy2DAsync);
    FK_COPY_PRELUDE(hStream);
    if (!c) return E_INVALID_VALUE;
    return copy3d(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, 0, c->srcPitch, 0,
                  c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, 0, c->dstPitch, 0,
                  c->WidthInBytes, c->Height, 1);
}

CUresult CUDAAPI cuMemcpy3DAsync(const CUDA_MEMCPY3D *c, CUstream hStream) {
    size_t sh, dh;
    FK_ENTER(cuMemcpy3DAsync);
    FK_COPY_PRELUDE(hStream);
    if (!c) return E_INVALID_VALUE;
    if (c->srcLOD || c->dstLOD || c->reserved0 || c->reserved1) return E_INVALID_VALUE;
    sh = c->srcHeight;
    dh = c->dstHeight;
    return copy3d(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch, sh,
                  c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch, dh,
                  c->WidthInBytes, c->Height, c->Depth);
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
    FK_ENTER(cuMemsetD8Async);
    FK_COPY_PRELUDE(hStream);
    if (!dev_range_ok((uintptr_t)dstDevice, N)) return E_INVALID_VALUE;
    if (N) memset((void *)(uintptr_t)dstDevice, uc, N);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
    size_t i;
    FK_ENTER(cuMemsetD16Async);
    FK_COPY_PRELUDE(hStream);
    if ((dstDevice & 1) || N * 2 / 2 != N || !dev_range_ok((uintptr_t)dstDevice, N * 2)) return E_INVALID_VALUE;
    for (i = 0; i < N; i++) ((unsigned short *)(uintptr_t)dstDevice)[i] = us;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
    size_t i;
    FK_ENTER(cuMemsetD32Async);
    FK_COPY_PRELUDE(hStream);
    if ((dstDevice & 3) || N * 4 / 4 != N || !dev_range_ok((uintptr_t)dstDevice, N * 4)) return E_INVALID_VALUE;
    for (i = 0; i < N; i++) ((unsigned int *)(uintptr_t)dstDevice)[i] = ui;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------- pools */
static int valid_pool(CUmemoryPool p) {
    int d;
    for (d = 0; d < g_ndev; d++)
        if (p == &g_dev[d].default_pool) return 1;
    return vec_has(&g_pools, p);
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    FK_ENTER(cuMemAllocAsync);
    FK_NEED_CTX(c);
    if (!valid_stream(hStream)) return E_INVALID_HANDLE;
    return do_alloc(dptr, bytesize, MK_DEVICE, c->dev, &g_dev[c->dev].default_pool, 0);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    FK_ENTER(cuMemFreeAsync);
    if (!cur_ctx()) return E_INVALID_CONTEXT;
    if (!valid_stream(hStream)) return E_INVALID_HANDLE;
    pend_check_free(dptr, hStream, 0);
    return do_free(dptr, 0);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
    FK_ENTER(cuMemAllocFromPoolAsync);
    if (!cur_ctx()) return E_INVALID_CONTEXT;
    if (!valid_stream(hStream)) return E_INVALID_HANDLE;
    if (!valid_pool(pool)) return E_INVALID_VALUE;
    return do_alloc(dptr, bytesize, MK_DEVICE, pool->dev, pool, 0);
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps) {
    struct CUmemPoolHandle_st *p;
    FK_ENTER(cuMemPoolCreate);
    if (!pool || !poolProps) return E_INVALID_VALUE;
    if (poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return E_INVALID_VALUE;
    if (poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_dev(poolProps->location.id))
        return E_INVALID_VALUE;
    p = calloc(1, sizeof(*p));
    if (!p) return E_OUT_OF_MEMORY;
    p->magic = 0x900Lu;
    p->live = 1;
    p->dev = poolProps->location.id;
    p->reuse[1] = p->reuse[2] = p->reuse[3] = 1;
    if (vec_add(&g_pools, p)) { free(p); return E_OUT_OF_MEMORY; }
    *pool = p;
    return CUDA_SUCCESS;
}

/* Destroyed pools are never freed: allocations still made from them keep a pointer. */
CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
    FK_ENTER(cuMemPoolDestroy);
    if (!vec_has(&g_pools, pool)) return E_INVALID_VALUE;
    vec_remove(&g_pools, pool);
    pool->live = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
    FK_ENTER(cuMemPoolTrimTo);
    if (!valid_pool(pool)) return E_INVALID_VALUE;
    pool_trim(pool, minBytesToKeep);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    FK_ENTER(cuMemPoolSetAttribute);
    if (!value) return E_INVALID_VALUE;
    if (!valid_pool(pool)) return E_INVALID_VALUE;
    switch ((int)attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        pool->reuse[attr] = *(int *)value != 0;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: pool->threshold = *(unsigned long long *)value; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (*(unsigned long long *)value != 0) return E_INVALID_VALUE;
        pool->reserved_high = pool->reserved;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(unsigned long long *)value != 0) return E_INVALID_VALUE;
        pool->used_high = pool->used;
        break;
    default: return E_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    FK_ENTER(cuMemPoolGetAttribute);
    if (!value) return E_INVALID_VALUE;
    if (!valid_pool(pool)) return E_INVALID_VALUE;
    switch ((int)attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = pool->reuse[attr];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(unsigned long long *)value = pool->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(unsigned long long *)value = pool->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(unsigned long long *)value = pool->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(unsigned long long *)value = pool->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(unsigned long long *)value = pool->used_high; break;
    default: return E_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev) {
    FK_ENTER(cuDeviceGetDefaultMemPool);
    if (!pool_out) return E_INVALID_VALUE;
    if (!valid_dev(dev)) return E_INVALID_DEVICE;
    *pool_out = &g_dev[dev].default_pool;
    return CUDA_SUCCESS;
}

static int valid_location(CUmemLocation loc) {
    if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE) return valid_dev(loc.id);
    return loc.type == CU_MEM_LOCATION_TYPE_HOST || loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
           loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

static int managed_range(CUdeviceptr p, size_t n) {
    fk_alloc *a = find_alloc((uintptr_t)p);
    return a && a->kind == MK_MANAGED && n <= a->size - ((uintptr_t)p - a->base);
}

CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                                    CUstream hStream) {
    FK_ENTER(cuMemPrefetchAsync);
    if (!cur_ctx()) return E_INVALID_CONTEXT;
    if (!valid_stream(hStream)) return E_INVALID_HANDLE;
    if (flags != 0 || count == 0 || !valid_location(location) || !managed_range(devPtr, count))
        return E_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location) {
    FK_ENTER(cuMemAdvise);
    if (!cur_ctx()) return E_INVALID_CONTEXT;
    if ((int)advice < CU_MEM_ADVISE_SET_READ_MOSTLY || (int)advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
        return E_INVALID_VALUE;
    if (count == 0 || !managed_range(devPtr, count)) return E_INVALID_VALUE;
    if (advice != CU_MEM_ADVISE_SET_READ_MOSTLY && advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY &&
        !valid_location(location))
        return E_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------ cuGetProcAddress_v2 */
#ifndef FAKECUDA_NO_GPA
typedef struct fk_entry {
    const char *name;
    void *fn;
    int version;
} fk_entry;

static const fk_entry fk_entries[] = {
#define FK_X_ENTRY(name, version, required, params) {#name, (void *)(PFN_##name)name, version},
    BC_DRIVER_SYMBOLS(FK_X_ENTRY)
#undef FK_X_ENTRY
};

static int is_hidden(const char *name) {
    const char *h = getenv("FAKECUDA_HIDE");
    size_t n = strlen(name);
    while (h && *h) {
        const char *comma = strchr(h, ',');
        size_t len = comma ? (size_t)(comma - h) : strlen(h);
        while (len && isspace((unsigned char)*h)) { h++; len--; }
        while (len && isspace((unsigned char)h[len - 1])) len--;
        if (len == n && strncmp(h, name, n) == 0) return 1;
        h = comma ? comma + 1 : NULL;
    }
    return 0;
}

FK_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                               unsigned long long flags, CUdriverProcAddressQueryResult *symbolStatus);
/* Symbols are looked up by name; a symbol whose ABI version (in our table) is newer
 * than the fake driver version (FAKECUDA_DRIVER_VERSION) reports
 * VERSION_NOT_SUFFICIENT, like an older driver lacking that variant. */
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, unsigned long long flags,
                                     CUdriverProcAddressQueryResult *symbolStatus) {
    size_t i;
    int drv;
    FK_ENTER_NOINIT(cuGetProcAddress_v2);
    if (!symbol || !pfn) return E_INVALID_VALUE;
    if (flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) return E_INVALID_VALUE;
    *pfn = NULL;
    drv = env_int("FAKECUDA_DRIVER_VERSION", 13000);
    for (i = 0; i < sizeof(fk_entries) / sizeof(fk_entries[0]); i++) {
        if (strcmp(fk_entries[i].name, symbol) != 0) continue;
        g_version_requested[i] = cudaVersion;
        if (is_hidden(symbol)) break;
        if (fk_entries[i].version > drv || cudaVersion < 2000) {
            if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            return E_NOT_FOUND;
        }
        *pfn = fk_entries[i].fn;
        if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return E_NOT_FOUND;
}
#endif

/* ================================================================ control */
/* Clear call counters, injected faults, the launch log, requested versions and
 * device-attribute overrides. Live objects are kept. */
FK_EXPORT int fakecuda_reset(void) {
    int i;
    FK_LOCK_SCOPE;
    memset(g_calls, 0, sizeof(g_calls));
    memset(g_faults, 0, sizeof(g_faults));
    memset(g_version_requested, 0, sizeof(g_version_requested));
    for (i = 0; i < FK_RING; i++) {
        free(g_ring[i].params);
        memset(&g_ring[i], 0, sizeof(g_ring[i]));
    }
    g_launch_count = 0;
    g_reason[0] = 0;
    g_pending_mode = 0;
    g_npend = 0;
    g_early_frees = 0;
    for (i = 0; i < FK_MAX_DEV; i++) default_attrs(i);
    return 0;
}

/* The (after_n_calls+1)-th call to `symbol` from now on returns cuda_result, for
 * `times` calls (-1: forever; 0 disarms). Returns 0, or -1 for an unknown symbol. */
FK_EXPORT int fakecuda_fail(const char *symbol, int cuda_result, int after_n_calls, int times) {
    int i = sym_index(symbol);
    FK_LOCK_SCOPE;
    if (i < 0) return -1;
    g_faults[i].armed = times != 0;
    g_faults[i].code = cuda_result;
    g_faults[i].after = after_n_calls < 0 ? 0 : after_n_calls;
    g_faults[i].times = times;
    g_faults[i].seen = 0;
    return 0;
}

/* Calls to `symbol` since the last reset (counted even when a fault was injected); -1 if unknown. */
FK_EXPORT long long fakecuda_calls(const char *symbol) {
    int i = sym_index(symbol);
    FK_LOCK_SCOPE;
    return i < 0 ? -1 : g_calls[i];
}

/* The cudaVersion barecuda last asked cuGetProcAddress_v2 for `symbol` (0: never; -1 unknown). */
FK_EXPORT int fakecuda_version_requested(const char *symbol) {
    int i = sym_index(symbol);
    FK_LOCK_SCOPE;
    return i < 0 ? -1 : g_version_requested[i];
}

/* Live objects of a kind: ctx_retain, stream, event, module, mem, host_mem,
 * host_register, pool, managed, global. -1 for an unknown kind. */
FK_EXPORT int fakecuda_live(const char *kind) {
    int d, n = 0;
    FK_LOCK_SCOPE;
    if (!kind) return -1;
    if (!strcmp(kind, "ctx_retain")) {
        for (d = 0; d < FK_MAX_DEV; d++) n += g_dev[d].retain;
        return n;
    }
    if (!strcmp(kind, "stream")) return (int)g_streams.n;
    if (!strcmp(kind, "event")) return (int)g_events.n;
    if (!strcmp(kind, "module")) return (int)g_modules.n;
    if (!strcmp(kind, "pool")) return (int)g_pools.n;
    if (!strcmp(kind, "mem")) return count_allocs(MK_DEVICE, MK_MANAGED);
    if (!strcmp(kind, "managed")) return count_allocs(MK_MANAGED, MK_MANAGED);
    if (!strcmp(kind, "host_mem")) return count_allocs(MK_HOST_ALLOC, MK_HOST_ALLOC);
    if (!strcmp(kind, "host_register")) return count_allocs(MK_HOST_REG, MK_HOST_REG);
    if (!strcmp(kind, "global")) return count_allocs(MK_GLOBAL, MK_GLOBAL);
    return -1;
}

/* Bytes of device memory in use on `dev` (device + managed allocations). */
FK_EXPORT long long fakecuda_mem_used(int dev) {
    FK_LOCK_SCOPE;
    if (dev < 0 || dev >= FK_MAX_DEV) return -1;
    return (long long)g_dev[dev].used;
}

FK_EXPORT long long fakecuda_launch_count(void) {
    FK_LOCK_SCOPE;
    return g_launch_count;
}

static fk_launch *launch_at(int back) {
    long long idx;
    if (back < 0 || back >= FK_RING || back >= g_launch_count) return NULL;
    idx = g_launch_count - 1 - back;
    return &g_ring[idx % FK_RING];
}

/* Launch `back` (0 = newest). dims_out: grid x,y,z then block x,y,z. Any output may be
 * NULL. Returns the kernel's parameter byte count (params_out gets at most params_cap
 * of them), or -1 when there is no such launch. */
FK_EXPORT int fakecuda_last_launch(int back, char *name_out, int name_len, unsigned int dims_out[6],
                                   unsigned int *shared_out, void **stream_out, unsigned char *params_out,
                                   int params_cap) {
    fk_launch *r;
    FK_LOCK_SCOPE;
    r = launch_at(back);
    if (!r) return -1;
    if (name_out && name_len > 0) snprintf(name_out, (size_t)name_len, "%s", r->name);
    if (dims_out) {
        memcpy(dims_out, r->grid, sizeof(r->grid));
        memcpy(dims_out + 3, r->block, sizeof(r->block));
    }
    if (shared_out) *shared_out = r->shared;
    if (stream_out) *stream_out = r->stream;
    if (params_out && params_cap > 0 && r->params)
        memcpy(params_out, r->params, r->nparams_bytes < (size_t)params_cap ? r->nparams_bytes : (size_t)params_cap);
    return (int)r->nparams_bytes;
}

/* The cuLaunchKernelEx side of launch `back`: kind (0 cuLaunchKernel, 1 cooperative,
 * 2 Ex), cluster dims, cooperative, priority, programmatic serialization, number of
 * attributes, whether `extra` carried the parameters. Returns 0 or -1. */
FK_EXPORT int fakecuda_last_launch_ex(int back, int *kind, unsigned int cluster_out[3], int *cooperative,
                                      int *priority, int *prog_serial, int *num_attrs, int *used_extra) {
    fk_launch *r;
    FK_LOCK_SCOPE;
    r = launch_at(back);
    if (!r) return -1;
    if (kind) *kind = r->kind;
    if (cluster_out) memcpy(cluster_out, r->cluster, sizeof(r->cluster));
    if (cooperative) *cooperative = r->cooperative;
    if (priority) *priority = r->priority;
    if (prog_serial) *prog_serial = r->prog_serial;
    if (num_attrs) *num_attrs = r->num_attrs;
    if (used_extra) *used_extra = r->used_extra;
    return 0;
}

/* Why the last rejected launch was rejected ("" when none since reset). */
FK_EXPORT int fakecuda_last_reason(char *out, int len) {
    FK_LOCK_SCOPE;
    if (out && len > 0) snprintf(out, (size_t)len, "%s", g_reason);
    return (int)strlen(g_reason);
}

/* Override a device attribute until the next reset. Returns 0 or -1. */
FK_EXPORT int fakecuda_set_attribute(int dev, int attr, int value) {
    FK_LOCK_SCOPE;
    if (dev < 0 || dev >= FK_MAX_DEV || attr <= 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX) return -1;
    g_dev[dev].attrs[attr] = value;
    return 0;
}

/* Is the current thread's context set (1), and to which device (*dev)? For tests of
 * context binding. */
FK_EXPORT int fakecuda_current_device(int *dev) {
    CUcontext c = tls_ctx;
    if (!c) return 0;
    if (dev) *dev = c->dev;
    return 1;
}

/* Pending-work model switch (see "pending-work model" above); returns the old setting. */
FK_EXPORT int fakecuda_pending_mode(int on) {
    int old;
    FK_LOCK_SCOPE;
    old = g_pending_mode;
    g_pending_mode = on != 0;
    if (!on) g_npend = 0;
    return old;
}

/* Frees of memory that pending work on another stream still referenced. */
FK_EXPORT long long fakecuda_early_frees(void) {
    FK_LOCK_SCOPE;
    return g_early_frees;
}

/* Pending launches referencing the allocation that contains ptr, on streams other than
 * `stream` (any stream when any_stream); -1 if ptr is in no allocation. */
FK_EXPORT int fakecuda_pending_refs(unsigned long long ptr, void *stream, int any_stream) {
    fk_alloc *a;
    FK_LOCK_SCOPE;
    a = find_alloc((uintptr_t)ptr);
    if (!a) return -1;
    return pend_refs(a->id, (CUstream)stream, any_stream);
}

/* ---- launch: a module's kernel names (cuModuleGetFunctionCount, cuModuleEnumerateFunctions), so C++ kernels of cubins can be found by their plain name. */
CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int *count, CUmodule mod) {
    FK_ENTER(cuModuleGetFunctionCount);
    if (!count) return E_INVALID_VALUE;
    if (!vec_has(&g_modules, mod)) return E_INVALID_HANDLE;
    *count = (unsigned int)mod->nfuncs;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions, CUmodule mod) {
    unsigned int i;
    FK_ENTER(cuModuleEnumerateFunctions);
    if (!functions) return E_INVALID_VALUE;
    if (!vec_has(&g_modules, mod)) return E_INVALID_HANDLE;
    for (i = 0; i < numFunctions && (int)i < mod->nfuncs; i++) functions[i] = &mod->funcs[i];
    return CUDA_SUCCESS;
}
