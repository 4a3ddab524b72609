"""The allocators that leave caching to the driver, and how driver memory is freed.

Owns: DriverAllocator (cuMemAllocAsync on the device's default memory pool, or
cuMemAlloc where the driver or device has no pools), DriverMemoryPool (a pool made
with cuMemPoolCreate, or the device's default pool, through cuMemAllocFromPoolAsync),
and the free rule of every allocator that hands a buffer's memory straight back to
the driver (free_order, free_async, free_sync: also used by _ipc's and _managed's
allocators). barecuda's own cache (MemoryPool) and the stream-close rule all
allocators follow are in _pool.pyx; the Allocator interface in _buffer.pyx.
"""

__all__ = ["DriverAllocator", "DriverMemoryPool"]
cimport cython
from libc.string cimport memset
import warnings

from barecuda._abi cimport *
from barecuda._errors cimport (check, bc_state_t, bc_driver_usable, CUDA_SUCCESS, CUDA_ERROR_NOT_SUPPORTED,
                              CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, warn_destroy_failed)
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current, require
from barecuda._device cimport Device, device_of
from barecuda._buffer cimport (Allocator, DeviceBuffer, KIND_ASYNC, KIND_SYNC, oom_error,
                               stream_closed, _order_on_safe_stream, capture_use_t, capture_use_slot)
from barecuda._pool cimport fmt_bytes
from barecuda._stream cimport resolve_device
from barecuda._errors import CudaWarning, make_error, _renamed

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()
# Non-NULL while a barecuda capture runs (_buffer.pxd, capture_use_t): then graph
# allocations are marked and the frees of other memory wait for the captures' end.
cdef capture_use_t *CAP = capture_use_slot()


# ------------------------------------------------------------------ freeing
# While a barecuda capture runs, driver memory that is not a graph allocation is not
# freed: cuMemFree is an unsafe call (it invalidates global captures), cuMemFreeAsync in
# a capture must name a graph allocation (and on the legacy stream it would join a
# blocking capturing stream), and frees that first synchronize the context invalidate
# every capture. Such frees wait in _after_capture until the last capture ends.
cdef list _after_capture = []       # (context, address, async) frees deferred during captures (free_async/free_sync)


cdef bint _is_capturing(CUstream s) noexcept:
    cdef CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE
    if s == NULL or D.cuStreamIsCapturing == NULL or D.cuStreamIsCapturing(s, &st) != 0:
        return False
    return st != CU_STREAM_CAPTURE_STATUS_NONE


cdef void flush_capture_frees() noexcept:
    cdef CUresult rc
    cdef CUcontext ctx
    cdef CUdeviceptr dp
    global _after_capture
    if not _after_capture or not bc_driver_usable(ST):
        return
    todo = _after_capture
    _after_capture = []
    ST.capture_frees = 0
    try:
        synced = set()
        for c, p, is_async in todo:
            ctx = <CUcontext><size_t>c
            set_current(ctx)
            if c not in synced:        # work queued before the capture may still use them
                synced.add(c)
                with nogil:
                    rc = D.cuCtxSynchronize()
                check(rc, b"cuCtxSynchronize")
            dp = <CUdeviceptr><size_t>p
            if is_async:
                check(D.cuMemFreeAsync(dp, NULL), b"cuMemFreeAsync")
            else:
                with nogil:
                    rc = D.cuMemFree(dp)
                check(rc, b"cuMemFree")
    except BaseException as e:
        try:
            warnings.warn(f"freeing device memory deferred during a stream capture failed: {e}", CudaWarning)
        except BaseException:
            pass


cdef int free_order(DeviceBuffer b, CUstream *out) except -1:
    """See _driver_pool.pxd."""
    cdef CUresult rc
    if stream_closed(b):
        return _order_on_safe_stream(b, out)      # waits for the context
    out[0] = b.stream_handle
    if b.used_elsewhere:
        # Queued work on some other stream may still use it: wait for everything.
        set_current(b.ctx)
        with nogil:
            rc = D.cuCtxSynchronize()
        check(rc, b"cuCtxSynchronize")
    return 0


cdef void note_graph_alloc(DeviceBuffer b, CUstream s) noexcept:
    """See _driver_pool.pxd."""
    b._graph_alloc = CAP[0] != NULL and _is_capturing(s)


cdef int free_async(DeviceBuffer b) except -1:
    """See _driver_pool.pxd."""
    cdef CUdeviceptr p = b.ptr
    cdef CUstream s = NULL
    b.ptr = 0
    if p == 0:
        return 0
    if CAP[0] != NULL:
        if b._graph_alloc and not stream_closed(b):
            # Graph memory: in stream order (a free node while its stream still
            # captures), without the context synchronization of free_order.
            set_current(b.ctx)
            check(D.cuMemFreeAsync(p, b.stream_handle), b"cuMemFreeAsync")
            return 0
        _after_capture.append((<size_t>b.ctx, <size_t>p, True))
        ST.capture_frees += 1
        return 0
    set_current(b.ctx)
    free_order(b, &s)
    check(D.cuMemFreeAsync(p, s), b"cuMemFreeAsync")
    return 0


