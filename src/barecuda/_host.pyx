"""Page-locked host memory.

Owns: PinnedBuffer (cuMemHostAlloc memory with the buffer protocol, waiting for the
async copies that used it before it is freed), the PinnedAllocator interface pinned
caches implement (barecuda._pinned_pool.PinnedMemoryPool), pinned_empty, host registration
(register_host / HostRegistration, cuMemHostRegister) and mapped memory, and the
host-buffer helpers the copies use.
"""

__all__ = ["PinnedBuffer", "PinnedAllocator", "pinned_empty", "register_host", "HostRegistration"]
cimport cython
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS,
                             PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES)
import warnings

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable, warn_destroy_failed
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current
from barecuda._device cimport Device
from barecuda._dtype cimport np_module, resolve_dtype, normalize_shape, nbytes_of
from barecuda._buffer cimport oom_error, checked_size
from barecuda._stream cimport resolve_device
from barecuda._errors import CudaWarning, _renamed, _enter_self, _exit_close

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()


# ---------------------------------------------------------------- host buffers
cdef int get_host(object obj, Py_buffer *view, bint writable) except -1:
    cdef int flags = PyBUF_C_CONTIGUOUS | (PyBUF_WRITABLE if writable else 0)
    try:
        PyObject_GetBuffer(obj, view, flags)
    except TypeError:
        raise TypeError(f"expected a DeviceBuffer, a device array (__cuda_array_interface__ / "
                        f"__dlpack__) or a host object with the buffer protocol, not "
                        f"{type(obj).__name__}") from None
    except (BufferError, ValueError) as e:
        if writable:
            try:
                PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS)
            except Exception:
                pass
            else:
                PyBuffer_Release(view)
                raise ValueError(f"the destination {type(obj).__name__} is read-only") from None
        raise ValueError(f"host buffer ({type(obj).__name__}) must be C-contiguous: {e}; "
                         "copy it first, e.g. numpy.ascontiguousarray(x)") from None
    return 0


cdef PinnedBuffer find_pinned(object obj):
    """The PinnedBuffer under obj (itself, a memoryview of it, a numpy view of it...)."""
    cdef int depth
    for depth in range(8):
        if obj is None:
            return None
        if type(obj) is PinnedBuffer:
            return <PinnedBuffer>obj
        if type(obj) is memoryview:
            obj = (<object>obj).obj
        else:
            obj = getattr(obj, "base", None)
    return None



# --------------------------------------------------------------- PinnedBuffer
cdef char _empty_host[8]
cdef char *_fmt_B = b"B"


cdef class PinnedAllocator:
    """Base of pinned host-memory caches (``barecuda.PinnedMemoryPool``): a PinnedBuffer
    from one hands its memory back through ``give_back`` instead of freeing it."""

    cdef int give_back(self, void *p, size_t n, CUdeviceptr dptr, CUevent ev) except -1:
        raise NotImplementedError


