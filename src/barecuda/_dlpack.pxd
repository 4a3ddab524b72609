"""DLPack structures (include/barecuda/bc_dlpack.h), shared by _buffer and _interop.
Declarations only: no module of this name exists at run time."""
from libc.stdint cimport int64_t, uint64_t, uint8_t, uint16_t, int32_t, uint32_t

cdef extern from "barecuda/bc_dlpack.h" nogil:
    ctypedef struct DLPackVersion:
        uint32_t major
        uint32_t minor
    ctypedef struct DLDevice:
        int32_t device_type
        int32_t device_id
    ctypedef struct DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct DLTensor:
        void *data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t *shape
        int64_t *strides
        uint64_t byte_offset
    ctypedef struct DLManagedTensor:
        DLTensor dl_tensor
        void *manager_ctx
        void (*deleter)(DLManagedTensor *) noexcept
    ctypedef struct DLManagedTensorVersioned:
        DLPackVersion version
        void *manager_ctx
        void (*deleter)(DLManagedTensorVersioned *) noexcept
        uint64_t flags
        DLTensor dl_tensor
    ctypedef union _bc_dl_union:
        DLManagedTensor legacy
        DLManagedTensorVersioned versioned
    ctypedef struct bc_dlpack_export:
        _bc_dl_union t
        void *owner
        int64_t shape[32]
        int64_t strides[32]
    ctypedef int (*bc_dlx_dltensor_fn)(void *py_object, DLTensor *out) noexcept
    ctypedef int (*bc_dlx_stream_fn)(int32_t device_type, int32_t device_id, void **out_stream) noexcept
    ctypedef struct bc_dlpack_exchange_api:
        DLPackVersion version
        bc_dlx_dltensor_fn dltensor_from_py_object_no_sync
        bc_dlx_stream_fn current_work_stream
    const char *BC_DLPACK_EXCHANGE_CAPSULE
    int kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged
    int kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLComplex, kDLBool
    uint64_t DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
    int BC_DLPACK_MAJOR_VERSION, BC_DLPACK_MINOR_VERSION, BC_DLPACK_MAX_NDIM
