"""Streams and events.

Owns: Stream (created, or wrapping a foreign handle from another library) and Event
(record, wait, query, synchronize with an optional timeout, elapsed time), and the one
place that turns a ``stream=`` argument into a ``CUstream`` (``stream_handle`` in
_stream.pxd). Waits release the GIL.

Rules every method follows:
- in a child forked after the driver was loaded it raises ``ForkedProcessError``
  (naming ``spawn``) before any driver call; destructors there leak silently;
- it makes the object's context current on the calling thread first (cached per
  thread by _loader, so a bound thread pays no driver call), so any thread may use
  any stream or event;
- after ``close()`` it raises ``ValueError`` naming the object.
"""

__all__ = ["Stream", "Event"]
cimport cython
import threading
import time
import warnings

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable, CUDA_ERROR_NOT_READY
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current, destroy_handle, destroy_fn
from barecuda._ft cimport bc_mutex, bc_mutex_lock, bc_mutex_unlock
from barecuda._device cimport Device, device_of, activate_device, device_at, current_device
from barecuda._errors import CudaWarning
from barecuda._lazy cimport lazy_module
from barecuda._wait cimport query_fn, wait_until, timeout_arg

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()

from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.weakref cimport PyWeakref_NewRef, PyWeakref_GetObject


cdef int _stream_closed_error(Stream s) except -1:
    raise ValueError("stream is closed: a barecuda.Stream cannot be used after close()")


# Foreign stream objects seen lately and their handles, so that a torch/CuPy stream
# or any __cuda_stream__ object passed on every launch is read once (docs/interop.md).
# An entry holds a weak reference: it never keeps a stream object alive, and a new
# object at a dead one's address does not match (its weak reference is dead).
# Objects that take no weak reference are read on every call.
cdef enum:
    FS_SLOTS = 8
cdef PyObject *_fs_obj[FS_SLOTS]        # the object's address (identity key)
cdef PyObject *_fs_ref[FS_SLOTS]        # owned weak reference to it
cdef CUstream _fs_handle[FS_SLOTS]
cdef int _fs_next = 0
# Free-threaded build: the table is read and replaced from any thread (a replaced entry's
# weak reference is released), so both sides take this mutex; nothing on a GIL build.
cdef bc_mutex _fs_mu


cdef inline bint _seen_stream(object obj, CUstream *out) noexcept:
    cdef int i
    cdef bint found = False
    bc_mutex_lock(&_fs_mu)
    for i in range(FS_SLOTS):
        if _fs_obj[i] == <PyObject *>obj and PyWeakref_GetObject(<object>_fs_ref[i]) == <PyObject *>obj:
            out[0] = _fs_handle[i]
            found = True
            break
    bc_mutex_unlock(&_fs_mu)
    return found


cdef int _remember_stream(object obj, CUstream h) except -1:
    global _fs_next
    cdef int i
    cdef PyObject *old
    try:
        ref = PyWeakref_NewRef(obj, None)
    except TypeError:
        return 0                        # no weak references: not cached
    Py_INCREF(ref)
    bc_mutex_lock(&_fs_mu)
    i = _fs_next
    old = _fs_ref[i]
    _fs_ref[i] = <PyObject *>ref
    _fs_obj[i] = <PyObject *>obj
    _fs_handle[i] = h
    _fs_next = (i + 1) % FS_SLOTS
    bc_mutex_unlock(&_fs_mu)
    Py_XDECREF(old)
    return 0


