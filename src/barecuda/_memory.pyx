"""Device and pinned memory, copies, and interop.

Owns: DeviceBuffer (memory on one device, ordered on one stream), the Allocator
interface and the plain driver allocator behind it, PinnedBuffer (page-locked host
memory with the buffer protocol), host<->device and device<->device copies, memset,
``__cuda_array_interface__`` v3 and DLPack export, and zero-copy import of other
libraries' device arrays.

Lifetime rules (DESIGN.md principle 5):
- Memory is allocated stream-ordered (cuMemAllocAsync on the buffer's stream, or
  cuMemAlloc when the driver has no memory pools) and freed on that same stream
  (cuMemFreeAsync), so a buffer dropped while queued work on its stream still uses it
  is freed after that work, never before.
- When the launch path saw the buffer used on another stream (``used_elsewhere``),
  the plain allocator waits for the whole context (cuCtxSynchronize) before freeing;
  the caching allocator in _pool replaces this wait with events.
- Destructors never raise (failures become CudaWarning) and never call the driver
  once interpreter shutdown began or in a forked child: they leak instead.
- Views (imports of foreign arrays) keep their producer alive and never free memory.
"""
cimport cython
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS,
                             PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES, PyBUF_SIMPLE)
from cpython.pycapsule cimport (PyCapsule_New, PyCapsule_IsValid, PyCapsule_GetPointer,
                                PyCapsule_SetName, PyCapsule_CheckExact)
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from cpython.bytearray cimport PyByteArray_FromStringAndSize
from libc.stdlib cimport calloc, free
from libc.string cimport memset
from libc.stdint cimport int64_t, uint64_t, uint8_t, uint16_t, int32_t, uint32_t
import sys
import threading
import warnings

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current
from barecuda._device cimport Device, device_of, activate_device
from barecuda._stream cimport Stream, Event, stream_handle, as_stream, _foreign_stream
from barecuda._staging cimport staged_htod, staged_dtoh
from barecuda._errors import CudaWarning, make_error, DriverVersionError

cdef extern from "Python.h":
    int Py_IsInitialized() nogil

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
    int kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged
    int kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLComplex, kDLBool
    uint64_t DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_IS_COPIED
    int BC_DLPACK_MAJOR_VERSION, BC_DLPACK_MINOR_VERSION, BC_DLPACK_MAX_NDIM

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()

DEF MAX_DEVICES = 256

# ------------------------------------------------------------------------ dtypes
# name -> (itemsize, typestr, DLPack code). Plain names work without numpy.
_DTYPES = {
    "bool": (1, "|b1", 6),
    "int8": (1, "|i1", 0), "uint8": (1, "|u1", 1),
    "int16": (2, "<i2", 0), "uint16": (2, "<u2", 1),
    "int32": (4, "<i4", 0), "uint32": (4, "<u4", 1),
    "int64": (8, "<i8", 0), "uint64": (8, "<u8", 1),
    "float16": (2, "<f2", 2), "float32": (4, "<f4", 2), "float64": (8, "<f8", 2),
    "bfloat16": (2, None, 4),
    "complex64": (8, "<c8", 5), "complex128": (16, "<c16", 5),
}
_ALIASES = {
    "b1": "bool", "?": "bool", "bool_": "bool",
    "i1": "int8", "u1": "uint8", "i2": "int16", "u2": "uint16", "i4": "int32", "u4": "uint32",
    "i8": "int64", "u8": "uint64", "f2": "float16", "f4": "float32", "f8": "float64",
    "c8": "complex64", "c16": "complex128",
    "b": "int8", "B": "uint8", "h": "int16", "H": "uint16", "i": "int32", "I": "uint32",
    "q": "int64", "Q": "uint64", "e": "float16", "f": "float32", "d": "float64",
    "F": "complex64", "D": "complex128", "Zf": "complex64", "Zd": "complex128",
    "l": "int64" if sizeof(long) == 8 else "int32", "L": "uint64" if sizeof(long) == 8 else "uint32",
    "n": "int64" if sizeof(Py_ssize_t) == 8 else "int32", "N": "uint64" if sizeof(size_t) == 8 else "uint32",
    "half": "float16", "single": "float32", "double": "float64", "float": "float64", "int": "int64",
    "byte": "int8", "ubyte": "uint8", "short": "int16", "ushort": "uint16",
    "intc": "int32", "uintc": "uint32", "longlong": "int64", "ulonglong": "uint64",
    "cfloat": "complex128", "complex": "complex128", "csingle": "complex64", "cdouble": "complex128",
}
_DL_TO_NAME = {(v[2], v[0] * 8): k for k, v in _DTYPES.items()}
_numpy = None


cdef object _np():
    """numpy, imported on first need (import barecuda never imports it)."""
    global _numpy
    if _numpy is None:
        import numpy
        _numpy = numpy
    return _numpy


cdef object _np_or_none():
    try:
        return _np()
    except ImportError:
        return None


cdef tuple _resolve_dtype(object dtype):
    """(key, itemsize): key is a canonical name from _DTYPES, or a numpy typestr."""
    cdef object key
    if type(dtype) is str:
        key = dtype
        if key in _DTYPES:
            return key, _DTYPES[key][0]
        s = key
        if len(s) > 1 and s[0] in "<=|@":
            s = s[1:]
        name = _ALIASES.get(s)
        if name is None and s in _DTYPES:
            name = s
        if name is not None:
            return name, _DTYPES[name][0]
    elif dtype is float:
        return "float64", 8
    elif dtype is int:
        return "int64", 8
    elif dtype is bool:
        return "bool", 1
    elif dtype is complex:
        return "complex128", 16
    elif dtype is None:
        return "uint8", 1
    # numpy dtypes, scalar types, ml_dtypes..., or an unknown string: ask numpy.
    np = _np_or_none()
    if np is None:
        raise TypeError(f"unknown dtype {dtype!r} (numpy is not installed to interpret it); "
                        f"use one of {sorted(_DTYPES)}")
    try:
        d = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"unknown dtype {dtype!r}: {e}") from None
    if d.byteorder in "=<|" and d.name in _DTYPES and d.fields is None:
        return d.name, d.itemsize
    if d.byteorder == ">" or d.hasobject:
        raise TypeError(f"dtype {d} cannot live in device memory (big-endian or Python objects)")
    return d.str, d.itemsize


cdef object _typestr(object key):
    if key in _DTYPES:
        ts = _DTYPES[key][1]
        if ts is None:
            raise TypeError(f"dtype {key} has no __array_interface__ typestr")
        return ts
    return key


cdef object _public_dtype(object key):
    np = _np_or_none()
    if np is None:
        return key
    try:
        return np.dtype(key)
    except TypeError:
        return key


cdef tuple _normalize_shape(object shape):
    if isinstance(shape, int):
        shape = (shape,)
    else:
        try:
            shape = tuple(shape)
        except TypeError:
            raise TypeError(f"shape must be an int or a tuple of ints, not {type(shape).__name__}") from None
    for n in shape:
        if not isinstance(n, int) and not hasattr(n, "__index__"):
            raise TypeError(f"shape must contain ints, got {shape!r}")
        if n < 0:
            raise ValueError(f"negative dimension in shape {shape!r}")
    return tuple(int(n) for n in shape)


cdef size_t _nbytes_of(tuple shape, size_t itemsize) except? 0:
    cdef object total = itemsize
    for n in shape:
        total *= n
    if total > <object>(<size_t>-1 >> 1):
        raise OverflowError(f"shape {shape!r} is too large")
    return total


# ------------------------------------------------------------------ devices
cdef list _devices = [None] * MAX_DEVICES
cdef CUcontext _last_ctx = NULL
cdef int _last_ordinal = -1


