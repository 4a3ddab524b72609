"""Interop with other libraries' device arrays.

Owns: :func:`as_device_buffer`, and ``pointer_of`` -- the one resolver of pointer-like
arguments the launch packer and plan binding use (torch/cupy tensors by exact type,
CAI, DLPack, int addresses, DeviceBuffers) -- with ``tensor_pointer`` (the launch's
torch/CuPy fast path) and ``array_of`` (whole arrays, for NCCL and copies). The two
exchange protocols themselves (DLPack and CUDA Array Interface v3, import and
export) are _exchange's.

The producer's stream is honoured by ONE rule, the same for launch, bind and wrap
(docs/interop.md): DLPack producers are handed our consumer stream through
``__dlpack__(stream=...)``; a CAI v3 'stream' entry makes the consumer stream wait for
it through an event; torch/cupy tensors read directly make the consumer stream wait
for the library's current stream through an event. Nothing blocks the host.
"""

__all__ = ["as_device_buffer"]
from cpython.pycapsule cimport PyCapsule_IsValid, PyCapsule_GetPointer, PyCapsule_CheckExact
from cpython.ref cimport PyObject
from cpython.object cimport PyTypeObject, Py_TYPE
from libc.stdint cimport intptr_t
from cpython.exc cimport PyErr_Occurred
import sys

from barecuda._abi cimport *
from barecuda._errors cimport bc_state_t
from barecuda._loader cimport runtime_state, ensure_driver
from barecuda._device cimport Device, device_at
from barecuda._stream cimport stream_handle, stream_after
from barecuda._dlpack cimport *
from barecuda._dtype cimport dtype_info
from barecuda._buffer cimport DeviceBuffer, make_view, check_usable, note_use
from barecuda._exchange cimport _dl_capsule, _dl_tensor, _cai_dict, _cai_wait, _from_dlpack, _from_cai

cdef bc_state_t *ST = runtime_state()


# --------------------------------------------------------------- public API
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


cdef DeviceBuffer as_device(object obj, object stream):
    cdef const bc_dlpack_exchange_api *api
    if type(obj) is DeviceBuffer:
        return <DeviceBuffer>obj
    if _fast_kind(type(obj), &api) != FAST_NONE and _FAST_NAMES.get(
            (getattr(type(obj), "__module__", None), getattr(type(obj), "__qualname__", None))):
        return _tensor_view(obj, stream)            # torch / CuPy
    if _is_device_array(obj):
        return as_device_buffer(obj, stream=stream)
    return None


cdef DeviceBuffer _tensor_view(object obj, object stream):
    """A view of a torch/CuPy tensor for a copy, read by array_of (no DLPack capsule, no
    CAI dict): contiguous only (copies need it), ordered on `stream` by the one rule."""
    cdef bc_array a
    cdef CUstream h = NULL
    ensure_driver(ST)
    if stream is not None:
        stream_handle(stream, &h)
    name = array_of(obj, h, &a)
    dev = device_at(a.ordinal)
    order_array(obj, &a, dev, h)
    cdef DeviceBuffer v = make_view(a.ptr, a.nbytes, dev, h, stream, obj, None)
    info = dtype_info(name) if name is not None else None
    if info is not None and a.nbytes % <size_t>info[0] == 0:
        v._dtype, v._itemsize = name, info[0]
        v._shape = tuple(int(n) for n in obj.shape)
    v._readonly = a.readonly
    return v


def as_device_buffer(obj, *, stream=None):
    """A zero-copy DeviceBuffer view of another library's device array.

    Accepts a DeviceBuffer (returned as is), anything with ``__dlpack__`` on a CUDA
    device (PyTorch, CuPy, JAX...), anything with ``__cuda_array_interface__``, a
    DLPack capsule, or a CAI dict. The view keeps the producer alive and never frees
    the memory; when the memory is one of our own buffers' (a re-import, a CAI dict
    or another library's wrapper describing it), the view also pins that owner.
    ``stream`` is where the view will be used: the producer's pending work is
    ordered before work queued there by the rule of docs/interop.md. Strided
    (non-contiguous) arrays become strided views: usable as kernel pointers, refused
    by copies; read-only arrays become read-only views.
    """
    if type(obj) is DeviceBuffer:
        return obj
    if PyCapsule_CheckExact(obj):
        return _from_dlpack(obj, stream)
    if isinstance(obj, dict):
        try:
            return _from_cai(obj, stream)
        except KeyError as e:
            raise TypeError(f"not a __cuda_array_interface__ dict: missing {e}") from None
    f = getattr(obj, "__dlpack_device__", None)
    if f is not None and hasattr(obj, "__dlpack__"):
        if int(f()[0]) in (kDLCUDA, kDLCUDAManaged):
            return _from_dlpack(obj, stream)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(obj, stream)
    raise TypeError(f"{type(obj).__name__} is not a device array (no __cuda_array_interface__ "
                    "and no CUDA __dlpack__); use to_device() for host data")


