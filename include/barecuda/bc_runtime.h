/*
 * barecuda/bc_runtime.h -- the driver loader: the one driver table (filled
 * through the shared shim in bc_dl.h), process state (loaded / forked / finalizing), and the per-thread
 * cache of the current context.
 *
 * Included by _loader.pyx only: the statics below exist once, in that extension
 * module; other modules reach them through pointers handed out by _loader
 * (see _loader.pxd), never by including this header.
 */
#ifndef BARECUDA_BC_RUNTIME_H
#define BARECUDA_BC_RUNTIME_H

#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* dlinfo */
#endif
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include "barecuda/cuda_abi.h"
#include "barecuda/bc_state.h"
#include "barecuda/bc_dl.h"   /* bc_dl_open/bc_dl_close, bc_gpa_fill */

#ifdef _WIN32
#include <windows.h>
#define BC_THREAD_LOCAL __declspec(thread)
#else
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <unistd.h>
#define BC_THREAD_LOCAL __thread
#endif

/* The per-thread binding is read on every hot path (bc_set_current). _loader is a
 * dlopened extension, so by default its thread-locals use the global-dynamic model: a
 * call to __tls_get_addr (~11 instructions) on each read. With glibc, initial-exec puts
 * them in the static TLS block's surplus, which glibc reserves for dlopened libraries
 * like this one (a few hundred bytes; we take 12): a read is one %fs-relative load.
 * Elsewhere (other libcs, Windows, whose __declspec(thread) is static already) the
 * default stays. See docs/architecture.md, "the per-thread context binding". */
#if defined(__GLIBC__) && (defined(__GNUC__) || defined(__clang__)) && !defined(BC_TLS_DEFAULT_MODEL)
#define BC_HOT_THREAD_LOCAL __thread __attribute__((tls_model("initial-exec")))
#else
#define BC_HOT_THREAD_LOCAL BC_THREAD_LOCAL
#endif

static bc_driver_t bc_driver_table;
static bc_state_t bc_state;

/* Table of slot names, versions and offsets, generated from BC_DRIVER_SYMBOLS. */
#define BC_X_INFO(name, version, required, params) {#name, version, required, offsetof(bc_driver_t, name)},
static const bc_symbol_info bc_symbol_table[] = { BC_DRIVER_SYMBOLS(BC_X_INFO) };
#undef BC_X_INFO
#define BC_SYMBOL_COUNT (sizeof(bc_symbol_table) / sizeof(bc_symbol_table[0]))

static BC_HOT_THREAD_LOCAL CUcontext bc_tls_ctx;

#ifndef _WIN32
static void bc_atfork_child(void) {
    /* The child inherits a driver it must not use: CUDA does not survive fork. */
    bc_state.forked = 1;
    bc_tls_ctx = NULL;
}
#endif

/* The oldest driver barecuda loads (CUDA 12.0: cuGetProcAddress_v2). The doctor and
 * the loader's messages take it from here. */
#define BC_MIN_DRIVER_VERSION 12000

/* Result of a load attempt, for the Python side to turn into an exception. */
enum {
    BC_LOAD_OK = 0,
    BC_LOAD_NOT_FOUND = 1,        /* no candidate library could be opened */
    BC_LOAD_NO_PROC_ADDRESS = 2,  /* opened, but no cuGetProcAddress_v2 (driver < 12.0 or not a driver) */
    BC_LOAD_MISSING_SYMBOL = 3,   /* a required entry point is missing */
    BC_LOAD_INIT_FAILED = 4       /* cuInit returned an error (code in *cu_rc) */
};

/* Resolve every slot of the table from an opened library. Returns BC_LOAD_*.
 * On BC_LOAD_MISSING_SYMBOL, *missing names the slot. */
static int bc_resolve(void *h, const char **missing, CUresult *cu_rc) {
    bc_driver_t table;
    PFN_cuGetProcAddress_v2 gpa = (PFN_cuGetProcAddress_v2)bc_dl_sym(h, "cuGetProcAddress_v2");
    memset(&table, 0, sizeof(table));
    if (!gpa) return BC_LOAD_NO_PROC_ADDRESS;
    *missing = bc_gpa_fill(gpa, bc_symbol_table, BC_SYMBOL_COUNT, &table);
    if (*missing) return BC_LOAD_MISSING_SYMBOL;
    *cu_rc = table.cuInit(0);
    if (*cu_rc != CUDA_SUCCESS) return BC_LOAD_INIT_FAILED;
    if (table.cuDriverGetVersion(&bc_state.driver_version) != CUDA_SUCCESS) bc_state.driver_version = 0;
    bc_driver_table = table;
    return BC_LOAD_OK;
}

/* Open `path` and fill the table. Caller holds the loader lock. */
static int bc_load_from(const char *path, char *err, size_t errlen, const char **missing, CUresult *cu_rc) {
    int rc;
    void *h = bc_dl_open(path, err, errlen);
    if (!h) return BC_LOAD_NOT_FOUND;
    rc = bc_resolve(h, missing, cu_rc);
    if (rc != BC_LOAD_OK) {
        bc_dl_close(h);
        return rc;
    }
    bc_state.handle = h;
    snprintf(bc_state.path, sizeof(bc_state.path), "%s", path);
#if defined(__linux__)
    {
        /* Record the file actually opened, not just the name searched for. */
        struct link_map *lm = NULL;
        if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
            snprintf(bc_state.path, sizeof(bc_state.path), "%s", lm->l_name);
    }
#elif defined(_WIN32)
    GetModuleFileNameA((HMODULE)h, bc_state.path, (DWORD)sizeof(bc_state.path));
#endif
#ifdef _WIN32
    bc_state.pid = (int)GetCurrentProcessId();
#else
    bc_state.pid = (int)getpid();
    pthread_atfork(NULL, NULL, bc_atfork_child);
#endif
    bc_state.loaded = 1;
    return BC_LOAD_OK;
}

/* Make ctx current on the calling thread unless barecuda already did. */
/* What bc_set_current answers in a child forked after the driver was loaded (not a
 * CUresult): _loader turns it into ForkedProcessError. The fork handler clears the
 * thread's binding, so every operation's first bind in the child lands here, before any
 * driver call, at no cost to the bound hot path. */
#define BC_RC_FORKED ((CUresult)0x7ffffff0)

static inline CUresult bc_set_current(CUcontext ctx) {
    CUresult rc;
    if (bc_tls_ctx == ctx) return CUDA_SUCCESS;
    if (bc_state.forked) return BC_RC_FORKED;
    rc = bc_driver_table.cuCtxSetCurrent(ctx);
    if (rc == CUDA_SUCCESS) bc_tls_ctx = ctx;
    return rc;
}

static inline void bc_forget_current(void) { bc_tls_ctx = NULL; }
static inline CUcontext bc_bound_context(void) { return bc_tls_ctx; }

/* The device the user chose for this thread with Device.set_current(), or -1. */
static BC_HOT_THREAD_LOCAL int bc_tls_device = -1;
static inline int bc_chosen_device(void) { return bc_tls_device; }
static inline void bc_choose_device(int ordinal) { bc_tls_device = ordinal; }

#endif /* BARECUDA_BC_RUNTIME_H */