cdef Device _device_obj(int ordinal):
    d = _devices[ordinal] if 0 <= ordinal < MAX_DEVICES else None
    if d is None:
        d = Device(ordinal)
        _devices[ordinal] = d
    return <Device>d


cdef Device _resolve_device(object device, object stream):
    """The Device for (device, stream), made current on this thread."""
    global _last_ctx, _last_ordinal
    cdef CUcontext ctx = NULL
    cdef Device dev
    if device is None:
        if stream is not None and type(stream) is Stream:
            dev = (<Stream>stream).device
            dev.activate()
            return dev
        # Cheap path: the context current on this thread is the one we saw last.
        if D.cuCtxGetCurrent(&ctx) == 0 and ctx != NULL and ctx == _last_ctx:
            return <Device>_devices[_last_ordinal]
        dev = device_of(None)
        dev = _device_obj(dev.ordinal)
        dev.activate()
        _last_ctx = dev.ctx
        _last_ordinal = dev.ordinal
        return dev
    if type(device) is Device:
        dev = _device_obj((<Device>device).ordinal)
    elif isinstance(device, int):
        dev = _device_obj(device)
    else:
        dev = _device_obj(device_of(device).ordinal)
    dev.activate()
    return dev


cdef CUstream _norm_stream(CUstream s) noexcept nogil:
    """The legacy default stream has two spellings (NULL and CU_STREAM_LEGACY)."""
    return CU_STREAM_LEGACY if s == NULL else s


cdef int _stream_after(CUstream waiter, CUstream producer, CUcontext ctx) except -1:
    """Make later work on `waiter` wait for everything queued on `producer` so far."""
    cdef CUevent ev = NULL
    cdef CUresult rc
    if _norm_stream(waiter) == _norm_stream(producer):
        return 0
    set_current(ctx)
    check(D.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), b"cuEventCreate")
    rc = D.cuEventRecord(ev, producer)
    if rc == 0:
        rc = D.cuStreamWaitEvent(waiter, ev, 0)
    D.cuEventDestroy(ev)       # deferred by the driver until the event completes
    if rc != 0:
        check(rc, b"cuStreamWaitEvent")
    return 0


cdef object _oom(CUresult rc, const char *call, size_t nbytes, Device dev, str extra=""):
    return make_error(rc, call.decode(),
                      f"requested {nbytes} bytes ({nbytes / 2**20:.1f} MiB) on device {dev.ordinal}{extra}")


# ---------------------------------------------------------------- allocators
cdef class Allocator:
    """Base of every device-memory allocator (see ``DriverAllocator``, ``barecuda.MemoryPool``)."""

    cdef int allocate(self, DeviceBuffer b, size_t size, CUstream s) except -1:
        raise NotImplementedError

    cdef int deallocate(self, DeviceBuffer b) except -1:
        raise NotImplementedError

    def alloc(self, nbytes, *, stream=None):
        """A new DeviceBuffer of ``nbytes`` from this allocator."""
        return new_buffer(nbytes, self.device, stream, self)


@cython.final
cdef class DriverAllocator(Allocator):
    """Allocates straight from the driver: ``cuMemAllocAsync`` on the buffer's stream
    (the device's default memory pool), or ``cuMemAlloc`` where the driver or device
    has no memory pools. Frees with ``cuMemFreeAsync`` on the buffer's stream, after
    ``cuCtxSynchronize`` when the buffer was used on another stream."""
    cdef bint use_async

    def __cinit__(self, device=None):
        cdef Device dev = _resolve_device(device, None)
        self.device = dev
        self.ctx = dev.ctx
        self.use_async = D.cuMemAllocAsync != NULL and D.cuMemFreeAsync != NULL

    cdef int allocate(self, DeviceBuffer b, size_t size, CUstream s) except -1:
        cdef CUdeviceptr p = 0
        cdef CUresult rc
        b.ptr = 0
        b.size = size
        if size == 0:
            b._kind = KIND_SYNC
            return 0
        set_current(self.ctx)
        if self.use_async:
            with nogil:
                rc = D.cuMemAllocAsync(&p, size, s)
            if rc == 801:           # CUDA_ERROR_NOT_SUPPORTED: no memory pools here
                self.use_async = False
            else:
                if rc != 0:
                    raise _oom(rc, b"cuMemAllocAsync", size, self.device)
                b.ptr = p
                b._kind = KIND_ASYNC
                return 0
        with nogil:
            rc = D.cuMemAlloc(&p, size)
        if rc != 0:
            raise _oom(rc, b"cuMemAlloc", size, self.device)
        b.ptr = p
        b._kind = KIND_SYNC
        return 0

    cdef int deallocate(self, DeviceBuffer b) except -1:
        cdef CUdeviceptr p = b.ptr
        cdef CUstream s = b.stream_handle
        cdef CUresult rc = 0
        b.ptr = 0
        if p == 0:
            return 0
        set_current(b.ctx)
        if b._kind == KIND_ASYNC:
            if b.used_elsewhere:
                # Queued work on some other stream may still use it: wait for everything.
                with nogil:
                    rc = D.cuCtxSynchronize()
                check(rc, b"cuCtxSynchronize")
            check(D.cuMemFreeAsync(p, s), b"cuMemFreeAsync")
        else:
            with nogil:          # cuMemFree synchronizes the device itself
                rc = D.cuMemFree(p)
            check(rc, b"cuMemFree")
        return 0

    def __repr__(self):
        return f"<barecuda.DriverAllocator device={self.device.ordinal} async={bool(self.use_async)}>"


cdef PyObject *_default_alloc[MAX_DEVICES]
memset(_default_alloc, 0, sizeof(_default_alloc))
cdef list _default_alloc_refs = [None] * MAX_DEVICES
_alloc_lock = threading.Lock()
_default_factory = None


cdef Allocator default_allocator(int ordinal):
    cdef PyObject *a = _default_alloc[ordinal] if 0 <= ordinal < MAX_DEVICES else NULL
    if a != NULL:
        return <Allocator>a
    return _make_default(ordinal)


cdef Allocator _make_default(int ordinal):
    if not 0 <= ordinal < MAX_DEVICES:
        raise ValueError(f"device ordinal {ordinal} out of range")
    with _alloc_lock:
        if _default_alloc[ordinal] == NULL:
            dev = _device_obj(ordinal)
            a = _default_factory(dev) if _default_factory is not None else DriverAllocator(dev)
            if not isinstance(a, Allocator):
                raise TypeError("the default allocator factory must return a barecuda Allocator")
            _default_alloc_refs[ordinal] = a
            _default_alloc[ordinal] = <PyObject *>a
    return <Allocator>_default_alloc[ordinal]


def get_allocator(device=None):
    """The allocator ``alloc``/``empty``/``to_device`` use on ``device`` by default."""
    ensure_driver(ST)
    return default_allocator(_resolve_device(device, None).ordinal)


def set_allocator(allocator, device=None):
    """Make ``allocator`` the default for its device (``None`` restores the plain
    driver allocator on ``device``). Buffers allocated before keep their allocator.
    Returns the previous one."""
    cdef int o
    ensure_driver(ST)
    if allocator is not None and not isinstance(allocator, Allocator):
        raise TypeError(f"expected a barecuda Allocator, not {type(allocator).__name__}")
    o = (<Allocator>allocator).device.ordinal if allocator is not None else _resolve_device(device, None).ordinal
    if allocator is None:
        allocator = DriverAllocator(o)
    with _alloc_lock:
        prev = _default_alloc_refs[o]
        _default_alloc_refs[o] = allocator
        _default_alloc[o] = <PyObject *>allocator
    return prev