# ------------------------------------------------------- pointer_of (launch, bind)
# Exact classes read without DLPack/CAI, recognised by (module, qualname) the first
# time an object of that exact type is seen (torch/cupy are never imported here).
# Where the class publishes DLPack's C exchange API (PyTorch 2.10+; any class that
# defines `__dlpack_c_exchange_api__` itself), its tensors are read in C: a non-owning
# DLTensor and the library's current stream, no Python call at all (FAST_DLX).
# Otherwise through the cheapest methods (t.data_ptr(), t.get_device(); a.data.ptr).
cdef enum:
    FAST_NONE = 0
    FAST_TORCH = 1
    FAST_CUPY = 2
    FAST_DLX = 3
    FAST_SLOTS = 4

_FAST_NAMES = {
    ("torch", "Tensor"): FAST_TORCH,
    ("torch.nn.parameter", "Parameter"): FAST_TORCH,
    ("cupy", "ndarray"): FAST_CUPY,
    ("cupy._core.core", "ndarray"): FAST_CUPY,
}
cdef dict _fast_cache = {}          # exact type -> (FAST_* kind, exchange API capsule or None)
# (other classes are not cached: a strong reference would keep a user's local class,
# and whatever it closes over, alive forever)
# The recognised classes again as borrowed pointers (_fast_cache keeps them and their
# capsules alive), so the hot path compares a type pointer before any dict lookup.
cdef PyObject *_fast_types[FAST_SLOTS]
cdef int _fast_kinds[FAST_SLOTS]
cdef const bc_dlpack_exchange_api *_fast_apis[FAST_SLOTS]
cdef int _nfast = 0
# The libraries' "current stream" functions, looked up once (their modules are loaded).
cdef object _torch_stream_fn = None
cdef object _cupy_stream_fn = None
# CuPy's `cdef intptr_t get_current_stream_ptr() except? -1`, by its __pyx_capi__ signature
ctypedef intptr_t (*_cupy_stream_ptr_t)() noexcept
cdef const char *_CUPY_STREAM_SIG = b"intptr_t (void)"
cdef _cupy_stream_ptr_t _cupy_stream_c = NULL


cdef inline int _fast_kind(type t, const bc_dlpack_exchange_api **api) except -1:
    cdef int i
    for i in range(_nfast):
        if _fast_types[i] == <PyObject *>t:
            api[0] = _fast_apis[i]
            return _fast_kinds[i]
    return _fast_kind_slow(t, api)


cdef object _exchange_capsule(type t, bint named):
    """The class's valid `__dlpack_c_exchange_api__` capsule (inherited only for the
    named classes: a subclass of another library's tensor keeps the protocol path)."""
    cdef const bc_dlpack_exchange_api *api
    cap = getattr(t, "__dlpack_c_exchange_api__", None) if named else t.__dict__.get("__dlpack_c_exchange_api__")
    if cap is None or not PyCapsule_IsValid(cap, BC_DLPACK_EXCHANGE_CAPSULE):
        return None
    api = <const bc_dlpack_exchange_api *>PyCapsule_GetPointer(cap, BC_DLPACK_EXCHANGE_CAPSULE)
    if api.version.major != 1 or api.dltensor_from_py_object_no_sync == NULL or api.current_work_stream == NULL:
        return None
    return cap


