/*
 * barecuda/cuda_graph_abi.h -- the CUDA graphs part of the driver ABI (feature: CUDA
 * graphs, src/barecuda/graph/): the node, capture, instantiate and update enums, the
 * node-parameter and edge structs, each with its static size check.
 *
 * A section of cuda_abi.h kept in its own file only to hold that header under the
 * 800-line limit; cuda_abi.h includes it at the point where the section stood (after
 * the IPC types, before BC_DRIVER_SYMBOLS, whose graph rows use these types), inside
 * its extern "C" block. It uses cuda_abi.h's scalars (CUfunction, CUgraph, CUstream,
 * CUhostFn) and BC_STATIC_ASSERT, so it is not a header of its own: include
 * barecuda/cuda_abi.h. tests/core/test_abi.py checks its values with the rest, through
 * the preprocessed cuda_abi.h.
 */
#ifndef BARECUDA_CUDA_GRAPH_ABI_H
#define BARECUDA_CUDA_GRAPH_ABI_H

#ifndef BARECUDA_CUDA_ABI_H
#error "barecuda/cuda_graph_abi.h is part of barecuda/cuda_abi.h: include that header"
#endif

typedef struct CUgraphNode_st *CUgraphNode;
typedef unsigned long long CUgraphConditionalHandle;

typedef enum CUstreamCaptureMode_enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED = 2
} CUstreamCaptureMode;

typedef enum CUstreamCaptureStatus_enum {
    CU_STREAM_CAPTURE_STATUS_NONE = 0,
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} CUstreamCaptureStatus;

typedef enum CUgraphNodeType_enum {
    CU_GRAPH_NODE_TYPE_KERNEL = 0,
    CU_GRAPH_NODE_TYPE_MEMCPY = 1,
    CU_GRAPH_NODE_TYPE_MEMSET = 2,
    CU_GRAPH_NODE_TYPE_HOST = 3,
    CU_GRAPH_NODE_TYPE_GRAPH = 4,
    CU_GRAPH_NODE_TYPE_EMPTY = 5,
    CU_GRAPH_NODE_TYPE_WAIT_EVENT = 6,
    CU_GRAPH_NODE_TYPE_EVENT_RECORD = 7,
    CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL = 8,
    CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT = 9,
    CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10,
    CU_GRAPH_NODE_TYPE_MEM_FREE = 11,
    CU_GRAPH_NODE_TYPE_BATCH_MEM_OP = 12,
    CU_GRAPH_NODE_TYPE_CONDITIONAL = 13
} CUgraphNodeType;

typedef enum CUgraphConditionalNodeType_enum {
    CU_GRAPH_COND_TYPE_IF = 0,
    CU_GRAPH_COND_TYPE_WHILE = 1,
    CU_GRAPH_COND_TYPE_SWITCH = 2
} CUgraphConditionalNodeType;
#define CU_GRAPH_COND_ASSIGN_DEFAULT 0x1

typedef enum CUgraphExecUpdateResult_enum {
    CU_GRAPH_EXEC_UPDATE_SUCCESS = 0x0,
    CU_GRAPH_EXEC_UPDATE_ERROR = 0x1,
    CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED = 0x2,
    CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED = 0x3,
    CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED = 0x4,
    CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED = 0x5,
    CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED = 0x6,
    CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE = 0x7,
    CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED = 0x8
} CUgraphExecUpdateResult;

typedef enum CUgraphInstantiateResult_enum {
    CUDA_GRAPH_INSTANTIATE_SUCCESS = 0,
    CUDA_GRAPH_INSTANTIATE_ERROR = 1,
    CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE = 2,
    CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED = 3,
    CUDA_GRAPH_INSTANTIATE_MULTIPLE_CTXS_NOT_SUPPORTED = 4,
    CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED = 5
} CUgraphInstantiateResult;

typedef enum CUgraphInstantiate_flags_enum {
    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH = 1,
    CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD = 2,
    CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH = 4,
    CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY = 8
} CUgraphInstantiate_flags;

