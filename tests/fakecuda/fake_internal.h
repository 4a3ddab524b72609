/*
 * fake_internal.h -- what the files of the CUDA driver double (every .c file in tests/fakecuda/) share.
 *
 * The double implements every entry point in BC_DRIVER_SYMBOLS
 * (include/barecuda/cuda_abi.h) and is split by concern: state.c, device.c, ptx.c,
 * module.c, launch.c, stream.c, memory.c, control.c (and any other *.c here:
 * tests/conftest.py compiles every one of them into one shared library). Everything
 * declared below is internal to that library (hidden visibility); only the driver
 * entry points and the fakecuda_* control API are exported. See README.md.
 */
#ifndef FAKECUDA_FAKE_INTERNAL_H
#define FAKECUDA_FAKE_INTERNAL_H

#include <ctype.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "barecuda/cuda_abi.h"   /* includes barecuda/cuda_errors.h: CUDA_ERROR_* names */

#define FK_EXPORT __attribute__((visibility("default")))

/* Every entry point, declared from the ABI header: a definition whose signature
 * differs from what barecuda calls is a compile error. */
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

#pragma GCC visibility push(hidden)

extern const char *const fk_sym_names[FK_NSYM];

extern pthread_mutex_t g_mu;

extern pthread_once_t g_once;

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

extern long long g_calls[FK_NSYM];

extern fk_fault g_faults[FK_NSYM];
extern long long g_faults_fired[FK_NSYM];
extern int g_delay_us[FK_NSYM];   /* fakecuda_delay: microseconds slept at each entry */

extern int g_version_requested[FK_NSYM];

extern int g_initialized;

extern int g_ndev;

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

extern fk_device g_dev[FK_MAX_DEV];

extern __thread CUcontext tls_ctx;

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

extern fk_vec g_streams, g_events, g_modules, g_funcs, g_pools;

extern fk_alloc *g_allocs;

extern size_t g_nallocs, g_capallocs;

extern unsigned long long g_next_alloc_id;

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

extern fk_launch g_ring[FK_RING];

extern long long g_launch_count;

extern char g_reason[256];

