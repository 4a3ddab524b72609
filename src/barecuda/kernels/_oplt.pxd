"""The op's record of a cuBLASLt matmul call (see _oplt.pyx): made by _opcall on a miss,
issued by _opcall's hit path."""
from cpython.object cimport PyObject
from barecuda._abi cimport CUstream
from barecuda._buffer cimport DeviceBuffer
from barecuda.kernels._opkey cimport pfact

# The allocation of a new output (_opcall._new_like: the recorded (nbytes, device, shape,
# dtype, itemsize) on the stream).
ctypedef DeviceBuffer (*new_like_t)(tuple a, object stream)


cdef class LtCall:
    cdef object mm              # weak reference to the _cublaslt.Matmul (_matmul._lt_cache owns it)
    cdef object ws              # weak reference to the workspace DeviceBuffer (_matmul._lt_ws owns it)
    cdef CUstream stream        # the recorded call's stream: the workspace is that stream's
    cdef float alpha
    cdef float beta
    cdef int src[3]             # A, B, C/D: argument i (>= 0) or new output j (-1 - j)


# The record of a cuBLASLt call that a family function ran and returned as
# (Matmul, None, None, (a, b, c, alpha, beta, workspace), result): src the sources of a, b
# and c (see LtCall.src); None when it cannot be recorded (then the Python path each time).
cdef LtCall lt_call(object mm, object ws, object stream, int sa, int sb, int sc, object alpha, object beta)

# Issue the recorded call with this call's arrays (vals, read into f) on `stream`, the new
# outputs allocated into `made` (new_like, per entry of `alloc`): 1. 0 when the record cannot
# be issued here (its Matmul or workspace gone, another stream, a capture recorder running,
# a tensor the launch reader does not take): nothing issued or allocated, the caller runs
# the Python path.
cdef int lt_hit(LtCall c, PyObject **vals, const pfact *f, object stream, tuple alloc, list made,
                new_like_t new_like) except -1

# The Python path's cuBLASLt call (args as lt_call's) ran on `stream`: note each DeviceBuffer's
# use there (what a hit notes).
cdef int lt_noted(tuple args, object stream) except -1
