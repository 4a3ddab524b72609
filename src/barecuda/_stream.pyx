"""Streams and events.

Owns: Stream (created, or wrapping a foreign handle from another library) and Event
(record, wait, query, synchronize, elapsed time). Waits release the GIL.
"""
cimport cython
import warnings

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable
from barecuda._loader cimport driver_table, runtime_state, ensure_driver
from barecuda._device cimport Device, device_of, activate_device
from barecuda._errors import CudaWarning, make_error

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()

cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1

cdef extern from "barecuda/bc_wait.h" nogil:
    ctypedef CUresult (*bc_query_fn)(void *handle)
    CUresult bc_wait_slice(bc_query_fn query, void *handle, int first)
    int BC_WAIT_TIMESLICE


cdef int wait_interruptible(_query_fn query, void *handle, const char *call) except -1:
    """Wait until query(handle) stops answering NOT_READY; Ctrl-C interrupts the wait
    (raising KeyboardInterrupt) but never the GPU work. The GIL is released while
    waiting; the short-wait latency equals a spin-wait on the driver."""
    cdef CUresult rc
    cdef int first = 1
    while True:
        with nogil:
            rc = bc_wait_slice(query, handle, first)
        if rc != BC_WAIT_TIMESLICE:
            break
        first = 0
        PyErr_CheckSignals()
    if rc != 0:
        check(rc, call)
    return 0