cdef int free_sync(DeviceBuffer b) except -1:
    """See _driver_pool.pxd."""
    cdef CUdeviceptr p = b.ptr
    cdef CUresult rc
    b.ptr = 0
    if p == 0:
        return 0
    if CAP[0] != NULL:
        _after_capture.append((<size_t>b.ctx, <size_t>p, False))
        ST.capture_frees += 1
        return 0
    set_current(b.ctx)
    with nogil:                  # cuMemFree synchronizes the device itself
        rc = D.cuMemFree(p)
    check(rc, b"cuMemFree")
    return 0


# --------------------------------------------------------------- allocators
@cython.final
cdef class DriverAllocator(Allocator):
    """Allocates straight from the driver: ``cuMemAllocAsync`` on the buffer's stream
    (the device's default memory pool), or ``cuMemAlloc`` where the driver or device
    has no memory pools. Frees with ``cuMemFreeAsync`` on the buffer's stream, after
    ``cuCtxSynchronize`` when the buffer was used on another stream."""
    cdef bint use_async

    def __cinit__(self, device=None):
        cdef Device dev = resolve_device(device, None)
        self.device = dev
        self.ctx = dev.ctx
        self.use_async = D.cuMemAllocAsync != NULL and D.cuMemFreeAsync != NULL

    cdef int allocate(self, DeviceBuffer b, size_t size, CUstream s) except -1:
        cdef CUdeviceptr p = 0
        cdef CUresult rc
        b.ptr = 0
        b.nbytes = size
        if size == 0:
            b._kind = KIND_SYNC
            return 0
        set_current(self.ctx)
        if self.use_async:
            with nogil:
                rc = D.cuMemAllocAsync(&p, size, s)
            if rc == CUDA_ERROR_NOT_SUPPORTED:     # no memory pools here
                self.use_async = False
            else:
                if rc != 0:
                    raise oom_error(rc, b"cuMemAllocAsync", size, self.device, "")
                b.ptr = p
                b._kind = KIND_ASYNC
                note_graph_alloc(b, s)      # on a capturing stream: a graph allocation node
                return 0
        # cuMemAlloc is not stream ordered: during a global (or this thread's
        # thread-local) capture the driver refuses it and invalidates the capture; in a
        # relaxed one it is ordinary memory that the graph holds when its work uses it.
        with nogil:
            rc = D.cuMemAlloc(&p, size)
        if rc != 0:
            raise oom_error(rc, b"cuMemAlloc", size, self.device,
                            " (cuMemAlloc during a stream capture needs mode='relaxed', or a memory pool)"
                            if rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED else "")
        b.ptr = p
        b._kind = KIND_SYNC
        return 0

    cdef int deallocate(self, DeviceBuffer b) except -1:
        if b._kind == KIND_ASYNC:
            return free_async(b)
        return free_sync(b)

    def __repr__(self):
        return f"<barecuda.DriverAllocator device={self.device.ordinal} async={bool(self.use_async)}>"


@cython.final
cdef int pool_alloc(DeviceBuffer b, size_t size, CUmemoryPool pool, CUcontext ctx, CUstream s, int kind,
                    CUresult *rc) except -1:
    """The allocate of every allocator on a driver pool: b takes `size` bytes of `pool`
    on stream s (``cuMemAllocFromPoolAsync`` without the GIL), with buffer kind `kind`;
    nothing for size 0. The driver's answer is left in rc (the caller words the error)."""
    cdef CUdeviceptr p = 0
    b.ptr = 0
    b.nbytes = size
    b._kind = kind
    rc[0] = CUDA_SUCCESS
    if size == 0:
        return 0
    set_current(ctx)
    with nogil:
        rc[0] = D.cuMemAllocFromPoolAsync(&p, size, pool, s)
    if rc[0] == CUDA_SUCCESS:
        b.ptr = p
    return 0


