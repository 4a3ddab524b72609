"""cuBLASLt's ABI as barecuda declares it (include/barecuda/cublaslt_abi.h), ``Matmul``
(one geometry's descriptors and algorithm) and ``issue``: one ``cublasLtMatmul`` from C,
for ``Matmul.run``, ``MatmulPlan.launch`` and the op's recorded call (``_oplt``)."""
from libc.stdint cimport uint64_t, int64_t

from barecuda._abi cimport CUstream, bc_symbol_info
from barecuda._device cimport Device

cdef extern from "barecuda/cublaslt_abi.h" nogil:
    ctypedef int cublasStatus_t
    ctypedef void *cublasLtHandle_t
    ctypedef void *cublasLtMatmulDesc_t
    ctypedef void *cublasLtMatrixLayout_t
    ctypedef void *cublasLtMatmulPreference_t
    ctypedef CUstream bc_lt_stream_t
    ctypedef struct cublasLtMatmulAlgo_t:
        uint64_t data[8]
    ctypedef struct cublasLtMatmulHeuristicResult_t:
        cublasLtMatmulAlgo_t algo
        size_t workspaceSize
        cublasStatus_t state
        float wavesCount
    enum:
        BC_CUDA_R_32F
        BC_CUDA_R_16F
        BC_CUDA_R_16BF
        BC_CUBLAS_COMPUTE_32F
        BC_CUBLAS_OP_N
        BC_CUBLAS_OP_T
        BC_LT_DESC_TRANSA
        BC_LT_DESC_TRANSB
        BC_LT_LAYOUT_BATCH_COUNT
        BC_LT_LAYOUT_STRIDED_BATCH_OFFSET
        BC_LT_PREF_MAX_WORKSPACE_BYTES
    ctypedef struct bc_cublaslt_t:
        size_t (*cublasLtGetVersion)() nogil
        cublasStatus_t (*cublasLtCreate)(cublasLtHandle_t *handle) nogil
        cublasStatus_t (*cublasLtDestroy)(cublasLtHandle_t handle) nogil
        const char *(*cublasLtGetStatusString)(cublasStatus_t status) nogil
        cublasStatus_t (*cublasLtMatmulDescCreate)(cublasLtMatmulDesc_t *desc, int computeType, int scaleType) nogil
        cublasStatus_t (*cublasLtMatmulDescDestroy)(cublasLtMatmulDesc_t desc) nogil
        cublasStatus_t (*cublasLtMatmulDescSetAttribute)(cublasLtMatmulDesc_t desc, int attr, const void *buf,
                                                         size_t size) nogil
        cublasStatus_t (*cublasLtMatrixLayoutCreate)(cublasLtMatrixLayout_t *layout, int type, uint64_t rows,
                                                     uint64_t cols, int64_t ld) nogil
        cublasStatus_t (*cublasLtMatrixLayoutDestroy)(cublasLtMatrixLayout_t layout) nogil
        cublasStatus_t (*cublasLtMatrixLayoutSetAttribute)(cublasLtMatrixLayout_t layout, int attr, const void *buf,
                                                           size_t size) nogil
        cublasStatus_t (*cublasLtMatmulPreferenceCreate)(cublasLtMatmulPreference_t *pref) nogil
        cublasStatus_t (*cublasLtMatmulPreferenceDestroy)(cublasLtMatmulPreference_t pref) nogil
        cublasStatus_t (*cublasLtMatmulPreferenceSetAttribute)(cublasLtMatmulPreference_t pref, int attr,
                                                               const void *buf, size_t size) nogil
        cublasStatus_t (*cublasLtMatmulAlgoGetHeuristic)(
            cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
            cublasLtMatmulHeuristicResult_t *results, int *returned) nogil
        cublasStatus_t (*cublasLtMatmul)(
            cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
            cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta, const void *C,
            cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t *algo,
            void *workspace, size_t workspaceSize, bc_lt_stream_t stream) nogil
    size_t BC_CUBLASLT_NSYMBOLS
    const bc_symbol_info bc_cublaslt_symbols[]


cdef class Matmul:
    cdef cublasLtHandle_t lt
    cdef cublasLtMatmulDesc_t desc
    cdef cublasLtMatrixLayout_t la, lb, lc
    cdef cublasLtMatmulAlgo_t algo
    cdef readonly size_t workspace_size
    cdef readonly int heuristic     # the algorithm's rank in the heuristic's list (0: its first choice)
    cdef readonly Device device
    cdef readonly tuple key
    cdef object __weakref__         # the op's records hold it weakly (_matmul._lt_cache owns it)

    cdef cublasLtMatrixLayout_t _layout(self, int i)
    cdef int run_c(self, const void *a, const void *b, void *c, float alpha, float beta, void *ws,
                   size_t ws_bytes, CUstream s) except -1


# One cublasLtMatmul of mm's geometry on stream s (C = D = c, the workspace ws of ws_bytes,
# at least mm.workspace_size), mm's device's context made current first; without the GIL
# when release_gil. A status other than success raises CublasLtError (call "cublasLtMatmul").
cdef int issue(Matmul mm, const void *a, const void *b, void *c, float alpha, float beta, void *ws,
               size_t ws_bytes, CUstream s, bint release_gil) except -1
