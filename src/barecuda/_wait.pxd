"""Waiting for the GPU: interruptible and timed waits on a driver query.

Declarations and inline functions only (no module at run time: each waiter compiles
them in, as _lazy.pxd's lazy_module). Owns the wait loop behind ``Stream.synchronize``,
``Event.synchronize`` and ``GraphExec``'s waits -- the GIL released, the query polled in
time slices (``include/barecuda/bc_wait.h``: spin first, then nap), Ctrl-C checked
between slices, an optional deadline -- and the checks of a ``timeout=`` argument. Why
it polls instead of calling the driver's blocking wait: docs/architecture.md, "Waiting".
"""
from barecuda._abi cimport CUresult
from barecuda._errors cimport check

ctypedef CUresult (*query_fn)(void *handle) noexcept nogil

cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1

cdef extern from "barecuda/bc_wait.h" nogil:
    ctypedef CUresult (*bc_query_fn)(void *handle)
    CUresult bc_wait_slice_until(bc_query_fn query, void *handle, int first, long long deadline_ns)
    long long bc_wait_now_ns()
    int BC_WAIT_TIMESLICE
    int BC_WAIT_DEADLINE


cdef inline int wait_until(query_fn query, void *handle, const char *call, double timeout,
                           object what) except -1:
    """Wait until query(handle) stops answering CUDA_ERROR_NOT_READY (its other error
    raised as `call`'s); timeout < 0: none, else TimeoutError naming `what` after
    `timeout` seconds.

    Ctrl-C interrupts the wait (KeyboardInterrupt) but never the GPU work; so does
    the timeout (TimeoutError, when ``timeout >= 0`` seconds). The GIL is released
    while waiting; the short-wait latency equals a spin-wait on the driver."""
    cdef CUresult rc
    cdef int first = 1
    cdef long long deadline = 0
    if timeout >= 0:
        deadline = bc_wait_now_ns() + <long long>(timeout * 1e9)
        if deadline == 0:
            deadline = 1
    while True:
        with nogil:
            rc = bc_wait_slice_until(<bc_query_fn>query, handle, first, deadline)
        if rc == BC_WAIT_DEADLINE:
            raise TimeoutError(f"{what if isinstance(what, str) else repr(what)} did not complete within {timeout:g} s; the queued GPU work "
                               "keeps running (wait again, or query() to poll)")
        if rc != BC_WAIT_TIMESLICE:
            break
        first = 0
        PyErr_CheckSignals()
    if rc != 0:
        check(rc, call)
    return 0


cdef inline int wait_interruptible(query_fn query, void *handle, const char *call) except -1:
    """wait_until without a timeout."""
    return wait_until(query, handle, call, -1.0, call.decode())


cdef inline double timeout_arg(object timeout) except? -2:
    """A `timeout=` argument (None or seconds >= 0) as wait_until's timeout (-1.0: none)."""
    if timeout is None:
        return -1.0
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, not {type(timeout).__name__}")
    if not timeout >= 0:      # also refuses NaN
        raise ValueError(f"timeout must be >= 0 seconds, got {timeout!r}")
    return <double>timeout