cdef int _foreign_stream(object obj, CUstream *out) except -1:
    """Slow path of stream_handle(): anything that is not None or a Stream.

    Accepted: an object with ``__cuda_stream__`` (the CUDA stream protocol), an int
    handle (a ``CUstream`` value: 0 is the legacy default stream, 1 and 2 the driver's
    ``CU_STREAM_LEGACY`` / ``CU_STREAM_PER_THREAD``, anything else must be a live
    stream of the device in use -- barecuda cannot check it), and a PyTorch stream
    (``torch.cuda.Stream``, by its ``cuda_stream`` attribute). Anything else (a
    buffer, a kernel, a bool) is refused before any driver call."""
    cdef size_t h
    if type(obj) is Stream:
        return stream_handle(obj, out)
    if isinstance(obj, bool):
        raise TypeError("stream= got a bool; expected a barecuda.Stream, None, an int CUstream handle "
                        "or an object with __cuda_stream__")
    if isinstance(obj, int):
        if obj < 0:
            raise ValueError(f"a stream handle must be a CUstream address >= 0, got {obj}")
        h = obj
        out[0] = <CUstream>h
        return 0
    if _seen_stream(obj, out):
        return 0
    proto = getattr(obj, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int)
                and not isinstance(value[1], bool) and value[1] >= 0):
            raise TypeError(f"{type(obj).__name__}.__cuda_stream__ must give (version, handle), got {value!r}")
        h = value[1]
        out[0] = <CUstream>h
        _remember_stream(obj, out[0])
        return 0
    mod = type(obj).__module__
    # torch.cuda.Stream / ExternalStream (cuda_stream), cupy.cuda.Stream (ptr)
    value = getattr(obj, "cuda_stream" if mod.startswith("torch") else "ptr", None) \
        if mod.startswith(("torch", "cupy")) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        h = value
        out[0] = <CUstream>h
        _remember_stream(obj, out[0])
        return 0
    raise TypeError(f"stream= expects a barecuda.Stream, None, an int CUstream handle or an object with "
                    f"__cuda_stream__, not {type(obj).__name__}")


cdef Stream _wrap_stream(CUstream h, Device device, object keepalive):
    cdef Stream s = Stream.__new__(Stream, _wrap=True)
    s.handle = h
    s.device = device if device is not None else Device()
    s.device.activate()
    s.ctx = s.device.ctx
    s._keepalive = keepalive
    if h == NULL:                 # the legacy default stream: known without asking
        s._priority = 0
        s._non_blocking = False
        s._flags_known = True
    return s


cdef Stream as_stream(object obj, Device device):
    """A Stream object for obj (None -> the device's default stream)."""
    cdef CUstream h
    if type(obj) is Stream:
        if (<Stream>obj).closed:
            _stream_closed_error(<Stream>obj)
        return <Stream>obj
    if obj is None:
        return _wrap_stream(NULL, device, None)
    _foreign_stream(obj, &h)
    return _wrap_stream(h, device, obj)


# ------------------------------------------- where memory work runs, and its order
# For the memory modules (_buffer, _allocators, _copy, _interop, _host, _managed,
# _driver_pool): the device a (device=, stream=) pair names, and cross-stream order.
cdef Device resolve_device(object device, object stream):
    """The Device for (device, stream), made current on this thread (one Device object
    per ordinal: _device's cache)."""
    cdef Device dev
    if device is None:
        if stream is not None and type(stream) is Stream:
            dev = (<Stream>stream).device
        else:
            dev = current_device()
    elif type(device) is Device:
        dev = device_at((<Device>device).ordinal)
    elif isinstance(device, int) and not isinstance(device, bool):
        dev = device_at(device)
    else:
        dev = device_at(device_of(device).ordinal)
    dev.activate()
    return dev


cdef CUstream _norm_stream(CUstream s) noexcept nogil:
    """The legacy default stream has two spellings (NULL and CU_STREAM_LEGACY)."""
    return CU_STREAM_LEGACY if s == NULL else s


cdef int stream_after(CUstream waiter, CUstream producer, CUcontext ctx) except -1:
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



# Callables run by Stream.close() (and by the destructor) with the CUstream as an int,
# before the stream is destroyed: owners of work ordered on the stream (the memory
# pools' blocks freed in stream order) move it to a safe stream there. See
# add_close_hook.
_close_hooks = []
_close_hooks_lock = threading.Lock()

