"""Device memory: DeviceBuffer, allocation, and the ownership protocol.

Owns: DeviceBuffer (memory on one device, ordered on one stream), its views and
slices, the Allocator interface, alloc/empty/zeros, and
pin/unpin/owner_of/note_use (the ownership protocol other modules use; see
docs/errors.md, "Ownership"). Elsewhere: each device's default allocator
(get_allocator, set_allocator) in _allocators; the device a (device=, stream=) pair
names and the order between streams (resolve_device, stream_after) in _stream; the
allocators that leave caching to the driver (DriverAllocator, DriverMemoryPool) and
their free rule (free_order) in _driver_pool, the caching allocator in _pool, dtypes
in _dtype, copies and memset's fill in _copy, DLPack/CAI in _exchange, pinned host memory in _host,
managed and pitched memory in _managed.

Lifetime rules:
- Memory is allocated stream-ordered (cuMemAllocAsync on the buffer's stream, or
  cuMemAlloc when the driver has no memory pools) and freed on that same stream
  (cuMemFreeAsync), so a buffer dropped while queued work on its stream still uses it
  is freed after that work, never before.
- When work on another stream used the buffer (``used_elsewhere`` of the OWNER, set by
  note_use for the owner and all its views), the plain allocator waits for the whole
  context (cuCtxSynchronize) before freeing; the caching allocator in _pool replaces
  this wait with events.
- One owner per allocation. Views and slices of our buffers, DLPack exports and other
  dependants pin the owner; close() with live dependants defers the free to the last
  unpin, and the closed object refuses every further use.
- Destructors never raise (failures become CudaWarning) and never call the driver
  once interpreter shutdown began or in a forked child: they leak instead.
"""

__all__ = ["DeviceBuffer", "Allocator", "alloc", "empty", "zeros"]
cimport cython
import operator
import warnings

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current
from barecuda._device cimport Device
from barecuda._stream cimport Stream, stream_handle, resolve_device, stream_use, stream_done
from barecuda._allocators cimport default_allocator
from barecuda._dlpack cimport kDLCUDA
from barecuda._lazy cimport lazy_module
from cpython.ref cimport PyObject
from barecuda._dtype cimport resolve_dtype, normalize_shape, nbytes_of, public_dtype
from barecuda._errors import CudaWarning, make_error, _renamed, _enter_self, _exit_close

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()
cdef bc_owners _owners           # every owner's live allocation, for view_at (the GIL, or its own mutex on a free-threaded build)


cdef object oom_error(int rc, const char *call, size_t nbytes, Device dev, str extra):
    return make_error(rc, call.decode(),
                      f"requested {nbytes} bytes ({nbytes / 2**20:.1f} MiB) on device {dev.ordinal}{extra}")


# ------------------------------------------------------------ stream capture
# The copies' and memsets' capture recorder (_capture.pyx sets it while a barecuda
# capture runs): see _buffer.pxd, capture_use_t.
cdef capture_use_t _capture_use = NULL


cdef capture_use_t *capture_use_slot() noexcept nogil:
    return &_capture_use


cdef int _refuse_captured(CUstream s, str op, str what) except -1:
    cdef CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE
    if D.cuStreamIsCapturing == NULL or D.cuStreamIsCapturing(s, &st) != 0 or st == CU_STREAM_CAPTURE_STATUS_NONE:
        return 0
    raise make_error(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, op,
                     f"{what} cannot be captured: its stream (0x{<size_t>s:x}) is capturing. Nothing was "
                     "queued and the capture goes on; copies in a capture are device to device or "
                     "between device and pinned memory (PinnedBuffer), on stream=the capturing stream")


