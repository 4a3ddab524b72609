/*
 * barecuda/nvrtc_abi.h -- the NVRTC and nvJitLink ABIs, written by hand (no
 * nvrtc.h / nvJitLink.h needed), the driver's link (cuLink*) and library
 * (cuLibrary*) entry points that _program resolves for itself, and a
 * dlopen/LoadLibrary shim for opening the libraries found by _libfind.py.
 *
 * Included by _program.pyx only. Function tables are filled with bc_tool_dlsym()
 * (NVRTC, nvJitLink: their unversioned exports) or the driver's
 * cuGetProcAddress_v2 (cuLink*, cuLibrary*: at the CUDA version written below).
 */
#ifndef BARECUDA_NVRTC_ABI_H
#define BARECUDA_NVRTC_ABI_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "barecuda/cuda_abi.h"

#ifdef _WIN32
#include <windows.h>
#else
#include <dlfcn.h>
#endif

/* ------------------------------------------------------------------ NVRTC */
typedef int nvrtcResult;                 /* NVRTC_SUCCESS == 0 */
typedef struct _nvrtcProgram *nvrtcProgram;

enum {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6,
    NVRTC_ERROR_BUILTIN_OPERATION_FAILURE = 7,
    NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION = 8,
    NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION = 9,
    NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID = 10,
    NVRTC_ERROR_INTERNAL_ERROR = 11
};

/* X(name, required, params) */
#define BC_NVRTC_SYMBOLS(X) \
    X(nvrtcGetErrorString, 1, const char *, (nvrtcResult result)) \
    X(nvrtcVersion, 1, nvrtcResult, (int *major, int *minor)) \
    X(nvrtcGetNumSupportedArchs, 0, nvrtcResult, (int *numArchs)) \
    X(nvrtcGetSupportedArchs, 0, nvrtcResult, (int *supportedArchs)) \
    X(nvrtcCreateProgram, 1, nvrtcResult, (nvrtcProgram *prog, const char *src, const char *name, int numHeaders, const char *const *headers, const char *const *includeNames)) \
    X(nvrtcDestroyProgram, 1, nvrtcResult, (nvrtcProgram *prog)) \
    X(nvrtcCompileProgram, 1, nvrtcResult, (nvrtcProgram prog, int numOptions, const char *const *options)) \
    X(nvrtcGetPTXSize, 1, nvrtcResult, (nvrtcProgram prog, size_t *ptxSizeRet)) \
    X(nvrtcGetPTX, 1, nvrtcResult, (nvrtcProgram prog, char *ptx)) \
    X(nvrtcGetCUBINSize, 0, nvrtcResult, (nvrtcProgram prog, size_t *cubinSizeRet)) \
    X(nvrtcGetCUBIN, 0, nvrtcResult, (nvrtcProgram prog, char *cubin)) \
    X(nvrtcGetLTOIRSize, 0, nvrtcResult, (nvrtcProgram prog, size_t *ltoirSizeRet)) \
    X(nvrtcGetLTOIR, 0, nvrtcResult, (nvrtcProgram prog, char *ltoir)) \
    X(nvrtcGetProgramLogSize, 1, nvrtcResult, (nvrtcProgram prog, size_t *logSizeRet)) \
    X(nvrtcGetProgramLog, 1, nvrtcResult, (nvrtcProgram prog, char *log)) \
    X(nvrtcAddNameExpression, 1, nvrtcResult, (nvrtcProgram prog, const char *name_expression)) \
    X(nvrtcGetLoweredName, 1, nvrtcResult, (nvrtcProgram prog, const char *name_expression, const char **lowered_name))

#define BC_X_NVRTC_FIELD(name, required, ret, params) ret (*name) params;
typedef struct { BC_NVRTC_SYMBOLS(BC_X_NVRTC_FIELD) } bc_nvrtc_t;

