/*
 * barecuda/cuda_abi.h -- the part of the CUDA driver ABI that barecuda uses,
 * written by hand. No CUDA header, toolkit or import library is needed to build.
 *
 * Every enum carries explicit values, every struct a static size check, and every
 * entry point a PFN_ typedef for the exact ABI variant we call. The variant is
 * chosen at run time by asking cuGetProcAddress_v2 for the symbol at the CUDA
 * version written next to it in BC_DRIVER_SYMBOLS below: asking for
 * cuCtxSynchronize at 13000 would return a function taking a CUcontext, asking
 * for cuMemAlloc at 2000 the 32-bit one -- the version pins the signature.
 *
 * tests/core/test_abi.py compares these values with NVIDIA's cuda.h where one is
 * installed; nothing here may depend on that header.
 */
#ifndef BARECUDA_CUDA_ABI_H
#define BARECUDA_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "barecuda/cuda_errors.h" /* CUDA_SUCCESS and every CUDA_ERROR_* name */

#ifdef _WIN32
#define CUDAAPI __stdcall
#else
#define CUDAAPI
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ scalars */
typedef int CUresult;                 /* enum cudaError_enum; names and table in cuda_errors.h */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUarray_st *CUarray;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

typedef struct CUuuid_st { char bytes[16]; } CUuuid;

#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* -------------------------------------------------------------------- enums */
/* Every CUdevice_attribute as X(SUFFIX, value): the enum below and the name tables that
 * _abi.pxd builds for Python (Device.attribute names) come from this one list. */
