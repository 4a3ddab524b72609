/*
 * barecuda/nccl_abi.h -- the part of NCCL's C ABI that barecuda calls, written by
 * hand (no nccl.h needed to build). libnccl.so.2 is loaded at run time by
 * src/barecuda/_nccl.pyx with the shared shim (bc_dl.h); every entry point below
 * is looked up by name (bc_dl_fill).
 *
 * Values follow NCCL 2.x's public header (stable since 2.10; bfloat16 from 2.10,
 * the fp8 types from 2.24). ncclUniqueId is 128 opaque bytes passed BY VALUE to
 * ncclCommInitRank.
 */
#ifndef BARECUDA_NCCL_ABI_H
#define BARECUDA_NCCL_ABI_H

#include <stddef.h>
#include "barecuda/bc_dl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BC_NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[BC_NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef struct ncclComm *ncclComm_t;
typedef struct CUstream_st *bc_nccl_stream_t;   /* cudaStream_t == CUstream */

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

typedef enum {
    ncclInt8 = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclFloat32 = 7,
    ncclFloat64 = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11
} ncclDataType_t;

typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4
} ncclRedOp_t;

/* X(return type, name, parameter list) */
#define BC_NCCL_SYMBOLS(X) \
    X(ncclResult_t, ncclGetVersion, (int *version)) \
    X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId *uniqueId)) \
    X(ncclResult_t, ncclCommInitRank, (ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)) \
    X(ncclResult_t, ncclCommInitAll, (ncclComm_t *comm, int ndev, const int *devlist)) \
    X(ncclResult_t, ncclCommDestroy, (ncclComm_t comm)) \
    X(ncclResult_t, ncclCommAbort, (ncclComm_t comm)) \
    X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t *asyncError)) \
    X(const char *, ncclGetErrorString, (ncclResult_t result)) \
    X(const char *, ncclGetLastError, (ncclComm_t comm)) \
    X(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int *count)) \
    X(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int *device)) \
    X(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int *rank)) \
    X(ncclResult_t, ncclAllReduce, (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, bc_nccl_stream_t stream)) \
    X(ncclResult_t, ncclBroadcast, (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, bc_nccl_stream_t stream)) \
    X(ncclResult_t, ncclReduce, (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, bc_nccl_stream_t stream)) \
    X(ncclResult_t, ncclAllGather, (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, bc_nccl_stream_t stream)) \
    X(ncclResult_t, ncclReduceScatter, (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, bc_nccl_stream_t stream)) \
    X(ncclResult_t, ncclSend, (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, bc_nccl_stream_t stream)) \
    X(ncclResult_t, ncclRecv, (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, bc_nccl_stream_t stream)) \
    X(ncclResult_t, ncclGroupStart, (void)) \
    X(ncclResult_t, ncclGroupEnd, (void))

#define BC_NCCL_X_PFN(ret, name, params) typedef ret (*PFN_##name) params;
BC_NCCL_SYMBOLS(BC_NCCL_X_PFN)
#undef BC_NCCL_X_PFN

/* The NCCL table: one pointer per entry point (NULL where this libnccl lacks it). */
typedef struct bc_nccl_t {
#define BC_NCCL_X_FIELD(ret, name, params) PFN_##name name;
    BC_NCCL_SYMBOLS(BC_NCCL_X_FIELD)
#undef BC_NCCL_X_FIELD
} bc_nccl_t;

/* Names in table order, for the loader. */
static const char *const bc_nccl_symbol_names[] = {
#define BC_NCCL_X_NAME(ret, name, params) #name,
    BC_NCCL_SYMBOLS(BC_NCCL_X_NAME)
#undef BC_NCCL_X_NAME
};
#define BC_NCCL_NSYMBOLS (sizeof(bc_nccl_symbol_names) / sizeof(bc_nccl_symbol_names[0]))

/* Rows for bc_dl_fill, every one optional: _nccl.pyx decides which are required, so
 * that its message can name every missing one. */
static const bc_symbol_info bc_nccl_symbols[] = {
#define BC_NCCL_X_ROW(ret, name, params) {#name, 0, 0, offsetof(bc_nccl_t, name)},
    BC_NCCL_SYMBOLS(BC_NCCL_X_ROW)
#undef BC_NCCL_X_ROW
};

#ifdef __cplusplus
}
#endif
#endif /* BARECUDA_NCCL_ABI_H */