/* ------------------------------------------------------------------ nvJitLink */
typedef int nvJitLinkResult;             /* NVJITLINK_SUCCESS == 0 */
typedef struct nvJitLink *nvJitLinkHandle;
typedef enum {
    NVJITLINK_INPUT_NONE = 0,
    NVJITLINK_INPUT_CUBIN = 1,
    NVJITLINK_INPUT_PTX = 2,
    NVJITLINK_INPUT_LTOIR = 3,
    NVJITLINK_INPUT_FATBIN = 4,
    NVJITLINK_INPUT_OBJECT = 5,
    NVJITLINK_INPUT_LIBRARY = 6,
    NVJITLINK_INPUT_ANY = 10
} nvJitLinkInputType;

#define BC_NVJITLINK_SYMBOLS(X) \
    X(nvJitLinkCreate, 1, nvJitLinkResult, (nvJitLinkHandle *handle, unsigned int numOptions, const char **options)) \
    X(nvJitLinkDestroy, 1, nvJitLinkResult, (nvJitLinkHandle *handle)) \
    X(nvJitLinkAddData, 1, nvJitLinkResult, (nvJitLinkHandle handle, nvJitLinkInputType inputType, const void *data, size_t size, const char *name)) \
    X(nvJitLinkComplete, 1, nvJitLinkResult, (nvJitLinkHandle handle)) \
    X(nvJitLinkGetLinkedCubinSize, 1, nvJitLinkResult, (nvJitLinkHandle handle, size_t *size)) \
    X(nvJitLinkGetLinkedCubin, 1, nvJitLinkResult, (nvJitLinkHandle handle, void *cubin)) \
    X(nvJitLinkGetLinkedPtxSize, 1, nvJitLinkResult, (nvJitLinkHandle handle, size_t *size)) \
    X(nvJitLinkGetLinkedPtx, 1, nvJitLinkResult, (nvJitLinkHandle handle, char *ptx)) \
    X(nvJitLinkGetErrorLogSize, 1, nvJitLinkResult, (nvJitLinkHandle handle, size_t *size)) \
    X(nvJitLinkGetErrorLog, 1, nvJitLinkResult, (nvJitLinkHandle handle, char *log)) \
    X(nvJitLinkGetInfoLogSize, 1, nvJitLinkResult, (nvJitLinkHandle handle, size_t *size)) \
    X(nvJitLinkGetInfoLog, 1, nvJitLinkResult, (nvJitLinkHandle handle, char *log)) \
    X(nvJitLinkVersion, 0, nvJitLinkResult, (unsigned int *major, unsigned int *minor))

typedef struct { BC_NVJITLINK_SYMBOLS(BC_X_NVRTC_FIELD) } bc_nvjitlink_t;
#undef BC_X_NVRTC_FIELD

/* ------------------------------------------------------------------ driver: link and library */
typedef struct CUlinkState_st *CUlinkState;
/* CUlibrary and CUkernel come from cuda_abi.h */
typedef int CUjitInputType;
typedef int CUlibraryOption;
enum {
    CU_JIT_INPUT_CUBIN = 0,
    CU_JIT_INPUT_PTX = 1,
    CU_JIT_INPUT_FATBINARY = 2,
    CU_JIT_INPUT_OBJECT = 3,
    CU_JIT_INPUT_LIBRARY = 4
};

/* X(name, CUDA version of the ABI, params): resolved with cuGetProcAddress_v2 */
#define BC_LINK_SYMBOLS(X) \
    X(cuLinkCreate, 6050, (unsigned int numOptions, CUjit_option *options, void **optionValues, CUlinkState *stateOut)) \
    X(cuLinkAddData, 6050, (CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name, unsigned int numOptions, CUjit_option *options, void **optionValues)) \
    X(cuLinkComplete, 5050, (CUlinkState state, void **cubinOut, size_t *sizeOut)) \
    X(cuLinkDestroy, 5050, (CUlinkState state)) \
    X(cuLibraryLoadData, 12000, (CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues, unsigned int numLibraryOptions)) \
    X(cuLibraryUnload, 12000, (CUlibrary library)) \
    X(cuLibraryGetKernel, 12000, (CUkernel *pKernel, CUlibrary library, const char *name)) \
    X(cuKernelGetFunction, 12000, (CUfunction *pFunc, CUkernel kernel))