cdef int _foreign_stream(object obj, CUstream *out) except -1:
    """Slow path of stream_handle(): anything that is not None or a Stream."""
    cdef size_t h
    if isinstance(obj, Stream):
        out[0] = (<Stream>obj).handle
        return 0
    if isinstance(obj, int):
        h = obj
        out[0] = <CUstream>h
        return 0
    proto = getattr(obj, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        if not (isinstance(value, tuple) and len(value) == 2):
            raise TypeError(f"{type(obj).__name__}.__cuda_stream__ must give (version, handle), got {value!r}")
        h = value[1]
        out[0] = <CUstream>h
        return 0
    for attr in ("cuda_stream", "ptr", "handle"):   # torch.cuda.Stream, cupy Stream, cuda.core-likes
        value = getattr(obj, attr, None)
        if isinstance(value, int):
            h = value
            out[0] = <CUstream>h
            return 0
    raise TypeError(f"expected a barecuda.Stream, None, an int handle or an object with "
                    f"__cuda_stream__, not {type(obj).__name__}")


cdef Stream _wrap_stream(CUstream h, Device device, object keepalive):
    cdef Stream s = Stream.__new__(Stream, _wrap=True)
    s.handle = h
    s.device = device if device is not None else Device()
    s.device.activate()
    s.ctx = s.device.ctx
    s._keepalive = keepalive
    return s


cdef Stream as_stream(object obj, Device device):
    """A Stream object for obj (None -> the device's default stream)."""
    cdef CUstream h
    if type(obj) is Stream:
        return <Stream>obj
    if obj is None:
        return _wrap_stream(NULL, device, None)
    _foreign_stream(obj, &h)
    return _wrap_stream(h, device, obj)


@cython.final
cdef class Stream:
    """A CUDA stream: an ordered queue of work on one device.

    Parameters
    ----------
    device : Device or int, optional
        Defaults to the current device.
    priority : int, optional
        Lower numbers are higher priority; see ``Device.stream_priority_range()``.
        Values outside the range are clamped by the driver.
    non_blocking : bool, optional
        If True the stream does not synchronize with the legacy default stream.
        Default False, so work on the default stream (``stream=None``) and on this
        stream are ordered with each other as in the CUDA runtime.

    Notes
    -----
    ``Stream.from_handle(handle)`` wraps a stream another library created (it is
    then never destroyed by barecuda); any object with ``__cuda_stream__`` is
    accepted wherever a stream is.
    """

    def __cinit__(self, device=None, int priority=0, bint non_blocking=False, *, _wrap=False):
        self.handle = NULL
        self.owned = False
        self._keepalive = None
        if _wrap:
            return
        cdef Device dev = device_of(device)
        dev.activate()
        cdef unsigned int flags = CU_STREAM_NON_BLOCKING if non_blocking else CU_STREAM_DEFAULT
        cdef CUstream h = NULL
        check(D.cuStreamCreateWithPriority(&h, flags, priority), b"cuStreamCreateWithPriority")
        self.handle = h
        self.owned = True
        self.device = dev
        self.ctx = dev.ctx

    @staticmethod
    def from_handle(handle, device=None, owner=None):
        """Wrap a ``CUstream`` created elsewhere (an int, or an object with
        ``__cuda_stream__``). barecuda never destroys it; ``owner`` is kept alive."""
        cdef CUstream h
        _foreign_stream(handle, &h)
        return _wrap_stream(h, device_of(device), owner if owner is not None else handle)

    @staticmethod
    def default(device=None):
        """The legacy default stream (``stream=None``) of a device."""
        return _wrap_stream(NULL, device_of(device), None)

    def __dealloc__(self):
        if self.owned and self.handle != NULL and bc_driver_usable(ST):
            # The driver defers the destruction until queued work is done.
            rc = D.cuStreamDestroy(self.handle)
            if rc != 0:
                warnings.warn(f"cuStreamDestroy in Stream.__dealloc__: {make_error(rc, 'cuStreamDestroy')}",
                              CudaWarning)
        self.handle = NULL

    def close(self):
        """Destroy the stream now (queued work still completes). Idempotent."""
        if self.owned and self.handle != NULL:
            self.device.activate()
            check(D.cuStreamDestroy(self.handle), b"cuStreamDestroy")
        self.handle = NULL
        self.owned = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def handle_int(self):
        """The ``CUstream`` as an int (0 for the default stream)."""
        return <size_t>self.handle

    def __int__(self):
        return <size_t>self.handle

    def __cuda_stream__(self):
        """The CUDA stream protocol: ``(version, handle)``."""
        return (0, <size_t>self.handle)

    def __repr__(self):
        return f"<barecuda.Stream 0x{<size_t>self.handle:x} on device {self.device.ordinal}>"

    def __eq__(self, other):
        return isinstance(other, Stream) and (<Stream>other).handle == self.handle

    def __hash__(self):
        return hash(("barecuda.Stream", <size_t>self.handle))

    @property
    def priority(self):
        """The stream's priority."""
        cdef int p = 0
        self.device.activate()
        check(D.cuStreamGetPriority(self.handle, &p), b"cuStreamGetPriority")
        return p

    @property
    def non_blocking(self):
        """True when the stream does not synchronize with the legacy default stream."""
        cdef unsigned int f = 0
        self.device.activate()
        check(D.cuStreamGetFlags(self.handle, &f), b"cuStreamGetFlags")
        return bool(f & CU_STREAM_NON_BLOCKING)

    def synchronize(self):
        """Block until all work queued on the stream is done.

        The GIL is released while waiting, and Ctrl-C interrupts the wait
        (``KeyboardInterrupt``; the queued GPU work itself keeps running). See
        :meth:`synchronize_blocking` for the driver's uninterruptible wait.
        """
        wait_interruptible(<_query_fn>D.cuStreamQuery, <void *>self.handle, b"cuStreamSynchronize")

    def synchronize_blocking(self):
        """``cuStreamSynchronize`` itself: GIL released, not interruptible."""
        cdef CUstream h = self.handle
        cdef CUresult rc
        with nogil:
            rc = D.cuStreamSynchronize(h)
        if rc != 0:
            check(rc, b"cuStreamSynchronize")

    def query(self):
        """True when all work queued on the stream is done; never blocks."""
        cdef CUresult rc = D.cuStreamQuery(self.handle)
        if rc == 0:
            return True
        if rc == 600:   # CUDA_ERROR_NOT_READY
            return False
        check(rc, b"cuStreamQuery")

    def wait(self, what):
        """Make later work on this stream wait for an Event, or for everything
        queued so far on another stream (an Event is recorded there for you)."""
        cdef Event ev
        if isinstance(what, Event):
            ev = <Event>what
        else:
            other = as_stream(what, self.device)
            ev = Event(self.device, timing=False)
            ev.record(other)
        check(D.cuStreamWaitEvent(self.handle, ev.handle, 0), b"cuStreamWaitEvent")
        return ev

    def record(self, event=None, *, timing=True):
        """Record an event on this stream (a new one unless given) and return it."""
        cdef Event ev = event if event is not None else Event(self.device, timing=timing)
        ev.record(self)
        return ev

    # -- CUDA graphs (owned by _graph.pyx): capture delegates there
    def capture(self, mode="global"):
        """``with stream.capture(mode) as graph:`` -- see :func:`barecuda.capture`."""
        from barecuda._graph import capture
        return capture(self, mode)


@cython.final
cdef class Event:
    """A CUDA event: a marker in a stream that can be waited on and timed.

    Parameters
    ----------
    device : Device or int, optional
    timing : bool
        Record timestamps (needed for :meth:`elapsed_ms`). Default True.
    blocking_sync : bool
        :meth:`synchronize` sleeps instead of spinning. Default False.
    """

    def __cinit__(self, device=None, *, bint timing=True, bint blocking_sync=False):
        self.handle = NULL
        cdef Device dev = device_of(device)
        dev.activate()
        cdef unsigned int flags = 0
        if not timing:
            flags |= CU_EVENT_DISABLE_TIMING
        if blocking_sync:
            flags |= CU_EVENT_BLOCKING_SYNC
        cdef CUevent h = NULL
        check(D.cuEventCreate(&h, flags), b"cuEventCreate")
        self.handle = h
        self.device = dev
        self.ctx = dev.ctx
        self.timing = timing

    def __dealloc__(self):
        if self.handle != NULL and bc_driver_usable(ST):
            rc = D.cuEventDestroy(self.handle)
            if rc != 0:
                warnings.warn(f"cuEventDestroy in Event.__dealloc__: {make_error(rc, 'cuEventDestroy')}",
                              CudaWarning)
        self.handle = NULL

    def __repr__(self):
        return f"<barecuda.Event 0x{<size_t>self.handle:x} on device {self.device.ordinal}>"

    @property
    def handle_int(self):
        """The ``CUevent`` as an int."""
        return <size_t>self.handle

    def record(self, stream=None):
        """Record the event on ``stream`` (default stream when None). Returns self."""
        cdef CUstream h
        if stream is None:
            h = NULL
        elif type(stream) is Stream:
            h = (<Stream>stream).handle
        else:
            _foreign_stream(stream, &h)
        self.device.activate()
        check(D.cuEventRecord(self.handle, h), b"cuEventRecord")
        return self

    def query(self):
        """True when the work before the event's last record is done; never blocks."""
        cdef CUresult rc = D.cuEventQuery(self.handle)
        if rc == 0:
            return True
        if rc == 600:
            return False
        check(rc, b"cuEventQuery")

    def synchronize(self):
        """Block until the event has completed (GIL released; Ctrl-C interrupts the wait)."""
        wait_interruptible(<_query_fn>D.cuEventQuery, <void *>self.handle, b"cuEventSynchronize")

    def elapsed_ms(self, Event start not None):
        """Milliseconds from ``start`` to this event (both recorded, both complete)."""
        cdef float ms = 0
        if not (self.timing and start.timing):
            raise ValueError("both events must be created with timing=True to measure elapsed time")
        check(D.cuEventElapsedTime(&ms, start.handle, self.handle), b"cuEventElapsedTime")
        return ms

    def __sub__(self, other):
        """``end - start`` is ``end.elapsed_ms(start)``."""
        if not isinstance(other, Event):
            return NotImplemented
        return self.elapsed_ms(other)