#define BC_DEVICE_ATTRIBUTES(X) \
    X(MAX_THREADS_PER_BLOCK, 1) \
    X(MAX_BLOCK_DIM_X, 2) \
    X(MAX_BLOCK_DIM_Y, 3) \
    X(MAX_BLOCK_DIM_Z, 4) \
    X(MAX_GRID_DIM_X, 5) \
    X(MAX_GRID_DIM_Y, 6) \
    X(MAX_GRID_DIM_Z, 7) \
    X(MAX_SHARED_MEMORY_PER_BLOCK, 8) \
    X(TOTAL_CONSTANT_MEMORY, 9) \
    X(WARP_SIZE, 10) \
    X(MAX_PITCH, 11) \
    X(MAX_REGISTERS_PER_BLOCK, 12) \
    X(CLOCK_RATE, 13) \
    X(TEXTURE_ALIGNMENT, 14) \
    X(GPU_OVERLAP, 15) \
    X(MULTIPROCESSOR_COUNT, 16) \
    X(KERNEL_EXEC_TIMEOUT, 17) \
    X(INTEGRATED, 18) \
    X(CAN_MAP_HOST_MEMORY, 19) \
    X(COMPUTE_MODE, 20) \
    X(MAXIMUM_TEXTURE1D_WIDTH, 21) \
    X(MAXIMUM_TEXTURE2D_WIDTH, 22) \
    X(MAXIMUM_TEXTURE2D_HEIGHT, 23) \
    X(MAXIMUM_TEXTURE3D_WIDTH, 24) \
    X(MAXIMUM_TEXTURE3D_HEIGHT, 25) \
    X(MAXIMUM_TEXTURE3D_DEPTH, 26) \
    X(MAXIMUM_TEXTURE2D_LAYERED_WIDTH, 27) \
    X(MAXIMUM_TEXTURE2D_LAYERED_HEIGHT, 28) \
    X(MAXIMUM_TEXTURE2D_LAYERED_LAYERS, 29) \
    X(SURFACE_ALIGNMENT, 30) \
    X(CONCURRENT_KERNELS, 31) \
    X(ECC_ENABLED, 32) \
    X(PCI_BUS_ID, 33) \
    X(PCI_DEVICE_ID, 34) \
    X(TCC_DRIVER, 35) \
    X(MEMORY_CLOCK_RATE, 36) \
    X(GLOBAL_MEMORY_BUS_WIDTH, 37) \
    X(L2_CACHE_SIZE, 38) \
    X(MAX_THREADS_PER_MULTIPROCESSOR, 39) \
    X(ASYNC_ENGINE_COUNT, 40) \
    X(UNIFIED_ADDRESSING, 41) \
    X(MAXIMUM_TEXTURE1D_LAYERED_WIDTH, 42) \
    X(MAXIMUM_TEXTURE1D_LAYERED_LAYERS, 43) \
    X(CAN_TEX2D_GATHER, 44) \
    X(MAXIMUM_TEXTURE2D_GATHER_WIDTH, 45) \
    X(MAXIMUM_TEXTURE2D_GATHER_HEIGHT, 46) \
    X(MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE, 47) \
    X(MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE, 48) \
    X(MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE, 49) \
    X(PCI_DOMAIN_ID, 50) \
    X(TEXTURE_PITCH_ALIGNMENT, 51) \
    X(MAXIMUM_TEXTURECUBEMAP_WIDTH, 52) \
    X(MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH, 53) \
    X(MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS, 54) \
    X(MAXIMUM_SURFACE1D_WIDTH, 55) \
    X(MAXIMUM_SURFACE2D_WIDTH, 56) \
    X(MAXIMUM_SURFACE2D_HEIGHT, 57) \
    X(MAXIMUM_SURFACE3D_WIDTH, 58) \
    X(MAXIMUM_SURFACE3D_HEIGHT, 59) \
    X(MAXIMUM_SURFACE3D_DEPTH, 60) \
    X(MAXIMUM_SURFACE1D_LAYERED_WIDTH, 61) \
    X(MAXIMUM_SURFACE1D_LAYERED_LAYERS, 62) \
    X(MAXIMUM_SURFACE2D_LAYERED_WIDTH, 63) \
    X(MAXIMUM_SURFACE2D_LAYERED_HEIGHT, 64) \
    X(MAXIMUM_SURFACE2D_LAYERED_LAYERS, 65) \
    X(MAXIMUM_SURFACECUBEMAP_WIDTH, 66) \
    X(MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH, 67) \
    X(MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS, 68) \
    X(MAXIMUM_TEXTURE1D_LINEAR_WIDTH, 69) \
    X(MAXIMUM_TEXTURE2D_LINEAR_WIDTH, 70) \
    X(MAXIMUM_TEXTURE2D_LINEAR_HEIGHT, 71) \
    X(MAXIMUM_TEXTURE2D_LINEAR_PITCH, 72) \
    X(MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH, 73) \
    X(MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT, 74) \
    X(COMPUTE_CAPABILITY_MAJOR, 75) \
    X(COMPUTE_CAPABILITY_MINOR, 76) \
    X(MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH, 77) \
    X(STREAM_PRIORITIES_SUPPORTED, 78) \
    X(GLOBAL_L1_CACHE_SUPPORTED, 79) \
    X(LOCAL_L1_CACHE_SUPPORTED, 80) \
    X(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 81) \
    X(MAX_REGISTERS_PER_MULTIPROCESSOR, 82) \
    X(MANAGED_MEMORY, 83) \
    X(MULTI_GPU_BOARD, 84) \
    X(MULTI_GPU_BOARD_GROUP_ID, 85) \
    X(HOST_NATIVE_ATOMIC_SUPPORTED, 86) \
    X(SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, 87) \
    X(PAGEABLE_MEMORY_ACCESS, 88) \
    X(CONCURRENT_MANAGED_ACCESS, 89) \
    X(COMPUTE_PREEMPTION_SUPPORTED, 90) \
    X(CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 91) \
    X(CAN_USE_STREAM_MEM_OPS_V1, 92) \
    X(CAN_USE_64_BIT_STREAM_MEM_OPS_V1, 93) \
    X(CAN_USE_STREAM_WAIT_VALUE_NOR_V1, 94) \
    X(COOPERATIVE_LAUNCH, 95) \
    X(COOPERATIVE_MULTI_DEVICE_LAUNCH, 96) \
    X(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 97) \
    X(CAN_FLUSH_REMOTE_WRITES, 98) \
    X(HOST_REGISTER_SUPPORTED, 99) \
    X(PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, 100) \
    X(DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, 101) \
    X(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 102) \
    X(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 103) \
    X(HANDLE_TYPE_WIN32_HANDLE_SUPPORTED, 104) \
    X(HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED, 105) \
    X(MAX_BLOCKS_PER_MULTIPROCESSOR, 106) \
    X(GENERIC_COMPRESSION_SUPPORTED, 107) \
    X(MAX_PERSISTING_L2_CACHE_SIZE, 108) \
    X(MAX_ACCESS_POLICY_WINDOW_SIZE, 109) \
    X(GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 110) \
    X(RESERVED_SHARED_MEMORY_PER_BLOCK, 111) \
    X(SPARSE_CUDA_ARRAY_SUPPORTED, 112) \
    X(READ_ONLY_HOST_REGISTER_SUPPORTED, 113) \
    X(TIMELINE_SEMAPHORE_INTEROP_SUPPORTED, 114) \
    X(MEMORY_POOLS_SUPPORTED, 115) \
    X(GPU_DIRECT_RDMA_SUPPORTED, 116) \
    X(GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, 117) \
    X(GPU_DIRECT_RDMA_WRITES_ORDERING, 118) \
    X(MEMPOOL_SUPPORTED_HANDLE_TYPES, 119) \
    X(CLUSTER_LAUNCH, 120) \
    X(DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED, 121) \
    X(CAN_USE_64_BIT_STREAM_MEM_OPS, 122) \
    X(CAN_USE_STREAM_WAIT_VALUE_NOR, 123) \
    X(DMA_BUF_SUPPORTED, 124) \
    X(IPC_EVENT_SUPPORTED, 125) \
    X(MEM_SYNC_DOMAIN_COUNT, 126) \
    X(TENSOR_MAP_ACCESS_SUPPORTED, 127) \
    X(HANDLE_TYPE_FABRIC_SUPPORTED, 128) \
    X(UNIFIED_FUNCTION_POINTERS, 129) \
    X(NUMA_CONFIG, 130) \
    X(NUMA_ID, 131) \
    X(MULTICAST_SUPPORTED, 132) \
    X(MPS_ENABLED, 133) \
    X(HOST_NUMA_ID, 134) \
    X(D3D12_CIG_SUPPORTED, 135) \
    X(MEM_DECOMPRESS_ALGORITHM_MASK, 136) \
    X(MEM_DECOMPRESS_MAXIMUM_LENGTH, 137) \
    X(VULKAN_CIG_SUPPORTED, 138) \
    X(GPU_PCI_DEVICE_ID, 139) \
    X(GPU_PCI_SUBSYSTEM_ID, 140) \
    X(HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 141) \
    X(HOST_NUMA_MEMORY_POOLS_SUPPORTED, 142) \
    X(HOST_NUMA_MULTINODE_IPC_SUPPORTED, 143) \
    X(HOST_MEMORY_POOLS_SUPPORTED, 144) \
    X(HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 145) \
    X(HOST_ALLOC_DMA_BUF_SUPPORTED, 146) \
    X(ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED, 147)