@cython.final
@cython.no_gc_clear
cdef class PinnedBuffer:
    """Page-locked host memory (``cuMemHostAlloc``), viewable through the buffer
    protocol: ``memoryview(p)``, ``numpy.asarray(p)`` (bytes; see :func:`pinned_empty`).

    Parameters
    ----------
    nbytes : int
    device : Device or int, optional
        The device whose context allocates it (portable memory is usable from all).
    portable : bool
        Usable from every context (CU_MEMHOSTALLOC_PORTABLE). Default True.
    mapped : bool
        Also map it into the device address space (``device_ptr``). Default False.
    write_combined : bool
        Write-combined memory: fast host writes and device reads, very slow host reads.

    ``close()`` refuses while buffer-protocol views exist and waits for any async
    copy that used this memory before freeing it.
    """

    def __cinit__(self, nbytes, *, device=None, bint portable=True, bint mapped=False,
                  bint write_combined=False):
        cdef void *p = NULL
        cdef CUdeviceptr dp = 0
        cdef CUresult rc
        cdef size_t n
        cdef unsigned int flags = 0
        self.ptr = NULL
        self._pool = None
        n = checked_size(nbytes, "nbytes")      # an int in [0, 2**63): before any driver call
        ensure_driver(ST)
        cdef Device dev = resolve_device(device, None)
        if portable:
            flags |= CU_MEMHOSTALLOC_PORTABLE
        if mapped:
            flags |= CU_MEMHOSTALLOC_DEVICEMAP
        if write_combined:
            flags |= CU_MEMHOSTALLOC_WRITECOMBINED
        if n > 0:
            with nogil:
                rc = D.cuMemHostAlloc(&p, n, flags)
            if rc != 0:
                raise oom_error(rc, b"cuMemHostAlloc", n, dev, " (pinned host memory)")
            if mapped:
                rc = D.cuMemHostGetDevicePointer(&dp, p, 0)
                if rc != 0:
                    D.cuMemFreeHost(p)
                    check(rc, b"cuMemHostGetDevicePointer")
        self.device = dev
        self.ctx = dev.ctx
        self._strides[0] = 1
        self._set_block(p, n, dp, flags)

    cdef void _set_block(self, void *p, size_t n, CUdeviceptr dptr, unsigned int flags) noexcept:
        """The memory this buffer is: n bytes at p (its own allocation, or a pinned pool's
        block), mapped at dptr (0: not mapped), allocated with flags."""
        self.ptr = p
        self.nbytes_ = n
        self._shape[0] = n
        self.dptr = dptr
        self.flags = flags

    def __dealloc__(self):
        if self.ptr == NULL or not bc_driver_usable(ST):
            return
        try:
            self._free()
        except BaseException as e:
            warnings.warn(f"freeing PinnedBuffer ({self.nbytes_} bytes) failed: {e}", CudaWarning)

    cdef int _free(self) except -1:
        cdef void *p = self.ptr
        cdef CUevent ev = self._last_use
        cdef CUresult rc = 0
        self.ptr = NULL
        self._last_use = NULL
        set_current(self.ctx)
        if self._graph_held and p != NULL:
            # A graph copied to or from it: a launch of it may still run (its executables
            # are gone, the work need not be). Graph launches record no event here.
            self._graph_held = False
            with nogil:
                rc = D.cuCtxSynchronize()
            if rc != 0:
                if ev != NULL:
                    D.cuEventDestroy(ev)
                check(rc, b"cuCtxSynchronize")
        if self._pool is not None and p != NULL:
            # Back to its pinned pool, which reuses it once `ev` has completed.
            pool = self._pool
            self._pool = None
            (<PinnedAllocator>pool).give_back(p, self.nbytes_, self.dptr, ev)
            return 0
        if ev != NULL:
            with nogil:
                rc = D.cuEventSynchronize(ev)
            D.cuEventDestroy(ev)
            check(rc, b"cuEventSynchronize")
        if p != NULL:
            with nogil:
                rc = D.cuMemFreeHost(p)
            check(rc, b"cuMemFreeHost")
        return 0

    cdef int note_async_use(self, CUstream s) except -1:
        """An async copy queued on s uses this memory: close/free must wait for it."""
        cdef CUevent ev = self._last_use
        cdef CUresult rc
        set_current(self.ctx)
        if ev == NULL:
            rc = D.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)
            if rc != 0:
                return self._unguarded(s, rc, b"cuEventCreate")
            self._last_use = ev
        else:
            # Keep covering the earlier use (maybe on another stream) with the new record.
            if D.cuEventQuery(ev) != 0:
                rc = D.cuStreamWaitEvent(s, ev, 0)
                if rc != 0:
                    return self._unguarded(s, rc, b"cuStreamWaitEvent")
        rc = D.cuEventRecord(ev, s)
        if rc != 0:
            return self._unguarded(s, rc, b"cuEventRecord")
        return 0

    cdef int _unguarded(self, CUstream s, CUresult rc, const char *call) except -1:
        """The guard event could not cover a copy queued on s: wait for s before
        raising, so that no later close() frees this memory under the copy."""
        cdef CUresult rs
        with nogil:
            rs = D.cuStreamSynchronize(s)
        if rs != 0 and self._last_use != NULL:
            with nogil:
                D.cuCtxSynchronize()
        return check(rc, call)

    def __getbuffer__(self, Py_buffer *view, int flags):
        if self._closed:
            raise BufferError("PinnedBuffer is closed")
        if self.ptr != NULL:
            view.buf = self.ptr
        else:
            view.buf = <void *>_empty_host
        view.obj = self
        view.len = self.nbytes_
        view.readonly = 0
        view.itemsize = 1
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = _fmt_B
        view.ndim = 1
        view.shape = NULL
        view.strides = NULL
        if flags & PyBUF_ND:
            view.shape = self._shape
        if (flags & PyBUF_STRIDES) == PyBUF_STRIDES:
            view.strides = self._strides
        view.suboffsets = NULL
        view.internal = NULL
        self._exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self._exports -= 1

    def close(self):
        """Free the memory (after any async copy that used it). Idempotent.

        Raises BufferError while views (memoryview, numpy arrays) of it exist."""
        with cython.critical_section(self):       # against hold_host / a last unpin on another thread
            if ST.forked:
                ensure_driver(ST)         # ForkedProcessError: a forked child leaks it (destructor)
            if self._exports > 0:
                raise BufferError(f"PinnedBuffer has {self._exports} exported view(s) "
                                  "(memoryview / numpy array); delete them first")
            if self._pins > 0:
                # A graph copies to or from it: unusable from now on, freed by the last holder.
                self._closed = True
                self._free_pending = True
                return
            if self.ptr == NULL:
                self.nbytes_ = 0
                self._shape[0] = 0
                self._closed = True
                return
            try:
                if bc_driver_usable(ST):
                    self._free()
            finally:
                self.ptr = NULL
                self.nbytes_ = 0
                self._shape[0] = 0
                self._closed = True

    __enter__ = _enter_self      # `with x:` closes x at the end of the block
    __exit__ = _exit_close

    @property
    def is_closed(self):
        """True once :meth:`close` was called."""
        return self._closed

    closed = _renamed("PinnedBuffer.closed", "is_closed")   # the old spelling, for one release

    @property
    def ptr(self):
        """Host address as an int (0 once closed)."""
        return 0 if self._closed else <size_t>self.ptr

    @property
    def nbytes(self):
        """The size in bytes (0 once closed)."""
        return 0 if self._closed else self.nbytes_

    def __len__(self):
        return 0 if self._closed else self.nbytes_

    @property
    def mapped(self):
        """Whether the memory is also mapped into the device address space (:attr:`device_ptr`)."""
        return bool(self.flags & CU_MEMHOSTALLOC_DEVICEMAP)

    @property
    def device_ptr(self):
        """The device address of mapped memory (``mapped=True``)."""
        if not (self.flags & CU_MEMHOSTALLOC_DEVICEMAP):
            raise ValueError("this PinnedBuffer is not mapped (create it with mapped=True)")
        return self.dptr

    def __repr__(self):
        return f"<barecuda.PinnedBuffer 0x{<size_t>self.ptr:x} {self.nbytes_} bytes{' mapped' if self.mapped else ''}>"