# ---------------------------------------------------------------- allocators
cdef class Allocator:
    """Base of every device-memory allocator (see ``DriverAllocator``, ``barecuda.MemoryPool``)."""

    cdef int allocate(self, DeviceBuffer b, size_t size, CUstream s) except -1:
        raise NotImplementedError

    cdef int deallocate(self, DeviceBuffer b) except -1:
        raise NotImplementedError

    def alloc(self, nbytes, *, stream=None):
        """A new DeviceBuffer of ``nbytes`` from this allocator."""
        return new_buffer(checked_size(nbytes, "nbytes"), self.device, stream, self)


cdef inline DeviceBuffer _blank(CUdeviceptr p, size_t nbytes, Device dev, CUstream h, object stream):
    """A new DeviceBuffer over [p, p + nbytes) on dev, ordered on h (its own stream and
    its root's): new_buffer, adopt and make_view then make it an owner or a view."""
    cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
    b.ptr = p
    b.nbytes = nbytes
    b.device = dev
    b.ctx = dev.ctx
    b.stream_handle = h
    b.root_stream = h
    b._stream = stream
    return b


cdef DeviceBuffer new_buffer(size_t nbytes, object device, object stream, object allocator):
    cdef CUstream h = NULL
    cdef Device dev
    cdef Allocator a
    ensure_driver(ST)
    if stream is not None:
        stream_handle(stream, &h)
    if allocator is not None:
        a = <Allocator?>allocator
        dev = a.device
        if device is not None and resolve_device(device, None).ordinal != dev.ordinal:
            raise ValueError(f"allocator is for device {dev.ordinal}, not {device!r}")
        dev.activate()
    else:
        dev = resolve_device(device, stream)
        a = <Allocator>default_allocator(dev.ordinal)
    if bc_owners_reserve(&_owners):
        raise MemoryError()
    cdef DeviceBuffer b = _blank(0, 0, dev, h, stream)
    # An allocator may call the driver on h without the GIL (a cache miss): a Stream
    # closed meanwhile on another thread is destroyed after it (stream_done).
    cdef Stream so = stream_use(stream)
    try:
        a.allocate(b, nbytes, h)
    finally:
        stream_done(so)
    b._allocator = a
    if b.ptr != 0:
        bc_owners_add(&_owners, b.ptr, b.nbytes, <void *>b, &b._reg)
    return b


cdef DeviceBuffer adopt(CUdeviceptr p, size_t nbytes, Device dev, CUstream h, object stream, int kind,
                        object allocator):
    if bc_owners_reserve(&_owners):
        raise MemoryError()
    cdef DeviceBuffer b = _blank(p, nbytes, dev, h, stream)
    b._kind = kind
    b._allocator = allocator
    if p != 0:
        bc_owners_add(&_owners, p, nbytes, <void *>b, &b._reg)
    return b


cdef DeviceBuffer make_view(CUdeviceptr ptr, size_t nbytes, Device dev, CUstream h, object stream,
                            object owner, DeviceBuffer root):
    dev.activate()
    cdef DeviceBuffer v = _blank(ptr, nbytes, dev, h, stream)
    v._owner = owner
    v._kind = KIND_VIEW
    if root is not None:
        _attach(v, pin(root))  # root (a view or the owner) must be open; the owner is pinned
    return v


cdef inline void _attach(DeviceBuffer v, DeviceBuffer o) noexcept:
    """v (a new view) depends on owner o, pinned for it."""
    v._root = o
    v.root_stream = o.root_stream
    v.use_flag = &o.used_elsewhere
    v._readonly = o._readonly


cdef DeviceBuffer view_at(CUdeviceptr ptr, size_t nbytes, Device dev, CUstream h, object stream,
                          object producer):
    """See _buffer.pxd."""
    cdef bc_owner_entry found
    cdef const bc_owner_entry *e = &found if bc_owners_find(&_owners, ptr, &found) else NULL
    if e != NULL and nbytes > e.hi - ptr:
        raise BufferError(f"the imported array [0x{ptr:x}, +{nbytes} bytes) runs past the end of the "
                          f"barecuda allocation it lies in ([0x{e.lo:x}, +{e.hi - e.lo} bytes))")
    cdef DeviceBuffer v = make_view(ptr, nbytes, dev, h, stream, producer, None)
    if e != NULL:
        bc_use_enter(&(<DeviceBuffer>e.obj)._pins)
        _attach(v, <DeviceBuffer>e.obj)
    return v