def _set_default_allocator_factory(factory):
    """Used by barecuda._pool: build each device's default allocator with factory(Device)."""
    global _default_factory
    _default_factory = factory


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
        if device is not None and _resolve_device(device, None).ordinal != dev.ordinal:
            raise ValueError(f"allocator is for device {dev.ordinal}, not {device!r}")
        dev.activate()
    else:
        dev = _resolve_device(device, stream)
        a = default_allocator(dev.ordinal)
    cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
    b.device = dev
    b.ctx = dev.ctx
    b.stream_handle = h
    b._stream = stream
    a.allocate(b, nbytes, h)
    b._allocator = a
    return b


# ---------------------------------------------------------------- host buffers
cdef int _get_host(object obj, Py_buffer *view, bint writable) except -1:
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


cdef PinnedBuffer _find_pinned(object obj):
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


cdef bint _is_device_array(object obj):
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    f = getattr(obj, "__dlpack_device__", None)
    if f is not None:
        try:
            dt = f()[0]
        except Exception:
            return False
        return dt == kDLCUDA or dt == kDLCUDAManaged
    return False


cdef DeviceBuffer _as_device(object obj, object stream):
    if type(obj) is DeviceBuffer:
        return <DeviceBuffer>obj
    if _is_device_array(obj):
        return as_device_buffer(obj, stream=stream)
    return None


# --------------------------------------------------------------------- copies
cdef int _sync(CUstream s) except -1:
    cdef CUresult rc
    with nogil:
        rc = D.cuStreamSynchronize(s)
    return check(rc, b"cuStreamSynchronize")


cdef int _copy_dd(DeviceBuffer dst, DeviceBuffer src, object stream) except -1:
    cdef CUstream s = dst.stream_handle
    cdef CUresult rc
    cdef size_t n = src.size
    dst._check_open()
    src._check_open()
    if dst.size != src.size:
        raise ValueError(f"size mismatch: destination has {dst.size} bytes, source {src.size}")
    if stream is not None:
        stream_handle(stream, &s)
    if n == 0:
        return 0
    set_current(dst.ctx)
    if stream is None and src.stream_handle != dst.stream_handle:
        _stream_after(s, src.stream_handle, dst.ctx)
    if dst.device.ordinal == src.device.ordinal:
        with nogil:
            rc = D.cuMemcpyDtoDAsync(dst.ptr, src.ptr, n, s)
        check(rc, b"cuMemcpyDtoDAsync")
    else:
        with nogil:
            rc = D.cuMemcpyPeerAsync(dst.ptr, dst.ctx, src.ptr, src.ctx, n, s)
        check(rc, b"cuMemcpyPeerAsync")
    if stream is None:
        _sync(s)
    else:
        note_use(dst, s)
        note_use(src, s)
    return 0


cdef int _copy_host(DeviceBuffer dev, object host, object stream, bint to_host,
                    bint fresh=False) except -1:
    """Host (buffer protocol) <-> device. ``to_host``: dev -> host (writable), complete
    on return unless host is a PinnedBuffer and a stream is given (then asynchronous).
    Otherwise host -> dev: synchronous without a stream, else ordered on it (host
    memory may be reused on return: pageable bytes are staged). ``fresh``: host was
    just allocated by us and never touched (see staged_dtoh)."""
    cdef Py_buffer view
    cdef CUcontext ctx = dev.ctx
    cdef PinnedBuffer p
    cdef CUstream s = dev.stream_handle
    cdef CUresult rc
    cdef size_t n
    cdef CUdeviceptr dptr
    cdef void *hp
    dev._check_open()
    if stream is not None:
        stream_handle(stream, &s)
    _get_host(host, &view, to_host)
    try:
        n = view.len
        if n != dev.size:
            raise ValueError(f"size mismatch: destination has {n if to_host else dev.size} bytes, "
                             f"source {dev.size if to_host else n}")
        if n == 0:
            return 0
        set_current(ctx)
        dptr = dev.ptr
        hp = view.buf
        if to_host:
            p = _find_pinned(host) if stream is not None else None
            if p is not None:
                # Page-locked destination on a stream: a true asynchronous copy.
                with nogil:
                    rc = D.cuMemcpyDtoHAsync(hp, dptr, n, s)
                check(rc, b"cuMemcpyDtoHAsync")
            else:
                # Complete on return (staged through pinned chunks when large).
                with nogil:
                    staged_dtoh(hp, dptr, n, s, ctx, fresh)
                return 0
        else:
            p = _find_pinned(host)
            if p is not None:
                with nogil:
                    rc = D.cuMemcpyHtoDAsync(dptr, hp, n, s)
                check(rc, b"cuMemcpyHtoDAsync")
            else:
                # Pageable memory: staged through pinned chunks (plain path below the
                # threshold); returns once host may be reused, the DMAs ordered on s.
                with nogil:
                    staged_htod(dptr, hp, n, s, ctx)
            if stream is None:
                _sync(s)
                return 0
        note_use(dev, s)
        if p is not None:
            p.note_async_use(s)
    finally:
        PyBuffer_Release(&view)
    return 0