typedef enum CUgraphDebugDot_flags_enum {
    CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE = 1
} CUgraphDebugDot_flags;

typedef struct CUDA_KERNEL_NODE_PARAMS_v2_st {
    CUfunction func;
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
    CUkernel kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS_v2;

typedef struct CUDA_MEMSET_NODE_PARAMS_st {
    CUdeviceptr dst;
    size_t pitch;
    unsigned int value;
    unsigned int elementSize;
    size_t width;
    size_t height;
} CUDA_MEMSET_NODE_PARAMS;

typedef struct CUDA_HOST_NODE_PARAMS_st {
    CUhostFn fn;
    void *userData;
} CUDA_HOST_NODE_PARAMS;

typedef struct CUDA_CONDITIONAL_NODE_PARAMS {
    CUgraphConditionalHandle handle;
    CUgraphConditionalNodeType type;
    unsigned int size;
    CUgraph *phGraph_out;
    CUcontext ctx;
} CUDA_CONDITIONAL_NODE_PARAMS;

/* Only the members barecuda fills (type, conditional) are spelled out; the union is
 * padded to the driver's 29 long longs. */
typedef struct CUgraphNodeParams_st {
    CUgraphNodeType type;
    int reserved0[3];
    union {
        long long reserved1[29];
        CUDA_CONDITIONAL_NODE_PARAMS conditional;
    };
    long long reserved2;
} CUgraphNodeParams;

/* CUgraphEdgeData.type and .from_port (12.3+): a programmatic edge lets the downstream
 * kernel start before the upstream one ends (programmatic dependent launch). */
enum {
    CU_GRAPH_DEPENDENCY_TYPE_DEFAULT = 0,
    CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC = 1
};
enum {
    CU_GRAPH_KERNEL_NODE_PORT_DEFAULT = 0,
    CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC = 1,
    CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER = 2
};

typedef struct CUgraphEdgeData_st {
    unsigned char from_port;
    unsigned char to_port;
    unsigned char type;
    unsigned char reserved[5];
} CUgraphEdgeData;

typedef struct CUgraphExecUpdateResultInfo_st {
    CUgraphExecUpdateResult result;
    CUgraphNode errorNode;
    CUgraphNode errorFromNode;
} CUgraphExecUpdateResultInfo;

typedef struct CUDA_GRAPH_INSTANTIATE_PARAMS_st {
    unsigned long long flags;
    CUstream hUploadStream;
    CUgraphNode hErrNode_out;
    CUgraphInstantiateResult result_out;
} CUDA_GRAPH_INSTANTIATE_PARAMS;

#if UINTPTR_MAX == 0xffffffffffffffffULL
BC_STATIC_ASSERT(sizeof(CUDA_KERNEL_NODE_PARAMS_v2) == 72, kernel_node_params_v2_size);
BC_STATIC_ASSERT(sizeof(CUDA_MEMSET_NODE_PARAMS) == 40, memset_node_params_size);
BC_STATIC_ASSERT(sizeof(CUDA_HOST_NODE_PARAMS) == 16, host_node_params_size);
BC_STATIC_ASSERT(sizeof(CUDA_CONDITIONAL_NODE_PARAMS) == 32, conditional_node_params_size);
BC_STATIC_ASSERT(sizeof(CUgraphNodeParams) == 256, graph_node_params_size);
BC_STATIC_ASSERT(offsetof(CUgraphNodeParams, conditional) == 16, graph_node_params_union_offset);
BC_STATIC_ASSERT(sizeof(CUgraphEdgeData) == 8, graph_edge_data_size);
BC_STATIC_ASSERT(sizeof(CUgraphExecUpdateResultInfo) == 24, exec_update_result_info_size);
BC_STATIC_ASSERT(sizeof(CUDA_GRAPH_INSTANTIATE_PARAMS) == 32, instantiate_params_size);
#endif

#endif /* BARECUDA_CUDA_GRAPH_ABI_H */
