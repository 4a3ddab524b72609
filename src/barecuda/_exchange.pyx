"""The two exchange protocols for device arrays: DLPack and the CUDA Array Interface v3,
import and export.

Owns: DLPack export (``DeviceBuffer.__dlpack__``: its stream, device and copy rules;
the capsules themselves are made and released in _dlpack_export) and import (a
consumed capsule's owner, ``DeviceBuffer.from_dlpack``), CUDA Array Interface v3
export and import (``__cuda_array_interface__``, ``DeviceBuffer.from_cuda_array_interface``),
the layout checks of an import, and the re-import of our own memory (``view_at``).
Which object goes through which protocol is _interop's (``as_device_buffer``,
``pointer_of``); the producer's stream is honoured by the one rule of docs/interop.md.
"""
cimport cython
from cpython.pycapsule cimport PyCapsule_IsValid, PyCapsule_GetPointer, PyCapsule_SetName, PyCapsule_CheckExact

from barecuda._abi cimport *
from barecuda._errors cimport bc_state_t, CUDA_SUCCESS
from barecuda._loader cimport driver_table, runtime_state, ensure_driver
from barecuda._device cimport Device, activate_device, device_at
from barecuda._stream cimport stream_handle, resolve_device, stream_after
from barecuda._dlpack cimport *
from barecuda._dtype cimport resolve_dtype, typestr_of, nbytes_of, dtype_info, dtype_from_dlpack
from barecuda._buffer cimport DeviceBuffer, make_view, view_at, check_usable, order_stream
from barecuda._dlpack_export cimport make_capsule, our_export

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()


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


cdef object _dl_stream_arg(CUstream h):
    """The __dlpack__(stream=...) value for consumer stream h (array API numbering)."""
    if h == NULL or h == CU_STREAM_LEGACY:
        return 1
    if h == CU_STREAM_PER_THREAD:
        return 2
    return <size_t>h


cdef object _dl_capsule(object obj, CUstream h):
    """obj.__dlpack__ for consumer stream h: the producer orders h after its work."""
    dev = obj.__dlpack_device__()
    if int(dev[0]) not in (kDLCUDA, kDLCUDAManaged):
        raise BufferError(f"{type(obj).__name__} is not in CUDA device memory (DLPack device {tuple(dev)}); "
                          "use to_device() to copy host data")
    sarg = _dl_stream_arg(h)
    # The producer may check (PyTorch does) that its device's context is the
    # current one when it is handed a stream: bind it, as we are about to use
    # the memory there anyway. This does not change the thread's default device.
    activate_device(int(dev[1]))
    try:
        return obj.__dlpack__(stream=sarg, max_version=(BC_DLPACK_MAJOR_VERSION, BC_DLPACK_MINOR_VERSION))
    except TypeError:
        return obj.__dlpack__(stream=sarg)


cdef DLTensor *_dl_tensor(object cap, void **mt, bint *versioned, bint consume) except NULL:
    cdef DLTensor *t
    if PyCapsule_IsValid(cap, b"dltensor_versioned"):
        mt[0] = PyCapsule_GetPointer(cap, b"dltensor_versioned")
        versioned[0] = True
        if (<DLManagedTensorVersioned *>mt[0]).version.major > 1:
            raise BufferError("DLPack major version > 1 is not supported")
        if consume:
            PyCapsule_SetName(cap, b"used_dltensor_versioned")
        t = &(<DLManagedTensorVersioned *>mt[0]).dl_tensor
    elif PyCapsule_IsValid(cap, b"dltensor"):
        mt[0] = PyCapsule_GetPointer(cap, b"dltensor")
        versioned[0] = False
        if consume:
            PyCapsule_SetName(cap, b"used_dltensor")
        t = &(<DLManagedTensor *>mt[0]).dl_tensor
    else:
        raise BufferError("not a DLPack capsule (or it was already consumed)")
    if t.device.device_type != kDLCUDA and t.device.device_type != kDLCUDAManaged:
        raise BufferError(f"DLPack tensor is on device type {t.device.device_type}, not CUDA")
    return t


