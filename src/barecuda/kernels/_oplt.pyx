"""The op path of a cuBLASLt matmul: ``matmul(..., backend="cublaslt")`` (and ``"auto"``
where it picks cuBLASLt) recorded and reissued like a kernel launch (see _opcall).

A cuBLASLt call is a library call, not a ``cuLaunchKernel``: the family function runs it
itself (``Matmul.run`` with the workspace of ``_matmul._lt_workspace``) and returns
``(Matmul, None, None, (a, b, c, alpha, beta, workspace), result)``. ``_opcall`` then
records the call under its signature as it records a launch (the same keys, the same
result mapping, new outputs made again by the same allocation call), with an ``LtCall``
for the issue: the ``_cublaslt.Matmul`` (descriptors and the heuristic's algorithm of this
geometry; held weakly: ``_matmul._lt_cache`` owns it), alpha and beta, where A, B and C/D
come from (an array argument or a new output), and the workspace and stream of the
recorded call (the workspace held weakly: ``_matmul._lt_ws`` owns it, one per (device,
stream)). A hit resolves the three addresses here, as the kernel hit does (a DeviceBuffer
noted as used on the stream, a tensor read through ``_interop.tensor_pointer`` with its
library's stream ordered before ours), and calls ``cublasLtMatmul`` through
``_cublaslt.issue``: a status other than success raises ``CublasLtError`` as
``Matmul.run`` does. The GIL is released around it only when launches release it
(``set_launch_releases_gil``), as a kernel hit.

What is not issued here (the Python path runs instead, with its own errors and results,
and records the call again): another stream than the recorded one (its workspace is
another; the Python path allocates it on first use), a Matmul or workspace gone (the
caches were cleared or evicted), a closed workspace or stream, a tensor the launch reader
does not take, and any call while barecuda's capture recorder is set (``Stream.capture``):
under capture the op behaves exactly as the Python path did (the workspace must exist
before capturing; see the ``matmul`` docstring).
"""
from cpython.object cimport PyObject, PyTypeObject
from cpython.weakref cimport PyWeakref_NewRef, PyWeakref_GetObject

from barecuda._abi cimport CUstream, CUdeviceptr
from barecuda._buffer cimport DeviceBuffer, KIND_CLOSED, note_use
from barecuda._stream cimport Stream, stream_handle
from barecuda._interop cimport tensor_pointer, bc_stream_memo
from barecuda._launch cimport capture_hook_t, capture_hook_slot, releases_gil_slot
from barecuda.kernels._opkey cimport P_BUF, P_DLX
from barecuda.kernels._cublaslt cimport Matmul, issue

cdef extern from "Python.h":
    PyTypeObject *Py_TYPE(PyObject *o)

__all__ = []

cdef capture_hook_t *_hook_slot = capture_hook_slot()     # _launch's switches, read on each hit
cdef bint *_gil_slot = releases_gil_slot()


cdef class LtCall:
    """See _oplt.pxd (no Python API)."""


cdef LtCall lt_call(object mm, object ws, object stream, int sa, int sb, int sc, object alpha, object beta):
    """See _oplt.pxd."""
    cdef LtCall c
    if type(mm) is not Matmul or type(ws) is not DeviceBuffer or type(alpha) is not float \
            or type(beta) is not float:
        return None
    c = LtCall.__new__(LtCall)
    stream_handle(stream, &c.stream)
    c.mm = PyWeakref_NewRef(mm, None)
    c.ws = PyWeakref_NewRef(ws, None)
    c.alpha = alpha
    c.beta = beta
    c.src[0], c.src[1], c.src[2] = sa, sb, sc
    return c


cdef int lt_hit(LtCall c, PyObject **vals, const pfact *f, object stream, tuple alloc, list made,
                new_like_t new_like) except -1:
    """See _oplt.pxd."""
    cdef CUstream hs
    cdef CUdeviceptr p[3]
    cdef CUdeviceptr addr
    cdef bc_stream_memo memo
    cdef PyTypeObject *ttype = NULL     # the tensor class tensor_pointer took first, on device tdev
    cdef int tdev = -1
    cdef int i, ref
    cdef DeviceBuffer b
    if _hook_slot[0] != NULL:
        return 0
    mm = <object>PyWeakref_GetObject(c.mm)
    ws = <object>PyWeakref_GetObject(c.ws)
    if mm is None or ws is None or (<DeviceBuffer>ws)._kind == KIND_CLOSED:
        return 0
    if stream is None:
        hs = NULL
    elif type(stream) is Stream:
        if (<Stream>stream).closed:
            return 0
        hs = (<Stream>stream).handle
    else:
        stream_handle(stream, &hs)
    if hs != c.stream:
        return 0
    memo.source = NULL
    memo.ordinal = -1
    for i in range(3):
        ref = c.src[i]
        if ref < 0:
            continue
        if f[ref].kind == P_BUF:
            b = <DeviceBuffer>f[ref].buf
            note_use(b, hs)
            p[i] = b.ptr
        elif f[ref].kind != P_DLX:
            return 0
        elif Py_TYPE(vals[ref]) == ttype and f[ref].dl.device.device_id == tdev:
            p[i] = f[ref].addr          # (as in _opcall._issue_direct: read by the key, stream ordered)
        elif tensor_pointer(<object>vals[ref], (<Matmul>mm).device, hs, &memo, &addr) != 1:
            return 0
        else:
            ttype = Py_TYPE(vals[ref])
            tdev = f[ref].dl.device.device_id
            p[i] = addr
    for a in alloc:
        made.append(new_like(<tuple>a, stream))
    for i in range(3):
        if c.src[i] < 0:
            p[i] = (<DeviceBuffer>made[-1 - c.src[i]]).ptr
    b = <DeviceBuffer>ws
    note_use(b, hs)
    issue(<Matmul>mm, <const void *>p[0], <const void *>p[1], <void *>p[2], c.alpha, c.beta, <void *>b.ptr,
          b.nbytes, hs, _gil_slot[0])
    return 1


cdef int lt_noted(tuple args, object stream) except -1:
    """See _oplt.pxd."""
    cdef CUstream hs
    stream_handle(stream, &hs)
    for x in args:
        if type(x) is DeviceBuffer and (<DeviceBuffer>x)._kind != KIND_CLOSED:
            note_use(<DeviceBuffer>x, hs)
    return 0