cdef bint _is_library_class(type t, str module, str qualname):
    """t is the class its module and qualified name say, as the library's loaded module
    holds it (sys.modules; nothing imported): a class that only names itself
    torch.Tensor or cupy.ndarray is not read as one."""
    obj = sys.modules.get(module)
    for part in qualname.split("."):
        if obj is None:
            return False
        obj = getattr(obj, part, None)
    return obj is t


cdef int _fast_kind_slow(type t, const bc_dlpack_exchange_api **api) except -1:
    global _nfast, _torch_stream_fn, _cupy_stream_fn, _cupy_stream_c
    cdef int k
    api[0] = NULL
    e = _fast_cache.get(t)
    if e is None:
        name = (getattr(t, "__module__", None), getattr(t, "__qualname__", None))
        k = _FAST_NAMES.get(name, FAST_NONE)
        if k != FAST_NONE and not _is_library_class(t, name[0], name[1]):
            k = FAST_NONE                   # named like torch's/CuPy's class, but not it
        cap = _exchange_capsule(t, k != FAST_NONE)
        if cap is not None:
            k = FAST_DLX
        if k == FAST_NONE:
            return FAST_NONE
        e = _fast_cache[t] = (k, cap)
        # a newly seen class (a library loaded again): look its stream function up again
        if k == FAST_TORCH:
            _torch_stream_fn = None
        elif k == FAST_CUPY:
            _cupy_stream_fn, _cupy_stream_c = None, NULL
        if _nfast < FAST_SLOTS:
            _fast_types[_nfast] = <PyObject *>t
            _fast_kinds[_nfast] = k
            _fast_apis[_nfast] = NULL if cap is None else \
                <const bc_dlpack_exchange_api *>PyCapsule_GetPointer(cap, BC_DLPACK_EXCHANGE_CAPSULE)
            _nfast += 1
    if e[1] is not None:
        api[0] = <const bc_dlpack_exchange_api *>PyCapsule_GetPointer(e[1], BC_DLPACK_EXCHANGE_CAPSULE)
    return <int>e[0]


# CuPy arrays: a.data (a MemoryPointer), its .ptr and .device_id, through the classes'
# data descriptors (C-level properties in CuPy), found once per class: a getter call
# each, no attribute lookup. Not a data descriptor (an instance attribute): getattr.
cdef tuple _nd = (None, None)           # the CuPy array class seen last, its 'data' descriptor
cdef tuple _mp = (None, None, None)     # the MemoryPointer class seen last, its ptr, device_id


cdef object _data_descriptor(type t, str name):
    """The data descriptor `name` resolves to on instances of t (first in the MRO), or None."""
    for base in t.__mro__:
        if name in vars(base):
            d = vars(base)[name]
            dt = <PyTypeObject *>Py_TYPE(d)
            return d if dt.tp_descr_get != NULL and dt.tp_descr_set != NULL else None
    return None


cdef inline object _get(object obj, object descr, str name):
    if descr is not None:
        return (<PyTypeObject *>Py_TYPE(descr)).tp_descr_get(descr, obj, type(obj))
    return getattr(obj, name)


cdef int _cupy_read(object obj, CUdeviceptr *ptr, int *ordinal) except -1:
    """A CuPy array's address and device (obj.data.ptr, obj.data.device_id)."""
    global _nd, _mp
    nd, mp = _nd, _mp                   # locals: a getter may run code that replaces them
    if type(obj) is not nd[0]:
        nd = _nd = (type(obj), _data_descriptor(type(obj), "data"))
    mem = _get(obj, nd[1], "data")
    if type(mem) is not mp[0]:
        mp = _mp = (type(mem), _data_descriptor(type(mem), "ptr"), _data_descriptor(type(mem), "device_id"))
    ordinal[0] = _get(mem, mp[2], "device_id")
    ptr[0] = <CUdeviceptr>_get(mem, mp[1], "ptr")
    return 0


cdef int _wrong_device(object obj, int have, Device dev) except -1:
    raise ValueError(f"{type(obj).__name__} is on device {have} but it is used on device "
                     f"{dev.ordinal}; move it first (e.g. t.to('cuda:{dev.ordinal}'))")