cdef PyObject *_capture_mod = NULL     # barecuda.graph._capture, once Stream.capture first ran
cdef PyObject *_host_node_mod = NULL   # barecuda.graph._host_node, once a stored host-node error is raised


def add_close_hook(hook):
    """Register ``hook(handle: int)``, called when a barecuda-created stream is about to
    be destroyed (``Stream.close()`` or its destructor), while the stream still exists.

    For barecuda's own subsystems (memory pools): an exception from a hook propagates
    out of ``close()`` (the stream is then left alive) and becomes a ``CudaWarning``
    in the destructor. Hooks run in registration order.
    """
    if not callable(hook):
        raise TypeError("a stream close hook must be callable")
    with _close_hooks_lock:
        _close_hooks.append(hook)


cdef inline int _guard_stream(Stream s) except -1:
    """Fork check, closed check, then bind the stream's context on this thread."""
    ensure_driver(ST)
    if s.closed:
        return _stream_closed_error(s)
    return set_current(s.ctx)


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
    accepted wherever a stream is. Every method works from any thread (the stream's
    context is made current on the calling thread), refuses after :meth:`close`
    (``ValueError``), and raises ``ForkedProcessError`` in a forked child.
    """

    def __cinit__(self, device=None, int priority=0, bint non_blocking=False, *, _wrap=False):
        self.handle = NULL
        self.owned = False
        self.closed = False
        self._keepalive = None
        self._flags_known = False
        if _wrap:
            return
        cdef Device dev = device_of(device)
        dev.activate()
        cdef unsigned int flags = CU_STREAM_NON_BLOCKING if non_blocking else CU_STREAM_DEFAULT
        cdef CUstream h = NULL
        cdef int p = 0
        check(D.cuStreamCreateWithPriority(&h, flags, priority), b"cuStreamCreateWithPriority")
        self.handle = h
        self.owned = True
        self.device = dev
        self.ctx = dev.ctx
        # The driver clamps the priority: ask once for the value it chose.
        cdef CUresult rc = D.cuStreamGetPriority(h, &p)
        if rc != 0:
            D.cuStreamDestroy(h)
            self.handle = NULL
            self.owned = False
            check(rc, b"cuStreamGetPriority")
        self._priority = p
        self._non_blocking = non_blocking
        self._flags_known = True

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
        if not (self.owned and self.handle != NULL):
            return
        if not bc_driver_usable(ST):
            return                        # shutdown or forked child: leak silently
        try:
            _run_close_hooks(<size_t>self.handle)
        except Exception as e:
            warnings.warn(f"Stream.__dealloc__: {e!r}", CudaWarning)
        else:       # the driver defers the destruction until queued work is done
            destroy_handle(self.ctx, <destroy_fn>D.cuStreamDestroy, self.handle, b"cuStreamDestroy",
                           "Stream.__dealloc__")
        self.handle = NULL

    def close(self):
        """Destroy the stream now (queued work still completes). Idempotent.

        Afterwards every method and every use as ``stream=`` raises ``ValueError``.
        A stream wrapped with :meth:`from_handle` or :meth:`default` is only marked
        closed (barecuda never destroys streams it did not create). A call another
        thread is making on the stream right now (a copy, a memset, a synchronize)
        finishes first: the destruction then happens when it returns. Closing a
        stream while a capture on it runs raises ``ValueError`` (end the capture first)."""
        cdef CUstream h
        cdef CUresult rc
        if self.closed:
            return
        if self._captures > 0:
            raise ValueError("this stream is capturing: end the capture first (leave its `with capture(...)` "
                             "block), then close the stream")
        ensure_driver(ST)
        if self.owned and self.handle != NULL:
            set_current(self.ctx)
            _run_close_hooks(<size_t>self.handle)
            h = self.handle
            self.handle = NULL
            self.owned = False
            self.closed = True
            self._keepalive = None
            # Closed at once; destroyed now unless a call on another thread still names
            # the handle (stream_use): then by the last stream_done (bc_uses.h).
            self._dead = h
            bc_flag_set(&self._destroy_pending)
            if bc_use_count(&self._uses) == 0 and bc_flag_take(&self._destroy_pending):
                self._dead = NULL
                rc = D.cuStreamDestroy(h)
                if rc != 0:            # as before: a failed destroy leaves the stream open
                    self.handle = h
                    self.owned = True
                    self.closed = False
                    check(rc, b"cuStreamDestroy")
            return
        self.handle = NULL
        self.owned = False
        self.closed = True
        self._keepalive = None

    @property
    def is_closed(self):
        """True once :meth:`close` was called."""
        return bool(self.closed)

    def __enter__(self):
        if self.closed:
            _stream_closed_error(self)
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def handle_int(self):
        """The ``CUstream`` as an int (0 for the default stream and after close())."""
        return <size_t>self.handle

    def __int__(self):
        if self.closed:
            _stream_closed_error(self)
        return <size_t>self.handle

    def __cuda_stream__(self):
        """The CUDA stream protocol: ``(version, handle)``."""
        if self.closed:
            _stream_closed_error(self)
        return (0, <size_t>self.handle)

    def __repr__(self):
        if self.closed:
            return f"<barecuda.Stream (closed) on device {self.device.ordinal}>"
        return f"<barecuda.Stream 0x{<size_t>self.handle:x} on device {self.device.ordinal}>"

    def __eq__(self, other):
        return isinstance(other, Stream) and (<Stream>other).handle == self.handle \
            and (<Stream>other).closed == self.closed

    def __hash__(self):
        return hash(("barecuda.Stream", <size_t>self.handle))

    cdef int _load_flags(self) except -1:
        cdef int p = 0
        cdef unsigned int f = 0
        _guard_stream(self)
        check(D.cuStreamGetPriority(self.handle, &p), b"cuStreamGetPriority")
        check(D.cuStreamGetFlags(self.handle, &f), b"cuStreamGetFlags")
        self._priority = p
        self._non_blocking = (f & CU_STREAM_NON_BLOCKING) != 0
        self._flags_known = True
        return 0

    @property
    def priority(self):
        """The stream's priority as the driver clamped it (asked once, at creation; for
        a wrapped foreign stream, on first access)."""
        if self.closed:
            _stream_closed_error(self)
        if not self._flags_known:
            self._load_flags()
        return self._priority

    @property
    def non_blocking(self):
        """True when the stream does not synchronize with the legacy default stream
        (known at creation; for a wrapped foreign stream, asked on first access)."""
        if self.closed:
            _stream_closed_error(self)
        if not self._flags_known:
            self._load_flags()
        return bool(self._non_blocking)

    def synchronize(self, timeout=None):
        """Block until all work queued on the stream is done, then raise an exception a
        CUDA graph host node stored, if any (see ``barecuda.check_host_errors``).

        The GIL is released while waiting, and Ctrl-C interrupts the wait
        (``KeyboardInterrupt``; the queued GPU work itself keeps running). See
        :meth:`synchronize_blocking` for the driver's uninterruptible wait.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait at most; then ``TimeoutError`` is raised and the queued
            work keeps running. None (default) waits as long as it takes.
        """
        cdef double t = timeout_arg(timeout)
        _guard_stream(self)
        cdef Stream so = stream_use(self)      # the wait releases the GIL (a close() meanwhile waits for it)
        try:
            wait_until(<query_fn>D.cuStreamQuery, <void *>self.handle, b"cuStreamSynchronize", t, self)
        finally:
            stream_done(so)
        if ST.host_errors:          # an exception a CUDA graph host node stored (docs/graphs.md)
            lazy_module(&_host_node_mod, "barecuda.graph._host_node").check_host_errors()

    def synchronize_blocking(self):
        """``cuStreamSynchronize`` itself: GIL released, not interruptible."""
        _guard_stream(self)
        cdef CUstream h = self.handle
        cdef CUresult rc
        cdef Stream so = stream_use(self)
        try:
            with nogil:
                rc = D.cuStreamSynchronize(h)
        finally:
            stream_done(so)
        if rc != 0:
            check(rc, b"cuStreamSynchronize")

    def query(self):
        """True when all work queued on the stream is done; never blocks."""
        _guard_stream(self)
        cdef CUresult rc = D.cuStreamQuery(self.handle)
        if rc == 0:
            return True
        if rc == CUDA_ERROR_NOT_READY:
            return False
        check(rc, b"cuStreamQuery")

    def wait(self, what):
        """Make later work on this stream wait for an Event, or for everything
        queued so far on another stream (an Event is recorded there for you)."""
        cdef Event ev
        _guard_stream(self)
        if isinstance(what, Event):
            ev = <Event>what
            _guard_event(ev)
            set_current(self.ctx)
        else:
            other = as_stream(what, self.device)
            ev = Event(self.device, timing=False)
            ev.record(other)
            set_current(self.ctx)
        check(D.cuStreamWaitEvent(self.handle, ev.handle, 0), b"cuStreamWaitEvent")
        return ev

    def record(self, event=None, *, timing=True):
        """Record an event on this stream (a new one unless given) and return it."""
        _guard_stream(self)
        cdef Event ev = event if event is not None else Event(self.device, timing=timing)
        ev.record(self)
        return ev

    # -- CUDA graphs (owned by _capture.pyx): capture delegates there
    def capture(self, mode="global"):
        """``with stream.capture(mode) as graph:`` -- see :func:`barecuda.capture`."""
        # graph._capture cimports this module: imported on first use (_lazy.pxd)
        return lazy_module(&_capture_mod, "barecuda.graph._capture").capture(self, mode)


cdef Stream stream_use(object obj):
    cdef Stream s
    if type(obj) is not Stream:
        return None
    s = <Stream>obj
    bc_use_enter(&s._uses)         # enter first, then look (bc_uses.h)
    if s.closed:
        stream_done(s)
        _stream_closed_error(s)
    return s


_LATE = "%s.close (deferred to the last call in flight)"    # destroy_handle's `where` for stream_done, event_done


cdef void stream_done(Stream s) noexcept:
    cdef CUstream h
    if s is None:
        return
    if bc_use_leave(&s._uses) != 0 or not bc_flag_take(&s._destroy_pending):
        return
    h = s._dead
    s._dead = NULL
    destroy_handle(s.ctx, <destroy_fn>D.cuStreamDestroy, <void *>h, b"cuStreamDestroy", _LATE % "Stream")


cdef int _run_close_hooks(size_t handle) except -1:
    if _close_hooks:
        for hook in list(_close_hooks):
            hook(handle)
    return 0


cdef void event_done(Event e) noexcept:
    """Leave e's use count; the last one out destroys a handle close() left behind."""
    cdef CUevent h
    if bc_use_leave(&e._uses) != 0 or not bc_flag_take(&e._destroy_pending):
        return
    h = e._dead
    e._dead = NULL
    destroy_handle(e.ctx, <destroy_fn>D.cuEventDestroy, <void *>h, b"cuEventDestroy", _LATE % "Event")


