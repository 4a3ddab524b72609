"""The key of an op call: what every check of a family module reads, read in C.

Owns the signature ``_opcall``'s memo is keyed on (its module docstring says what is in
it): reading a call's arguments into facts (``pfact``: ``read_call``, ``read_arg``),
comparing them with a record's keys (``keys_match``), and both in one pass against one
record (``match_call``: the op's last record), all inline in ``_opkey.pxd`` for the hit path; and here, out of line, the tensor reader (``read_tensor``: tensors whose
class publishes DLPack's C exchange API, with the cache of those classes) and the making
of a record's keys (``make_keys``, on a miss). ``Op``, its records and the launch they
issue are ``_opcall``'s.
"""
from cpython.exc cimport PyErr_Clear
from libc.stdint cimport uintptr_t
from libc.string cimport memset

from barecuda._dlpack cimport bc_dlpack_exchange_api, BC_DLPACK_EXCHANGE_CAPSULE, kDLCUDA

cdef extern from "Python.h":
    int PyCapsule_IsValid(object o, const char *name)
    void *PyCapsule_GetPointer(object o, const char *name) except? NULL
    bint PyTuple_CheckExact(object o)

cdef extern from "structmember.h":      # (PyMemberDef: its own header before Python 3.12)
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member

__all__ = ["keyed_weight_class"]

cdef enum:
    NTYPES = 4      # tensor classes with the C exchange API remembered


# ------------------------------------------------------------------ the weight class (P_QW)
cdef PyObject *_qw_type = NULL        # kept by _qw_keep
cdef Py_ssize_t _qw_data = 0          # offsets of its `data`, `format` and `shape` slots
cdef Py_ssize_t _qw_fmt = 0
cdef Py_ssize_t _qw_shape = 0
cdef object _qw_keep = None


def keyed_weight_class(cls):
    """Key instances of ``cls`` (``QuantWeight``: ``__slots__`` ``data``, ``format``, ``shape``)
    in op calls by value: the format and shape, and the ``data`` DeviceBuffer as a buffer
    argument; launch arguments that are that buffer (or addresses in it) are mapped onto it."""
    global _qw_type, _qw_data, _qw_fmt, _qw_shape, _qw_keep
    offs = []
    for name in ("data", "format", "shape"):
        d = cls.__dict__.get(name)
        if type(d).__name__ != "member_descriptor":
            raise TypeError(f"keyed_weight_class: {cls.__name__}.{name} is not a __slots__ member")
        offs.append((<PyMemberDescrObject *>d).d_member.offset)
    _qw_keep = cls
    _qw_data, _qw_fmt, _qw_shape = offs
    _qw_type = <PyObject *>cls
    return cls


cdef inline PyObject *_slot(PyObject *o, Py_ssize_t off) noexcept:
    return (<PyObject **>(<char *>o + off))[0]


cdef int _read_weight(PyObject *o, pfact *f) noexcept:
    """P_QW, or P_NOKEY for an instance whose slots are unset, not a shape tuple, or whose
    data buffer is not an open DeviceBuffer."""
    cdef PyObject *data = _slot(o, _qw_data)
    cdef PyObject *fmt = _slot(o, _qw_fmt)
    cdef PyObject *shape = _slot(o, _qw_shape)
    if data == NULL or fmt == NULL or shape == NULL or not PyTuple_CheckExact(<object>shape):
        return P_NOKEY
    if read_arg(data, f) != P_BUF:
        return P_NOKEY
    f.obj = o
    f.qfmt = fmt
    f.qshape = shape
    f.kind = P_QW
    return P_QW


cdef int _int_tuple(PyObject *o) noexcept:
    cdef Py_ssize_t i
    for i in range(PyTuple_GET_SIZE(<object>o)):
        if not PyLong_CheckExact(<object>PyTuple_GET_ITEM(<object>o, i)):
            return P_NOKEY
    return P_VAL


# ------------------------------------------------------------------ tensor classes
cdef PyObject *_dlx_types[NTYPES]
cdef const bc_dlpack_exchange_api *_dlx_apis[NTYPES]
cdef int _ndlx = 0
cdef list _dlx_keep = []
cdef PyObject *_last_nodlx = NULL     # the last class seen without the API (skips the look-up)


