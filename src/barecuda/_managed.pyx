"""Managed (unified) and pitched device memory.

Owns: managed_empty (cuMemAllocManaged) with DeviceBuffer.prefetch/advise, and
alloc_pitch (cuMemAllocPitch). Neither is stream-ordered, so their allocator's free
waits for the buffer's stream (or the whole context after cross-stream use).
"""

__all__ = ["managed_empty", "alloc_pitch"]
cimport cython

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current, require
from barecuda._device cimport Device, device_of
from barecuda._stream cimport stream_handle, resolve_device
from barecuda._dtype cimport resolve_dtype, normalize_shape, nbytes_of
from barecuda._buffer cimport (DeviceBuffer, Allocator, adopt, oom_error, checked_size,
                               note_use, order_stream, KIND_MANAGED, KIND_SYNC)
from barecuda._driver_pool cimport free_sync

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()


@cython.final
cdef class _WaitingFreeAllocator(Allocator):
    """Memory from cuMemAllocManaged / cuMemAllocPitch: not stream-ordered, so the free
    waits for the buffer's stream (or the whole context after cross-stream use)."""
    cdef int kind

    def __cinit__(self, Device device, int kind):
        self.device = device
        self.ctx = device.ctx
        self.kind = kind

    cdef int allocate(self, DeviceBuffer b, size_t size, CUstream s) except -1:
        raise TypeError("use managed_empty() / alloc_pitch()")

    cdef int deallocate(self, DeviceBuffer b) except -1:
        cdef CUstream s = NULL
        cdef CUresult rc
        if b.ptr == 0:
            return 0
        set_current(b.ctx)
        order_stream(b, &s)
        with nogil:
            rc = D.cuCtxSynchronize() if b.used_elsewhere else D.cuStreamSynchronize(s)
        check(rc, b"cuCtxSynchronize" if b.used_elsewhere else b"cuStreamSynchronize")
        return free_sync(b)


cdef object _waiting_allocators = {}


cdef Allocator waiting_allocator(Device dev, int kind):
    key = (dev.ordinal, kind)
    a = _waiting_allocators.get(key)
    if a is None:
        a = _WaitingFreeAllocator(dev, kind)
        _waiting_allocators[key] = a
    return <Allocator>a


_ATTACH = {"global": CU_MEM_ATTACH_GLOBAL, "host": CU_MEM_ATTACH_HOST}


def managed_empty(shape, dtype="uint8", *, device=None, stream=None, attach="global"):
    """A DeviceBuffer of managed (unified) memory, accessible from the host and every
    device (``cuMemAllocManaged``). Use :meth:`DeviceBuffer.prefetch` and
    :meth:`DeviceBuffer.advise` to place it. Freeing waits for the buffer's stream."""
    cdef CUdeviceptr p = 0
    cdef CUresult rc
    cdef CUstream h = NULL
    cdef size_t n
    cdef unsigned int flags
    ensure_driver(ST)
    shp = normalize_shape(shape)
    key, itemsize = resolve_dtype(dtype)
    n = nbytes_of(shp, itemsize)
    try:
        flags = _ATTACH[attach]
    except KeyError:
        raise ValueError(f"attach must be 'global' or 'host', not {attach!r}") from None
    if stream is not None:
        stream_handle(stream, &h)
    cdef Device dev = resolve_device(device, stream)
    if n:
        with nogil:
            rc = D.cuMemAllocManaged(&p, n, flags)
        if rc != 0:
            raise oom_error(rc, b"cuMemAllocManaged", n, dev, " (managed memory)")
    cdef DeviceBuffer b = adopt(p, n, dev, h, stream, KIND_MANAGED, waiting_allocator(dev, KIND_MANAGED))
    b._shape = shp
    b._dtype = key
    b._itemsize = itemsize
    return b