# ---------------------------------------------------------------- DeviceBuffer
@cython.final
@cython.freelist(32)
@cython.no_gc_clear
cdef class DeviceBuffer:
    """Memory on one device, ordered on one stream.

    Create with :func:`alloc`, :func:`empty`, :func:`zeros`, :func:`to_device`, or
    ``DeviceBuffer(nbytes, device=None, stream=None)``; import another library's
    device array with :func:`as_device_buffer`.

    The memory is allocated in the order of ``stream`` (the legacy default stream
    when None) and freed in that same order when the buffer is closed or dropped,
    so work already queued on that stream that uses it finishes first. A buffer used
    on another stream (a launch or async copy there) is freed only once that work is
    done too (see the module notes).

    Attributes
    ----------
    ptr : int
        The device address (0 for an empty buffer).
    nbytes : int
    device : Device
    shape : tuple of int
    dtype : numpy.dtype, or str when numpy is not installed
    size : int
        Number of elements.
    """

    def __init__(self, nbytes, *, device=None, stream=None):
        if nbytes < 0:
            raise ValueError("nbytes must be >= 0")
        cdef DeviceBuffer b = new_buffer(nbytes, device, stream, None)
        # Move the freshly allocated memory into self.
        self.ptr = b.ptr
        self.size = b.size
        self.stream_handle = b.stream_handle
        self.device = b.device
        self.ctx = b.ctx
        self._stream = b._stream
        self._allocator = b._allocator
        self._kind = b._kind
        self._block = b._block
        self._owner = None
        b._allocator = None
        b.ptr = 0
        b._block = NULL

    def __dealloc__(self):
        if self._allocator is None or self._kind == KIND_CLOSED:
            return
        if not bc_driver_usable(ST):
            return            # interpreter shutting down, or forked child: leak
        cdef CUdeviceptr p = self.ptr
        try:
            self._release()
        except BaseException as e:
            warnings.warn(f"freeing DeviceBuffer 0x{p:x} ({self.size} bytes) failed: {e}",
                          CudaWarning)

    cdef int _release(self) except -1:
        alloc = self._allocator
        self._allocator = None
        if alloc is not None:
            (<Allocator>alloc).deallocate(self)
        self.ptr = 0
        self._block = NULL
        return 0

    cdef int _check_open(self) except -1:
        if self._kind == KIND_CLOSED:
            raise ValueError("operation on a closed DeviceBuffer")
        return 0

    def close(self):
        """Free the memory now (in stream order) or drop the view. Idempotent."""
        if self._kind == KIND_CLOSED:
            return
        try:
            if self._allocator is not None:
                if bc_driver_usable(ST):
                    self._release()
                else:
                    self._allocator = None
        finally:
            self._kind = KIND_CLOSED
            self.ptr = 0
            self._owner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def closed(self):
        return self._kind == KIND_CLOSED

    @property
    def ptr(self):
        """The device address as an int."""
        return self.ptr

    def __int__(self):
        return self.ptr

    @property
    def nbytes(self):
        return self.size

    @property
    def shape(self):
        if self._shape is None:
            return (self.size,)
        return self._shape

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def dtype(self):
        """numpy.dtype when numpy is installed, else the dtype's name (str)."""
        return _public_dtype(self._dtype if self._dtype is not None else "uint8")

    @property
    def itemsize(self):
        return self._itemsize if self._itemsize else 1

    @property
    def size(self):
        """Number of elements."""
        return self.size // (self._itemsize if self._itemsize else 1)

    def __len__(self):
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d DeviceBuffer")
        return shape[0]

    @property
    def stream(self):
        """The stream the memory is ordered on (None: the legacy default stream)."""
        return self._stream

    @property
    def is_view(self):
        """True when the memory belongs to another object (an imported array)."""
        return self._kind == KIND_VIEW

    @property
    def owner(self):
        """The object a view keeps alive (None for memory barecuda allocated)."""
        return self._owner

    def __repr__(self):
        if self._kind == KIND_CLOSED:
            return "<barecuda.DeviceBuffer (closed)>"
        dt = self._dtype if self._dtype is not None else "uint8"
        view = " view" if self._kind == KIND_VIEW else ""
        return (f"<barecuda.DeviceBuffer{view} 0x{self.ptr:x} {self.size} bytes shape={self.shape} "
                f"dtype={dt} device={self.device.ordinal}>")

    # -- typed views
    def view(self, dtype=None, shape=None):
        """A view of the same memory with another dtype and/or shape (same nbytes)."""
        self._check_open()
        key, itemsize = _resolve_dtype(dtype if dtype is not None else (self._dtype or "uint8"))
        if shape is None:
            if self.size % itemsize:
                raise ValueError(f"{self.size} bytes is not a multiple of the itemsize {itemsize}")
            shp = (self.size // itemsize,)
        else:
            shp = _normalize_shape(shape)
            if _nbytes_of(shp, itemsize) != self.size:
                raise ValueError(f"shape {shp} with itemsize {itemsize} does not cover {self.size} bytes")
        cdef DeviceBuffer v = _make_view(self.ptr, self.size, self.device, self.stream_handle,
                                         self._stream, self)
        v._shape = shp
        v._dtype = key
        v._itemsize = itemsize
        return v

    # -- copies
    def copy_from(self, src, stream=None):
        """Copy ``src`` into this buffer; returns self.

        ``src`` is a DeviceBuffer, another library's device array, or any C-contiguous
        host object with the buffer protocol, of exactly ``nbytes`` bytes.
        With ``stream=None`` the copy is synchronous. With a stream it is queued on
        it and returns at once: a host source must then stay valid and unmodified
        until the stream reaches the copy (a PinnedBuffer is kept valid for you:
        closing it waits for the copy).
        """
        cdef DeviceBuffer d = _as_device(src, stream)
        if d is not None:
            _copy_dd(self, d, stream)
        else:
            _copy_host(self, src, stream, False)
        return self

    def copy_to(self, dst=None, stream=None):
        """Copy this buffer into ``dst`` and return ``dst``.

        ``dst`` is a DeviceBuffer, a device array, or a writable C-contiguous host
        buffer of exactly ``nbytes`` bytes; None makes a new ``bytearray`` (the copy
        is then always complete on return). With a stream the copy is asynchronous
        and the host destination must stay valid until the stream reaches it.
        """
        if dst is None:
            # uninitialised (no memset: every byte is written by the copy, and the
            # staging threads fault the pages in in parallel)
            dst = PyByteArray_FromStringAndSize(NULL, <Py_ssize_t>self.size)
            _copy_host(self, dst, stream, True, True)
            if stream is not None:
                _sync_on(stream)
            return dst
        cdef DeviceBuffer d = _as_device(dst, stream)
        if d is not None:
            _copy_dd(d, self, stream)
        else:
            _copy_host(self, dst, stream, True)
        return dst

    def to_numpy(self, stream=None):
        """A new numpy array with this buffer's shape, dtype and contents. The copy
        runs on ``stream`` (or the buffer's stream) and is complete on return."""
        self._check_open()
        np = _np()
        try:
            dt = np.dtype(self._dtype if self._dtype is not None else "uint8")
        except TypeError:
            raise TypeError(f"numpy has no dtype {self._dtype!r}; use .view('uint8') first") from None
        out = np.empty(self.shape, dtype=dt)
        _copy_host(self, out, stream, True, True)
        if stream is not None:
            _sync_on(stream)
        return out

    def copy(self, stream=None):
        """A new buffer (same device, stream, shape, dtype) with a copy of the contents."""
        self._check_open()
        cdef DeviceBuffer b = new_buffer(self.size, self.device, self._stream, None)
        b._shape, b._dtype, b._itemsize = self._shape, self._dtype, self._itemsize
        _copy_dd(b, self, stream)
        return b

    def memset(self, value, *, int width=8, stream=None):
        """Fill the buffer with ``value`` repeated as a ``width``-bit (8, 16 or 32)
        integer; negative values are taken as two's complement. ``nbytes`` must be a
        multiple of ``width // 8``. Synchronous unless a stream is given. Returns self."""
        cdef CUstream s = self.stream_handle
        cdef CUresult rc
        cdef unsigned long long v
        cdef size_t count
        cdef CUdeviceptr p
        self._check_open()
        if width not in (8, 16, 32):
            raise ValueError(f"width must be 8, 16 or 32, not {width}")
        value = int(value)
        w = int(width)
        if not -(1 << (w - 1)) <= value < (1 << w):
            raise OverflowError(f"value {value} does not fit in {width} bits")
        if value < 0:
            value += 1 << w
        v = value
        if self.size % (width // 8):
            raise ValueError(f"nbytes ({self.size}) is not a multiple of {width // 8} (width={width})")
        if stream is not None:
            stream_handle(stream, &s)
        count = self.size // (width // 8)
        if count == 0:
            return self
        set_current(self.ctx)
        p = self.ptr
        if width == 8:
            with nogil:
                rc = D.cuMemsetD8Async(p, <unsigned char>v, count, s)
            check(rc, b"cuMemsetD8Async")
        elif width == 16:
            with nogil:
                rc = D.cuMemsetD16Async(p, <unsigned short>v, count, s)
            check(rc, b"cuMemsetD16Async")
        else:
            with nogil:
                rc = D.cuMemsetD32Async(p, <unsigned int>v, count, s)
            check(rc, b"cuMemsetD32Async")
        if stream is None:
            _sync(s)
        else:
            note_use(self, s)
        return self

    def prefetch(self, where=None, *, stream=None):
        """Managed memory only: migrate it to ``where`` (a Device/ordinal, or None /
        ``"cpu"`` for the host), asynchronously on ``stream`` (default: its stream)."""
        self._check_open()
        _prefetch(self, where, stream)
        return self

    def advise(self, advice, where=None):
        """Managed memory only: ``cuMemAdvise`` with ``advice`` one of "read_mostly",
        "preferred_location", "accessed_by" (and their "unset_" forms), for ``where``
        (a Device/ordinal, or None / "cpu" for the host)."""
        self._check_open()
        _advise(self, advice, where)
        return self

    @property
    def is_managed(self):
        return self._kind == KIND_MANAGED

    # -- export
    @property
    def __cuda_array_interface__(self):
        """CUDA Array Interface v3. ``stream`` is the buffer's stream (1: legacy default)."""
        self._check_open()
        key = self._dtype if self._dtype is not None else "uint8"
        ts = _typestr(key)
        return {
            "shape": self.shape,
            "typestr": ts,
            "descr": [("", ts)],
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            "stream": 1 if self.stream_handle == NULL else <size_t>self.stream_handle,
        }

    def __dlpack_device__(self):
        return (kDLCUDA, self.device.ordinal)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (``dltensor_versioned`` when the consumer accepts
        DLPack >= 1.0, else ``dltensor``).

        ``stream`` is the consumer's stream: None or 1 the legacy default stream, 2 the
        per-thread default stream, -1 no synchronization, any other int a CUstream.
        When it differs from this buffer's stream, the consumer's stream is made to
        wait for the work queued on ours (an event; nothing blocks).
        """
        cdef CUstream cs
        cdef DeviceBuffer src = self
        self._check_open()
        if dl_device is not None:
            dt, did = dl_device
            if int(dt) != kDLCUDA or int(did) != self.device.ordinal:
                raise BufferError(f"cannot export device {self.device.ordinal} memory to DLPack device "
                                  f"{tuple(dl_device)} without a copy")
        if copy:
            src = self.copy()
        if stream is not None and stream != -1:
            if stream == 0 or stream == 1:
                cs = CU_STREAM_LEGACY        # 0 is ambiguous in the spec; read it as the legacy stream
            elif stream == 2:
                cs = CU_STREAM_PER_THREAD
            else:
                _foreign_stream(stream, &cs)
            _stream_after(cs, src.stream_handle, src.ctx)
        elif stream is None:
            _stream_after(CU_STREAM_LEGACY, src.stream_handle, src.ctx)
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        return _make_capsule(src, versioned, bool(copy))

    # -- import
    @staticmethod
    def from_cuda_array_interface(obj, *, stream=None):
        """A zero-copy view of ``obj`` (anything with ``__cuda_array_interface__``, or
        the interface dict itself). See :func:`as_device_buffer`."""
        return _from_cai(obj, stream)

    @staticmethod
    def from_dlpack(obj, *, stream=None):
        """A zero-copy view of a DLPack producer (or a capsule). See :func:`as_device_buffer`."""
        return _from_dlpack(obj, stream)


cdef int _sync_on(object stream) except -1:
    cdef CUstream h = NULL
    stream_handle(stream, &h)
    return _sync(h)


cdef DeviceBuffer _make_view(CUdeviceptr ptr, size_t nbytes, Device dev, CUstream h, object stream,
                             object owner):
    cdef DeviceBuffer v = DeviceBuffer.__new__(DeviceBuffer)
    v.ptr = ptr
    v.size = nbytes
    v.device = dev
    dev.activate()
    v.ctx = dev.ctx
    v.stream_handle = h
    v._stream = stream
    v._owner = owner
    v._kind = KIND_VIEW
    return v


# ----------------------------------------------------------------- DLPack out
cdef void _dl_release(bc_dlpack_export *e) noexcept nogil:
    if e == NULL:
        return
    if e.owner != NULL and Py_IsInitialized():
        with gil:
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


cdef object _make_capsule(DeviceBuffer b, bint versioned, bint copied):
    key = b._dtype if b._dtype is not None else "uint8"
    info = _DTYPES.get(key)
    if info is None:
        raise BufferError(f"dtype {key!r} has no DLPack equivalent")
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
        e.strides[i] = stride
        stride *= shape[i] if shape[i] > 0 else 1
    t.data = <void *>b.ptr
    t.device.device_type = kDLCUDA
    t.device.device_id = b.device.ordinal
    t.ndim = ndim
    t.dtype.code = info[2]
    t.dtype.bits = info[0] * 8
    t.dtype.lanes = 1
    t.shape = e.shape
    t.strides = e.strides
    t.byte_offset = 0
    e.owner = <void *>b
    Py_INCREF(b)
    try:
        if versioned:
            e.t.versioned.version.major = BC_DLPACK_MAJOR_VERSION
            e.t.versioned.version.minor = BC_DLPACK_MINOR_VERSION
            e.t.versioned.manager_ctx = e
            e.t.versioned.deleter = _dl_deleter_versioned
            e.t.versioned.flags = DLPACK_FLAG_BITMASK_IS_COPIED if copied else 0
            return PyCapsule_New(&e.t.versioned, b"dltensor_versioned", _capsule_destructor_versioned)
        e.t.legacy.manager_ctx = e
        e.t.legacy.deleter = _dl_deleter_legacy
        return PyCapsule_New(&e.t.legacy, b"dltensor", _capsule_destructor_legacy)
    except BaseException:
        _dl_release(e)
        raise


# ------------------------------------------------------------------ DLPack in
@cython.final
cdef class _DLPackOwner:
    """Holds a consumed DLPack managed tensor; calls its deleter when the last view dies."""
    cdef void *mt
    cdef bint versioned
    cdef object producer

    def __dealloc__(self):
        cdef void *mt = self.mt
        self.mt = NULL
        if mt == NULL:
            return
        if self.versioned:
            if (<DLManagedTensorVersioned *>mt).deleter != NULL:
                (<DLManagedTensorVersioned *>mt).deleter(<DLManagedTensorVersioned *>mt)
        else:
            if (<DLManagedTensor *>mt).deleter != NULL:
                (<DLManagedTensor *>mt).deleter(<DLManagedTensor *>mt)


cdef DeviceBuffer _from_dlpack(object obj, object stream):
    cdef CUstream h = NULL
    cdef _DLPackOwner owner
    cdef DLTensor *t
    cdef int i
    cdef int64_t expect
    ensure_driver(ST)
    if stream is not None:
        stream_handle(stream, &h)
    if PyCapsule_CheckExact(obj):
        cap = obj
    else:
        dev = obj.__dlpack_device__()
        if int(dev[0]) not in (kDLCUDA, kDLCUDAManaged):
            raise BufferError(f"{type(obj).__name__} is not in CUDA device memory (DLPack device {tuple(dev)}); "
                              "use to_device() to copy host data")
        sarg = 1 if h == NULL else <size_t>h
        # The producer may check (PyTorch does) that its device's context is the
        # current one when it is handed a stream: bind it, as we are about to use
        # the memory there anyway. This does not change the thread's default device.
        activate_device(int(dev[1]))
        try:
            cap = obj.__dlpack__(stream=sarg, max_version=(BC_DLPACK_MAJOR_VERSION, BC_DLPACK_MINOR_VERSION))
        except TypeError:
            cap = obj.__dlpack__(stream=sarg)
    owner = _DLPackOwner.__new__(_DLPackOwner)
    if PyCapsule_IsValid(cap, b"dltensor_versioned"):
        owner.mt = PyCapsule_GetPointer(cap, b"dltensor_versioned")
        owner.versioned = True
        PyCapsule_SetName(cap, b"used_dltensor_versioned")
        t = &(<DLManagedTensorVersioned *>owner.mt).dl_tensor
        if (<DLManagedTensorVersioned *>owner.mt).version.major > 1:
            raise BufferError("DLPack major version > 1 is not supported")
    elif PyCapsule_IsValid(cap, b"dltensor"):
        owner.mt = PyCapsule_GetPointer(cap, b"dltensor")
        owner.versioned = False
        PyCapsule_SetName(cap, b"used_dltensor")
        t = &(<DLManagedTensor *>owner.mt).dl_tensor
    else:
        raise BufferError("not a DLPack capsule (or it was already consumed)")
    if t.device.device_type != kDLCUDA and t.device.device_type != kDLCUDAManaged:
        raise BufferError(f"DLPack tensor is on device type {t.device.device_type}, not CUDA")
    name = _DL_TO_NAME.get((t.dtype.code, t.dtype.bits))
    if name is None or t.dtype.lanes != 1:
        raise BufferError(f"unsupported DLPack dtype (code={t.dtype.code}, bits={t.dtype.bits}, "
                          f"lanes={t.dtype.lanes})")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides != NULL:
        expect = 1
        for i in range(t.ndim - 1, -1, -1):
            if t.shape[i] != 1 and t.strides[i] != expect and t.shape[i] != 0:
                raise BufferError(f"DLPack tensor is not C-contiguous (shape {shape}, strides "
                                  f"{tuple(t.strides[j] for j in range(t.ndim))}); make it contiguous first")
            expect *= t.shape[i]
    itemsize = _DTYPES[name][0]
    nbytes = _nbytes_of(shape, itemsize)
    dev_obj = _device_obj(t.device.device_id)
    cdef DeviceBuffer v = _make_view(<CUdeviceptr>t.data + t.byte_offset, nbytes, dev_obj, h, stream, owner)
    v._shape = shape
    v._dtype = name
    v._itemsize = itemsize
    owner.producer = obj if not PyCapsule_CheckExact(obj) else None   # producer stays alive too
    return v


# --------------------------------------------------------------------- CAI in
cdef int _ordinal_of_ptr(CUdeviceptr p) except -2:
    cdef int ordinal = -1
    if p != 0 and D.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) == 0:
        return ordinal
    return -1


cdef DeviceBuffer _from_cai(object obj, object stream):
    cdef CUstream h = NULL
    cdef CUstream ps
    cdef CUdeviceptr p
    ensure_driver(ST)
    if stream is not None:
        stream_handle(stream, &h)
    cai = obj if isinstance(obj, dict) else obj.__cuda_array_interface__
    data = cai["data"]
    p = data[0] if data is not None and data[0] is not None else 0
    shape = tuple(int(n) for n in cai["shape"])
    typestr = cai["typestr"]
    if cai.get("mask") is not None:
        raise ValueError("masked CUDA arrays are not supported")
    key, itemsize = _resolve_dtype(typestr)
    strides = cai.get("strides")
    if strides is not None:
        expect = itemsize
        for n, st in zip(reversed(shape), reversed(tuple(strides))):
            if n != 1 and n != 0 and st != expect:
                raise ValueError(f"array is not C-contiguous (shape {shape}, strides {tuple(strides)}); "
                                 "make it contiguous first")
            expect *= n
    nbytes = _nbytes_of(shape, itemsize)
    o = _ordinal_of_ptr(p)
    dev = _resolve_device(None if o < 0 else o, stream)
    # CAI v3: synchronize on the producer's stream before we use the data.
    sentry = cai.get("stream") if cai.get("version", 0) >= 3 else None
    if sentry is not None:
        if sentry == 0:
            raise ValueError("__cuda_array_interface__ 'stream' must not be 0 (ambiguous; spec v3)")
        if sentry == 1:
            ps = CU_STREAM_LEGACY
        elif sentry == 2:
            ps = CU_STREAM_PER_THREAD
        else:
            ps = <CUstream><size_t>sentry
        _stream_after(h, ps, dev.ctx)
    cdef DeviceBuffer v = _make_view(p, nbytes, dev, h, stream, obj)
    v._shape = shape
    v._dtype = key
    v._itemsize = itemsize
    return v


# --------------------------------------------------------------- public API
def as_device_buffer(obj, *, stream=None):
    """A zero-copy DeviceBuffer view of another library's device array.

    Accepts a DeviceBuffer (returned as is), anything with ``__dlpack__`` on a CUDA
    device (PyTorch, CuPy, JAX...), anything with ``__cuda_array_interface__``, a
    DLPack capsule, or a CAI dict. The view keeps the producer alive and never frees
    the memory. ``stream`` is where the view will be used: the producer's pending
    work is made to complete before work queued there (DLPack: we pass our stream to
    the producer; CAI v3: we wait on the producer's ``stream`` entry with an event).
    The array must be C-contiguous.
    """
    if type(obj) is DeviceBuffer:
        return obj
    if PyCapsule_CheckExact(obj):
        return _from_dlpack(obj, stream)
    if isinstance(obj, dict):
        return _from_cai(obj, stream)
    f = getattr(obj, "__dlpack_device__", None)
    if f is not None and hasattr(obj, "__dlpack__"):
        if int(f()[0]) in (kDLCUDA, kDLCUDAManaged):
            return _from_dlpack(obj, stream)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(obj, stream)
    raise TypeError(f"{type(obj).__name__} is not a device array (no __cuda_array_interface__ "
                    "and no CUDA __dlpack__); use to_device() for host data")


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
    if nbytes < 0:
        raise ValueError("nbytes must be >= 0")
    return new_buffer(nbytes, device, stream, allocator)


def empty(shape, dtype="uint8", *, device=None, stream=None, allocator=None):
    """An uninitialized DeviceBuffer of ``shape`` and ``dtype`` (a numpy dtype or a
    name such as ``"float32"``; names work without numpy)."""
    shp = _normalize_shape(shape)
    key, itemsize = _resolve_dtype(dtype)
    cdef DeviceBuffer b = new_buffer(_nbytes_of(shp, itemsize), device, stream, allocator)
    b._shape = shp
    b._dtype = key
    b._itemsize = itemsize
    return b


def zeros(shape, dtype="uint8", *, device=None, stream=None, allocator=None):
    """Like :func:`empty`, filled with zero bytes (synchronously unless a stream is given)."""
    b = empty(shape, dtype, device=device, stream=stream, allocator=allocator)
    b.memset(0, stream=stream)
    return b


def to_device(obj, *, stream=None, device=None, allocator=None):
    """Copy a host object (any C-contiguous buffer-protocol object; numpy arrays keep
    their shape and dtype) to a new DeviceBuffer. A device array is copied device to
    device. Synchronous unless a stream is given (then the host memory must stay valid
    until the stream reaches the copy)."""
    cdef Py_buffer view
    cdef DeviceBuffer b
    cdef int i
    d = _as_device(obj, stream)
    if d is not None:
        b = new_buffer(d.size, device if device is not None else d.device, stream, allocator)
        b._shape, b._dtype, b._itemsize = d._shape, d._dtype, d._itemsize
        _copy_dd(b, d, stream)
        return b
    try:
        PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    except TypeError:
        raise TypeError(f"to_device needs a buffer-protocol object or a device array, "
                        f"not {type(obj).__name__}") from None
    except (BufferError, ValueError) as e:
        raise ValueError(f"{type(obj).__name__} must be C-contiguous: {e}; "
                         "copy it first, e.g. numpy.ascontiguousarray(x)") from None
    try:
        fmt = view.format.decode() if view.format != NULL else "B"
        shape = tuple(view.shape[i] for i in range(view.ndim)) if view.shape != NULL else (view.len,)
        nbytes = view.len
    finally:
        PyBuffer_Release(&view)
    key = None
    try:
        key, itemsize = _resolve_dtype(fmt)
    except TypeError:
        pass
    if key is None or _nbytes_of(shape, itemsize) != nbytes:
        dt = getattr(obj, "dtype", None)
        if dt is not None:
            key, itemsize = _resolve_dtype(dt)
        if key is None or _nbytes_of(shape, itemsize) != nbytes:
            key, itemsize, shape = "uint8", 1, (nbytes,)
    b = new_buffer(nbytes, device, stream, allocator)
    b._shape = shape
    b._dtype = key
    b._itemsize = itemsize
    _copy_host(b, obj, stream, False)
    return b


# --------------------------------------------------------------- PinnedBuffer
cdef char _empty_host[8]
cdef char *_fmt_B = b"B"


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
        if nbytes < 0:
            raise ValueError("nbytes must be >= 0")
        n = nbytes
        ensure_driver(ST)
        cdef Device dev = _resolve_device(device, None)
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
                raise _oom(rc, b"cuMemHostAlloc", n, dev, " (pinned host memory)")
            if mapped:
                rc = D.cuMemHostGetDevicePointer(&dp, p, 0)
                if rc != 0:
                    D.cuMemFreeHost(p)
                    check(rc, b"cuMemHostGetDevicePointer")
        self.ptr = p
        self.nbytes_ = n
        self.device = dev
        self.ctx = dev.ctx
        self.dptr = dp
        self.flags = flags
        self._shape[0] = n
        self._strides[0] = 1

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
        if self._pool is not None and p != NULL:
            # Back to its pinned pool, which reuses it once `ev` has completed.
            pool = self._pool
            self._pool = None
            pool._give_back(<size_t>p, self.nbytes_, self.dptr, <size_t>ev)
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
        set_current(self.ctx)
        if ev == NULL:
            check(D.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), b"cuEventCreate")
            self._last_use = ev
        else:
            # Keep covering the earlier use (maybe on another stream) with the new record.
            if D.cuEventQuery(ev) != 0:
                check(D.cuStreamWaitEvent(s, ev, 0), b"cuStreamWaitEvent")
        check(D.cuEventRecord(ev, s), b"cuEventRecord")
        return 0

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
        if self._exports > 0:
            raise BufferError(f"PinnedBuffer has {self._exports} exported view(s) "
                              "(memoryview / numpy array); delete them first")
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def closed(self):
        return self._closed

    @property
    def ptr(self):
        """Host address as an int."""
        return <size_t>self.ptr

    @property
    def nbytes(self):
        return self.nbytes_

    def __len__(self):
        return self.nbytes_

    @property
    def mapped(self):
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
    np = _np()
    shp = _normalize_shape(shape)
    key, itemsize = _resolve_dtype(dtype)
    nbytes = _nbytes_of(shp, itemsize)
    p = PinnedBuffer(nbytes, device=device, portable=portable, mapped=mapped, write_combined=write_combined)
    return np.frombuffer(p, dtype=np.dtype(key), count=nbytes // itemsize).reshape(shp)


cdef PinnedBuffer pinned_from_block(void *p, size_t n, Device dev, CUdeviceptr dptr, unsigned int flags,
                                    object pool):
    """A PinnedBuffer over memory a pinned pool owns (given back to `pool` on close)."""
    cdef PinnedBuffer b = PinnedBuffer.__new__(PinnedBuffer, 0, device=dev)
    b.ptr = p
    b.nbytes_ = n
    b._shape[0] = n
    b.dptr = dptr
    b.flags = flags
    b._pool = pool
    return b


# ------------------------------------------------------------ other memory kinds
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
        cdef CUdeviceptr p = b.ptr
        cdef CUstream s = b.stream_handle
        cdef CUresult rc
        b.ptr = 0
        if p == 0:
            return 0
        set_current(b.ctx)
        with nogil:
            rc = D.cuCtxSynchronize() if b.used_elsewhere else D.cuStreamSynchronize(s)
        check(rc, b"cuCtxSynchronize" if b.used_elsewhere else b"cuStreamSynchronize")
        with nogil:
            rc = D.cuMemFree(p)
        check(rc, b"cuMemFree")
        return 0


cdef object _waiting_allocators = {}


cdef Allocator _waiting_allocator(Device dev, int kind):
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
    shp = _normalize_shape(shape)
    key, itemsize = _resolve_dtype(dtype)
    n = _nbytes_of(shp, itemsize)
    try:
        flags = _ATTACH[attach]
    except KeyError:
        raise ValueError(f"attach must be 'global' or 'host', not {attach!r}") from None
    if stream is not None:
        stream_handle(stream, &h)
    cdef Device dev = _resolve_device(device, stream)
    if n:
        with nogil:
            rc = D.cuMemAllocManaged(&p, n, flags)
        if rc != 0:
            raise _oom(rc, b"cuMemAllocManaged", n, dev, " (managed memory)")
    cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
    b.ptr = p
    b.size = n
    b.device = dev
    b.ctx = dev.ctx
    b.stream_handle = h
    b._stream = stream
    b._kind = KIND_MANAGED
    b._shape = shp
    b._dtype = key
    b._itemsize = itemsize
    b._allocator = _waiting_allocator(dev, KIND_MANAGED)
    return b


cdef CUmemLocation _location(object where) except *:
    cdef CUmemLocation loc
    if where is None or (isinstance(where, str) and where.lower() in ("cpu", "host")):
        loc.type = CU_MEM_LOCATION_TYPE_HOST
        loc.id = 0
    else:
        loc.type = CU_MEM_LOCATION_TYPE_DEVICE
        loc.id = device_of(where).ordinal
    return loc


def _prefetch(DeviceBuffer b, where, stream):
    cdef CUstream s = b.stream_handle
    cdef CUmemLocation loc = _location(where)
    if b._kind != KIND_MANAGED:
        raise ValueError("prefetch() needs managed memory (managed_empty)")
    if D.cuMemPrefetchAsync == NULL:
        raise DriverVersionError("cuMemPrefetchAsync (with CUmemLocation) needs a CUDA 12.2+ driver")
    if stream is not None:
        stream_handle(stream, &s)
    if b.size == 0:
        return
    set_current(b.ctx)
    check(D.cuMemPrefetchAsync(b.ptr, b.size, loc, 0, s), b"cuMemPrefetchAsync")
    if stream is not None:
        note_use(b, s)


_ADVICE = {
    "read_mostly": CU_MEM_ADVISE_SET_READ_MOSTLY, "unset_read_mostly": CU_MEM_ADVISE_UNSET_READ_MOSTLY,
    "preferred_location": CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
    "unset_preferred_location": CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
    "accessed_by": CU_MEM_ADVISE_SET_ACCESSED_BY, "unset_accessed_by": CU_MEM_ADVISE_UNSET_ACCESSED_BY,
}


def _advise(DeviceBuffer b, advice, where):
    cdef CUmemLocation loc = _location(where)
    if b._kind != KIND_MANAGED:
        raise ValueError("advise() needs managed memory (managed_empty)")
    if D.cuMemAdvise == NULL:
        raise DriverVersionError("cuMemAdvise (with CUmemLocation) needs a CUDA 12.2+ driver")
    try:
        code = _ADVICE[advice] if isinstance(advice, str) else int(advice)
    except KeyError:
        raise ValueError(f"unknown advice {advice!r}; one of {sorted(_ADVICE)}") from None
    if b.size == 0:
        return
    set_current(b.ctx)
    check(D.cuMemAdvise(b.ptr, b.size, <CUmem_advise>code, loc), b"cuMemAdvise")


def alloc_pitch(width_bytes, height, *, element_size=4, device=None, stream=None):
    """Pitched 2D device memory (``cuMemAllocPitch``): returns ``(buffer, pitch)``;
    row ``y`` starts at ``buffer.ptr + y * pitch``. ``element_size`` is 4, 8 or 16."""
    cdef CUdeviceptr p = 0
    cdef size_t pitch = 0
    cdef CUresult rc
    cdef size_t w = width_bytes, h = height
    cdef unsigned int es = element_size
    cdef CUstream hs = NULL
    if es not in (4, 8, 16):
        raise ValueError("element_size must be 4, 8 or 16")
    ensure_driver(ST)
    if stream is not None:
        stream_handle(stream, &hs)
    cdef Device dev = _resolve_device(device, stream)
    if w and h:
        with nogil:
            rc = D.cuMemAllocPitch(&p, &pitch, w, h, es)
        if rc != 0:
            raise _oom(rc, b"cuMemAllocPitch", w * h, dev, " (pitched)")
    cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
    b.ptr = p
    b.size = pitch * h
    b.device = dev
    b.ctx = dev.ctx
    b.stream_handle = hs
    b._stream = stream
    b._kind = KIND_SYNC
    b._shape = (h, pitch)
    b._dtype = "uint8"
    b._itemsize = 1
    b._allocator = _waiting_allocator(dev, KIND_SYNC)
    return b, pitch


cdef class _Side:
    """One side of a 2D/3D copy: device address or host pointer, and its extent."""
    cdef CUmemorytype mtype
    cdef CUdeviceptr dptr
    cdef void *hptr
    cdef size_t nbytes
    cdef Py_buffer view
    cdef bint has_view
    cdef DeviceBuffer dev
    cdef object keep

    def __dealloc__(self):
        if self.has_view:
            PyBuffer_Release(&self.view)


cdef _Side _side(object obj, bint writable):
    cdef _Side sd = _Side.__new__(_Side)
    cdef DeviceBuffer d = _as_device(obj, None)
    if d is not None:
        d._check_open()
        sd.mtype = CU_MEMORYTYPE_DEVICE
        sd.dptr = d.ptr
        sd.nbytes = d.size
        sd.dev = d
        return sd
    _get_host(obj, &sd.view, writable)
    sd.has_view = True
    sd.keep = obj
    sd.mtype = CU_MEMORYTYPE_HOST
    sd.hptr = sd.view.buf
    sd.nbytes = sd.view.len
    return sd


cdef int _check_extent(_Side sd, str which, size_t x, size_t y, size_t z, size_t pitch, size_t rows,
                       size_t width, size_t height, size_t depth) except -1:
    if width == 0 or height == 0 or depth == 0:
        return 0
    if x + width > pitch:
        raise ValueError(f"{which}: x offset + width ({x} + {width}) exceeds the pitch {pitch}")
    if y + height > rows and depth > 1:
        raise ValueError(f"{which}: y offset + height exceeds the rows per slice ({rows})")
    last = ((z + depth - 1) * rows + (y + height - 1)) * pitch + x + width
    if last > sd.nbytes:
        raise ValueError(f"{which}: the copy reaches byte {last} but the buffer has {sd.nbytes}")
    return 0


cdef CUcontext _ctx_of(_Side d, _Side sr, object stream) except NULL:
    if d.dev is not None:
        return d.dev.ctx
    if sr.dev is not None:
        return sr.dev.ctx
    return _resolve_device(None, stream).ctx


cdef int _pick_stream(_Side d, _Side sr, object stream, CUstream *s) except -1:
    """The stream of a pitched copy: the one given, else dst's, else src's (else NULL)."""
    if stream is not None:
        stream_handle(stream, s)
    elif d.dev is not None:
        s[0] = d.dev.stream_handle
    elif sr.dev is not None:
        s[0] = sr.dev.stream_handle
    return 0


cdef int _after_copy(_Side d, _Side sr, object stream, CUstream s) except -1:
    """Synchronous without a stream; else both device sides are noted as used on it."""
    if stream is None:
        _sync(s)
        return 0
    if d.dev is not None:
        note_use(d.dev, s)
    if sr.dev is not None:
        note_use(sr.dev, s)
    return 0


def copy_2d(dst, src, width_bytes, height, *, dst_pitch=None, src_pitch=None, dst_x=0, dst_y=0,
            src_x=0, src_y=0, stream=None):
    """Copy a ``width_bytes`` x ``height`` rectangle between pitched memories (device
    buffers or host buffers, any direction; ``cuMemcpy2DAsync``). Pitches default to
    ``width_bytes``. Synchronous unless a stream is given (host memory must then stay
    valid until the stream reaches the copy). Bounds are checked before any driver call."""
    cdef CUDA_MEMCPY2D c
    cdef CUstream s = NULL
    cdef CUresult rc
    cdef _Side d = _side(dst, True)
    cdef _Side sr = _side(src, False)
    cdef size_t w = width_bytes, h = height
    cdef size_t dp = w if dst_pitch is None else dst_pitch
    cdef size_t sp = w if src_pitch is None else src_pitch
    _check_extent(d, "dst", dst_x, dst_y, 0, dp, h + dst_y, w, h, 1)
    _check_extent(sr, "src", src_x, src_y, 0, sp, h + src_y, w, h, 1)
    _pick_stream(d, sr, stream, &s)
    if w == 0 or h == 0:
        return
    memset(&c, 0, sizeof(c))
    c.srcXInBytes = src_x
    c.srcY = src_y
    c.srcMemoryType = sr.mtype
    c.srcHost = sr.hptr
    c.srcDevice = sr.dptr
    c.srcPitch = sp
    c.dstXInBytes = dst_x
    c.dstY = dst_y
    c.dstMemoryType = d.mtype
    c.dstHost = d.hptr
    c.dstDevice = d.dptr
    c.dstPitch = dp
    c.WidthInBytes = w
    c.Height = h
    set_current(_ctx_of(d, sr, stream))
    with nogil:
        rc = D.cuMemcpy2DAsync(&c, s)
    check(rc, b"cuMemcpy2DAsync")
    _after_copy(d, sr, stream, s)


def copy_3d(dst, src, width_bytes, height, depth, *, dst_pitch=None, src_pitch=None, dst_height=None,
            src_height=None, dst_pos=(0, 0, 0), src_pos=(0, 0, 0), stream=None):
    """Copy a ``width_bytes`` x ``height`` x ``depth`` box between pitched memories
    (``cuMemcpy3DAsync``). ``*_height`` is the rows per slice (default ``height``);
    ``*_pos`` are ``(x_bytes, y, z)``. Synchronous unless a stream is given."""
    cdef CUDA_MEMCPY3D c
    cdef CUstream s = NULL
    cdef CUresult rc
    cdef _Side d = _side(dst, True)
    cdef _Side sr = _side(src, False)
    cdef size_t w = width_bytes, h = height, dz = depth
    cdef size_t dp = w if dst_pitch is None else dst_pitch
    cdef size_t sp = w if src_pitch is None else src_pitch
    cdef size_t dh = h if dst_height is None else dst_height
    cdef size_t sh = h if src_height is None else src_height
    dx, dy, dzp = dst_pos
    sx, sy, szp = src_pos
    _check_extent(d, "dst", dx, dy, dzp, dp, dh, w, h, dz)
    _check_extent(sr, "src", sx, sy, szp, sp, sh, w, h, dz)
    _pick_stream(d, sr, stream, &s)
    if w == 0 or h == 0 or dz == 0:
        return
    memset(&c, 0, sizeof(c))
    c.srcXInBytes, c.srcY, c.srcZ = sx, sy, szp
    c.srcMemoryType = sr.mtype
    c.srcHost = sr.hptr
    c.srcDevice = sr.dptr
    c.srcPitch = sp
    c.srcHeight = sh
    c.dstXInBytes, c.dstY, c.dstZ = dx, dy, dzp
    c.dstMemoryType = d.mtype
    c.dstHost = d.hptr
    c.dstDevice = d.dptr
    c.dstPitch = dp
    c.dstHeight = dh
    c.WidthInBytes = w
    c.Height = h
    c.Depth = dz
    set_current(_ctx_of(d, sr, stream))
    with nogil:
        rc = D.cuMemcpy3DAsync(&c, s)
    check(rc, b"cuMemcpy3DAsync")
    _after_copy(d, sr, stream, s)


@cython.final
cdef class HostRegistration:
    """Page-locks an existing host buffer (``cuMemHostRegister``) until :meth:`close`
    or the end of a ``with`` block. See :func:`register_host`."""
    cdef Py_buffer view
    cdef bint registered
    cdef bint has_view
    cdef readonly Device device
    cdef CUcontext ctx
    cdef CUdeviceptr dptr
    cdef object obj

    def __dealloc__(self):
        if self.registered and bc_driver_usable(ST):
            set_current(self.ctx)
            rc = D.cuMemHostUnregister(self.view.buf)
            if rc != 0:
                warnings.warn(f"cuMemHostUnregister failed: {make_error(rc, 'cuMemHostUnregister')}", CudaWarning)
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def ptr(self):
        return <size_t>self.view.buf if self.has_view else 0

    @property
    def nbytes(self):
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
    cdef Device dev = _resolve_device(device, None)
    _get_host(obj, &r.view, not read_only)
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