# ------------------------------------------------------------------ buffer streams
cdef int _order_on_safe_stream(DeviceBuffer b, CUstream *out) except -1:
    """See _buffer.pxd (order_stream). b's Stream was closed: its queued work may still
    run, on a handle that no driver call may name. Wait for the whole context (that
    work included), then order b on the legacy default stream from now on. The owner
    is marked used elsewhere: views made earlier still compare note_use with the dead
    handle, which a new stream may reuse, so every later free must wait for all work
    (the plain allocator synchronizes, the pools defer)."""
    cdef CUresult rc
    set_current(b.ctx)
    with nogil:
        rc = D.cuCtxSynchronize()
    check(rc, b"cuCtxSynchronize")
    b._stream = None
    b.stream_handle = NULL
    if b.use_flag == &b.used_elsewhere:       # an owner (or a foreign import)
        b.root_stream = NULL
    b.use_flag[0] = 1
    out[0] = NULL
    return 0


# ------------------------------------------------------------------ ownership
cdef DeviceBuffer pin(DeviceBuffer b):
    cdef DeviceBuffer o = owner_of(b)
    # Count first, then look (bc_uses.h): a close() on another thread either sees this
    # pin and leaves the free to the last unpin, or is seen here.
    bc_use_enter(&o._pins)
    if b._kind == KIND_CLOSED:
        unpin(o)
        check_usable(b)
    return o


@cython.final
@cython.freelist(16)
cdef class _Hold:
    """One pin on an allocation owner, released when this object goes (see hold())."""
    cdef DeviceBuffer owner

    def __dealloc__(self):
        cdef DeviceBuffer o = self.owner
        if o is not None:
            self.owner = None
            unpin(o)

    def __repr__(self):
        return f"<barecuda pin on {self.owner!r}>"


cdef object hold(DeviceBuffer b):
    cdef _Hold h = _Hold.__new__(_Hold)
    h.owner = pin(b)
    return h


cdef list holds(object objs):
    cdef list out = []
    for o in objs:
        if type(o) is DeviceBuffer:
            out.append(hold(<DeviceBuffer>o))
    return out


cdef void unpin(DeviceBuffer b) noexcept:
    cdef DeviceBuffer o = owner_of(b)
    cdef long n = bc_use_leave(&o._pins)
    if n < 0:                   # more unpins than pins: stay at 0 (as before the count was atomic)
        bc_use_enter(&o._pins)
        n = 0
    if n == 0 and bc_use_count(&o._uses) == 0 and bc_flag_take(&o._free_pending):
        _run_deferred_free(o)


cdef DeviceBuffer use_begin(DeviceBuffer b):
    cdef DeviceBuffer o = owner_of(b)
    bc_use_enter(&o._uses)         # enter first, then look: a close() after this sees the count
    if b._kind == KIND_CLOSED:
        use_end(o)
        raise ValueError("operation on a closed DeviceBuffer (use after close())")
    return o


cdef void use_end(DeviceBuffer o) noexcept:
    if o is None:
        return
    if bc_use_leave(&o._uses) != 0:
        return
    if bc_use_count(&o._pins) == 0 and bc_flag_take(&o._free_pending):
        _run_deferred_free(o)
    elif o._kind == KIND_CLOSED and o._allocator is None and o._root is None and o._owner is not None:
        o._owner = None        # a closed foreign import: its producer goes after the last call


cdef void _run_deferred_free(DeviceBuffer o) noexcept:
    try:
        _deferred_free(o)
    except BaseException as e:
        try:
            warnings.warn(f"deferred free of DeviceBuffer ({o.nbytes} bytes) failed: {e}", CudaWarning)
        except BaseException:
            pass