/* Entry of every driver function: count, inject, require cuInit, lock for the rest. */
#define FK_ENTER_NOINIT(name)                                                      \
    do {                                                                           \
        CUresult fk_rc_ = fk_begin(FK_##name);                                     \
        if (fk_rc_ != CUDA_SUCCESS) return fk_rc_;                                 \
    } while (0);                                                                   \
    FK_LOCK_SCOPE

#define FK_ENTER(name)                                                             \
    FK_ENTER_NOINIT(name);                                                         \
    if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED

#define FK_NEED_CTX(var)                                                           \
    CUcontext var = cur_ctx();                                                     \
    if (!var) return CUDA_ERROR_INVALID_CONTEXT

#define FK_PEND_MAX 65536

typedef struct fk_pend {
    CUstream stream;
    unsigned long long seq;
    unsigned long long alloc_id;
} fk_pend;

extern fk_pend g_pend[FK_PEND_MAX];

extern int g_npend;

extern int g_pending_mode;

extern unsigned long long g_pend_seq;

extern long long g_early_frees;

typedef struct tok {
    const char *s;
    int n;
} tok;

typedef struct toks {
    tok *t;
    int n, cap;
} toks;

typedef struct parse_ctx {
    char err[512];
    int nentries;
} parse_ctx;

typedef struct occ_info {
    int max_threads, static_smem, max_dyn, sms, max_blocks_sm, threads_sm, smem_sm, regs_sm, optin;
} occ_info;

typedef struct launch_req {
    int kind;
    unsigned int grid[3], block[3], shared;
    CUstream stream;
    unsigned int cluster[3];
    int cooperative, priority, prog_serial, num_attrs, has_cluster;
} launch_req;

#define FK_COPY_PRELUDE(stream)                                                    \
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;                                      \
    if (!valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE

/* ------------------------------------------------------------ internal functions */
void fk_init_mutex(void);
void fk_unlock_cleanup(int *unused);
int vec_add(fk_vec *v, void *p);
int vec_has(const fk_vec *v, const void *p);
int vec_remove(fk_vec *v, const void *p);
CUresult fk_reject(CUresult rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int env_int(const char *name, int dflt);
double now_ms(void);
int sym_index(const char *name);
void default_attrs(int d);
void init_devices(void);
CUresult fk_begin(int sym);
int valid_dev(CUdevice d);
int valid_ctx(CUcontext c);
CUcontext cur_ctx(void);
int valid_stream(CUstream s);
fk_alloc *find_alloc(uintptr_t p);
fk_alloc *find_alloc_exact(uintptr_t p);
int dev_range_ok(uintptr_t p, size_t n);
fk_alloc *add_alloc(void);
void remove_alloc(fk_alloc *a);
void pool_trim(struct CUmemPoolHandle_st *p, unsigned long long keep);
void sync_point(void);
CUresult do_alloc(CUdeviceptr *dptr, size_t n, int kind, int dev, struct CUmemPoolHandle_st *pool, unsigned flags);
CUresult do_free(CUdeviceptr dptr, int allow_host);
int count_allocs(int kind1, int kind2);
CUstream pend_norm(CUstream s);
void pend_add_launch(CUstream stream, const unsigned char *buf, size_t n);
void pend_complete(CUstream stream, unsigned long long upto, int all);
int pend_refs(unsigned long long alloc_id, CUstream stream, int any_stream);
void pend_check_free(CUdeviceptr dptr, CUstream stream, int any_stream);
int tok_is(const tok *t, const char *s);
int tok_push(toks *ts, const char *s, int n);
int tokenize(const char *s, size_t len, toks *out);
int type_size(const tok *t);
int is_float_type(const tok *t);
long long tok_ll(const tok *t, int *ok);
int parse_decl(const toks *ts, int *pi, int end, size_t *size, size_t *align, tok *name, tok *type, parse_ctx *pc);
void copy_name(char dst[256], const tok *t);
int parse_entry(const toks *ts, int i, int end, const toks *body, struct CUfunc_st *f, parse_ctx *pc);
int parse_float_tok(const tok *t, double *out, int is_f32);
int parse_global(const toks *ts, int i, int end, fk_global *g, parse_ctx *pc);
void free_module(struct CUmod_st *m);
char *strip_comments(const char *src, size_t len, int *invalid, int *invalid_line);
int find_kw(const toks *ts, int from, int to, int *which);
int add_func(struct CUmod_st *m, struct CUfunc_st *f, int *cap);
CUresult parse_module(const char *text, struct CUmod_st *m, parse_ctx *pc);
void write_log(void *buf, void **size_slot, const char *msg);
int optin_limit(const struct CUfunc_st *f);
void get_occ_info(const struct CUfunc_st *f, occ_info *o);
int occ_blocks(const occ_info *o, int block, size_t dyn);
int cluster_size_of(const CUlaunchConfig *cfg, unsigned int dims[3]);
CUresult do_launch(CUfunction f, const launch_req *r, void **kernelParams, void **extra);
CUresult make_stream(CUstream *ph, unsigned int flags, int priority);
CUresult htod(CUdeviceptr dst, const void *src, size_t n);
CUresult dtoh(void *dst, CUdeviceptr src, size_t n);
CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n);
unsigned char *side_addr(CUmemorytype t, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t z, size_t pitch, size_t height, size_t width, size_t rows, size_t depth, int *err);
CUresult copy3d(CUmemorytype st, const void *sh, CUdeviceptr sd, size_t sx, size_t sy, size_t sz, size_t sp, size_t shgt, CUmemorytype dt, void *dh, CUdeviceptr dd, size_t dx, size_t dy, size_t dz, size_t dp, size_t dhgt, size_t w, size_t h, size_t d);
int valid_pool(CUmemoryPool p);
int valid_location(CUmemLocation loc);
int managed_range(CUdeviceptr p, size_t n);
fk_launch *launch_at(int back);

/* ------------------------------------------ CUDA graphs: capture hooks (graph.c) */
CUresult fk_cap_kernel(CUfunction f, const launch_req *r, unsigned char *buf, int *taken);
CUresult fk_cap_copy(CUstream s, CUmemorytype dt, void *dh, CUdeviceptr dd, CUmemorytype st, const void *sh,
                     CUdeviceptr sd, size_t bytes, int *taken);
CUresult fk_cap_copy3d(CUstream s, const CUDA_MEMCPY3D *c, int *taken);
CUresult fk_cap_memset(CUstream s, CUdeviceptr dst, unsigned int value, unsigned int esize, size_t count, int *taken);
CUresult fk_cap_host(CUstream s, CUhostFn fn, void *user, int *taken);
CUresult fk_cap_alloc(CUstream s, CUdeviceptr *dptr, size_t bytes, int dev, struct CUmemPoolHandle_st *pool,
                      int *taken);
CUresult fk_cap_free(CUstream s, CUdeviceptr dptr, int *taken);
int fk_cap_event_record(CUevent e, CUstream s);   /* 1: recorded into a capture */
int fk_cap_event_wait(CUstream s, CUevent e);     /* joins s to the event's capture */
int fk_cap_forbid(CUstream s);                    /* 1: s captures (the capture is now invalid) */
int fk_cap_unsafe(void);                          /* 1: an unsafe call during a global / this thread's capture */
int fk_cap_any(void);                             /* 1: a capture runs (a context-wide sync invalidates all) */
/* Returns from the enclosing function when `call` (which sets fk_taken_) captured the operation or failed. */
#define FK_CAPTURED(call)                                                          \
    do {                                                                           \
        int fk_taken_ = 0;                                                         \
        CUresult fk_crc_ = (call);                                                 \
        if (fk_taken_ || fk_crc_) return fk_crc_;                                  \
    } while (0)

#pragma GCC visibility pop

#endif /* FAKECUDA_FAKE_INTERNAL_H */