cdef inline int _guard_event(Event e) except -1:
    ensure_driver(ST)
    if e.closed:
        raise ValueError("event is closed: a barecuda.Event cannot be used after close()")
    return set_current(e.ctx)


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

    Notes
    -----
    Timing has one order: ``end.elapsed_ms(start)`` (also ``end - start``) is the
    time from ``start`` to ``end``; the reversed call raises ``ValueError``. Every
    method works from any thread, refuses after :meth:`close`, and raises
    ``ForkedProcessError`` in a forked child.
    """

    def __cinit__(self, device=None, *, bint timing=True, bint blocking_sync=False):
        self.handle = NULL
        self.closed = False
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
        destroy_handle(self.ctx, <destroy_fn>D.cuEventDestroy, self.handle, b"cuEventDestroy", "Event.__dealloc__")
        self.handle = NULL

    def close(self):
        """Destroy the event now; a failure raises (the destructor only warns).
        Idempotent; afterwards every method raises ``ValueError``."""
        if self.closed:
            return
        _guard_event(self)
        cdef CUevent h = self.handle
        cdef CUresult rc
        # Closed at once; destroyed now unless a synchronize() on another thread still
        # waits on the handle: then by its event_done (bc_uses.h, as Stream.close).
        self.handle = NULL
        self.closed = True
        self._dead = h
        bc_flag_set(&self._destroy_pending)
        if bc_use_count(&self._uses) == 0 and bc_flag_take(&self._destroy_pending):
            self._dead = NULL
            rc = D.cuEventDestroy(h)
            if rc != 0:                # a failed destroy leaves the event open
                self.handle = h
                self.closed = False
                check(rc, b"cuEventDestroy")

    @property
    def is_closed(self):
        """True once :meth:`close` was called."""
        return bool(self.closed)

    def __repr__(self):
        if self.closed:
            return f"<barecuda.Event (closed) on device {self.device.ordinal}>"
        return f"<barecuda.Event 0x{<size_t>self.handle:x} on device {self.device.ordinal}>"

    @property
    def handle_int(self):
        """The ``CUevent`` as an int (0 after close())."""
        return <size_t>self.handle

    def record(self, stream=None):
        """Record the event on ``stream`` (default stream when None). Returns self."""
        cdef CUstream h
        _guard_event(self)
        stream_handle(stream, &h)
        check(D.cuEventRecord(self.handle, h), b"cuEventRecord")
        return self

    def query(self):
        """True when the work before the event's last record is done; never blocks."""
        _guard_event(self)
        cdef CUresult rc = D.cuEventQuery(self.handle)
        if rc == 0:
            return True
        if rc == CUDA_ERROR_NOT_READY:
            return False
        check(rc, b"cuEventQuery")

    def synchronize(self, timeout=None):
        """Block until the event has completed (GIL released; Ctrl-C interrupts the wait),
        then raise an exception a CUDA graph host node stored, if any.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait at most; then ``TimeoutError`` is raised and the GPU work
            keeps running. None (default) waits as long as it takes.
        """
        cdef double t = timeout_arg(timeout)
        _guard_event(self)
        bc_use_enter(&self._uses)         # enter first, then look (bc_uses.h)
        try:
            _guard_event(self)
            wait_until(<query_fn>D.cuEventQuery, <void *>self.handle, b"cuEventSynchronize", t, self)
        finally:
            event_done(self)
        if ST.host_errors:
            lazy_module(&_host_node_mod, "barecuda.graph._host_node").check_host_errors()

    def elapsed_ms(self, Event start not None):
        """Milliseconds from ``start`` to this event: call it on the LATER event,
        ``end.elapsed_ms(start)`` (both recorded with timing, both complete).

        Raises
        ------
        ValueError
            When an event was made with ``timing=False``, or when ``start`` completed
            after this event (the call is reversed: use ``start.elapsed_ms(end)``'s
            mirror, ``end.elapsed_ms(start)``).
        """
        cdef float ms = 0
        if not (self.timing and start.timing):
            raise ValueError("both events must be created with timing=True to measure elapsed time")
        _guard_event(start)
        _guard_event(self)
        check(D.cuEventElapsedTime(&ms, start.handle, self.handle), b"cuEventElapsedTime")
        if ms < 0:
            raise ValueError(f"elapsed_ms is called on the later event with the earlier one: "
                             f"end.elapsed_ms(start); this call is reversed ({-ms:.4g} ms the other way)")
        return ms

    def __sub__(self, other):
        """``end - start`` is ``end.elapsed_ms(start)``."""
        if not isinstance(other, Event):
            return NotImplemented
        return self.elapsed_ms(other)

    def __rsub__(self, other):
        """``end - start`` with ``start`` this event: ``other.elapsed_ms(self)``."""
        if not isinstance(other, Event):
            return NotImplemented
        return (<Event>other).elapsed_ms(self)
