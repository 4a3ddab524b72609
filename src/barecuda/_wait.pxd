"""Interruptible and timed waits on a driver query (see _wait.pyx)."""
from barecuda._abi cimport CUresult

ctypedef CUresult (*query_fn)(void *handle) noexcept nogil
# Wait until query(handle) stops answering CUDA_ERROR_NOT_READY (its other error raised
# as `call`'s). timeout < 0: none; else TimeoutError, naming `what`, after `timeout` seconds.
cdef int wait_until(query_fn query, void *handle, const char *call, double timeout, object what) except -1
cdef int wait_interruptible(query_fn query, void *handle, const char *call) except -1   # no timeout
# A `timeout=` argument (None or seconds >= 0) as wait_until's timeout (-1.0: none).
cdef double timeout_arg(object timeout) except? -2