def pinned_empty(shape, dtype="uint8", *, device=None, portable=True, mapped=False, write_combined=False):
    """A numpy array of ``shape``/``dtype`` over new pinned memory (needs numpy).
    The array keeps its PinnedBuffer alive; ``arr.base`` leads to it."""
    np = np_module()
    shp = normalize_shape(shape)
    key, itemsize = resolve_dtype(dtype)
    nbytes = nbytes_of(shp, itemsize)
    p = PinnedBuffer(nbytes, device=device, portable=portable, mapped=mapped, write_combined=write_combined)
    return np.frombuffer(p, dtype=np.dtype(key), count=nbytes // itemsize).reshape(shp)


@cython.final
@cython.freelist(8)
cdef class _HostHold:
    """One pin on a PinnedBuffer, released when this object goes (see hold_host)."""
    cdef PinnedBuffer buf

    def __dealloc__(self):
        cdef PinnedBuffer b = self.buf
        if b is None:
            return
        cdef object failed = None
        cdef size_t nbytes = 0
        self.buf = None
        with cython.critical_section(b):      # pins and close() of one PinnedBuffer, any thread
            b._pins -= 1
            if not (b._pins == 0 and b._free_pending):
                return
            b._free_pending = False
            nbytes = b.nbytes_
            try:
                if bc_driver_usable(ST):
                    b._free()
            except BaseException as e:
                failed = e
            finally:
                b.ptr = NULL
                b.nbytes_ = 0
                b._shape[0] = 0
        if failed is not None:                # warned outside the section: the warning may run Python code
            try:
                warnings.warn(f"deferred free of PinnedBuffer ({nbytes} bytes) failed: {failed}", CudaWarning)
            except BaseException:
                pass

    def __repr__(self):
        return f"<barecuda pin on {self.buf!r}>"


cdef object hold_host(PinnedBuffer p):
    cdef _HostHold h
    if p._closed:
        raise ValueError("PinnedBuffer is closed (use after close())")
    h = _HostHold.__new__(_HostHold)
    with cython.critical_section(p):
        if p._closed:
            raise ValueError("PinnedBuffer is closed (use after close())")
        p._pins += 1
        p._graph_held = True
    h.buf = p
    return h


cdef PinnedBuffer pinned_from_block(void *p, size_t n, Device dev, CUdeviceptr dptr, unsigned int flags,
                                    PinnedAllocator pool):
    """A PinnedBuffer over memory a pinned pool owns (given back to `pool` on close)."""
    cdef PinnedBuffer b = PinnedBuffer.__new__(PinnedBuffer, 0, device=dev)
    b._set_block(p, n, dptr, flags)
    b._pool = pool
    return b




# ------------------------------------------------------------ host registration
@cython.final
cdef class HostRegistration:
    """Page-locks an existing host buffer (``cuMemHostRegister``) until :meth:`close`
    or the end of a ``with`` block. See :func:`register_host`."""
    cdef Py_buffer view
    cdef bint registered
    cdef bint has_view
    cdef readonly Device device
    """The Device whose context registered the memory."""
    cdef CUcontext ctx
    cdef CUdeviceptr dptr
    cdef object obj

    def __dealloc__(self):
        if self.registered and bc_driver_usable(ST):
            set_current(self.ctx)
            rc = D.cuMemHostUnregister(self.view.buf)
            if rc != 0:
                warn_destroy_failed(rc, b"cuMemHostUnregister", "HostRegistration.__dealloc__")
        if self.has_view:
            PyBuffer_Release(&self.view)

    def close(self):
        """Unregister now and release the buffer. Idempotent. Nothing waits here: the
        caller must make sure no queued async copy still uses the memory."""
        cdef CUresult rc
        if self.registered:
            self.registered = False
            set_current(self.ctx)
            rc = D.cuMemHostUnregister(self.view.buf)
            if self.has_view:
                self.has_view = False
                PyBuffer_Release(&self.view)
            check(rc, b"cuMemHostUnregister")
        elif self.has_view:
            self.has_view = False
            PyBuffer_Release(&self.view)

    __enter__ = _enter_self      # `with x:` closes x at the end of the block
    __exit__ = _exit_close

    @property
    def ptr(self):
        """The registered host address as an int (0 once unregistered)."""
        return <size_t>self.view.buf if self.has_view else 0

    @property
    def nbytes(self):
        """The registered size in bytes (0 once unregistered)."""
        return self.view.len if self.has_view else 0

    @property
    def device_ptr(self):
        """Device address of the registered memory (``mapped=True``)."""
        if not self.dptr:
            raise ValueError("not registered with mapped=True")
        return self.dptr


def register_host(obj, *, device=None, portable=True, mapped=False, read_only=False):
    """Page-lock the memory of a C-contiguous host buffer (a numpy array, bytearray...)
    so copies from/to it run at pinned speed; use as a context manager::

        with bc.register_host(arr):
            buf.copy_from(arr, stream=s); s.synchronize()

    The buffer is held (cannot be resized) while registered. Unregister only once
    no queued copy uses it."""
    cdef HostRegistration r = HostRegistration.__new__(HostRegistration)
    cdef unsigned int flags = 0
    cdef CUresult rc
    cdef CUdeviceptr dp = 0
    ensure_driver(ST)
    cdef Device dev = resolve_device(device, None)
    get_host(obj, &r.view, not read_only)
    r.has_view = True
    r.obj = obj
    r.device = dev
    r.ctx = dev.ctx
    if portable:
        flags |= CU_MEMHOSTREGISTER_PORTABLE
    if mapped:
        flags |= CU_MEMHOSTREGISTER_DEVICEMAP
    if read_only:
        flags |= CU_MEMHOSTREGISTER_READ_ONLY
    if r.view.len == 0:
        return r
    with nogil:
        rc = D.cuMemHostRegister(r.view.buf, r.view.len, flags)
    check(rc, b"cuMemHostRegister")
    r.registered = True
    if mapped:
        check(D.cuMemHostGetDevicePointer(&dp, r.view.buf, 0), b"cuMemHostGetDevicePointer")
        r.dptr = dp
    return r
