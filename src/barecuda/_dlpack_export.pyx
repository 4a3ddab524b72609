"""The DLPack capsules barecuda produces (DeviceBuffer.__dlpack__'s C side).

Owns: the export record (bc_dlpack_export in include/barecuda/bc_dlpack.h: the
managed tensor with its shape and strides, and the allocation owner it pins), the
deleters and capsule destructors that release it, and recognising a capsule of ours
when it comes back (an import of our own export pins our owner instead of wrapping a
foreign producer). The Python-facing export rules (streams, dl_device, copy) and every
import stay in _interop, the only module that cimports this one.

Lifetime: make_capsule pins the buffer's OWNER (not a view that may be closed first);
the deleter unpins it, once, whoever runs it (the consumer, or the capsule destructor
of a capsule never consumed), and never touches Python after interpreter shutdown.
"""
from cpython.pycapsule cimport PyCapsule_New, PyCapsule_IsValid, PyCapsule_GetPointer
from cpython.ref cimport Py_INCREF, Py_DECREF
from libc.stdlib cimport calloc, free
from libc.stdint cimport int64_t

from barecuda._dlpack cimport *
from barecuda._dtype cimport dlpack_dtype
from barecuda._buffer cimport DeviceBuffer, pin, unpin

cdef extern from "Python.h":
    int Py_IsInitialized() nogil


cdef void _dl_release(bc_dlpack_export *e) noexcept nogil:
    if e == NULL:
        return
    if e.owner != NULL and Py_IsInitialized():
        with gil:
            unpin(<DeviceBuffer>e.owner)
            Py_DECREF(<object>e.owner)
    free(e)


cdef void _dl_deleter_legacy(DLManagedTensor *t) noexcept nogil:
    _dl_release(<bc_dlpack_export *>t.manager_ctx)


cdef void _dl_deleter_versioned(DLManagedTensorVersioned *t) noexcept nogil:
    _dl_release(<bc_dlpack_export *>t.manager_ctx)


cdef void _capsule_destructor_legacy(object capsule) noexcept:
    cdef DLManagedTensor *t
    if PyCapsule_IsValid(capsule, b"dltensor"):      # never consumed
        t = <DLManagedTensor *>PyCapsule_GetPointer(capsule, b"dltensor")
        if t != NULL and t.deleter != NULL:
            t.deleter(t)


cdef void _capsule_destructor_versioned(object capsule) noexcept:
    cdef DLManagedTensorVersioned *t
    if PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        t = <DLManagedTensorVersioned *>PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        if t != NULL and t.deleter != NULL:
            t.deleter(t)


cdef object make_capsule(DeviceBuffer b, bint versioned, bint copied):
    key = b._dtype if b._dtype is not None else "uint8"
    dl = dlpack_dtype(key)
    if dl is None:
        raise BufferError(f"dtype {key!r} has no DLPack equivalent")
    cdef bint padded = dl[1] == 6          # 6-bit floats, one per byte: flagged padded (DLPack 1.1)
    if padded and not versioned:
        raise BufferError(f"{key} is held one per byte, which only a versioned DLPack capsule can say "
                          "(call __dlpack__(max_version=(1, 1)))")
    shape = b.shape
    cdef int ndim = len(shape)
    cdef int i
    cdef int64_t stride = 1
    if ndim > BC_DLPACK_MAX_NDIM:
        raise BufferError(f"DLPack export supports at most {BC_DLPACK_MAX_NDIM} dimensions")
    cdef bc_dlpack_export *e = <bc_dlpack_export *>calloc(1, sizeof(bc_dlpack_export))
    if e == NULL:
        raise MemoryError()
    cdef DLTensor *t = &e.t.versioned.dl_tensor if versioned else &e.t.legacy.dl_tensor
    for i in range(ndim - 1, -1, -1):
        e.shape[i] = shape[i]
        e.strides[i] = stride if b._strides is None else b._strides[i]
        stride *= shape[i] if shape[i] > 0 else 1
    t.data = <void *>b.ptr
    t.device.device_type = kDLCUDA
    t.device.device_id = b.device.ordinal
    t.ndim = ndim
    t.dtype.code = dl[0]
    t.dtype.bits = dl[1]
    t.dtype.lanes = dl[2]
    t.shape = e.shape
    t.strides = e.strides
    t.byte_offset = 0
    try:
        o = pin(b)             # the capsule holds the allocation until its deleter runs
    except BaseException:
        free(e)
        raise
    e.owner = <void *>o        # the owner: unpin must not go through a view closed since
    Py_INCREF(o)
    try:
        if versioned:
            e.t.versioned.version.major = BC_DLPACK_MAJOR_VERSION
            e.t.versioned.version.minor = BC_DLPACK_MINOR_VERSION
            e.t.versioned.manager_ctx = e
            e.t.versioned.deleter = _dl_deleter_versioned
            e.t.versioned.flags = ((DLPACK_FLAG_BITMASK_IS_COPIED if copied else 0)
                                   | (DLPACK_FLAG_BITMASK_READ_ONLY if b._readonly else 0)
                                   | (DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED if padded else 0))
            return PyCapsule_New(&e.t.versioned, b"dltensor_versioned", _capsule_destructor_versioned)
        e.t.legacy.manager_ctx = e
        e.t.legacy.deleter = _dl_deleter_legacy
        return PyCapsule_New(&e.t.legacy, b"dltensor", _capsule_destructor_legacy)
    except BaseException:
        _dl_release(e)
        raise


cdef DeviceBuffer our_export(void *mt, bint versioned):
    """The DeviceBuffer a capsule of ours was exported from (None for foreign capsules)."""
    cdef bc_dlpack_export *e
    if versioned:
        if (<DLManagedTensorVersioned *>mt).deleter != _dl_deleter_versioned:
            return None
        e = <bc_dlpack_export *>(<DLManagedTensorVersioned *>mt).manager_ctx
    else:
        if (<DLManagedTensor *>mt).deleter != _dl_deleter_legacy:
            return None
        e = <bc_dlpack_export *>(<DLManagedTensor *>mt).manager_ctx
    if e == NULL or e.owner == NULL:
        return None
    return <DeviceBuffer>e.owner