cdef object _stream_fn(object obj, int kind):
    """The function giving the library's current raw stream (torch: of a device); CuPy's
    C get_current_stream_ptr (cdef in CuPy 14: its module's __pyx_capi__) where it has one."""
    global _torch_stream_fn, _cupy_stream_fn, _cupy_stream_c
    mod = sys.modules.get(type(obj).__module__.partition(".")[0])
    if kind == FAST_TORCH:
        f = getattr(getattr(mod, "_C", None), "_cuda_getCurrentRawStream", None)
        if f is None:
            f = lambda ordinal: mod.cuda.current_stream(ordinal).cuda_stream
        _torch_stream_fn = f
    else:
        smod = getattr(mod.cuda, "stream", None)
        cap = getattr(smod, "__pyx_capi__", {}).get("get_current_stream_ptr")
        if cap is not None and PyCapsule_IsValid(cap, _CUPY_STREAM_SIG):
            _cupy_stream_c = <_cupy_stream_ptr_t>PyCapsule_GetPointer(cap, _CUPY_STREAM_SIG)
            f = cap                         # kept alive with the pointer
        else:
            _cupy_stream_c = NULL
            f = getattr(smod, "get_current_stream_ptr", None)
            if f is None:
                get = mod.cuda.get_current_stream
                f = lambda: get().ptr
        _cupy_stream_fn = f
    return f


cdef int _producer_stream(object obj, int kind, int ordinal, CUstream *out) except -1:
    """The library's current stream on `ordinal` (where its pending work on obj is
    queued), in out (NULL: the legacy default stream)."""
    cdef intptr_t c
    if kind == FAST_TORCH:
        f = _torch_stream_fn if _torch_stream_fn is not None else _stream_fn(obj, kind)
        h = f(ordinal)
    else:
        f = _cupy_stream_fn if _cupy_stream_fn is not None else _stream_fn(obj, kind)
        if _cupy_stream_c != NULL:
            c = _cupy_stream_c()
            if c == -1 and PyErr_Occurred():        # its `except? -1`
                return -1
            out[0] = <CUstream>c
            return 0
        h = f()
    out[0] = <CUstream><size_t>h
    return 0


cdef int _order_tensor(object obj, int kind, const bc_dlpack_exchange_api *api, int ordinal, CUstream consumer,
                       Device dev, bc_stream_memo *memo) except -1:
    """The stream rule for a tensor read directly. One launch's tensors of a library and
    device share its current stream (no user code runs between one launch's arguments):
    with the packer's memo (bc_stream_memo, _interop.pxd) only the first orders."""
    cdef const void *source = <const void *>api if api != NULL else <const void *><size_t>kind
    cdef void *h = NULL
    cdef CUstream producer = NULL
    # (the callers with a memo have checked it: this runs for a launch's first tensor)
    if api != NULL:
        if api.current_work_stream(kDLCUDA, ordinal, &h) != 0:
            return -1                       # the library set the exception
        _order_after_producer(<CUstream>h, consumer, dev)
    else:
        _producer_stream(obj, kind, ordinal, &producer)
        _order_after_producer(producer, consumer, dev)
    if memo != NULL:
        memo.source = source
        memo.ordinal = ordinal
    return 0


cdef inline int _order_after_producer(CUstream producer, CUstream consumer, Device dev) except -1:
    if producer == NULL:
        producer = CU_STREAM_LEGACY
    if producer == (CU_STREAM_LEGACY if consumer == NULL else consumer):
        return 0                            # the same stream (stream_after's own test, without the call)
    return stream_after(consumer, producer, dev.ctx)


cdef int _not_on_gpu(object obj, int device_type, Device dev) except -1:
    where = "on the CPU" if device_type == kDLCPU else f"in DLPack device type {device_type} memory"
    raise ValueError(f"the {type(obj).__name__} is {where}, not on device {dev.ordinal}; move it first "
                     f"(e.g. t.to('cuda:{dev.ordinal}'))")


cdef int _torch_device(object obj, Device dev) except -1:
    cdef int have = obj.get_device()
    if have < 0:
        raise ValueError(f"the tensor is on the CPU, not on device {dev.ordinal}; move it first "
                         f"(t.to('cuda:{dev.ordinal}'))")
    if have != dev.ordinal:
        _wrong_device(obj, have, dev)
    return have


