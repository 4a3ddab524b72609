/*
 * barecuda/nvrtc_abi.h -- the NVRTC and nvJitLink ABIs, written by hand (no
 * nvrtc.h / nvJitLink.h needed): result codes, input kinds and one X-macro of
 * entry points per library, from which the function tables and their
 * bc_symbol_info rows are generated.
 *
 * Included by _nvrtc.pyx only. The libraries are found by _libfind.py, opened with
 * bc_dl_open and their tables filled by exported name with bc_dl_fill (both in
 * bc_dl.h, the shim the driver loader shares). The driver's own linker and library
 * entry points (cuLink*, cuLibrary*) are in the driver table (cuda_abi.h).
 */
#ifndef BARECUDA_NVRTC_ABI_H
#define BARECUDA_NVRTC_ABI_H

#include <stddef.h>
#include "barecuda/bc_dl.h"

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

/* X(name, required: 0 when an older library may lack it, return type, parameter list) */
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
typedef int nvJitLinkResult;
enum { NVJITLINK_SUCCESS = 0 };          /* every other value is a failure, reported as a number */
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

/* Rows for bc_dl_fill (version 0: these libraries export one variant per name). */
#define BC_X_NVRTC_INFO(name, required, ret, params) {#name, 0, required, offsetof(bc_nvrtc_t, name)},
static const bc_symbol_info bc_nvrtc_symbols[] = { BC_NVRTC_SYMBOLS(BC_X_NVRTC_INFO) };
#undef BC_X_NVRTC_INFO
#define BC_X_JL_INFO(name, required, ret, params) {#name, 0, required, offsetof(bc_nvjitlink_t, name)},
static const bc_symbol_info bc_nvjitlink_symbols[] = { BC_NVJITLINK_SYMBOLS(BC_X_JL_INFO) };
#undef BC_X_JL_INFO
#define BC_NVRTC_SYMBOL_COUNT (sizeof(bc_nvrtc_symbols) / sizeof(bc_nvrtc_symbols[0]))
#define BC_NVJITLINK_SYMBOL_COUNT (sizeof(bc_nvjitlink_symbols) / sizeof(bc_nvjitlink_symbols[0]))

#endif /* BARECUDA_NVRTC_ABI_H */
