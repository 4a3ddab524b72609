"""Streams and events."""
from barecuda._abi cimport CUstream, CUevent, CUcontext, CUresult
from barecuda._device cimport Device

cdef class Stream:
    cdef CUstream handle
    cdef readonly Device device
    cdef CUcontext ctx
    cdef bint owned             # we created it and destroy it
    cdef object _keepalive      # owner of a foreign stream

cdef class Event:
    cdef CUevent handle
    cdef readonly Device device
    cdef CUcontext ctx
    cdef bint timing

ctypedef CUresult (*_query_fn)(void *handle) noexcept nogil
cdef int wait_interruptible(_query_fn query, void *handle, const char *call) except -1
cdef int _foreign_stream(object obj, CUstream *out) except -1
cdef Stream as_stream(object obj, Device device)

cdef inline int stream_handle(object obj, CUstream *out) except -1:
    """The CUstream for obj: None -> default (legacy) stream; Stream -> its handle;
    objects with __cuda_stream__ and raw int handles through the slow path."""
    if obj is None:
        out[0] = NULL
        return 0
    if type(obj) is Stream:
        out[0] = (<Stream>obj).handle
        return 0
    return _foreign_stream(obj, out)
