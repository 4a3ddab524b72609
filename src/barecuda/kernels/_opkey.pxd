"""The key of an op call (see _opkey.pyx): one argument as read from a call (`pfact`), as
recorded (`pkey`), and the readers and the comparison the op's hit path runs. Those are
inline here, so that `_opcall`'s hit reads and matches a call without a call across
modules; `_opkey` itself owns the tensor reader (it keeps the cache of tensor classes)
and the making of keys (a miss)."""
from cpython.object cimport PyObject, PyTypeObject
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM
from libc.stdint cimport uint64_t, int64_t

from barecuda._buffer cimport DeviceBuffer, KIND_CLOSED
from barecuda._dlpack cimport DLTensor

cdef extern from "Python.h":
    PyTypeObject *Py_TYPE(PyObject *o)
    int PyObject_RichCompareBool(object a, object b, int op) except -1
    int Py_EQ
    bint PyFloat_CheckExact(object o)
    double PyFloat_AS_DOUBLE(object o)
    bint PyLong_CheckExact(object o)
    bint PyUnicode_CheckExact(object o)

cdef enum:
    MAXD = 8        # dimensions of a keyed tensor

cdef enum:          # parameter kinds
    P_NONE = 0      # None
    P_BUF = 1       # DeviceBuffer (open)
    P_DLX = 2       # tensor read through DLPack's C exchange API
    P_VAL = 3       # exact bool / int / float / str, keyed by value
    P_NOKEY = 4     # anything else: the call is not keyed (Python path)
    P_QW = 5        # a registered weight object (QuantWeight): its format and shape by value, its
                    # data buffer as a P_BUF (launch arguments map onto that buffer)


ctypedef struct pfact:       # one argument as read from a call (borrowed pointers)
    int kind
    PyObject *obj
    PyObject *buf            # P_BUF: obj; P_QW: its data buffer (a DeviceBuffer)
    PyObject *qfmt           # P_QW: its format (str) and shape (tuple)
    PyObject *qshape
    uint64_t addr
    uint64_t span            # bytes from addr the array covers (derived-pointer mapping)
    int same_obj             # first earlier array argument that is the same object, else -1
    int same_addr            # first earlier array argument at the same address, else -1
    DLTensor dl              # P_DLX


ctypedef struct pkey:        # one argument as recorded (references held by the record's `keep`)
    # (what a hit compares for None / values / DeviceBuffers first: one cache line a key)
    int kind
    int low                  # address & 15
    int readonly
    int device
    int same_obj
    int same_addr
    PyObject *dtype          # P_BUF: the buffer's dtype object; P_VAL: the value
    PyObject *shape
    PyObject *strides
    PyObject *type
    PyObject *qfmt           # P_QW
    PyObject *qshape
    int ndim                 # P_DLX
    int dtcode
    int has_strides
    int64_t dims[MAXD]
    int64_t strd[MAXD]


# _read_arg of anything but a DeviceBuffer, None or a keyed scalar: a tuple of exact ints
# (P_VAL), the registered weight class (P_QW), a tensor of a class publishing DLPack's C
# exchange API (P_DLX), else P_NOKEY. t is o's type.
cdef int read_tensor(PyObject *o, PyObject *t, pfact *f) noexcept

# The keys of the n arguments read into f, into keys[0..n) (the objects they point to
# appended to keep, which the record holds); 1 when an argument cannot be recorded.
cdef int make_keys(const pfact *f, int n, pkey *keys, list keep) except -1


cdef inline int read_arg(PyObject *o, pfact *f) noexcept:
    """Fill f for argument o; returns its kind (P_NOKEY for what cannot be keyed). The
    common kinds inline (exact type pointers, no reference traffic); tensors out of line."""
    cdef PyObject *t = <PyObject *>Py_TYPE(o)
    f.obj = o
    f.buf = o
    f.addr = 0
    f.span = 0
    if t == <PyObject *>DeviceBuffer:
        if (<DeviceBuffer>o)._kind == KIND_CLOSED or (<DeviceBuffer>o).ptr == 0:
            f.kind = P_NOKEY
        else:
            f.kind = P_BUF
            f.addr = (<DeviceBuffer>o).ptr
            f.span = (<DeviceBuffer>o).nbytes
        return f.kind
    if o == <PyObject *>None:
        f.kind = P_NONE
    elif t == <PyObject *>float or t == <PyObject *>int or t == <PyObject *>bool or t == <PyObject *>str:
        f.kind = P_VAL
    else:
        f.kind = read_tensor(o, t, f)
    return f.kind


cdef inline int read_call(PyObject **vals, int n, int stream_at, pfact *f) noexcept:
    """Read the n arguments vals (argument stream_at is the stream: not keyed) and their
    alias patterns into f; 0, or -1 when the call cannot be keyed."""
    cdef int i, j, ki, kj
    for i in range(n):
        if i == stream_at:                  # passed on to Kernel.launch, which checks it; no check reads it
            f[i].kind = P_NONE
            f[i].obj = vals[i]
            f[i].addr = 0
        elif read_arg(vals[i], &f[i]) == P_NOKEY:
            return -1
        f[i].same_obj = -1
        f[i].same_addr = -1
        ki = f[i].kind
        if ki == P_BUF or ki == P_DLX or ki == P_QW:
            for j in range(i):
                kj = f[j].kind
                if kj == P_BUF or kj == P_DLX or kj == P_QW:
                    if f[i].same_obj < 0 and f[j].obj == f[i].obj:
                        f[i].same_obj = j
                    if f[i].same_addr < 0 and f[j].addr == f[i].addr:
                        f[i].same_addr = j
    return 0


cdef inline int dlx_code(const DLTensor *d) noexcept:
    return (d.dtype.code << 24) | (d.dtype.bits << 16) | d.dtype.lanes