cdef int tensor_pointer(object obj, Device dev, CUstream consumer, bc_stream_memo *memo,
                        CUdeviceptr *out) except -1:
    """See _interop.pxd."""
    cdef int kind
    cdef int have
    cdef CUdeviceptr p
    cdef DLTensor dl
    cdef const bc_dlpack_exchange_api *api = NULL
    cdef PyObject *t = <PyObject *>Py_TYPE(obj)
    cdef int i
    # _fast_kind with a borrowed type pointer (no reference traffic) and no error test on a hit
    for i in range(_nfast):
        if _fast_types[i] == t:
            kind = _fast_kinds[i]
            api = _fast_apis[i]
            break
    else:
        kind = _fast_kind_slow(type(obj), &api)
    if kind == FAST_DLX:
        if api.dltensor_from_py_object_no_sync(<void *>obj, &dl) != 0:
            return -1                       # the library set the exception
        have = dl.device.device_id
        if (dl.device.device_type != kDLCUDA and dl.device.device_type != kDLCUDAManaged) or have != dev.ordinal:
            return -2
        if memo == NULL or memo.source != <const void *>api or memo.ordinal != have:
            _order_tensor(obj, kind, api, have, consumer, dev, memo)
        out[0] = <CUdeviceptr>dl.data + dl.byte_offset
        return 1
    if kind == FAST_TORCH:
        have = obj.get_device()
        p = <CUdeviceptr>obj.data_ptr() if have == dev.ordinal else 0
    elif kind == FAST_CUPY:
        _cupy_read(obj, &p, &have)
    else:
        return 0
    if have != dev.ordinal:
        return -2
    if memo == NULL or memo.source != <const void *><size_t>kind or memo.ordinal != have:
        _order_tensor(obj, kind, NULL, have, consumer, dev, memo)
    out[0] = p
    return 1


cdef int _tensor_refused(object obj, Device dev) except -1:
    """Raise the error tensor_pointer's -2 stands for (a tensor not on `dev`)."""
    cdef DLTensor dl
    cdef CUdeviceptr p
    cdef const bc_dlpack_exchange_api *api = NULL
    cdef int have, kind = _fast_kind(type(obj), &api)
    if kind == FAST_TORCH:
        have = _torch_device(obj, dev)      # raises for the CPU and another device
    elif kind == FAST_CUPY:
        _cupy_read(obj, &p, &have)
    else:
        if api.dltensor_from_py_object_no_sync(<void *>obj, &dl) != 0:
            return -1
        if dl.device.device_type != kDLCUDA and dl.device.device_type != kDLCUDAManaged:
            _not_on_gpu(obj, dl.device.device_type, dev)
        have = dl.device.device_id
    return _wrong_device(obj, have, dev)


cdef int pointer_of(object obj, Device dev, CUstream consumer, CUdeviceptr *out) except -1:
    """See _interop.pxd and docs/interop.md."""
    cdef type t = type(obj)
    cdef int r
    cdef CUdeviceptr p
    cdef DLTensor *tensor
    cdef void *mt = NULL
    cdef bint versioned = False
    if t is DeviceBuffer:
        check_usable(<DeviceBuffer>obj)
        if (<DeviceBuffer>obj).device is not None and (<DeviceBuffer>obj).device.ordinal != dev.ordinal:
            _wrong_device(obj, (<DeviceBuffer>obj).device.ordinal, dev)
        note_use(<DeviceBuffer>obj, consumer)
        out[0] = (<DeviceBuffer>obj).ptr
        return 0
    if t is int:
        if obj < 0 or obj > <object>(<CUdeviceptr>-1):
            raise ValueError(f"a device address must be in [0, 2**64), got {obj}")
        out[0] = <CUdeviceptr>obj
        return 0
    r = tensor_pointer(obj, dev, consumer, NULL, out)
    if r != 0:
        return 0 if r == 1 else _tensor_refused(obj, dev)
    if PyCapsule_CheckExact(obj):
        raise TypeError("a DLPack capsule cannot be a kernel argument (it would be consumed); "
                        "pass the array, or as_device_buffer(capsule)")
    if isinstance(obj, dict):
        raise TypeError("a dict is not a device array argument; pass the array, or "
                        "as_device_buffer(cai_dict)")
    f = getattr(obj, "__dlpack_device__", None)
    if f is not None and hasattr(obj, "__dlpack__"):
        where = f()
        if int(where[0]) in (kDLCUDA, kDLCUDAManaged):
            if int(where[1]) != dev.ordinal:
                _wrong_device(obj, int(where[1]), dev)
            cap = _dl_capsule(obj, consumer)
            tensor = _dl_tensor(cap, &mt, &versioned, False)
            out[0] = <CUdeviceptr>tensor.data + tensor.byte_offset
            # Not consumed: the capsule's destructor calls the deleter; obj keeps the memory.
            return 0
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        cai = _cai_dict(cai)
        data = cai["data"]
        p = 0 if data is None or data[0] is None else <CUdeviceptr>data[0]
        _cai_wait(cai, consumer, dev.ctx)
        out[0] = p
        return 0
    raise TypeError(f"{type(obj).__name__} is not a device pointer (DeviceBuffer, int address, "
                    "torch/cupy array, or an object with __cuda_array_interface__ / CUDA __dlpack__)")


