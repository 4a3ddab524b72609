/*
 * barecuda/bc_dl.h -- the one dlopen/LoadLibrary shim, and the two ways a table of
 * function pointers is filled from an opened library:
 *
 *   bc_dl_fill   by exported name (dlsym / GetProcAddress): NVRTC, nvJitLink, NCCL;
 *   bc_gpa_fill  through the driver's cuGetProcAddress_v2 at the CUDA version each
 *                entry point's ABI is written for: the driver table (bc_runtime.h).
 *
 * A table is described by bc_symbol_info rows (name, version, required, offset of the
 * slot in the table struct), generated from the X-macro that also declares the struct;
 * `version` is used by bc_gpa_fill only. Everything here is static: each extension
 * module that includes it gets its own copy of these few small functions.
 */
#ifndef BARECUDA_BC_DL_H
#define BARECUDA_BC_DL_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "barecuda/cuda_abi.h"

#ifdef _WIN32
#include <windows.h>
#else
#include <dlfcn.h>
#endif

/* Open `path` (a file name or a name the system loader searches for). NULL on
 * failure, with the loader's reason in err (when err is not NULL). */
static inline void *bc_dl_open(const char *path, char *err, size_t errlen) {
#ifdef _WIN32
    /* A full path: look for its dependencies next to it first (pip wheels put
     * NVIDIA's DLLs side by side); a bare name: the standard search. */
    HMODULE h = LoadLibraryExA(path, NULL, LOAD_LIBRARY_SEARCH_DEFAULT_DIRS | LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR);
    if (!h) h = LoadLibraryA(path);
    if (!h && err) snprintf(err, errlen, "LoadLibrary failed with Windows error %lu", (unsigned long)GetLastError());
    return (void *)h;
#else
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h && err) {
        const char *e = dlerror();
        snprintf(err, errlen, "%s", e ? e : "dlopen failed");
    }
    return h;
#endif
}

static inline void *bc_dl_sym(void *h, const char *name) {
#ifdef _WIN32
    return (void *)GetProcAddress((HMODULE)h, name);
#else
    return dlsym(h, name);
#endif
}

static inline void bc_dl_close(void *h) {
#ifdef _WIN32
    FreeLibrary((HMODULE)h);
#else
    dlclose(h);
#endif
}

/* Fill `table` (laid out as `syms` describes) by exported name from library h.
 * Missing optional entries are NULL. Returns NULL, or the name of the first
 * required entry that is missing (the table is then partly filled: discard it). */
static inline const char *bc_dl_fill(void *h, const bc_symbol_info *syms, size_t n, void *table) {
    size_t i;
    for (i = 0; i < n; i++) {
        void *fn = bc_dl_sym(h, syms[i].name);
        if (!fn && syms[i].required) return syms[i].name;
        memcpy((char *)table + syms[i].offset, &fn, sizeof(fn));
    }
    return NULL;
}

/* Fill `table` through cuGetProcAddress_v2, asking for each entry point at its
 * `version`. An entry the driver does not have (or not at that version) is NULL.
 * Returns NULL, or the name of the first required entry that is missing. */
static inline const char *bc_gpa_fill(PFN_cuGetProcAddress_v2 gpa, const bc_symbol_info *syms, size_t n, void *table) {
    size_t i;
    for (i = 0; i < n; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult status = 0;
        CUresult rc = gpa(syms[i].name, &fn, syms[i].version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
        if (rc != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS) fn = NULL;
        if (!fn && syms[i].required) return syms[i].name;
        memcpy((char *)table + syms[i].offset, &fn, sizeof(fn));
    }
    return NULL;
}

#endif /* BARECUDA_BC_DL_H */