cdef inline bint _int_eq(PyObject *x, PyObject *y) noexcept:
    if not (PyLong_CheckExact(<object>x) and PyLong_CheckExact(<object>y)):
        return False
    try:
        return PyObject_RichCompareBool(<object>x, <object>y, Py_EQ) == 1
    except BaseException:
        return False


cdef inline bint _tuples_eq(PyObject *a, PyObject *b) noexcept:
    """Two shape/stride tuples (or None) equal; a and b are exact tuples or None."""
    cdef Py_ssize_t i, n
    cdef PyObject *x
    cdef PyObject *y
    if a == b:
        return True
    if a == <PyObject *>None or b == <PyObject *>None:
        return False
    n = PyTuple_GET_SIZE(<object>a)
    if n != PyTuple_GET_SIZE(<object>b):
        return False
    for i in range(n):
        x = PyTuple_GET_ITEM(<object>a, i)
        y = PyTuple_GET_ITEM(<object>b, i)
        if x != y and not _int_eq(x, y):
            return False
    return True


cdef inline bint _val_eq(PyObject *a, PyObject *b) noexcept:
    """Two keyed values (exact bool/int/float/str) are the same value of the same type."""
    if a == b:
        return True
    if Py_TYPE(a) != Py_TYPE(b):
        return False
    if PyFloat_CheckExact(<object>a):
        return PyFloat_AS_DOUBLE(<object>a) == PyFloat_AS_DOUBLE(<object>b)
    try:
        return PyObject_RichCompareBool(<object>a, <object>b, Py_EQ) == 1
    except BaseException:
        return False


cdef inline bint _same_dtype(PyObject *a, PyObject *b) noexcept:
    """A buffer's dtype key against a recorded one: the same object, or equal names."""
    return a == b or (PyUnicode_CheckExact(<object>a) and _val_eq(a, b))


cdef inline bint _key_eq(const pkey *k, const pfact *f) noexcept:
    """Array argument f (kind already equal to k's) is what k recorded: alias pattern,
    address mod 16, then its dtype/shape/strides/device/read-only (or the tensor's)."""
    cdef int d
    cdef DeviceBuffer b
    if k.same_obj != f.same_obj or k.same_addr != f.same_addr or k.low != <int>(f.addr & 15):
        return False
    if k.kind == P_BUF or k.kind == P_QW:
        if k.kind == P_QW and not (_val_eq(k.qfmt, f.qfmt) and _tuples_eq(k.qshape, f.qshape)):
            return False
        b = <DeviceBuffer>f.buf
        return (_same_dtype(<PyObject *>b._dtype, k.dtype) and b.device.ordinal == k.device
                and b._readonly == k.readonly
                and _tuples_eq(<PyObject *>b._shape, k.shape)
                and _tuples_eq(<PyObject *>b._strides, k.strides))
    # P_DLX
    if (<PyObject *>Py_TYPE(<PyObject *>f.obj) != k.type or f.dl.ndim != k.ndim
            or dlx_code(&f.dl) != k.dtcode
            or f.dl.device.device_id != k.device or (f.dl.strides != NULL) != k.has_strides):
        return False
    for d in range(k.ndim):
        if f.dl.shape[d] != k.dims[d]:
            return False
        if k.has_strides and f.dl.strides[d] != k.strd[d]:
            return False
    return True


cdef inline bint keys_match(const pkey *keys, int n, const pfact *f) noexcept:
    """The n arguments read into f (read_call) are what keys[0..n) recorded."""
    cdef int i
    cdef const pkey *k
    for i in range(n):
        k = &keys[i]
        if k.kind != f[i].kind:
            return False
        if k.kind == P_NONE:
            continue
        if k.kind == P_VAL:
            if not _val_eq(k.dtype, f[i].obj):
                return False
            continue
        if not _key_eq(k, &f[i]):
            return False
    return True


cdef inline bint match_call(const pkey *keys, int n, int stream_at, PyObject **vals, pfact *f) noexcept:
    """read_call and keys_match against one record in a single pass (the hit path's
    check of the op's last record): True exactly when read_call(vals) would key the call
    and keys_match(keys) would hold, with f filled as read_call fills it for the array
    arguments (what the issue reads). False also where it does not decide (a keyed tuple
    that is not the recorded object): the caller then runs read_call and keys_match."""
    cdef int i, j, kind
    cdef PyObject *o
    cdef PyObject *t
    for i in range(n):
        kind = keys[i].kind
        o = vals[i]
        f[i].obj = o
        f[i].addr = 0
        if i == stream_at or kind == P_NONE:     # (the stream's key is P_NONE: not keyed)
            f[i].kind = P_NONE
            if i != stream_at and o != <PyObject *>None:
                return False
            continue
        if kind == P_VAL:
            f[i].kind = P_VAL
            if o == keys[i].dtype:              # the recorded object (keyed values are immutable)
                continue
            t = <PyObject *>Py_TYPE(o)
            if not (t == <PyObject *>float or t == <PyObject *>int or t == <PyObject *>bool
                    or t == <PyObject *>str) or not _val_eq(keys[i].dtype, o):
                return False
            continue
        if read_arg(o, &f[i]) != kind:
            return False
        f[i].same_obj = -1
        f[i].same_addr = -1
        for j in range(i):
            if f[j].kind == P_BUF or f[j].kind == P_DLX or f[j].kind == P_QW:
                if f[i].same_obj < 0 and f[j].obj == o:
                    f[i].same_obj = j
                if f[i].same_addr < 0 and f[j].addr == f[i].addr:
                    f[i].same_addr = j
        if not _key_eq(&keys[i], &f[i]):
            return False
    return True
