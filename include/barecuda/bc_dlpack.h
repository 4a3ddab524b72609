/*
 * barecuda/bc_dlpack.h -- the DLPack ABI (v1.x, with the legacy v0 managed tensor),
 * declared by barecuda from the DLPack specification. No third-party header.
 *
 * Layouts are fixed by the spec; the static checks below pin them on 64-bit targets.
 * Capsule names: "dltensor" (DLManagedTensor), "dltensor_versioned"
 * (DLManagedTensorVersioned); a consumer renames the capsule to "used_dltensor" /
 * "used_dltensor_versioned" once it owns the tensor.
 */
#ifndef BARECUDA_BC_DLPACK_H
#define BARECUDA_BC_DLPACK_H

#include <stddef.h>
#include <stdint.h>
#include "barecuda/cuda_abi.h"   /* BC_STATIC_ASSERT */

#ifdef __cplusplus
extern "C" {
#endif

#define BC_DLPACK_MAJOR_VERSION 1
#define BC_DLPACK_MINOR_VERSION 1      /* 1.1: the fp8, fp6 and fp4 type codes below */

/* DLDeviceType */
typedef enum {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3,
    kDLOpenCL = 4,
    kDLVulkan = 7,
    kDLMetal = 8,
    kDLVPI = 9,
    kDLROCM = 10,
    kDLROCMHost = 11,
    kDLExtDev = 12,
    kDLCUDAManaged = 13,
    kDLOneAPI = 14,
    kDLWebGPU = 15,
    kDLHexagon = 16,
    kDLMAIA = 17
} DLDeviceType;

/* DLDataTypeCode */
typedef enum {
    kDLInt = 0,
    kDLUInt = 1,
    kDLFloat = 2,
    kDLOpaqueHandle = 3,
    kDLBfloat = 4,
    kDLComplex = 5,
    kDLBool = 6,
    /* DLPack 1.1: 8-bit floats (bits = 8) */
    kDLFloat8_e3m4 = 7,
    kDLFloat8_e4m3 = 8,
    kDLFloat8_e4m3b11fnuz = 9,
    kDLFloat8_e4m3fn = 10,
    kDLFloat8_e4m3fnuz = 11,
    kDLFloat8_e5m2 = 12,
    kDLFloat8_e5m2fnuz = 13,
    kDLFloat8_e8m0fnu = 14,
    /* DLPack 1.1: 6- and 4-bit floats (bits = 6 / 4); packed unless the versioned
       tensor's flags carry DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED */
    kDLFloat6_e2m3fn = 15,
    kDLFloat6_e3m2fn = 16,
    kDLFloat4_e2m1fn = 17
} DLDataTypeCode;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

typedef struct {
    int32_t device_type;   /* DLDeviceType; an int32 in the ABI */
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code;          /* DLDataTypeCode */
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;      /* in elements; NULL means compact row-major */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1ULL << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1ULL << 1)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1ULL << 2)

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#if UINTPTR_MAX == 0xffffffffffffffffULL
BC_STATIC_ASSERT(sizeof(DLDevice) == 8, dldevice_size);
BC_STATIC_ASSERT(sizeof(DLDataType) == 4, dldatatype_size);
BC_STATIC_ASSERT(sizeof(DLTensor) == 48, dltensor_size);
BC_STATIC_ASSERT(offsetof(DLTensor, shape) == 24, dltensor_shape_offset);
BC_STATIC_ASSERT(sizeof(DLManagedTensor) == 64, dlmanaged_size);
BC_STATIC_ASSERT(offsetof(DLManagedTensorVersioned, dl_tensor) == 32, dlversioned_tensor_offset);
BC_STATIC_ASSERT(sizeof(DLManagedTensorVersioned) == 80, dlversioned_size);
#endif

/* What barecuda allocates for one export: the managed tensor (either flavour) and
 * the shape/strides it points to, in one block so one free() releases it. */
#define BC_DLPACK_MAX_NDIM 32
typedef struct bc_dlpack_export {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned versioned;
    } t;
    void *owner;                     /* PyObject*, one strong reference */
    int64_t shape[BC_DLPACK_MAX_NDIM];
    int64_t strides[BC_DLPACK_MAX_NDIM];
} bc_dlpack_export;

/* DLPack's C exchange API (DLPack 1.2 and later): a table of C functions a tensor
 * library publishes on its tensor *type* as the capsule `__dlpack_c_exchange_api__`
 * named "dlpack_exchange_api" (PyTorch 2.10+). barecuda's launch path uses two of
 * them: a non-owning DLTensor of an object (no Python call, no allocation) and the
 * library's current stream on a device. Only the layout of the fields up to
 * current_work_stream is relied on; `version.major` must be 1. */
#define BC_DLPACK_EXCHANGE_CAPSULE "dlpack_exchange_api"
typedef int (*bc_dlx_dltensor_fn)(void *py_object, DLTensor *out);                 /* 0, or -1 + exception */
typedef int (*bc_dlx_stream_fn)(int32_t device_type, int32_t device_id, void **out_stream);
typedef struct bc_dlpack_exchange_api {
    DLPackVersion version;           /* the header: version, then the previous API or NULL */
    void *prev_api;
    void *managed_tensor_allocator;
    void *managed_tensor_from_py_object_no_sync;
    void *managed_tensor_to_py_object_no_sync;
    bc_dlx_dltensor_fn dltensor_from_py_object_no_sync;    /* may be NULL */
    bc_dlx_stream_fn current_work_stream;
} bc_dlpack_exchange_api;

#ifdef __cplusplus
}
#endif
#endif /* BARECUDA_BC_DLPACK_H */