typedef enum CUdevice_attribute_enum {
#define BC_X_ENUM(name, value) CU_DEVICE_ATTRIBUTE_##name = value,
    BC_DEVICE_ATTRIBUTES(BC_X_ENUM)
#undef BC_X_ENUM
    CU_DEVICE_ATTRIBUTE_MAX = 148
} CUdevice_attribute;

/* Every CUfunction_attribute as X(SUFFIX, value): the enum below and the name tables that
 * _abi.pxd builds for Python (Kernel attribute names) come from this one list. */
#define BC_FUNCTION_ATTRIBUTES(X) \
    X(MAX_THREADS_PER_BLOCK, 0) \
    X(SHARED_SIZE_BYTES, 1) \
    X(CONST_SIZE_BYTES, 2) \
    X(LOCAL_SIZE_BYTES, 3) \
    X(NUM_REGS, 4) \
    X(PTX_VERSION, 5) \
    X(BINARY_VERSION, 6) \
    X(CACHE_MODE_CA, 7) \
    X(MAX_DYNAMIC_SHARED_SIZE_BYTES, 8) \
    X(PREFERRED_SHARED_MEMORY_CARVEOUT, 9) \
    X(CLUSTER_SIZE_MUST_BE_SET, 10) \
    X(REQUIRED_CLUSTER_WIDTH, 11) \
    X(REQUIRED_CLUSTER_HEIGHT, 12) \
    X(REQUIRED_CLUSTER_DEPTH, 13) \
    X(NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 14) \
    X(CLUSTER_SCHEDULING_POLICY_PREFERENCE, 15)

typedef enum CUfunction_attribute_enum {
#define BC_X_ENUM(name, value) CU_FUNC_ATTRIBUTE_##name = value,
    BC_FUNCTION_ATTRIBUTES(BC_X_ENUM)
#undef BC_X_ENUM
    CU_FUNC_ATTRIBUTE_MAX = 16
} CUfunction_attribute;

/* Name tables of the two attribute enums, for the Python side (_abi.pxd turns them
 * into {"max_threads_per_block": 1, ...} dicts). Function-local statics: a unit
 * that does not use them carries no copy. */
typedef struct bc_enum_name { const char *name; int value; } bc_enum_name;
#define BC_X_NAME(name, value) {#name, value},
#define BC_X_COUNT(name, value) + 1
enum { BC_DEVICE_ATTRIBUTE_COUNT = 0 BC_DEVICE_ATTRIBUTES(BC_X_COUNT) };
enum { BC_FUNCTION_ATTRIBUTE_COUNT = 0 BC_FUNCTION_ATTRIBUTES(BC_X_COUNT) };
static inline const bc_enum_name *bc_device_attribute_names(void) {
    static const bc_enum_name t[] = { BC_DEVICE_ATTRIBUTES(BC_X_NAME) };
    return t;
}
static inline const bc_enum_name *bc_function_attribute_names(void) {
    static const bc_enum_name t[] = { BC_FUNCTION_ATTRIBUTES(BC_X_NAME) };
    return t;
}
#undef BC_X_NAME
#undef BC_X_COUNT

typedef enum CUjit_option_enum {
    CU_JIT_MAX_REGISTERS = 0,
    CU_JIT_THREADS_PER_BLOCK = 1,
    CU_JIT_WALL_TIME = 2,
    CU_JIT_INFO_LOG_BUFFER = 3,
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
    CU_JIT_OPTIMIZATION_LEVEL = 7,
    CU_JIT_TARGET_FROM_CUCONTEXT = 8,
    CU_JIT_TARGET = 9,
    CU_JIT_FALLBACK_STRATEGY = 10,
    CU_JIT_GENERATE_DEBUG_INFO = 11,
    CU_JIT_LOG_VERBOSE = 12,
    CU_JIT_GENERATE_LINE_INFO = 13,
    CU_JIT_CACHE_MODE = 14,
    CU_JIT_NUM_OPTIONS = 35
} CUjit_option;

/* The driver's linker (cuLink*) and library API (cuLibrary*): _program.pyx. */
typedef struct CUlinkState_st *CUlinkState;
typedef enum CUjitInputType_enum {
    CU_JIT_INPUT_CUBIN = 0,
    CU_JIT_INPUT_PTX = 1,
    CU_JIT_INPUT_FATBINARY = 2,
    CU_JIT_INPUT_OBJECT = 3,
    CU_JIT_INPUT_LIBRARY = 4
} CUjitInputType;
typedef int CUlibraryOption;   /* enum CUlibraryOption_enum; barecuda passes none */