cdef int _deferred_free(DeviceBuffer o) except -1:
    """Free an owner that close() left to its last dependant."""
    if o._allocator is None:
        return 0
    if not bc_driver_usable(ST):
        o._allocator = None
        bc_owners_remove(&_owners, &o._reg)
        return 0
    o._kind = o._free_kind
    o.ptr = o._free_ptr
    try:
        o._release()
    finally:
        o._kind = KIND_CLOSED
        o.ptr = 0
    return 0


cdef size_t checked_size(object n, str what) except? 0:
    """A byte count from Python: an int (or __index__), >= 0, below 2**63."""
    if type(n) is not int:
        if isinstance(n, bool) or not hasattr(type(n), "__index__"):
            raise TypeError(f"{what} must be an int, not {type(n).__name__}")
        n = operator.index(n)
    if n < 0:
        raise ValueError(f"{what} must be >= 0, not {n}")
    if n > <object>(<size_t>-1 >> 1):
        raise OverflowError(f"{what}={n} is too large")
    return <size_t>n


# ---------------------------------------------------------------- DeviceBuffer
# The sibling modules, imported on first use (they cimport this one): _lazy.pxd.
cdef PyObject *_copy_mod = NULL
cdef PyObject *_exchange_mod = NULL
cdef PyObject *_managed_mod = NULL
cdef inline object _copy(): return lazy_module(&_copy_mod, "barecuda._copy")
cdef inline object _exchange(): return lazy_module(&_exchange_mod, "barecuda._exchange")
cdef inline object _managed(): return lazy_module(&_managed_mod, "barecuda._managed")