cdef tuple _layout(tuple shape, object strides, size_t itemsize, bint in_bytes):
    """(nbytes spanned, element strides or None when C-contiguous)."""
    cdef object expect = 1
    cdef object span = 0
    if strides is None:
        return nbytes_of(shape, itemsize), None
    st = tuple(int(s) // itemsize if in_bytes else int(s) for s in strides)
    if in_bytes and any(int(s) % itemsize for s in strides):
        raise ValueError(f"strides {tuple(strides)} are not multiples of the itemsize {itemsize}")
    contiguous = True
    for n, s in zip(reversed(shape), reversed(st)):
        if n != 1 and n != 0 and s != expect:
            contiguous = False
        expect *= n
    if contiguous:
        return nbytes_of(shape, itemsize), None
    if any(s < 0 for s in st):
        raise ValueError(f"negative strides {st} are not supported; make the array contiguous first")
    if any(n == 0 for n in shape):
        return 0, st
    for n, s in zip(shape, st):
        span += (n - 1) * s
    span = (span + 1) * itemsize                # Python ints: checked before the cast
    if span > <object>(<size_t>-1 >> 1):
        raise OverflowError(f"shape {shape} with strides {st} spans {span} bytes (too large)")
    return <size_t>span, st


cdef DeviceBuffer _from_dlpack(object obj, object stream):
    cdef CUstream h = NULL
    cdef _DLPackOwner owner
    cdef DLTensor *t
    cdef int i
    cdef void *mt = NULL
    cdef bint versioned = False
    cdef DeviceBuffer ours, v = _import_start(obj, stream, &h)
    if v is not None:
        return v
    cap = obj if PyCapsule_CheckExact(obj) else _dl_capsule(obj, h)
    owner = _DLPackOwner.__new__(_DLPackOwner)
    t = _dl_tensor(cap, &mt, &versioned, True)
    owner.mt = mt
    owner.versioned = versioned
    name = dtype_from_dlpack(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    if name is None:
        raise BufferError(f"unsupported DLPack dtype (code={t.dtype.code}, bits={t.dtype.bits}, "
                          f"lanes={t.dtype.lanes})")
    if t.dtype.bits == 6 and not (versioned and (<DLManagedTensorVersioned *>mt).flags
                                  & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED):
        # DLPack 1.1: sub-byte data is packed unless flagged padded; barecuda holds 6-bit
        # floats one per byte.
        raise BufferError(f"packed 6-bit DLPack data ({name}) is not supported: barecuda takes 6-bit "
                          "floats padded to one byte each (a versioned tensor with the padded flag)")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if t.strides == NULL else tuple(t.strides[i] for i in range(t.ndim))
    itemsize = dtype_info(name)[0]
    nbytes, est = _layout(shape, strides, itemsize, False)
    dev_obj = device_at(t.device.device_id)
    ours = our_export(mt, versioned)
    if ours is not None:
        v = make_view(<CUdeviceptr>t.data + t.byte_offset, nbytes, dev_obj, h, stream, owner, ours)
    else:
        v = view_at(<CUdeviceptr>t.data + t.byte_offset, nbytes, dev_obj, h, stream, owner)
    _set_layout(v, shape, name, itemsize, est)
    if versioned and ((<DLManagedTensorVersioned *>mt).flags & DLPACK_FLAG_BITMASK_READ_ONLY):
        v._readonly = True
    owner.producer = obj if not PyCapsule_CheckExact(obj) else None   # producer stays alive too
    return v


cdef DeviceBuffer _import_start(object obj, object stream, CUstream *h):
    """The start of a DLPack or CAI import: fork check, the consumer stream into h, and
    a re-import of one of our own buffers (returned; None for any other object)."""
    ensure_driver(ST)
    if stream is not None:
        stream_handle(stream, h)
    if type(obj) is DeviceBuffer:
        return _reimport(<DeviceBuffer>obj, h[0], stream)
    return None


cdef inline int _set_layout(DeviceBuffer v, tuple shape, object dtype, size_t itemsize, object est) except -1:
    """An import's element layout (est: element strides of a strided import, else None)."""
    v._shape = shape
    v._dtype = dtype
    v._itemsize = itemsize
    v._strides = est
    v._strided = est is not None
    return 0


cdef DeviceBuffer _reimport(DeviceBuffer b, CUstream h, object stream):
    """A DLPack/CAI re-import of one of our buffers: a view holding its owner."""
    cdef CUstream bs
    check_usable(b)
    order_stream(b, &bs)
    stream_after(h, bs, b.ctx)
    cdef DeviceBuffer v = make_view(b.ptr, b.nbytes, b.device, h, stream, None, b)
    v._shape, v._dtype, v._itemsize = b._shape, b._dtype, b._itemsize
    v._strides, v._strided, v._readonly = b._strides, b._strided, b._readonly
    return v


# --------------------------------------------------------------------- CAI in
cdef int _ordinal_of_ptr(CUdeviceptr p) except -2:
    cdef int ordinal = -1
    if p != 0 and D.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) == CUDA_SUCCESS:
        return ordinal
    return -1


cdef int _cai_wait(object cai, CUstream consumer, CUcontext ctx) except -1:
    """CAI v3: make `consumer` wait (an event, never a host sync) for the producer's
    'stream' entry; absent or None: the producer says no synchronization is needed."""
    cdef CUstream ps
    sentry = cai.get("stream") if cai.get("version", 0) >= 3 else None
    if sentry is None:
        return 0
    if isinstance(sentry, bool) or not isinstance(sentry, int):
        raise TypeError(f"__cuda_array_interface__ 'stream' must be an int or None, not {type(sentry).__name__}")
    if sentry == 0:
        raise ValueError("__cuda_array_interface__ 'stream' must not be 0 (ambiguous; spec v3)")
    if sentry == 1:
        ps = CU_STREAM_LEGACY
    elif sentry == 2:
        ps = CU_STREAM_PER_THREAD
    else:
        ps = <CUstream><size_t>sentry
    return stream_after(consumer, ps, ctx)


cdef object _cai_dict(object obj):
    cai = obj if isinstance(obj, dict) else obj.__cuda_array_interface__
    if not isinstance(cai, dict):
        raise TypeError(f"__cuda_array_interface__ must be a dict, not {type(cai).__name__}")
    for k in ("data", "shape", "typestr"):
        if k not in cai:
            raise TypeError(f"__cuda_array_interface__ has no {k!r} entry")
    return cai


cdef DeviceBuffer _from_cai(object obj, object stream):
    cdef CUstream h = NULL
    cdef CUdeviceptr p
    cdef DeviceBuffer v = _import_start(obj, stream, &h)
    if v is not None:
        return v
    cai = _cai_dict(obj)
    data = cai["data"]
    p = data[0] if data is not None and data[0] is not None else 0
    shape = tuple(int(n) for n in cai["shape"])
    if cai.get("mask") is not None:
        raise ValueError("masked CUDA arrays are not supported")
    key, itemsize = resolve_dtype(cai["typestr"])
    nbytes, est = _layout(shape, cai.get("strides"), itemsize, True)
    o = _ordinal_of_ptr(p)
    dev = resolve_device(None if o < 0 else o, stream)
    _cai_wait(cai, h, dev.ctx)
    v = view_at(p, nbytes, dev, h, stream, obj)
    _set_layout(v, shape, key, itemsize, est)
    v._readonly = v._readonly or (data is not None and len(data) > 1 and bool(data[1]))
    return v


# --------------------------------------------------------------- DeviceBuffer export
def cai_of(DeviceBuffer b):
    """DeviceBuffer.__cuda_array_interface__ (v3; 'stream' is the buffer's stream)."""
    cdef CUstream bs
    ensure_driver(ST)
    b._check_open()
    order_stream(b, &bs)
    key = b._dtype if b._dtype is not None else "uint8"
    ts = typestr_of(key)
    return {
        "shape": b.shape,
        "typestr": ts,
        "descr": [("", ts)],
        "data": (b.ptr, bool(b._readonly)),
        "strides": None if b._strides is None else tuple(s * b._itemsize for s in b._strides),
        "version": 3,
        "stream": 1 if bs == NULL else <size_t>bs,
    }


def dlpack_of(DeviceBuffer b, stream, max_version, dl_device, copy):
    """DeviceBuffer.__dlpack__, following the array API's stream rules."""
    cdef CUstream cs
    cdef CUstream bs
    cdef DeviceBuffer src = b
    ensure_driver(ST)
    b._check_open()
    if dl_device is not None:
        dt, did = dl_device
        if int(dt) != kDLCUDA or int(did) != b.device.ordinal:
            raise BufferError(f"cannot export device {b.device.ordinal} memory to DLPack device "
                              f"{tuple(dl_device)} without a copy")
    if copy:
        src = b.copy()
    if stream is None:
        cs = CU_STREAM_LEGACY               # array API: None means the legacy default stream
    elif isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"__dlpack__ stream must be an int or None, not {type(stream).__name__}")
    elif stream == -1:
        cs = NULL                           # no synchronization asked
    elif stream == 0:
        raise ValueError("__dlpack__(stream=0) is not allowed for CUDA (ambiguous): pass 1 for the "
                         "legacy default stream, 2 for the per-thread default stream")
    elif stream == 1:
        cs = CU_STREAM_LEGACY
    elif stream == 2:
        cs = CU_STREAM_PER_THREAD
    elif stream < -1:
        raise ValueError(f"__dlpack__ stream must be -1, 1, 2 or a CUstream handle, not {stream}")
    else:
        cs = <CUstream><size_t>stream
    if not (stream is not None and stream == -1):
        order_stream(src, &bs)
        stream_after(cs, bs, src.ctx)
    versioned = max_version is not None and tuple(max_version)[0] >= 1
    return make_capsule(src, versioned, bool(copy))


def from_cai(obj, stream=None):
    return _from_cai(obj, stream)


def from_dlpack(obj, stream=None):
    return _from_dlpack(obj, stream)