typedef enum CUmemorytype_enum {
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_ARRAY = 3,
    CU_MEMORYTYPE_UNIFIED = 4
} CUmemorytype;

typedef enum CUpointer_attribute_enum {
    CU_POINTER_ATTRIBUTE_CONTEXT = 1,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
    CU_POINTER_ATTRIBUTE_HOST_POINTER = 4,
    CU_POINTER_ATTRIBUTE_SYNC_MEMOPS = 6,
    CU_POINTER_ATTRIBUTE_BUFFER_ID = 7,
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
    CU_POINTER_ATTRIBUTE_MAPPED = 13,
    CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17
} CUpointer_attribute;

typedef enum CUmem_advise_enum {
    CU_MEM_ADVISE_SET_READ_MOSTLY = 1,
    CU_MEM_ADVISE_UNSET_READ_MOSTLY = 2,
    CU_MEM_ADVISE_SET_PREFERRED_LOCATION = 3,
    CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION = 4,
    CU_MEM_ADVISE_SET_ACCESSED_BY = 5,
    CU_MEM_ADVISE_UNSET_ACCESSED_BY = 6
} CUmem_advise;

typedef enum CUmemLocationType_enum {
    CU_MEM_LOCATION_TYPE_INVALID = 0,
    CU_MEM_LOCATION_TYPE_DEVICE = 1,
    CU_MEM_LOCATION_TYPE_HOST = 2,
    CU_MEM_LOCATION_TYPE_HOST_NUMA = 3,
    CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 4
} CUmemLocationType;

typedef enum CUmemAllocationType_enum {
    CU_MEM_ALLOCATION_TYPE_INVALID = 0,
    CU_MEM_ALLOCATION_TYPE_PINNED = 1,
    CU_MEM_ALLOCATION_TYPE_MANAGED = 2
} CUmemAllocationType;

typedef enum CUmemAllocationHandleType_enum {
    CU_MEM_HANDLE_TYPE_NONE = 0,
    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1,
    CU_MEM_HANDLE_TYPE_WIN32 = 2,
    CU_MEM_HANDLE_TYPE_WIN32_KMT = 4,
    CU_MEM_HANDLE_TYPE_FABRIC = 8
} CUmemAllocationHandleType;

typedef enum CUmemPool_attribute_enum {
    CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
    CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
    CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8
} CUmemPool_attribute;

typedef enum CUlaunchAttributeID_enum {
    CU_LAUNCH_ATTRIBUTE_IGNORE = 0,
    CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1,
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2,
    CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY = 3,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT = 7,
    CU_LAUNCH_ATTRIBUTE_PRIORITY = 8,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP = 9,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN = 10
} CUlaunchAttributeID;

/* flags (plain #defines in the driver's header too) */
#define CU_CTX_SCHED_AUTO 0x00
#define CU_CTX_SCHED_SPIN 0x01
#define CU_CTX_SCHED_YIELD 0x02
#define CU_CTX_SCHED_BLOCKING_SYNC 0x04
#define CU_CTX_MAP_HOST 0x08
#define CU_STREAM_DEFAULT 0x0
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DEFAULT 0x0
#define CU_EVENT_BLOCKING_SYNC 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_EVENT_INTERPROCESS 0x4
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED 0x04
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_MEMHOSTREGISTER_IOMEMORY 0x04
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08
#define CU_MEM_ATTACH_GLOBAL 0x1
#define CU_MEM_ATTACH_HOST 0x2
#define CU_MEM_ATTACH_SINGLE 0x4
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM 1
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2
#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#define CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2
typedef int CUdriverProcAddressQueryResult;

/* ------------------------------------------------------------------ structs */
typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes;
    size_t srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    size_t srcPitch;
    size_t dstXInBytes;
    size_t dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    size_t dstPitch;
    size_t WidthInBytes;
    size_t Height;
} CUDA_MEMCPY2D;

typedef struct CUDA_MEMCPY3D_st {
    size_t srcXInBytes;
    size_t srcY;
    size_t srcZ;
    size_t srcLOD;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    void *reserved0;
    size_t srcPitch;
    size_t srcHeight;
    size_t dstXInBytes;
    size_t dstY;
    size_t dstZ;
    size_t dstLOD;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    void *reserved1;
    size_t dstPitch;
    size_t dstHeight;
    size_t WidthInBytes;
    size_t Height;
    size_t Depth;
} CUDA_MEMCPY3D;

typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation;