#define BC_X_LINK_FIELD(name, version, params) CUresult (CUDAAPI *name) params;
typedef struct { BC_LINK_SYMBOLS(BC_X_LINK_FIELD) } bc_linkdrv_t;
#undef BC_X_LINK_FIELD

typedef struct { const char *name; int required; size_t offset; } bc_tool_symbol;
typedef struct { const char *name; int version; size_t offset; } bc_link_symbol;

#define BC_X_NVRTC_INFO(name, required, ret, params) {#name, required, offsetof(bc_nvrtc_t, name)},
static const bc_tool_symbol bc_nvrtc_symbols[] = { BC_NVRTC_SYMBOLS(BC_X_NVRTC_INFO) };
#undef BC_X_NVRTC_INFO
#define BC_X_JL_INFO(name, required, ret, params) {#name, required, offsetof(bc_nvjitlink_t, name)},
static const bc_tool_symbol bc_nvjitlink_symbols[] = { BC_NVJITLINK_SYMBOLS(BC_X_JL_INFO) };
#undef BC_X_JL_INFO
#define BC_X_LINK_INFO(name, version, params) {#name, version, offsetof(bc_linkdrv_t, name)},
static const bc_link_symbol bc_link_symbols[] = { BC_LINK_SYMBOLS(BC_X_LINK_INFO) };
#undef BC_X_LINK_INFO
#define BC_NVRTC_SYMBOL_COUNT (sizeof(bc_nvrtc_symbols) / sizeof(bc_nvrtc_symbols[0]))
#define BC_NVJITLINK_SYMBOL_COUNT (sizeof(bc_nvjitlink_symbols) / sizeof(bc_nvjitlink_symbols[0]))
#define BC_LINK_SYMBOL_COUNT (sizeof(bc_link_symbols) / sizeof(bc_link_symbols[0]))

/* ------------------------------------------------------------------ dlopen shim */
static void *bc_tool_dlopen(const char *path, char *err, size_t errlen) {
#ifdef _WIN32
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

static void *bc_tool_dlsym(void *h, const char *name) {
#ifdef _WIN32
    return (void *)GetProcAddress((HMODULE)h, name);
#else
    return dlsym(h, name);
#endif
}

static void bc_tool_dlclose(void *h) {
#ifdef _WIN32
    FreeLibrary((HMODULE)h);
#else
    dlclose(h);
#endif
}

/* Fill `table` (an array of function pointers laid out as `syms`) from library h.
 * Returns NULL, or the name of the first required symbol that is missing. */
static const char *bc_tool_resolve(void *h, const bc_tool_symbol *syms, size_t n, void *table) {
    size_t i;
    for (i = 0; i < n; i++) {
        void *fn = bc_tool_dlsym(h, syms[i].name);
        if (!fn && syms[i].required) return syms[i].name;
        memcpy((char *)table + syms[i].offset, &fn, sizeof(fn));
    }
    return NULL;
}

/* Fill the driver's link/library table through cuGetProcAddress_v2 (found in the
 * already-opened driver handle). Missing entry points stay NULL. */
static void bc_link_resolve(void *driver_handle, bc_linkdrv_t *table) {
    size_t i;
    PFN_cuGetProcAddress_v2 gpa;
    memset(table, 0, sizeof(*table));
    if (!driver_handle) return;
    gpa = (PFN_cuGetProcAddress_v2)bc_tool_dlsym(driver_handle, "cuGetProcAddress_v2");
    if (!gpa) return;
    for (i = 0; i < BC_LINK_SYMBOL_COUNT; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult status = 0;
        CUresult rc = gpa(bc_link_symbols[i].name, &fn, bc_link_symbols[i].version,
                          CU_GET_PROC_ADDRESS_DEFAULT, &status);
        if (rc != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS) fn = NULL;
        memcpy((char *)table + bc_link_symbols[i].offset, &fn, sizeof(fn));
    }
}

#endif /* BARECUDA_NVRTC_ABI_H */
