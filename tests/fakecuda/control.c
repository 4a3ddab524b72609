/*
 * control.c -- driver double (tests/fakecuda/): cuGetProcAddress_v2 (the table of entry points) and the control API (fakecuda_*) that
 * tests reach through ctypes.
 */
#include "fake_internal.h"

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
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    if (flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    drv = env_int("FAKECUDA_DRIVER_VERSION", 13000);
    for (i = 0; i < sizeof(fk_entries) / sizeof(fk_entries[0]); i++) {
        if (strcmp(fk_entries[i].name, symbol) != 0) continue;
        g_version_requested[i] = cudaVersion;
        if (is_hidden(symbol)) break;
        if (fk_entries[i].version > drv || cudaVersion < 2000) {
            if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            return CUDA_ERROR_NOT_FOUND;
        }
        *pfn = fk_entries[i].fn;
        if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
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
    memset(g_delay_us, 0, sizeof(g_delay_us));
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

/* Every later call of `symbol` sleeps `usec` microseconds at its entry, outside the lock
 * and before it looks at its arguments (0: no delay; cleared by fakecuda_reset): widens
 * the window of races between a call in flight and another thread (tests/test_close_races.py). */
FK_EXPORT int fakecuda_delay(const char *symbol, int usec) {
    int i = sym_index(symbol);
    FK_LOCK_SCOPE;
    if (i < 0) return -1;
    g_delay_us[i] = usec < 0 ? 0 : usec;
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

fk_launch *launch_at(int back) {
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

/* Injected failures of `symbol` that fired since the library was loaded (not reset by
 * fakecuda_reset): the leak check of tests/conftest.py allows one live handle per
 * failed destroy/free, since a handle whose destroy failed stays alive. -1: unknown. */
FK_EXPORT long long fakecuda_faults_fired(const char *symbol) {
    int i = sym_index(symbol);
    FK_LOCK_SCOPE;
    return i < 0 ? -1 : g_faults_fired[i];
}