typedef struct CUmemPoolProps_st {
    CUmemAllocationType allocType;
    CUmemAllocationHandleType handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

typedef union CUlaunchAttributeValue_union {
    char pad[64];
    int cooperative;
    struct { unsigned int x, y, z; } clusterDim;
    int clusterSchedulingPolicyPreference;
    int programmaticStreamSerializationAllowed;
    struct { CUevent event; int flags; int triggerAtBlockStart; } programmaticEvent;
    int priority;
} CUlaunchAttributeValue;

typedef struct CUlaunchAttribute_st {
    CUlaunchAttributeID id;
    char pad[8 - sizeof(CUlaunchAttributeID)];
    CUlaunchAttributeValue value;
} CUlaunchAttribute;

typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define BC_STATIC_ASSERT(c, m) _Static_assert(c, #m)
#else
#define BC_STATIC_ASSERT(c, m) typedef char bc_static_assert_##m[(c) ? 1 : -1]
#endif
#if UINTPTR_MAX == 0xffffffffffffffffULL
BC_STATIC_ASSERT(sizeof(CUdeviceptr) == 8, deviceptr_size);
BC_STATIC_ASSERT(sizeof(CUuuid) == 16, uuid_size);
BC_STATIC_ASSERT(sizeof(CUDA_MEMCPY2D) == 128, memcpy2d_size);
BC_STATIC_ASSERT(sizeof(CUDA_MEMCPY3D) == 200, memcpy3d_size);
BC_STATIC_ASSERT(sizeof(CUmemLocation) == 8, memlocation_size);
BC_STATIC_ASSERT(sizeof(CUmemPoolProps) == 88, mempoolprops_size);
BC_STATIC_ASSERT(sizeof(CUlaunchAttributeValue) == 64, launchattrvalue_size);
BC_STATIC_ASSERT(sizeof(CUlaunchAttribute) == 72, launchattr_size);
BC_STATIC_ASSERT(offsetof(CUlaunchAttribute, value) == 8, launchattr_value_offset);
BC_STATIC_ASSERT(sizeof(CUlaunchConfig) == 56, launchconfig_size);
#endif

typedef void (CUDAAPI *CUhostFn)(void *userData);
typedef void (CUDAAPI *CUstreamCallback)(CUstream hStream, CUresult status, void *userData);
typedef size_t (CUDAAPI *CUoccupancyB2DSize)(int blockSize);

/* ---------------------------------------------- IPC, peer and pool sharing (dist)
 * Types used by the IPC / multi-GPU entry points at the end of BC_DRIVER_SYMBOLS. */
typedef struct CUipcMemHandle_st { char reserved[64]; } CUipcMemHandle;
typedef struct CUipcEventHandle_st { char reserved[64]; } CUipcEventHandle;
typedef struct CUmemPoolPtrExportData_st { unsigned char reserved[64]; } CUmemPoolPtrExportData;

typedef enum CUdevice_P2PAttribute_enum {
    CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK = 1,
    CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED = 2,
    CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED = 3,
    CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED = 4
} CUdevice_P2PAttribute;

typedef enum CUmemAccess_flags_enum {
    CU_MEM_ACCESS_FLAGS_PROT_NONE = 0,
    CU_MEM_ACCESS_FLAGS_PROT_READ = 1,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
} CUmemAccess_flags;

typedef struct CUmemAccessDesc_st {
    CUmemLocation location;
    CUmemAccess_flags flags;
} CUmemAccessDesc;

#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
#if UINTPTR_MAX == 0xffffffffffffffffULL
BC_STATIC_ASSERT(sizeof(CUipcMemHandle) == 64, ipcmemhandle_size);
BC_STATIC_ASSERT(sizeof(CUipcEventHandle) == 64, ipceventhandle_size);
BC_STATIC_ASSERT(sizeof(CUmemPoolPtrExportData) == 64, poolptrexport_size);
BC_STATIC_ASSERT(sizeof(CUmemAccessDesc) == 12, memaccessdesc_size);
#endif

/* --------------------------------------------- graphs (feature: CUDA graphs, _graph.pyx)
 * In their own header, only for length (the 800-line limit). */
#include "barecuda/cuda_graph_abi.h"

/* ----------------------------------------------------------- entry points
 * X(name, version, required, (parameter list))
 *   version: the CUDA version whose ABI of `name` the parameter list describes;
 *            cuGetProcAddress_v2 is asked for exactly that.
 *   required: 1 when barecuda cannot work without it on a CUDA 12.0 driver;
 *             0 when only one feature needs it (that feature checks for NULL and
 *             names the driver version it needs).
 * Every entry point returns CUresult.
 */
#define BC_DRIVER_SYMBOLS(X) \
    X(cuInit, 2000, 1, (unsigned int Flags)) \
    X(cuDriverGetVersion, 2020, 1, (int *driverVersion)) \
    X(cuGetErrorName, 6000, 1, (CUresult error, const char **pStr)) \
    X(cuGetErrorString, 6000, 1, (CUresult error, const char **pStr)) \
    X(cuDeviceGet, 2000, 1, (CUdevice *device, int ordinal)) \
    X(cuDeviceGetCount, 2000, 1, (int *count)) \
    X(cuDeviceGetName, 2000, 1, (char *name, int len, CUdevice dev)) \
    X(cuDeviceGetUuid, 9020, 1, (CUuuid *uuid, CUdevice dev)) \
    X(cuDeviceTotalMem, 3020, 1, (size_t *bytes, CUdevice dev)) \
    X(cuDeviceGetAttribute, 2000, 1, (int *pi, CUdevice_attribute attrib, CUdevice dev)) \
    X(cuDeviceGetPCIBusId, 4010, 1, (char *pciBusId, int len, CUdevice dev)) \
    X(cuDeviceCanAccessPeer, 4000, 1, (int *canAccessPeer, CUdevice dev, CUdevice peerDev)) \
    X(cuDevicePrimaryCtxRetain, 7000, 1, (CUcontext *pctx, CUdevice dev)) \
    X(cuDevicePrimaryCtxRelease, 11000, 1, (CUdevice dev)) \
    X(cuDevicePrimaryCtxGetState, 7000, 1, (CUdevice dev, unsigned int *flags, int *active)) \
    X(cuCtxSetCurrent, 4000, 1, (CUcontext ctx)) \
    X(cuCtxGetCurrent, 4000, 1, (CUcontext *pctx)) \
    X(cuCtxGetDevice, 2000, 1, (CUdevice *device)) \
    X(cuCtxSynchronize, 2000, 1, (void)) \
    X(cuCtxEnablePeerAccess, 4000, 1, (CUcontext peerContext, unsigned int Flags)) \
    X(cuCtxDisablePeerAccess, 4000, 1, (CUcontext peerContext)) \
    X(cuMemGetInfo, 3020, 1, (size_t *free, size_t *total)) \
    X(cuModuleLoadDataEx, 2010, 1, (CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options, void **optionValues)) \
    X(cuModuleUnload, 2000, 1, (CUmodule hmod)) \
    X(cuModuleGetFunction, 2000, 1, (CUfunction *hfunc, CUmodule hmod, const char *name)) \
    X(cuModuleGetGlobal, 3020, 1, (CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)) \
    /* kernels from source (_program.pyx): the driver's linker, context-independent libraries */ \
    X(cuLinkCreate, 6050, 0, (unsigned int numOptions, CUjit_option *options, void **optionValues, CUlinkState *stateOut)) \
    X(cuLinkAddData, 6050, 0, (CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name, unsigned int numOptions, CUjit_option *options, void **optionValues)) \
    X(cuLinkComplete, 5050, 0, (CUlinkState state, void **cubinOut, size_t *sizeOut)) \
    X(cuLinkDestroy, 5050, 0, (CUlinkState state)) \
    X(cuLibraryLoadData, 12000, 0, (CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues, unsigned int numLibraryOptions)) \
    X(cuLibraryUnload, 12000, 0, (CUlibrary library)) \
    X(cuLibraryGetKernel, 12000, 0, (CUkernel *pKernel, CUlibrary library, const char *name)) \
    X(cuKernelGetFunction, 12000, 0, (CUfunction *pFunc, CUkernel kernel)) \
    X(cuFuncGetAttribute, 2020, 1, (int *pi, CUfunction_attribute attrib, CUfunction hfunc)) \
    X(cuFuncSetAttribute, 9000, 1, (CUfunction hfunc, CUfunction_attribute attrib, int value)) \
    X(cuFuncGetParamInfo, 12040, 0, (CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize)) \
    X(cuFuncGetName, 12030, 0, (const char **name, CUfunction hfunc)) \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, 1, (int *numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize)) \
    X(cuOccupancyMaxPotentialBlockSize, 6050, 1, (int *minGridSize, int *blockSize, CUfunction func, CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize, int blockSizeLimit)) \
    X(cuOccupancyAvailableDynamicSMemPerBlock, 10020, 1, (size_t *dynamicSmemSize, CUfunction func, int numBlocks, int blockSize)) \
    X(cuOccupancyMaxActiveClusters, 11070, 0, (int *numClusters, CUfunction func, const CUlaunchConfig *config)) \
    X(cuLaunchKernel, 4000, 1, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)) \
    X(cuLaunchKernelEx, 11060, 0, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)) \
    X(cuLaunchCooperativeKernel, 9000, 1, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)) \
    X(cuLaunchHostFunc, 10000, 1, (CUstream hStream, CUhostFn fn, void *userData)) \
    X(cuStreamCreate, 2000, 1, (CUstream *phStream, unsigned int Flags)) \
    X(cuStreamCreateWithPriority, 5050, 1, (CUstream *phStream, unsigned int flags, int priority)) \
    X(cuStreamDestroy, 4000, 1, (CUstream hStream)) \
    X(cuStreamSynchronize, 2000, 1, (CUstream hStream)) \
    X(cuStreamQuery, 2000, 1, (CUstream hStream)) \
    X(cuStreamWaitEvent, 3020, 1, (CUstream hStream, CUevent hEvent, unsigned int Flags)) \
    X(cuStreamGetPriority, 5050, 1, (CUstream hStream, int *priority)) \
    X(cuStreamGetFlags, 5050, 1, (CUstream hStream, unsigned int *flags)) \
    X(cuStreamGetCtx, 9020, 1, (CUstream hStream, CUcontext *pctx)) \
    X(cuCtxGetStreamPriorityRange, 5050, 1, (int *leastPriority, int *greatestPriority)) \
    X(cuEventCreate, 2000, 1, (CUevent *phEvent, unsigned int Flags)) \
    X(cuEventDestroy, 4000, 1, (CUevent hEvent)) \
    X(cuEventRecord, 2000, 1, (CUevent hEvent, CUstream hStream)) \
    X(cuEventQuery, 2000, 1, (CUevent hEvent)) \
    X(cuEventSynchronize, 2000, 1, (CUevent hEvent)) \
    X(cuEventElapsedTime, 2000, 1, (float *pMilliseconds, CUevent hStart, CUevent hEnd)) \
    X(cuMemAlloc, 3020, 1, (CUdeviceptr *dptr, size_t bytesize)) \
    X(cuMemFree, 3020, 1, (CUdeviceptr dptr)) \
    X(cuMemAllocPitch, 3020, 1, (CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes)) \
    X(cuMemAllocManaged, 6000, 1, (CUdeviceptr *dptr, size_t bytesize, unsigned int flags)) \
    X(cuMemHostAlloc, 2020, 1, (void **pp, size_t bytesize, unsigned int Flags)) \
    X(cuMemFreeHost, 2000, 1, (void *p)) \
    X(cuMemHostGetDevicePointer, 3020, 1, (CUdeviceptr *pdptr, void *p, unsigned int Flags)) \
    X(cuMemHostRegister, 6050, 1, (void *p, size_t bytesize, unsigned int Flags)) \
    X(cuMemHostUnregister, 4000, 1, (void *p)) \
    X(cuMemGetAddressRange, 3020, 1, (CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)) \
    X(cuPointerGetAttribute, 4000, 1, (void *data, CUpointer_attribute attribute, CUdeviceptr ptr)) \
    X(cuMemcpy, 4000, 1, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)) \
    X(cuMemcpyAsync, 4000, 1, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)) \
    X(cuMemcpyHtoD, 3020, 1, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)) \
    X(cuMemcpyDtoH, 3020, 1, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)) \
    X(cuMemcpyDtoD, 3020, 1, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)) \
    X(cuMemcpyHtoDAsync, 3020, 1, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)) \
    X(cuMemcpyDtoHAsync, 3020, 1, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)) \
    X(cuMemcpyDtoDAsync, 3020, 1, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)) \
    X(cuMemcpyPeerAsync, 4000, 1, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, CUstream hStream)) \
    X(cuMemcpy2DAsync, 3020, 1, (const CUDA_MEMCPY2D *pCopy, CUstream hStream)) \
    X(cuMemcpy3DAsync, 3020, 1, (const CUDA_MEMCPY3D *pCopy, CUstream hStream)) \
    X(cuMemsetD8Async, 3020, 1, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)) \
    X(cuMemsetD16Async, 3020, 1, (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)) \
    X(cuMemsetD32Async, 3020, 1, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)) \
    X(cuMemAllocAsync, 11020, 0, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream)) \
    X(cuMemFreeAsync, 11020, 0, (CUdeviceptr dptr, CUstream hStream)) \
    X(cuMemAllocFromPoolAsync, 11020, 0, (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)) \
    X(cuMemPoolCreate, 11020, 0, (CUmemoryPool *pool, const CUmemPoolProps *poolProps)) \
    X(cuMemPoolDestroy, 11020, 0, (CUmemoryPool pool)) \
    X(cuMemPoolTrimTo, 11020, 0, (CUmemoryPool pool, size_t minBytesToKeep)) \
    X(cuMemPoolSetAttribute, 11020, 0, (CUmemoryPool pool, CUmemPool_attribute attr, void *value)) \
    X(cuMemPoolGetAttribute, 11020, 0, (CUmemoryPool pool, CUmemPool_attribute attr, void *value)) \
    X(cuDeviceGetDefaultMemPool, 11020, 0, (CUmemoryPool *pool_out, CUdevice dev)) \
    X(cuMemPrefetchAsync, 12020, 0, (CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags, CUstream hStream)) \
    X(cuMemAdvise, 12020, 0, (CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location)) \
    /* dist: IPC, peer topology and pool sharing (_ipc, _topology) */ \
    X(cuIpcGetMemHandle, 4010, 0, (CUipcMemHandle *pHandle, CUdeviceptr dptr)) \
    X(cuIpcOpenMemHandle, 11000, 0, (CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)) \
    X(cuIpcCloseMemHandle, 4010, 0, (CUdeviceptr dptr)) \
    X(cuIpcGetEventHandle, 4010, 0, (CUipcEventHandle *pHandle, CUevent event)) \
    X(cuIpcOpenEventHandle, 4010, 0, (CUevent *phEvent, CUipcEventHandle handle)) \
    X(cuMemPoolExportToShareableHandle, 11020, 0, (void *handle_out, CUmemoryPool pool, CUmemAllocationHandleType handleType, unsigned long long flags)) \
    X(cuMemPoolImportFromShareableHandle, 11020, 0, (CUmemoryPool *pool_out, void *handle, CUmemAllocationHandleType handleType, unsigned long long flags)) \
    X(cuMemPoolExportPointer, 11020, 0, (CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)) \
    X(cuMemPoolImportPointer, 11020, 0, (CUdeviceptr *ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *shareData)) \
    X(cuMemPoolSetAccess, 11020, 0, (CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)) \
    X(cuDeviceGetP2PAttribute, 8000, 0, (int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice, CUdevice dstDevice)) \
    X(cuDeviceGetByPCIBusId, 4010, 0, (CUdevice *dev, const char *pciBusId)) \
    /* CUDA graphs (_graph.pyx): capture, explicit graphs, executable graphs */ \
    X(cuStreamBeginCapture, 10010, 0, (CUstream hStream, CUstreamCaptureMode mode)) \
    X(cuStreamEndCapture, 10000, 0, (CUstream hStream, CUgraph *phGraph)) \
    X(cuStreamIsCapturing, 10000, 0, (CUstream hStream, CUstreamCaptureStatus *captureStatus)) \
    X(cuThreadExchangeStreamCaptureMode, 10010, 0, (CUstreamCaptureMode *mode)) \
    X(cuGraphCreate, 10000, 0, (CUgraph *phGraph, unsigned int flags)) \
    X(cuGraphDestroy, 10000, 0, (CUgraph hGraph)) \
    X(cuGraphGetNodes, 10000, 0, (CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)) \
    X(cuGraphNodeGetType, 10000, 0, (CUgraphNode hNode, CUgraphNodeType *type)) \
    X(cuGraphDestroyNode, 10000, 0, (CUgraphNode hNode)) \
    X(cuGraphAddDependencies, 12030, 0, (CUgraph hGraph, const CUgraphNode *from_nodes, const CUgraphNode *to_nodes, const CUgraphEdgeData *edgeData, size_t numDependencies)) \
    X(cuGraphGetEdges, 12030, 0, (CUgraph hGraph, CUgraphNode *from_nodes, CUgraphNode *to_nodes, CUgraphEdgeData *edgeData, size_t *numEdges)) \
    X(cuGraphAddKernelNode, 12000, 0, (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)) \
    X(cuGraphKernelNodeGetParams, 12000, 0, (CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)) \
    X(cuGraphKernelNodeSetParams, 12000, 0, (CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)) \
    X(cuGraphKernelNodeGetAttribute, 11000, 0, (CUgraphNode hNode, CUlaunchAttributeID attr, CUlaunchAttributeValue *value_out)) \
    X(cuGraphKernelNodeSetAttribute, 11000, 0, (CUgraphNode hNode, CUlaunchAttributeID attr, const CUlaunchAttributeValue *value)) \
    X(cuGraphAddMemcpyNode, 10000, 0, (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx)) \
    X(cuGraphAddMemsetNode, 10000, 0, (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)) \
    X(cuGraphAddHostNode, 10000, 0, (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, const CUDA_HOST_NODE_PARAMS *nodeParams)) \
    X(cuGraphAddChildGraphNode, 10000, 0, (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, CUgraph childGraph)) \
    X(cuGraphAddEmptyNode, 10000, 0, (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies)) \
    X(cuGraphAddEventRecordNode, 11010, 0, (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, CUevent event)) \
    X(cuGraphAddEventWaitNode, 11010, 0, (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, CUevent event)) \
    X(cuGraphAddNode, 12030, 0, (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData, size_t numDependencies, CUgraphNodeParams *nodeParams)) \
    X(cuGraphConditionalHandleCreate, 12030, 0, (CUgraphConditionalHandle *pHandle_out, CUgraph hGraph, CUcontext ctx, unsigned int defaultLaunchValue, unsigned int flags)) \
    X(cuGraphDebugDotPrint, 11030, 0, (CUgraph hGraph, const char *path, unsigned int flags)) \
    X(cuGraphInstantiateWithFlags, 11040, 0, (CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)) \
    X(cuGraphInstantiateWithParams, 12000, 0, (CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)) \
    X(cuGraphLaunch, 10000, 0, (CUgraphExec hGraphExec, CUstream hStream)) \
    X(cuGraphUpload, 11010, 0, (CUgraphExec hGraphExec, CUstream hStream)) \
    X(cuGraphExecDestroy, 10000, 0, (CUgraphExec hGraphExec)) \
    X(cuGraphExecUpdate, 12000, 0, (CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo)) \
    X(cuGraphExecKernelNodeSetParams, 12000, 0, (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)) \
    X(cuGraphNodeSetEnabled, 11060, 0, (CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled)) \
    X(cuGraphNodeGetEnabled, 11060, 0, (CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int *isEnabled)) \
    /* launch: a module's kernel names (C++ lookup by plain name in cubins) */ \
    X(cuModuleGetFunctionCount, 12040, 0, (unsigned int *count, CUmodule mod)) \
    X(cuModuleEnumerateFunctions, 12040, 0, (CUfunction *functions, unsigned int numFunctions, CUmodule mod))

/* PFN_<name> typedefs */
#define BC_X_PFN(name, version, required, params) typedef CUresult (CUDAAPI *PFN_##name) params;
BC_DRIVER_SYMBOLS(BC_X_PFN)
#undef BC_X_PFN

typedef CUresult (CUDAAPI *PFN_cuGetProcAddress_v2)(const char *symbol, void **pfn, int cudaVersion,
                                                   unsigned long long flags,
                                                   CUdriverProcAddressQueryResult *symbolStatus);

/* The driver table: one function pointer per entry point, filled once by the loader. */
typedef struct bc_driver_t {
#define BC_X_FIELD(name, version, required, params) PFN_##name name;
    BC_DRIVER_SYMBOLS(BC_X_FIELD)
#undef BC_X_FIELD
} bc_driver_t;

/* Description of each table slot, for the loader and for diagnostics. */
typedef struct bc_symbol_info {
    const char *name;
    int version;
    int required;
    size_t offset;
} bc_symbol_info;

#ifdef __cplusplus
}
#endif
#endif /* BARECUDA_CUDA_ABI_H */