# ------------------------------------------------------- array_of (whole-array consumers: NCCL)
cdef dict _torch_dtype_names = {}     # torch.dtype -> name ("float32", "bfloat16", ...)


cdef str _torch_dtype_name(object d):
    name = _torch_dtype_names.get(d)
    if name is None:
        name = _torch_dtype_names[d] = str(d).rpartition(".")[2]
    return name


cdef int _not_contiguous(object obj) except -1:
    raise ValueError(f"{type(obj).__name__} is not contiguous; a whole-array operation needs contiguous "
                     "memory (t.contiguous(), cupy.ascontiguousarray(a))")


cdef object array_of(object obj, CUstream consumer, bc_array *out):
    """See _interop.pxd. Reads only (no driver call on the DeviceBuffer/torch/CuPy
    paths); order_array() applies the stream rule."""
    cdef type t = type(obj)
    cdef int kind
    cdef DeviceBuffer b
    cdef const bc_dlpack_exchange_api *api = NULL
    out.readonly = False
    if t is DeviceBuffer or isinstance(obj, DeviceBuffer):
        b = <DeviceBuffer>obj
        check_usable(b)
        if b._strided:
            _not_contiguous(obj)
        out.kind = FAST_NONE
        out.ptr, out.nbytes, out.ordinal, out.readonly = b.ptr, b.nbytes, b.device.ordinal, b._readonly
        return b._dtype
    kind = _fast_kind(t, &api)
    if kind == FAST_DLX:                    # size and type: through the named libraries' methods
        kind = _FAST_NAMES.get((getattr(t, "__module__", None), getattr(t, "__qualname__", None)), FAST_NONE)
    out.kind = kind
    if kind == FAST_TORCH:
        out.ordinal = obj.get_device()
        if out.ordinal < 0:
            raise ValueError("the tensor is on the CPU; move it to a GPU first (t.to('cuda'))")
        if not obj.is_contiguous():
            _not_contiguous(obj)
        out.ptr = <CUdeviceptr>obj.data_ptr()
        out.nbytes = <size_t>obj.numel() * <size_t>obj.element_size()
        return _torch_dtype_name(obj.dtype)
    if kind == FAST_CUPY:
        if not obj.flags.c_contiguous:
            _not_contiguous(obj)
        _cupy_read(obj, &out.ptr, &out.ordinal)
        out.nbytes = obj.nbytes
        return obj.dtype.name
    # Other arrays: through the protocols (DLPack orders the consumer stream itself).
    b = as_device_buffer(obj, stream=None if consumer == NULL else <size_t>consumer)
    out.kind = FAST_NONE
    if b._strided:
        _not_contiguous(obj)
    out.ptr, out.nbytes, out.ordinal, out.readonly = b.ptr, b.nbytes, b.device.ordinal, b._readonly
    return b._dtype


cdef int order_array(object obj, const bc_array *a, Device dev, CUstream consumer) except -1:
    """See _interop.pxd."""
    if type(obj) is DeviceBuffer or isinstance(obj, DeviceBuffer):
        note_use(<DeviceBuffer>obj, consumer)
    elif a.kind == FAST_TORCH or a.kind == FAST_CUPY:
        _order_tensor(obj, a.kind, NULL, a.ordinal, consumer, dev, NULL)
    return 0