cdef class DriverMemoryPool(Allocator):
    """An allocator on a driver memory pool (``cuMemPoolCreate``), or on the device's
    default pool (``default=True``), allocating with ``cuMemAllocFromPoolAsync`` and
    freeing with ``cuMemFreeAsync`` on the buffer's stream.

    Parameters
    ----------
    device : Device or int, optional
    release_threshold : int, optional
        Bytes the pool keeps reserved across synchronizations. Default: unlimited, so
        that the steady state makes no allocation from the OS.
    limit : int, optional
        Maximum pool size (``CUmemPoolProps.maxSize``; drivers >= 12.2).
    default : bool
        Use the device's default pool instead of creating one.
    """

    def __cinit__(self, device=None, *, release_threshold=None, limit=None, bint default=False):
        cdef CUmemPoolProps props
        cdef CUmemoryPool p = NULL
        cdef unsigned long long thr
        ensure_driver(ST)
        require(<const void *>D.cuMemPoolCreate, b"cuMemPoolCreate", b"DriverMemoryPool")
        require(<const void *>D.cuMemAllocFromPoolAsync, b"cuMemAllocFromPoolAsync", b"DriverMemoryPool")
        cdef Device dev = device_of(device)
        dev.activate()
        self.device = dev
        self.ctx = dev.ctx
        if default:
            check(D.cuDeviceGetDefaultMemPool(&p, dev.handle), b"cuDeviceGetDefaultMemPool")
            self.owned = False
        else:
            memset(&props, 0, sizeof(props))
            props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED
            props.handleTypes = CU_MEM_HANDLE_TYPE_NONE
            props.location.type = CU_MEM_LOCATION_TYPE_DEVICE
            props.location.id = dev.ordinal
            props.maxSize = 0 if limit is None else limit
            check(D.cuMemPoolCreate(&p, &props), b"cuMemPoolCreate")
            self.owned = True
        self.pool = p
        thr = <unsigned long long>-1 if release_threshold is None else release_threshold
        try:
            check(D.cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr),
                  b"cuMemPoolSetAttribute")
        except BaseException:
            if self.owned:
                D.cuMemPoolDestroy(p)
            self.pool = NULL
            raise

    def __dealloc__(self):
        if self.pool != NULL and self.owned and bc_driver_usable(ST):
            rc = D.cuMemPoolDestroy(self.pool)
            if rc != 0:
                warn_destroy_failed(rc, b"cuMemPoolDestroy", "DriverMemoryPool.__dealloc__")
        self.pool = NULL

    cdef int allocate(self, DeviceBuffer b, size_t size, CUstream s) except -1:
        cdef CUresult rc = CUDA_SUCCESS
        pool_alloc(b, size, self.pool, self.ctx, s, KIND_ASYNC, &rc)
        if rc != CUDA_SUCCESS:
            raise make_error(rc, "cuMemAllocFromPoolAsync",
                             f"requested {size} bytes ({fmt_bytes(size)}) on device {self.device.ordinal}; "
                             f"pool stats: {self.stats()}")
        if size != 0:
            note_graph_alloc(b, s)
            self.n_allocs += 1
        return 0

    cdef int deallocate(self, DeviceBuffer b) except -1:
        return free_async(b)

    cdef unsigned long long _attr(self, int a) except? 0:
        cdef unsigned long long v = 0
        check(D.cuMemPoolGetAttribute(self.pool, <CUmemPool_attribute>a, &v), b"cuMemPoolGetAttribute")
        return v

    def stats(self):
        """``in_use``, ``reserved``, ``peak``, ``peak_reserved``, ``release_threshold``,
        ``allocations`` (from the driver's pool attributes)."""
        return {
            "in_use": self._attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
            "reserved": self._attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
            "peak": self._attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH),
            "peak_reserved": self._attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH),
            "release_threshold": self._attr(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD),
            "allocations": self.n_allocs,
        }

    def trim(self, keep=0):
        """Release reserved memory above ``keep`` bytes back to the OS (cuMemPoolTrimTo)."""
        set_current(self.ctx)
        check(D.cuMemPoolTrimTo(self.pool, keep), b"cuMemPoolTrimTo")

    @property
    def handle_int(self):
        """The ``CUmemoryPool`` as an int."""
        return <size_t>self.pool

    handle = _renamed("DriverMemoryPool.handle", "handle_int")   # the old spelling, for one release

    def set_release_threshold(self, nbytes):
        """Change the bytes the pool keeps reserved across synchronizations
        (``CU_MEMPOOL_ATTR_RELEASE_THRESHOLD``); None: unlimited. Read it back with
        ``stats()["release_threshold"]``."""
        cdef unsigned long long thr
        if nbytes is None:
            thr = <unsigned long long>-1
        else:
            if nbytes < 0:
                raise ValueError(f"release threshold must be >= 0 bytes or None, got {nbytes}")
            thr = nbytes
        set_current(self.ctx)
        check(D.cuMemPoolSetAttribute(self.pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr),
              b"cuMemPoolSetAttribute")

    def __repr__(self):
        return f"<barecuda.DriverMemoryPool 0x{<size_t>self.pool:x} device={self.device.ordinal}>"
