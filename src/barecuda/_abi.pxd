"""Cython mirror of include/barecuda/cuda_abi.h: the driver ABI barecuda declares itself."""
from libc.stddef cimport size_t

cdef extern from "barecuda/cuda_abi.h" nogil:
    ctypedef int CUresult
    ctypedef int CUdevice
    ctypedef unsigned long long CUdeviceptr
    cdef struct CUctx_st
    cdef struct CUmod_st
    cdef struct CUfunc_st
    cdef struct CUlib_st
    cdef struct CUkern_st
    cdef struct CUstream_st
    cdef struct CUevent_st
    cdef struct CUarray_st
    cdef struct CUmemPoolHandle_st
    cdef struct CUgraph_st
    cdef struct CUgraphExec_st
    cdef struct CUlinkState_st
    ctypedef CUctx_st* CUcontext
    ctypedef CUmod_st* CUmodule
    ctypedef CUfunc_st* CUfunction
    ctypedef CUlib_st* CUlibrary
    ctypedef CUkern_st* CUkernel
    ctypedef CUstream_st* CUstream
    ctypedef CUevent_st* CUevent
    ctypedef CUarray_st* CUarray
    ctypedef CUmemPoolHandle_st* CUmemoryPool
    ctypedef CUgraph_st* CUgraph
    ctypedef CUgraphExec_st* CUgraphExec
    ctypedef CUlinkState_st* CUlinkState
    ctypedef struct CUuuid:
        char bytes[16]
    int CUDA_SUCCESS
    CUstream CU_STREAM_LEGACY
    CUstream CU_STREAM_PER_THREAD
    ctypedef int CUdriverProcAddressQueryResult
    ctypedef enum CUdevice_attribute:
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK
        CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY
        CU_DEVICE_ATTRIBUTE_WARP_SIZE
        CU_DEVICE_ATTRIBUTE_MAX_PITCH
        CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK
        CU_DEVICE_ATTRIBUTE_CLOCK_RATE
        CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT
        CU_DEVICE_ATTRIBUTE_GPU_OVERLAP
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT
        CU_DEVICE_ATTRIBUTE_INTEGRATED
        CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY
        CU_DEVICE_ATTRIBUTE_COMPUTE_MODE
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS
        CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT
        CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS
        CU_DEVICE_ATTRIBUTE_ECC_ENABLED
        CU_DEVICE_ATTRIBUTE_PCI_BUS_ID
        CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID
        CU_DEVICE_ATTRIBUTE_TCC_DRIVER
        CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE
        CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH
        CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
        CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT
        CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS
        CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE
        CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID
        CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH
        CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED
        CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED
        CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR
        CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY
        CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD
        CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID
        CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED
        CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
        CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS
        CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS
        CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED
        CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
        CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1
        CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1
        CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1
        CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH
        CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES
        CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED
        CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES
        CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST
        CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED
        CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR
        CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED
        CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE
        CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
        CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK
        CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED
        CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED
        CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED
        CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING
        CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES
        CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH
        CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED
        CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS
        CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR
        CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
        CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED
        CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT
        CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED
        CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS
        CU_DEVICE_ATTRIBUTE_NUMA_CONFIG
        CU_DEVICE_ATTRIBUTE_NUMA_ID
        CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
        CU_DEVICE_ATTRIBUTE_MPS_ENABLED
        CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID
        CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED
        CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK
        CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH
        CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED
        CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID
        CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID
        CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED
        CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED
        CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED
        CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED
        CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED
        CU_DEVICE_ATTRIBUTE_MAX
    ctypedef enum CUfunction_attribute:
        CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
        CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES
        CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
        CU_FUNC_ATTRIBUTE_NUM_REGS
        CU_FUNC_ATTRIBUTE_PTX_VERSION
        CU_FUNC_ATTRIBUTE_BINARY_VERSION
        CU_FUNC_ATTRIBUTE_CACHE_MODE_CA
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
        CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH
        CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
        CU_FUNC_ATTRIBUTE_MAX
    ctypedef enum CUjit_option:
        CU_JIT_MAX_REGISTERS
        CU_JIT_THREADS_PER_BLOCK
        CU_JIT_WALL_TIME
        CU_JIT_INFO_LOG_BUFFER
        CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
        CU_JIT_ERROR_LOG_BUFFER
        CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
        CU_JIT_OPTIMIZATION_LEVEL
        CU_JIT_TARGET_FROM_CUCONTEXT
        CU_JIT_TARGET
        CU_JIT_FALLBACK_STRATEGY
        CU_JIT_GENERATE_DEBUG_INFO
        CU_JIT_LOG_VERBOSE
        CU_JIT_GENERATE_LINE_INFO
        CU_JIT_CACHE_MODE
        CU_JIT_NUM_OPTIONS
    ctypedef enum CUjitInputType:
        CU_JIT_INPUT_CUBIN
        CU_JIT_INPUT_PTX
        CU_JIT_INPUT_FATBINARY
        CU_JIT_INPUT_OBJECT
        CU_JIT_INPUT_LIBRARY
    ctypedef int CUlibraryOption
    ctypedef enum CUmemorytype:
        CU_MEMORYTYPE_HOST
        CU_MEMORYTYPE_DEVICE
        CU_MEMORYTYPE_ARRAY
        CU_MEMORYTYPE_UNIFIED
    ctypedef enum CUpointer_attribute:
        CU_POINTER_ATTRIBUTE_CONTEXT
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE
        CU_POINTER_ATTRIBUTE_DEVICE_POINTER
        CU_POINTER_ATTRIBUTE_HOST_POINTER
        CU_POINTER_ATTRIBUTE_SYNC_MEMOPS
        CU_POINTER_ATTRIBUTE_BUFFER_ID
        CU_POINTER_ATTRIBUTE_IS_MANAGED
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
        CU_POINTER_ATTRIBUTE_RANGE_SIZE
        CU_POINTER_ATTRIBUTE_MAPPED
        CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE
    ctypedef enum CUmem_advise:
        CU_MEM_ADVISE_SET_READ_MOSTLY
        CU_MEM_ADVISE_UNSET_READ_MOSTLY
        CU_MEM_ADVISE_SET_PREFERRED_LOCATION
        CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION
        CU_MEM_ADVISE_SET_ACCESSED_BY
        CU_MEM_ADVISE_UNSET_ACCESSED_BY
    ctypedef enum CUmemLocationType:
        CU_MEM_LOCATION_TYPE_INVALID
        CU_MEM_LOCATION_TYPE_DEVICE
        CU_MEM_LOCATION_TYPE_HOST
        CU_MEM_LOCATION_TYPE_HOST_NUMA
        CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT
    ctypedef enum CUmemAllocationType:
        CU_MEM_ALLOCATION_TYPE_INVALID
        CU_MEM_ALLOCATION_TYPE_PINNED
        CU_MEM_ALLOCATION_TYPE_MANAGED
    ctypedef enum CUmemAllocationHandleType:
        CU_MEM_HANDLE_TYPE_NONE
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        CU_MEM_HANDLE_TYPE_WIN32
        CU_MEM_HANDLE_TYPE_WIN32_KMT
        CU_MEM_HANDLE_TYPE_FABRIC
    ctypedef enum CUmemPool_attribute:
        CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES
        CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC
        CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES
        CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
        CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
        CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH
        CU_MEMPOOL_ATTR_USED_MEM_CURRENT
        CU_MEMPOOL_ATTR_USED_MEM_HIGH
    ctypedef enum CUlaunchAttributeID:
        CU_LAUNCH_ATTRIBUTE_IGNORE
        CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW
        CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY
        CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT
        CU_LAUNCH_ATTRIBUTE_PRIORITY
        CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP
        CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN
    enum:
        CU_CTX_SCHED_AUTO
        CU_CTX_SCHED_SPIN
        CU_CTX_SCHED_YIELD
        CU_CTX_SCHED_BLOCKING_SYNC
        CU_CTX_MAP_HOST
        CU_STREAM_DEFAULT
        CU_STREAM_NON_BLOCKING
        CU_EVENT_DEFAULT
        CU_EVENT_BLOCKING_SYNC
        CU_EVENT_DISABLE_TIMING
        CU_EVENT_INTERPROCESS
        CU_MEMHOSTALLOC_PORTABLE
        CU_MEMHOSTALLOC_DEVICEMAP
        CU_MEMHOSTALLOC_WRITECOMBINED
        CU_MEMHOSTREGISTER_PORTABLE
        CU_MEMHOSTREGISTER_DEVICEMAP
        CU_MEMHOSTREGISTER_IOMEMORY
        CU_MEMHOSTREGISTER_READ_ONLY
        CU_MEM_ATTACH_GLOBAL
        CU_MEM_ATTACH_HOST
        CU_MEM_ATTACH_SINGLE
        CU_GET_PROC_ADDRESS_DEFAULT
        CU_GET_PROC_ADDRESS_LEGACY_STREAM
        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
        CU_GET_PROC_ADDRESS_SUCCESS
        CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
        CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
    ctypedef struct CUDA_MEMCPY2D:
        size_t srcXInBytes
        size_t srcY
        CUmemorytype srcMemoryType
        const void *srcHost
        CUdeviceptr srcDevice
        CUarray srcArray
        size_t srcPitch
        size_t dstXInBytes
        size_t dstY
        CUmemorytype dstMemoryType
        void *dstHost
        CUdeviceptr dstDevice
        CUarray dstArray
        size_t dstPitch
        size_t WidthInBytes
        size_t Height
    ctypedef struct CUDA_MEMCPY3D:
        size_t srcXInBytes
        size_t srcY
        size_t srcZ
        size_t srcLOD
        CUmemorytype srcMemoryType
        const void *srcHost
        CUdeviceptr srcDevice
        CUarray srcArray
        void *reserved0
        size_t srcPitch
        size_t srcHeight
        size_t dstXInBytes
        size_t dstY
        size_t dstZ
        size_t dstLOD
        CUmemorytype dstMemoryType
        void *dstHost
        CUdeviceptr dstDevice
        CUarray dstArray
        void *reserved1
        size_t dstPitch
        size_t dstHeight
        size_t WidthInBytes
        size_t Height
        size_t Depth
    ctypedef struct CUmemLocation:
        CUmemLocationType type
        int id
    ctypedef struct CUmemPoolProps:
        CUmemAllocationType allocType
        CUmemAllocationHandleType handleTypes
        CUmemLocation location
        void *win32SecurityAttributes
        size_t maxSize
        unsigned short usage
    ctypedef struct _bc_cluster_dim:
        unsigned int x
        unsigned int y
        unsigned int z
    ctypedef struct _bc_prog_event:
        CUevent event
        int flags
        int triggerAtBlockStart
    ctypedef union CUlaunchAttributeValue:
        char pad[64]
        int cooperative
        _bc_cluster_dim clusterDim
        int clusterSchedulingPolicyPreference
        int programmaticStreamSerializationAllowed
        _bc_prog_event programmaticEvent
        int priority
    ctypedef struct CUlaunchAttribute:
        CUlaunchAttributeID id
        CUlaunchAttributeValue value
    ctypedef struct CUlaunchConfig:
        unsigned int gridDimX, gridDimY, gridDimZ
        unsigned int blockDimX, blockDimY, blockDimZ
        unsigned int sharedMemBytes
        CUstream hStream
        CUlaunchAttribute *attrs
        unsigned int numAttrs
    ctypedef void (*CUhostFn)(void *userData) noexcept
    ctypedef void (*CUstreamCallback)(CUstream hStream, CUresult status, void *userData) noexcept
    ctypedef size_t (*CUoccupancyB2DSize)(int blockSize) noexcept

    # -- dist: IPC, peer and pool sharing types
    ctypedef struct CUipcMemHandle:
        char reserved[64]
    ctypedef struct CUipcEventHandle:
        char reserved[64]
    ctypedef struct CUmemPoolPtrExportData:
        unsigned char reserved[64]
    ctypedef enum CUdevice_P2PAttribute:
        CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK
        CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED
        CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED
        CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED
    ctypedef enum CUmemAccess_flags:
        CU_MEM_ACCESS_FLAGS_PROT_NONE
        CU_MEM_ACCESS_FLAGS_PROT_READ
        CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    ctypedef struct CUmemAccessDesc:
        CUmemLocation location
        CUmemAccess_flags flags
    enum: CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
    # CUDA graphs (_graph.pyx)
    cdef struct CUgraphNode_st
    ctypedef CUgraphNode_st* CUgraphNode
    ctypedef unsigned long long CUgraphConditionalHandle
    ctypedef enum CUstreamCaptureMode:
        CU_STREAM_CAPTURE_MODE_GLOBAL
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        CU_STREAM_CAPTURE_MODE_RELAXED
    ctypedef enum CUstreamCaptureStatus:
        CU_STREAM_CAPTURE_STATUS_NONE
        CU_STREAM_CAPTURE_STATUS_ACTIVE
        CU_STREAM_CAPTURE_STATUS_INVALIDATED
    ctypedef enum CUgraphNodeType:
        CU_GRAPH_NODE_TYPE_KERNEL
        CU_GRAPH_NODE_TYPE_MEMCPY
        CU_GRAPH_NODE_TYPE_MEMSET
        CU_GRAPH_NODE_TYPE_HOST
        CU_GRAPH_NODE_TYPE_GRAPH
        CU_GRAPH_NODE_TYPE_EMPTY
        CU_GRAPH_NODE_TYPE_WAIT_EVENT
        CU_GRAPH_NODE_TYPE_EVENT_RECORD
        CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL
        CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT
        CU_GRAPH_NODE_TYPE_MEM_ALLOC
        CU_GRAPH_NODE_TYPE_MEM_FREE
        CU_GRAPH_NODE_TYPE_BATCH_MEM_OP
        CU_GRAPH_NODE_TYPE_CONDITIONAL
    ctypedef enum CUgraphConditionalNodeType:
        CU_GRAPH_COND_TYPE_IF
        CU_GRAPH_COND_TYPE_WHILE
        CU_GRAPH_COND_TYPE_SWITCH
    unsigned int CU_GRAPH_COND_ASSIGN_DEFAULT
    ctypedef enum CUgraphExecUpdateResult:
        CU_GRAPH_EXEC_UPDATE_SUCCESS
        CU_GRAPH_EXEC_UPDATE_ERROR
        CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
        CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED
        CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED
        CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED
        CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED
        CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE
        CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED
    ctypedef enum CUgraphInstantiateResult:
        CUDA_GRAPH_INSTANTIATE_SUCCESS
        CUDA_GRAPH_INSTANTIATE_ERROR
        CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE
        CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED
        CUDA_GRAPH_INSTANTIATE_MULTIPLE_CTXS_NOT_SUPPORTED
        CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED
    ctypedef enum CUgraphInstantiate_flags:
        CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
        CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD
        CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
        CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY
    ctypedef enum CUgraphDebugDot_flags:
        CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE
    ctypedef struct CUDA_KERNEL_NODE_PARAMS_v2:
        CUfunction func
        unsigned int gridDimX, gridDimY, gridDimZ
        unsigned int blockDimX, blockDimY, blockDimZ
        unsigned int sharedMemBytes
        void **kernelParams
        void **extra
        CUkernel kern
        CUcontext ctx
    ctypedef struct CUDA_MEMSET_NODE_PARAMS:
        CUdeviceptr dst
        size_t pitch
        unsigned int value
        unsigned int elementSize
        size_t width
        size_t height
    ctypedef struct CUDA_HOST_NODE_PARAMS:
        CUhostFn fn
        void *userData
    ctypedef struct CUDA_CONDITIONAL_NODE_PARAMS:
        CUgraphConditionalHandle handle
        CUgraphConditionalNodeType type
        unsigned int size
        CUgraph *phGraph_out
        CUcontext ctx
    ctypedef struct CUgraphNodeParams:
        CUgraphNodeType type
        CUDA_CONDITIONAL_NODE_PARAMS conditional
    enum:
        CU_GRAPH_DEPENDENCY_TYPE_DEFAULT
        CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
        CU_GRAPH_KERNEL_NODE_PORT_DEFAULT
        CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
        CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER
    ctypedef struct CUgraphEdgeData:
        unsigned char from_port
        unsigned char to_port
        unsigned char type
    ctypedef struct CUgraphExecUpdateResultInfo:
        CUgraphExecUpdateResult result
        CUgraphNode errorNode
        CUgraphNode errorFromNode
    ctypedef struct CUDA_GRAPH_INSTANTIATE_PARAMS:
        unsigned long long flags
        CUstream hUploadStream
        CUgraphNode hErrNode_out
        CUgraphInstantiateResult result_out

    # The driver table: one field per row of BC_DRIVER_SYMBOLS (written by tools/gen_abi.py;
    # edit the header, then run the tool; tests/core/test_abi.py fails while this is stale).
    # BEGIN GENERATED by tools/gen_abi.py from BC_DRIVER_SYMBOLS in include/barecuda/cuda_abi.h
    ctypedef struct bc_driver_t:
        CUresult (*cuInit)(unsigned int Flags) nogil
        CUresult (*cuDriverGetVersion)(int *driverVersion) nogil
        CUresult (*cuGetErrorName)(CUresult error, const char **pStr) nogil
        CUresult (*cuGetErrorString)(CUresult error, const char **pStr) nogil
        CUresult (*cuDeviceGet)(CUdevice *device, int ordinal) nogil
        CUresult (*cuDeviceGetCount)(int *count) nogil
        CUresult (*cuDeviceGetName)(char *name, int len, CUdevice dev) nogil
        CUresult (*cuDeviceGetUuid)(CUuuid *uuid, CUdevice dev) nogil
        CUresult (*cuDeviceTotalMem)(size_t *bytes, CUdevice dev) nogil
        CUresult (*cuDeviceGetAttribute)(int *pi, CUdevice_attribute attrib, CUdevice dev) nogil
        CUresult (*cuDeviceGetPCIBusId)(char *pciBusId, int len, CUdevice dev) nogil
        CUresult (*cuDeviceCanAccessPeer)(int *canAccessPeer, CUdevice dev, CUdevice peerDev) nogil
        CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *pctx, CUdevice dev) nogil
        CUresult (*cuDevicePrimaryCtxRelease)(CUdevice dev) nogil
        CUresult (*cuDevicePrimaryCtxGetState)(CUdevice dev, unsigned int *flags, int *active) nogil
        CUresult (*cuCtxSetCurrent)(CUcontext ctx) nogil
        CUresult (*cuCtxGetCurrent)(CUcontext *pctx) nogil
        CUresult (*cuCtxGetDevice)(CUdevice *device) nogil
        CUresult (*cuCtxSynchronize)() nogil
        CUresult (*cuCtxEnablePeerAccess)(CUcontext peerContext, unsigned int Flags) nogil
        CUresult (*cuCtxDisablePeerAccess)(CUcontext peerContext) nogil
        CUresult (*cuMemGetInfo)(size_t *free, size_t *total) nogil
        CUresult (*cuModuleLoadDataEx)(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options, void **optionValues) nogil
        CUresult (*cuModuleUnload)(CUmodule hmod) nogil
        CUresult (*cuModuleGetFunction)(CUfunction *hfunc, CUmodule hmod, const char *name) nogil
        CUresult (*cuModuleGetGlobal)(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name) nogil
        # kernels from source (_program.pyx): the driver's linker, context-independent libraries
        CUresult (*cuLinkCreate)(unsigned int numOptions, CUjit_option *options, void **optionValues, CUlinkState *stateOut) nogil
        CUresult (*cuLinkAddData)(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name, unsigned int numOptions, CUjit_option *options, void **optionValues) nogil
        CUresult (*cuLinkComplete)(CUlinkState state, void **cubinOut, size_t *sizeOut) nogil
        CUresult (*cuLinkDestroy)(CUlinkState state) nogil
        CUresult (*cuLibraryLoadData)(CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues, unsigned int numLibraryOptions) nogil
        CUresult (*cuLibraryUnload)(CUlibrary library) nogil
        CUresult (*cuLibraryGetKernel)(CUkernel *pKernel, CUlibrary library, const char *name) nogil
        CUresult (*cuKernelGetFunction)(CUfunction *pFunc, CUkernel kernel) nogil
        CUresult (*cuFuncGetAttribute)(int *pi, CUfunction_attribute attrib, CUfunction hfunc) nogil
        CUresult (*cuFuncSetAttribute)(CUfunction hfunc, CUfunction_attribute attrib, int value) nogil
        CUresult (*cuFuncGetParamInfo)(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize) nogil
        CUresult (*cuFuncGetName)(const char **name, CUfunction hfunc) nogil
        CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize) nogil
        CUresult (*cuOccupancyMaxPotentialBlockSize)(int *minGridSize, int *blockSize, CUfunction func, CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize, int blockSizeLimit) nogil
        CUresult (*cuOccupancyAvailableDynamicSMemPerBlock)(size_t *dynamicSmemSize, CUfunction func, int numBlocks, int blockSize) nogil
        CUresult (*cuOccupancyMaxActiveClusters)(int *numClusters, CUfunction func, const CUlaunchConfig *config) nogil
        CUresult (*cuLaunchKernel)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra) nogil
        CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) nogil
        CUresult (*cuLaunchCooperativeKernel)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams) nogil
        CUresult (*cuLaunchHostFunc)(CUstream hStream, CUhostFn fn, void *userData) nogil
        CUresult (*cuStreamCreate)(CUstream *phStream, unsigned int Flags) nogil
        CUresult (*cuStreamCreateWithPriority)(CUstream *phStream, unsigned int flags, int priority) nogil
        CUresult (*cuStreamDestroy)(CUstream hStream) nogil
        CUresult (*cuStreamSynchronize)(CUstream hStream) nogil
        CUresult (*cuStreamQuery)(CUstream hStream) nogil
        CUresult (*cuStreamWaitEvent)(CUstream hStream, CUevent hEvent, unsigned int Flags) nogil
        CUresult (*cuStreamGetPriority)(CUstream hStream, int *priority) nogil
        CUresult (*cuStreamGetFlags)(CUstream hStream, unsigned int *flags) nogil
        CUresult (*cuStreamGetCtx)(CUstream hStream, CUcontext *pctx) nogil
        CUresult (*cuCtxGetStreamPriorityRange)(int *leastPriority, int *greatestPriority) nogil
        CUresult (*cuEventCreate)(CUevent *phEvent, unsigned int Flags) nogil
        CUresult (*cuEventDestroy)(CUevent hEvent) nogil
        CUresult (*cuEventRecord)(CUevent hEvent, CUstream hStream) nogil
        CUresult (*cuEventQuery)(CUevent hEvent) nogil
        CUresult (*cuEventSynchronize)(CUevent hEvent) nogil
        CUresult (*cuEventElapsedTime)(float *pMilliseconds, CUevent hStart, CUevent hEnd) nogil
        CUresult (*cuMemAlloc)(CUdeviceptr *dptr, size_t bytesize) nogil
        CUresult (*cuMemFree)(CUdeviceptr dptr) nogil
        CUresult (*cuMemAllocPitch)(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes) nogil
        CUresult (*cuMemAllocManaged)(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) nogil
        CUresult (*cuMemHostAlloc)(void **pp, size_t bytesize, unsigned int Flags) nogil
        CUresult (*cuMemFreeHost)(void *p) nogil
        CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *pdptr, void *p, unsigned int Flags) nogil
        CUresult (*cuMemHostRegister)(void *p, size_t bytesize, unsigned int Flags) nogil
        CUresult (*cuMemHostUnregister)(void *p) nogil
        CUresult (*cuMemGetAddressRange)(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) nogil
        CUresult (*cuPointerGetAttribute)(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) nogil
        CUresult (*cuMemcpy)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) nogil
        CUresult (*cuMemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) nogil
        CUresult (*cuMemcpyHtoD)(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) nogil
        CUresult (*cuMemcpyDtoH)(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) nogil
        CUresult (*cuMemcpyDtoD)(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) nogil
        CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream) nogil
        CUresult (*cuMemcpyDtoHAsync)(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) nogil
        CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) nogil
        CUresult (*cuMemcpyPeerAsync)(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, CUstream hStream) nogil
        CUresult (*cuMemcpy2DAsync)(const CUDA_MEMCPY2D *pCopy, CUstream hStream) nogil
        CUresult (*cuMemcpy3DAsync)(const CUDA_MEMCPY3D *pCopy, CUstream hStream) nogil
        CUresult (*cuMemsetD8Async)(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) nogil
        CUresult (*cuMemsetD16Async)(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) nogil
        CUresult (*cuMemsetD32Async)(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) nogil
        CUresult (*cuMemAllocAsync)(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) nogil
        CUresult (*cuMemFreeAsync)(CUdeviceptr dptr, CUstream hStream) nogil
        CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) nogil
        CUresult (*cuMemPoolCreate)(CUmemoryPool *pool, const CUmemPoolProps *poolProps) nogil
        CUresult (*cuMemPoolDestroy)(CUmemoryPool pool) nogil
        CUresult (*cuMemPoolTrimTo)(CUmemoryPool pool, size_t minBytesToKeep) nogil
        CUresult (*cuMemPoolSetAttribute)(CUmemoryPool pool, CUmemPool_attribute attr, void *value) nogil
        CUresult (*cuMemPoolGetAttribute)(CUmemoryPool pool, CUmemPool_attribute attr, void *value) nogil
        CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *pool_out, CUdevice dev) nogil
        CUresult (*cuMemPrefetchAsync)(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags, CUstream hStream) nogil
        CUresult (*cuMemAdvise)(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location) nogil
        # dist: IPC, peer topology and pool sharing (_ipc, _topology)
        CUresult (*cuIpcGetMemHandle)(CUipcMemHandle *pHandle, CUdeviceptr dptr) nogil
        CUresult (*cuIpcOpenMemHandle)(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) nogil
        CUresult (*cuIpcCloseMemHandle)(CUdeviceptr dptr) nogil
        CUresult (*cuIpcGetEventHandle)(CUipcEventHandle *pHandle, CUevent event) nogil
        CUresult (*cuIpcOpenEventHandle)(CUevent *phEvent, CUipcEventHandle handle) nogil
        CUresult (*cuMemPoolExportToShareableHandle)(void *handle_out, CUmemoryPool pool, CUmemAllocationHandleType handleType, unsigned long long flags) nogil
        CUresult (*cuMemPoolImportFromShareableHandle)(CUmemoryPool *pool_out, void *handle, CUmemAllocationHandleType handleType, unsigned long long flags) nogil
        CUresult (*cuMemPoolExportPointer)(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr) nogil
        CUresult (*cuMemPoolImportPointer)(CUdeviceptr *ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *shareData) nogil
        CUresult (*cuMemPoolSetAccess)(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count) nogil
        CUresult (*cuDeviceGetP2PAttribute)(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice, CUdevice dstDevice) nogil
        CUresult (*cuDeviceGetByPCIBusId)(CUdevice *dev, const char *pciBusId) nogil
        # CUDA graphs (_graph.pyx): capture, explicit graphs, executable graphs
        CUresult (*cuStreamBeginCapture)(CUstream hStream, CUstreamCaptureMode mode) nogil
        CUresult (*cuStreamEndCapture)(CUstream hStream, CUgraph *phGraph) nogil
        CUresult (*cuStreamIsCapturing)(CUstream hStream, CUstreamCaptureStatus *captureStatus) nogil
        CUresult (*cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *mode) nogil
        CUresult (*cuGraphCreate)(CUgraph *phGraph, unsigned int flags) nogil
        CUresult (*cuGraphDestroy)(CUgraph hGraph) nogil
        CUresult (*cuGraphGetNodes)(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) nogil
        CUresult (*cuGraphNodeGetType)(CUgraphNode hNode, CUgraphNodeType *type) nogil
        CUresult (*cuGraphDestroyNode)(CUgraphNode hNode) nogil
        CUresult (*cuGraphAddDependencies)(CUgraph hGraph, const CUgraphNode *from_nodes, const CUgraphNode *to_nodes, const CUgraphEdgeData *edgeData, size_t numDependencies) nogil
        CUresult (*cuGraphGetEdges)(CUgraph hGraph, CUgraphNode *from_nodes, CUgraphNode *to_nodes, CUgraphEdgeData *edgeData, size_t *numEdges) nogil
        CUresult (*cuGraphAddKernelNode)(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) nogil
        CUresult (*cuGraphKernelNodeGetParams)(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) nogil
        CUresult (*cuGraphKernelNodeSetParams)(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) nogil
        CUresult (*cuGraphKernelNodeGetAttribute)(CUgraphNode hNode, CUlaunchAttributeID attr, CUlaunchAttributeValue *value_out) nogil
        CUresult (*cuGraphKernelNodeSetAttribute)(CUgraphNode hNode, CUlaunchAttributeID attr, const CUlaunchAttributeValue *value) nogil
        CUresult (*cuGraphAddMemcpyNode)(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx) nogil
        CUresult (*cuGraphAddMemsetNode)(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx) nogil
        CUresult (*cuGraphAddHostNode)(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, const CUDA_HOST_NODE_PARAMS *nodeParams) nogil
        CUresult (*cuGraphAddChildGraphNode)(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, CUgraph childGraph) nogil
        CUresult (*cuGraphAddEmptyNode)(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies) nogil
        CUresult (*cuGraphAddEventRecordNode)(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, CUevent event) nogil
        CUresult (*cuGraphAddEventWaitNode)(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies, CUevent event) nogil
        CUresult (*cuGraphAddNode)(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData, size_t numDependencies, CUgraphNodeParams *nodeParams) nogil
        CUresult (*cuGraphConditionalHandleCreate)(CUgraphConditionalHandle *pHandle_out, CUgraph hGraph, CUcontext ctx, unsigned int defaultLaunchValue, unsigned int flags) nogil
        CUresult (*cuGraphDebugDotPrint)(CUgraph hGraph, const char *path, unsigned int flags) nogil
        CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) nogil
        CUresult (*cuGraphInstantiateWithParams)(CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) nogil
        CUresult (*cuGraphLaunch)(CUgraphExec hGraphExec, CUstream hStream) nogil
        CUresult (*cuGraphUpload)(CUgraphExec hGraphExec, CUstream hStream) nogil
        CUresult (*cuGraphExecDestroy)(CUgraphExec hGraphExec) nogil
        CUresult (*cuGraphExecUpdate)(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo) nogil
        CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) nogil
        CUresult (*cuGraphNodeSetEnabled)(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled) nogil
        CUresult (*cuGraphNodeGetEnabled)(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int *isEnabled) nogil
        # launch: a module's kernel names (C++ lookup by plain name in cubins)
        CUresult (*cuModuleGetFunctionCount)(unsigned int *count, CUmodule mod) nogil
        CUresult (*cuModuleEnumerateFunctions)(CUfunction *functions, unsigned int numFunctions, CUmodule mod) nogil
        # PFN_<name> typedefs
    # END GENERATED

    # Name tables generated from BC_DEVICE_ATTRIBUTES / BC_FUNCTION_ATTRIBUTES
    # (names without the CU_DEVICE_ATTRIBUTE_ / CU_FUNC_ATTRIBUTE_ prefix).
    ctypedef struct bc_enum_name:
        const char *name
        int value
    enum: BC_DEVICE_ATTRIBUTE_COUNT
    enum: BC_FUNCTION_ATTRIBUTE_COUNT
    const bc_enum_name *bc_device_attribute_names()
    const bc_enum_name *bc_function_attribute_names()

    ctypedef struct bc_symbol_info:
        const char *name
        int version
        int required
        size_t offset

cdef extern from "barecuda/cuda_errors.h" nogil:
    ctypedef struct bc_error_info:
        int code
        const char *name
        const char *description
        const char *hint
        int sticky
    const bc_error_info *bc_error_table()      # sorted by code, BC_ERROR_TABLE_LEN rows
    enum: BC_ERROR_TABLE_LEN
    const bc_error_info *bc_error_lookup(int code)


cdef inline dict _enum_dict(const bc_enum_name *t, int n):
    cdef int i
    return {t[i].name.decode().lower(): t[i].value for i in range(n)}


cdef inline dict device_attribute_codes():
    """``{"max_threads_per_block": 1, ...}``: every CUdevice_attribute by lower-case
    name without the prefix, from the ABI header's BC_DEVICE_ATTRIBUTES table."""
    return _enum_dict(bc_device_attribute_names(), BC_DEVICE_ATTRIBUTE_COUNT)


cdef inline dict function_attribute_codes():
    """``{"max_threads_per_block": 0, ...}``: every CUfunction_attribute by lower-case
    name without the prefix, from the ABI header's BC_FUNCTION_ATTRIBUTES table."""
    return _enum_dict(bc_function_attribute_names(), BC_FUNCTION_ATTRIBUTE_COUNT)