@cython.final
@cython.freelist(32)
@cython.no_gc_clear
cdef class DeviceBuffer:
    """Memory on one device, ordered on one stream.

    Create with :func:`alloc`, :func:`empty`, :func:`zeros`, :func:`to_device`, or
    ``DeviceBuffer(nbytes, device=None, stream=None)``; import another library's
    device array with :func:`as_device_buffer`; take a view with :meth:`view` or
    ``buf[a:b]``.

    The memory is allocated in the order of ``stream`` (the legacy default stream
    when None) and freed in that same order when the buffer is closed or dropped,
    so work already queued on that stream that uses it finishes first. A buffer used
    on another stream (a launch or async copy there) is freed only once that work is
    done too. Views, slices and exports hold the allocation: closing the owner while
    they live defers the free to the last of them (docs/errors.md, "Ownership").

    Attributes
    ----------
    ptr : int
        The device address (0 for an empty or closed buffer).
    nbytes : int
    device : Device
    shape : tuple of int
    dtype : numpy.dtype, or str when numpy is not installed
    size : int
        Number of elements.
    """

    def __cinit__(self, *args, **kwargs):
        self.use_flag = &self.used_elsewhere

    def __init__(self, nbytes, *, device=None, stream=None):
        cdef DeviceBuffer b = new_buffer(checked_size(nbytes, "nbytes"), device, stream, None)
        # Move the freshly allocated memory into self.
        self.ptr = b.ptr
        self.nbytes = b.nbytes
        self.stream_handle = b.stream_handle
        self.root_stream = b.stream_handle
        self.device = b.device
        self.ctx = b.ctx
        self._stream = b._stream
        self._allocator = b._allocator
        self._kind = b._kind
        self._block = b._block
        self._owner = None
        bc_owners_move(&_owners, &b._reg, <void *>self, &self._reg)
        b._allocator = None
        b.ptr = 0
        b._block = NULL
        b._kind = KIND_CLOSED

    def __dealloc__(self):
        cdef DeviceBuffer root = self._root
        bc_owners_remove(&_owners, &self._reg)     # (the free below, or a leak)
        if root is not None:
            # A view: its owner outlives this line (we hold it); let it go (a closed
            # view released its pin in close() and only kept the reference).
            self._root = None
            if self._kind != KIND_CLOSED:
                unpin(root)
            return
        if self._allocator is None or (self._kind == KIND_CLOSED and not self._free_pending):
            return
        if not bc_driver_usable(ST):
            return            # interpreter shutting down, or forked child: leak
        if self._kind == KIND_CLOSED:
            self._kind = self._free_kind
            self.ptr = self._free_ptr
        cdef CUdeviceptr p = self.ptr
        try:
            self._release()
        except BaseException as e:
            warnings.warn(f"freeing DeviceBuffer 0x{p:x} ({self.nbytes} bytes) failed: {e}",
                          CudaWarning)

    cdef int _release(self) except -1:
        bc_owners_remove(&_owners, &self._reg)
        alloc = self._allocator
        self._allocator = None
        if alloc is not None:
            (<Allocator>alloc).deallocate(self)
        self.ptr = 0
        self._block = NULL
        return 0

    cdef int _check_open(self) except -1:
        if self._kind == KIND_CLOSED:
            raise ValueError("operation on a closed DeviceBuffer (use after close())")
        return 0

    cdef int _check_writable(self) except -1:
        self._check_open()
        if self._readonly:
            raise ValueError("this DeviceBuffer is a read-only import: it cannot be written "
                             "(memset, copy into it)")
        return 0

    cdef int _check_contiguous(self, str what) except -1:
        if self._strided:
            raise ValueError(f"{what} needs contiguous memory, but this DeviceBuffer is a strided "
                             f"(non-contiguous) import with strides {self._strides}; make it contiguous "
                             "first (torch: t.contiguous(), cupy/numpy: ascontiguousarray(a)) or pass it "
                             "to a kernel as a pointer")
        return 0

    def close(self):
        """Free the memory now (in stream order), or drop the view. Idempotent.

        If views, slices, exports or plans still hold this allocation, the free is
        deferred until the last of them is gone; this object refuses every further
        use at once either way."""
        cdef DeviceBuffer root
        # One close() at a time per buffer: two threads closing it at once (free-threaded
        # build) would both read it open; a no-op with the GIL.
        with cython.critical_section(self):
            if self._kind == KIND_CLOSED:
                return
            if ST.forked:
                ensure_driver(ST)          # ForkedProcessError: a forked child leaks it (destructor)
            root = self._root
            if root is not None:
                # A view releases its pin but keeps naming its owner (owner_of), so that a
                # dependant made through it (a plan, an export, a graph value) unpins the
                # right allocation later.
                self.use_flag = &self.used_elsewhere
                self._kind = KIND_CLOSED
                self.ptr = 0
                self._owner = None
                unpin(root)
                return
            if self._allocator is not None:
                # Closed at once; the free waits for the last dependant (unpin) and the last
                # driver call in flight on another thread (use_end). Mark first, then read the
                # counts (bc_uses.h): whoever takes the pending flag frees, exactly once.
                self._free_kind = self._kind
                self._free_ptr = self.ptr
                self._kind = KIND_CLOSED
                self.ptr = 0           # closed reads as address 0 everywhere (launch's fast check)
                self._owner = None
                bc_flag_set(&self._free_pending)
                if bc_use_count(&self._pins) > 0 or bc_use_count(&self._uses) > 0 or \
                        not bc_flag_take(&self._free_pending):
                    return
                self._kind = self._free_kind
                self.ptr = self._free_ptr
            try:
                if self._allocator is not None:
                    if bc_driver_usable(ST):
                        self._release()
                    else:
                        self._allocator = None
            finally:
                bc_owners_remove(&_owners, &self._reg)
                self._kind = KIND_CLOSED
                self.ptr = 0
                if bc_use_count(&self._uses) == 0:
                    self._owner = None     # (a foreign producer in use on another thread: use_end drops it)

    __enter__ = _enter_self      # `with x:` closes x at the end of the block
    __exit__ = _exit_close

    @property
    def is_closed(self):
        """True once :meth:`close` was called (or the owner of this view was closed)."""
        return self._kind == KIND_CLOSED

    closed = _renamed("DeviceBuffer.closed", "is_closed")   # the old spelling, for one release

    @property
    def ptr(self):
        """The device address as an int (0 once closed)."""
        return 0 if self._kind == KIND_CLOSED else self.ptr

    def __int__(self):
        self._check_open()
        return self.ptr

    @property
    def nbytes(self):
        """Size in bytes."""
        return self.nbytes

    @property
    def shape(self):
        """The shape: the one given at allocation or by a view, else ``(nbytes,)``."""
        if self._shape is None:
            return (self.nbytes,)
        return self._shape

    @property
    def ndim(self):
        """The number of dimensions (``len(shape)``)."""
        return len(self.shape)

    @property
    def dtype(self):
        """numpy.dtype when numpy is installed, else the dtype's name (str)."""
        return public_dtype(self._dtype if self._dtype is not None else "uint8")

    @property
    def itemsize(self):
        """Bytes per element of :attr:`dtype` (1 when the buffer has none)."""
        return self._itemsize if self._itemsize else 1

    @property
    def size(self):
        """Number of elements."""
        cdef object n = 1
        if self._shape is None:
            return self.nbytes // (self._itemsize if self._itemsize else 1)
        for k in self._shape:
            n *= k
        return n

    @property
    def strides(self):
        """Element strides of a strided (non-contiguous) import; None when contiguous."""
        return self._strides

    @property
    def readonly(self):
        """True for a read-only import (writes refuse)."""
        return bool(self._readonly)

    def __len__(self):
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d DeviceBuffer")
        return shape[0]

    @property
    def stream(self):
        """The stream the memory is ordered on (None: the legacy default stream).

        If that Stream was closed, reading this waits for the work queued on it and
        moves the buffer to the legacy default stream (None), as every other use does
        (docs/errors.md, "Ownership")."""
        cdef CUstream h
        if self._kind != KIND_CLOSED:
            order_stream(self, &h)
        return self._stream

    @property
    def is_view(self):
        """True when the memory belongs to another object (an import, a view, a slice)."""
        return self._kind == KIND_VIEW

    @property
    def owner(self):
        """What a view keeps alive: the owning DeviceBuffer of a view, slice or import
        of our memory (an import also keeps its producer), the producer of a foreign
        import; None for memory this buffer owns."""
        return self._root if self._root is not None else self._owner

    def __repr__(self):
        if self._kind == KIND_CLOSED:
            return "<barecuda.DeviceBuffer (closed)>"
        dt = self._dtype if self._dtype is not None else "uint8"
        view = " view" if self._kind == KIND_VIEW else ""
        return (f"<barecuda.DeviceBuffer{view} 0x{self.ptr:x} {self.nbytes} bytes shape={self.shape} "
                f"dtype={dt} device={self.device.ordinal}>")

    # -- views
    def view(self, dtype=None, shape=None):
        """A view of the same memory with another dtype and/or shape (same nbytes).
        The view holds the allocation (closing this buffer defers the free)."""
        self._check_open()
        self._check_contiguous("view()")
        key, itemsize = resolve_dtype(dtype if dtype is not None else (self._dtype or "uint8"))
        if shape is None:
            if self.nbytes % itemsize:
                raise ValueError(f"{self.nbytes} bytes is not a multiple of the itemsize {itemsize}")
            shp = (self.nbytes // itemsize,)
        else:
            shp = normalize_shape(shape)
            if nbytes_of(shp, itemsize) != self.nbytes:
                raise ValueError(f"shape {shp} with itemsize {itemsize} does not cover {self.nbytes} bytes")
        cdef DeviceBuffer v = self._sub(self.ptr, self.nbytes)
        v._shape = shp
        v._dtype = key
        v._itemsize = itemsize
        return v

    cdef DeviceBuffer _sub(self, CUdeviceptr p, size_t n):
        cdef DeviceBuffer v
        cdef CUstream h
        order_stream(self, &h)     # a view is born on a live stream
        if self._root is None and self._allocator is None:
            # a foreign import: the view keeps the same producer alive
            v = make_view(p, n, self.device, h, self._stream, self._owner, None)
            v.root_stream = self.root_stream
            v.use_flag = self.use_flag
            v._owner = self        # keeps the import (and so its producer) alive
            v._readonly = self._readonly
            return v
        return make_view(p, n, self.device, h, self._stream, None, self)

    def __getitem__(self, key):
        """``buf[a:b]``: a borrowed view of elements a..b-1 along the first axis (step 1),
        holding this buffer's allocation. Usable as a kernel argument and in copies."""
        cdef Py_ssize_t start, stop, step, n0
        cdef size_t row
        self._check_open()
        self._check_contiguous("slicing")
        if not isinstance(key, slice):
            raise TypeError("DeviceBuffer indexing takes a slice buf[a:b] (a view); "
                            f"not {type(key).__name__}")
        shape = self.shape
        if not shape:
            raise TypeError("cannot slice a 0-d DeviceBuffer")
        n0 = shape[0]
        start, stop, step = key.indices(n0)
        if step != 1:
            raise ValueError("DeviceBuffer slices must be contiguous (step 1)")
        if stop < start:
            stop = start
        row = self.nbytes // n0 if n0 else 0
        cdef DeviceBuffer v = self._sub(self.ptr + <size_t>start * row, <size_t>(stop - start) * row)
        v._shape = (stop - start,) + tuple(shape[1:])
        v._dtype = self._dtype
        v._itemsize = self._itemsize
        return v

    # -- copies (barecuda._copy)
    def copy_from(self, src, stream=None):
        """Copy ``src`` into this buffer; returns self.

        ``src`` is a DeviceBuffer, another library's device array, or any C-contiguous
        host object with the buffer protocol, of exactly ``nbytes`` bytes.
        With ``stream=None`` the copy is synchronous. With a stream it is queued on
        it and returns at once: a host source must then stay valid and unmodified
        until the stream reaches the copy (a PinnedBuffer is kept valid for you:
        closing it waits for the copy).
        """
        _copy().copy_into(self, src, stream)
        return self

    def copy_to(self, dst=None, stream=None):
        """Copy this buffer into ``dst`` and return ``dst``.

        ``dst`` is a DeviceBuffer, a device array, or a writable C-contiguous host
        buffer of exactly ``nbytes`` bytes; None makes a new ``bytearray`` (the copy
        is then always complete on return). With a stream the copy is asynchronous
        and the host destination must stay valid until the stream reaches it.
        """
        return _copy().copy_out(self, dst, stream)

    def to_numpy(self, stream=None):
        """A new numpy array with this buffer's shape, dtype and contents. The copy
        runs on ``stream`` (or the buffer's stream) and is complete on return."""
        return _copy().to_numpy(self, stream)

    def copy(self, stream=None):
        """A new buffer (same device, stream, shape, dtype) with a copy of the contents."""
        return _copy().duplicate(self, stream)

    def memset(self, value, *, width=8, stream=None):
        """Fill the buffer with ``value`` repeated as a ``width``-bit (8, 16 or 32)
        integer; negative values are taken as two's complement. ``nbytes`` must be a
        multiple of ``width // 8``. Synchronous unless a stream is given. Returns self."""
        _copy().fill(self, value, width, stream)
        return self

    # -- managed memory (barecuda._managed)
    def prefetch(self, where=None, *, stream=None):
        """Managed memory only: migrate it to ``where`` (a Device/ordinal, or None /
        ``"cpu"`` for the host), asynchronously on ``stream`` (default: its stream)."""
        self._check_open()
        _managed().prefetch(self, where, stream)
        return self

    def advise(self, advice, where=None):
        """Managed memory only: ``cuMemAdvise`` with ``advice`` one of "read_mostly",
        "preferred_location", "accessed_by" (and their "unset_" forms), for ``where``
        (a Device/ordinal, or None / "cpu" for the host)."""
        self._check_open()
        _managed().advise(self, advice, where)
        return self

    @property
    def is_managed(self):
        """True for managed (unified) memory (:func:`managed_empty`, or a view of it)."""
        k = self._free_kind if self._free_pending else self._kind
        return k == KIND_MANAGED or (self._root is not None and self._root._kind == KIND_MANAGED)

    # -- export (barecuda._exchange)
    @property
    def __cuda_array_interface__(self):
        """CUDA Array Interface v3. ``stream`` is the buffer's stream (1: legacy default)."""
        return _exchange().cai_of(self)

    def __dlpack_device__(self):
        return (kDLCUDA, self.device.ordinal)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (``dltensor_versioned`` when the consumer accepts
        DLPack >= 1.0, else ``dltensor``), following the array API's stream rules.

        ``stream`` is the consumer's stream: None or 1 the legacy default stream, 2 the
        per-thread default stream, -1 no synchronization, any other int a CUstream;
        0 is refused (ambiguous for CUDA). When it differs from this buffer's stream,
        the consumer's stream is made to wait for the work queued on ours (an event;
        nothing blocks). The capsule holds the allocation until it is consumed and
        released.
        """
        return _exchange().dlpack_of(self, stream, max_version, dl_device, copy)

    # -- import
    @staticmethod
    def from_cuda_array_interface(obj, *, stream=None):
        """A zero-copy view of ``obj`` (anything with ``__cuda_array_interface__``, or
        the interface dict itself). See :func:`as_device_buffer`."""
        return _exchange().from_cai(obj, stream)

    @staticmethod
    def from_dlpack(obj, *, stream=None):
        """A zero-copy view of a DLPack producer (or a capsule). See :func:`as_device_buffer`."""
        return _exchange().from_dlpack(obj, stream)


# --------------------------------------------------------------- public API

def _live_owners():
    """The DeviceBuffer owners whose allocations are still live, oldest first: a list
    for leak checks (tools/gpu_leak_plugin.py), not for programs."""
    cdef ptrdiff_t i
    cdef list out = []
    for i in range(_owners.n):
        out.append(<object>_owners.v[i].obj)
    return out


def alloc(nbytes, *, device=None, stream=None, allocator=None):
    """Allocate ``nbytes`` of device memory (uninitialized), ordered on ``stream``.

    Parameters
    ----------
    nbytes : int
    device : Device or int, optional
        Defaults to the stream's device, else the current device.
    stream : Stream, optional
        The stream the allocation and the eventual free are ordered on
        (None: the legacy default stream).
    allocator : Allocator, optional
        Defaults to the device's default allocator.
    """
    return new_buffer(checked_size(nbytes, "nbytes"), device, stream, allocator)


def empty(shape, dtype="uint8", *, device=None, stream=None, allocator=None):
    """An uninitialized DeviceBuffer of ``shape`` and ``dtype`` (a numpy dtype or a
    name such as ``"float32"``; names work without numpy)."""
    shp = normalize_shape(shape)
    key, itemsize = resolve_dtype(dtype)
    cdef DeviceBuffer b = new_buffer(nbytes_of(shp, itemsize), device, stream, allocator)
    b._shape = shp
    b._dtype = key
    b._itemsize = itemsize
    return b


def zeros(shape, dtype="uint8", *, device=None, stream=None, allocator=None):
    """Like :func:`empty`, filled with zero bytes (synchronously unless a stream is given)."""
    b = empty(shape, dtype, device=device, stream=stream, allocator=allocator)
    b.memset(0, stream=stream)
    return b