cdef int read_tensor(PyObject *o, PyObject *t, pfact *f) noexcept:
    """See _opkey.pxd."""
    global _last_nodlx
    cdef const bc_dlpack_exchange_api *api
    cdef int i
    cdef int64_t n, last
    if t == _qw_type:
        return _read_weight(o, f)
    if t == <PyObject *>tuple:
        return _int_tuple(o)
    if t == _last_nodlx:
        return P_NOKEY
    api = _dlx_api(t)
    if api == NULL:
        _last_nodlx = t
        return P_NOKEY
    if api.dltensor_from_py_object_no_sync(<void *>o, &f.dl) != 0:
        PyErr_Clear()
        return P_NOKEY
    if f.dl.device.device_type != kDLCUDA or f.dl.ndim > MAXD or f.dl.ndim < 0:
        return P_NOKEY
    f.kind = P_DLX
    f.addr = <uint64_t><uintptr_t>f.dl.data + f.dl.byte_offset
    last = 0
    for i in range(f.dl.ndim):
        n = f.dl.shape[i]
        if n <= 0:
            last = -1
            break
        if f.dl.strides != NULL:
            if f.dl.strides[i] < 0:
                last = -1
                break
            last += (n - 1) * f.dl.strides[i]
        else:
            last = last * n + (n - 1) if i else n - 1
    f.span = 0 if last < 0 else <uint64_t>(last + 1) * ((f.dl.dtype.bits * f.dl.dtype.lanes + 7) // 8)
    return P_DLX


cdef int make_keys(const pfact *f, int n, pkey *keys, list keep) except -1:
    """See _opkey.pxd."""
    cdef int i, j
    cdef pkey *kk
    cdef DeviceBuffer b
    memset(keys, 0, n * sizeof(pkey))
    for j in range(n):
        kk = &keys[j]
        kk.kind = f[j].kind
        kk.same_obj = f[j].same_obj
        kk.same_addr = f[j].same_addr
        kk.low = <int>(f[j].addr & 15)
        kk.type = <PyObject *>Py_TYPE(<PyObject *>f[j].obj)
        keep.append(<object>kk.type)
        if kk.kind == P_VAL:
            kk.dtype = f[j].obj
            keep.append(<object>f[j].obj)
        elif kk.kind == P_BUF or kk.kind == P_QW:
            if kk.kind == P_QW:
                kk.qfmt = f[j].qfmt
                kk.qshape = f[j].qshape
                keep.extend((<object>f[j].qfmt, <object>f[j].qshape))
            b = <DeviceBuffer>f[j].buf
            if (b._shape is not None and type(b._shape) is not tuple) or \
                    (b._strides is not None and type(b._strides) is not tuple):
                return 1
            kk.dtype = <PyObject *>b._dtype
            kk.shape = <PyObject *>b._shape
            kk.strides = <PyObject *>b._strides
            kk.device = b.device.ordinal
            kk.readonly = b._readonly
            keep.extend((b._dtype, b._shape, b._strides))
        elif kk.kind == P_DLX:
            kk.ndim = f[j].dl.ndim
            kk.dtcode = dlx_code(&f[j].dl)
            kk.device = f[j].dl.device.device_id
            kk.has_strides = f[j].dl.strides != NULL
            for i in range(kk.ndim):
                kk.dims[i] = f[j].dl.shape[i]
                kk.strd[i] = f[j].dl.strides[i] if kk.has_strides else 0
    return 0


cdef const bc_dlpack_exchange_api *_dlx_api(PyObject *t) noexcept:
    """The C exchange API of tensor class t, or NULL: the class publishes it itself, or is
    torch.Tensor (a subclass such as Parameter is not keyed: its own rules, e.g.
    requires_grad, are the Python path's to apply)."""
    cdef int i
    for i in range(_ndlx):
        if _dlx_types[i] == t:
            return _dlx_apis[i]
    if _ndlx >= NTYPES:
        return NULL
    try:
        if _dlx_remember(t):
            return _dlx_apis[_ndlx - 1]
    except BaseException:
        PyErr_Clear()
    return NULL


cdef int _dlx_remember(PyObject *t) except -1:
    """1 when class t has the C exchange API (then the last entry of the cache), else 0."""
    global _ndlx
    cdef const bc_dlpack_exchange_api *api
    tp = <object>t
    own = "__dlpack_c_exchange_api__" in tp.__dict__
    if not own and (getattr(tp, "__module__", None), getattr(tp, "__qualname__", None)) != ("torch", "Tensor"):
        return 0
    cap = getattr(tp, "__dlpack_c_exchange_api__", None)
    if cap is None or not PyCapsule_IsValid(cap, BC_DLPACK_EXCHANGE_CAPSULE):
        return 0
    api = <const bc_dlpack_exchange_api *>PyCapsule_GetPointer(cap, BC_DLPACK_EXCHANGE_CAPSULE)
    if api.version.major != 1 or api.dltensor_from_py_object_no_sync == NULL:
        return 0
    _dlx_keep.append((<object>t, cap))
    _dlx_types[_ndlx] = t
    _dlx_apis[_ndlx] = api
    _ndlx += 1
    return 1