cdef int _location(object where, CUmemLocation *loc) except -1:
    if where is None or (isinstance(where, str) and where.lower() in ("cpu", "host")):
        loc.type = CU_MEM_LOCATION_TYPE_HOST
        loc.id = 0
    else:
        loc.type = CU_MEM_LOCATION_TYPE_DEVICE
        loc.id = device_of(where).ordinal
    return 0


def prefetch(DeviceBuffer b, where, stream):
    """DeviceBuffer.prefetch: cuMemPrefetchAsync of managed memory."""
    cdef CUstream s = NULL
    cdef CUmemLocation loc
    _location(where, &loc)
    if not b.is_managed:
        raise ValueError("prefetch() needs managed memory (managed_empty)")
    require(<const void *>D.cuMemPrefetchAsync, b"cuMemPrefetchAsync", b"DeviceBuffer.prefetch")
    if stream is not None:
        stream_handle(stream, &s)
    else:
        order_stream(b, &s)
    if b.nbytes == 0:
        return
    set_current(b.ctx)
    check(D.cuMemPrefetchAsync(b.ptr, b.nbytes, loc, 0, s), b"cuMemPrefetchAsync")
    if stream is not None:
        note_use(b, s)


_ADVICE = {
    "read_mostly": CU_MEM_ADVISE_SET_READ_MOSTLY, "unset_read_mostly": CU_MEM_ADVISE_UNSET_READ_MOSTLY,
    "preferred_location": CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
    "unset_preferred_location": CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
    "accessed_by": CU_MEM_ADVISE_SET_ACCESSED_BY, "unset_accessed_by": CU_MEM_ADVISE_UNSET_ACCESSED_BY,
}


def advise(DeviceBuffer b, advice, where):
    """DeviceBuffer.advise: cuMemAdvise on managed memory."""
    cdef CUmemLocation loc
    _location(where, &loc)
    if not b.is_managed:
        raise ValueError("advise() needs managed memory (managed_empty)")
    require(<const void *>D.cuMemAdvise, b"cuMemAdvise", b"DeviceBuffer.advise")
    try:
        code = _ADVICE[advice] if isinstance(advice, str) else int(advice)
    except KeyError:
        raise ValueError(f"unknown advice {advice!r}; one of {sorted(_ADVICE)}") from None
    if b.nbytes == 0:
        return
    set_current(b.ctx)
    check(D.cuMemAdvise(b.ptr, b.nbytes, <CUmem_advise>code, loc), b"cuMemAdvise")


def alloc_pitch(width_bytes, height, *, element_size=4, device=None, stream=None):
    """Pitched 2D device memory (``cuMemAllocPitch``): returns ``(buffer, pitch)``;
    row ``y`` starts at ``buffer.ptr + y * pitch``. ``element_size`` is 4, 8 or 16."""
    cdef CUdeviceptr p = 0
    cdef size_t pitch = 0
    cdef CUresult rc
    cdef size_t w = checked_size(width_bytes, "width_bytes"), h = checked_size(height, "height")
    cdef unsigned int es
    cdef CUstream hs = NULL
    if element_size not in (4, 8, 16) or isinstance(element_size, bool):
        raise ValueError("element_size must be 4, 8 or 16")
    es = element_size
    ensure_driver(ST)
    if stream is not None:
        stream_handle(stream, &hs)
    cdef Device dev = resolve_device(device, stream)
    if w and h:
        with nogil:
            rc = D.cuMemAllocPitch(&p, &pitch, w, h, es)
        if rc != 0:
            raise oom_error(rc, b"cuMemAllocPitch", w * h if h == 0 or w <= (<size_t>-1) // h else <size_t>-1, dev, " (pitched)")
    if h and pitch > (<size_t>-1) // h:
        raise OverflowError(f"pitch {pitch} x height {h} overflows")
    cdef DeviceBuffer b = adopt(p, pitch * h, dev, hs, stream, KIND_SYNC, waiting_allocator(dev, KIND_SYNC))
    b._shape = (h, pitch)
    b._dtype = "uint8"
    b._itemsize = 1
    return b, pitch
