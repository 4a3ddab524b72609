/*
 * barecuda/cublaslt_abi.h -- the few cuBLASLt entry points, enums and structs that
 * barecuda.kernels._cublaslt uses, declared here so that no cuBLAS header or import
 * library is needed to build. libcublasLt is opened at run time (bc_dl.h) from the pip
 * wheel nvidia-cublas (CUDA 13) / nvidia-cublas-cu12 (CUDA 12) or the system.
 *
 * Values are those of cublasLt.h / cublas_api.h / library_types.h (CUDA 12.0 .. 13.x:
 * these enums and structs have not changed across those releases).
 */
#ifndef BARECUDA_CUBLASLT_ABI_H
#define BARECUDA_CUBLASLT_ABI_H

#include <stddef.h>
#include <stdint.h>
#include "barecuda/bc_dl.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int cublasStatus_t;                 /* CUBLAS_STATUS_SUCCESS = 0 */
typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct bc_lt_desc_opaque *cublasLtMatmulDesc_t;
typedef struct bc_lt_layout_opaque *cublasLtMatrixLayout_t;
typedef struct bc_lt_pref_opaque *cublasLtMatmulPreference_t;
typedef struct CUstream_st *bc_lt_stream_t;  /* cudaStream_t == CUstream */

/* semi-opaque algorithm descriptor (cublasLtMatmulAlgo_t) and the heuristic's answer */
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

/* library_types.h: cudaDataType */
enum { BC_CUDA_R_32F = 0, BC_CUDA_R_16F = 2, BC_CUDA_R_16BF = 14 };
/* cublas_api.h: cublasComputeType_t, cublasOperation_t */
enum { BC_CUBLAS_COMPUTE_32F = 68 };
enum { BC_CUBLAS_OP_N = 0, BC_CUBLAS_OP_T = 1 };
/* cublasLt.h: cublasLtMatmulDescAttributes_t (int32 values) */
enum { BC_LT_DESC_TRANSA = 3, BC_LT_DESC_TRANSB = 4 };
/* cublasLtMatrixLayoutAttribute_t: BATCH_COUNT int32, STRIDED_BATCH_OFFSET int64 */
enum { BC_LT_LAYOUT_BATCH_COUNT = 5, BC_LT_LAYOUT_STRIDED_BATCH_OFFSET = 6 };
/* cublasLtMatmulPreferenceAttributes_t: MAX_WORKSPACE_BYTES uint64 */
enum { BC_LT_PREF_MAX_WORKSPACE_BYTES = 1 };

/* X(return type, name, parameter list) */
#define BC_CUBLASLT_SYMBOLS(X) \
    X(size_t, cublasLtGetVersion, (void)) \
    X(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t *handle)) \
    X(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t handle)) \
    X(const char *, cublasLtGetStatusString, (cublasStatus_t status)) \
    X(cublasStatus_t, cublasLtMatmulDescCreate, (cublasLtMatmulDesc_t *desc, int computeType, int scaleType)) \
    X(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc)) \
    X(cublasStatus_t, cublasLtMatmulDescSetAttribute, (cublasLtMatmulDesc_t desc, int attr, const void *buf, size_t size)) \
    X(cublasStatus_t, cublasLtMatrixLayoutCreate, (cublasLtMatrixLayout_t *layout, int type, uint64_t rows, uint64_t cols, int64_t ld)) \
    X(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout)) \
    X(cublasStatus_t, cublasLtMatrixLayoutSetAttribute, (cublasLtMatrixLayout_t layout, int attr, const void *buf, size_t size)) \
    X(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t *pref)) \
    X(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref)) \
    X(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute, (cublasLtMatmulPreference_t pref, int attr, const void *buf, size_t size)) \
    X(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic, (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t *results, int *returned)) \
    X(cublasStatus_t, cublasLtMatmul, (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A, cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta, const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspaceSize, bc_lt_stream_t stream))

#define BC_CUBLASLT_X_PFN(ret, name, params) typedef ret (*PFN_##name) params;
BC_CUBLASLT_SYMBOLS(BC_CUBLASLT_X_PFN)
#undef BC_CUBLASLT_X_PFN

/* The cuBLASLt table: one pointer per entry point (NULL where this library lacks it). */
typedef struct bc_cublaslt_t {
#define BC_CUBLASLT_X_FIELD(ret, name, params) PFN_##name name;
    BC_CUBLASLT_SYMBOLS(BC_CUBLASLT_X_FIELD)
#undef BC_CUBLASLT_X_FIELD
} bc_cublaslt_t;

static const char *const bc_cublaslt_symbol_names[] = {
#define BC_CUBLASLT_X_NAME(ret, name, params) #name,
    BC_CUBLASLT_SYMBOLS(BC_CUBLASLT_X_NAME)
#undef BC_CUBLASLT_X_NAME
};
#define BC_CUBLASLT_NSYMBOLS (sizeof(bc_cublaslt_symbol_names) / sizeof(bc_cublaslt_symbol_names[0]))

/* Rows for bc_dl_fill, every one optional: _cublaslt.pyx says which are missing. */
static const bc_symbol_info bc_cublaslt_symbols[] = {
#define BC_CUBLASLT_X_ROW(ret, name, params) {#name, 0, 0, offsetof(bc_cublaslt_t, name)},
    BC_CUBLASLT_SYMBOLS(BC_CUBLASLT_X_ROW)
#undef BC_CUBLASLT_X_ROW
};

#ifdef __cplusplus
}
#endif
#endif /* BARECUDA_CUBLASLT_ABI_H */
