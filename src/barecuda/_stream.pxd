"""Streams and events."""
from barecuda._abi cimport CUstream, CUevent, CUcontext, CUresult
from barecuda._device cimport Device

from barecuda._uses cimport bc_use_enter, bc_use_leave, bc_use_count, bc_flag_set, bc_flag_take

cdef class Stream:
    cdef CUstream handle
    cdef readonly Device device
    """The Device this stream (or event) belongs to."""
    cdef CUcontext ctx
    cdef bint owned             # we created it and destroy it
    cdef object _keepalive      # owner of a foreign stream
    cdef bint closed            # close() was called: every method refuses
    cdef int _priority          # cached (see Stream.priority)
    cdef bint _non_blocking
    cdef bint _flags_known      # _priority/_non_blocking are valid
    cdef long _uses             # driver calls naming the handle in flight without the GIL (stream_use; atomic)
    cdef int _destroy_pending   # closed while in use: the last stream_done destroys _dead (bc_flag_take)
    cdef CUstream _dead         # the handle close() left to the last stream_done
    cdef int _captures          # barecuda captures running on it (_capture.pyx): close() refuses

    cdef int _load_flags(self) except -1

cdef class Event:
    cdef CUevent handle
    cdef readonly Device device
    """The Device this stream (or event) belongs to."""
    cdef CUcontext ctx
    cdef bint timing
    cdef bint closed
    cdef long _uses             # waits naming the handle in flight without the GIL (synchronize; atomic)
    cdef int _destroy_pending   # closed while waited on: the last event_done destroys _dead
    cdef CUevent _dead          # the handle close() left to the last event_done

cdef int _foreign_stream(object obj, CUstream *out) except -1
cdef int _stream_closed_error(Stream s) except -1
cdef Stream as_stream(object obj, Device device)

cdef inline int stream_handle(object obj, CUstream *out) except -1:
    """The CUstream for obj: None -> default (legacy) stream; Stream -> its handle;
    objects with __cuda_stream__ and raw int handles through the slow path.
    A closed Stream raises ValueError("stream is closed") before any driver call."""
    if obj is None:
        out[0] = NULL
        return 0
    if type(obj) is Stream:
        if (<Stream>obj).closed:
            return _stream_closed_error(<Stream>obj)
        out[0] = (<Stream>obj).handle
        return 0
    return _foreign_stream(obj, out)

# ---- use counts (docs/architecture.md, "Close versus in-flight use"): before a driver call
# that names obj's handle without the GIL. For a barecuda Stream: enters its use count,
# then raises ValueError (count left again) if it is closed, and returns it; anything
# else (None, foreign streams): returns None. Give the result to stream_done afterwards
# (in a finally): a close() meanwhile destroys the stream at the last stream_done.
cdef Stream stream_use(object obj)
# Leaves the count (None: nothing); the last one out of a closed stream destroys it
# (a failure becomes a CudaWarning). Never raises.
cdef void stream_done(Stream s) noexcept

# -- for the memory modules
# The Device for (device, stream): device None -> the stream's device (a barecuda Stream)
# or the current device; int or Device -> _device's cached Device. Made current on this thread.
cdef Device resolve_device(object device, object stream)
# Later work on `waiter` waits for everything queued on `producer` so far (nothing when
# they are the same stream; NULL and CU_STREAM_LEGACY are the same stream).
cdef int stream_after(CUstream waiter, CUstream producer, CUcontext ctx) except -1
