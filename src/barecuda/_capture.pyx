"""CUDA graphs: stream capture.

Owns: ``capture(stream, mode)`` / ``Stream.capture`` (the ``Capture`` context manager:
``cuStreamBeginCapture`` .. ``cuStreamEndCapture``, a failed capture ended and
discarded), ``is_capturing``, and the recorder the launch paths call while a capture
runs (``_launch.set_capture_hook``): a launch on a capturing stream makes the captured
graph hold the kernel (or plan) and its arguments, and remember the kernel by its
CUfunction so that ``Graph.kernel_nodes`` can map captured kernel nodes back to it.
The caching allocator's capture path (graph memory) is in ``_pool.pyx``.
"""
cimport cython

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current
from barecuda._device cimport Device, device_of
from barecuda._stream cimport Stream, stream_handle
from barecuda._buffer cimport DeviceBuffer, owner_of, KIND_POOL, capture_use_slot
from barecuda._driver_pool cimport flush_capture_frees
from barecuda._pool cimport bc_block, FROM_GRAPH
from barecuda._launch cimport Kernel, set_capture_hook
from barecuda._graph cimport Graph, need, graph_shell, hold
from barecuda._errors import make_error
from barecuda import _pool

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()

_MODES = {"global": CU_STREAM_CAPTURE_MODE_GLOBAL, "thread_local": CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
          "relaxed": CU_STREAM_CAPTURE_MODE_RELAXED}


@cython.final
cdef class Capture:
    """Context manager of a stream capture: ``with capture(stream) as graph:``.

    Everything queued on ``stream`` inside the block (kernel launches, plans, plan
    lists, device-to-device, pinned and device-memset copies, event record/wait,
    stream-ordered allocations) becomes a node of ``graph`` instead of running.
    On leaving the block the capture ends; if the block raised, or an operation that
    cannot be captured invalidated the capture, the partial graph is destroyed (and
    ``CudaStreamCaptureError`` names why in the latter case).
    """
    cdef object stream
    cdef CUstream hs
    cdef int mode
    cdef Graph graph
    cdef bint active

    def __cinit__(self, stream, mode="global"):
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {sorted(_MODES)}, got {mode!r}")
        if stream is None:
            raise ValueError("the legacy default stream (stream=None) cannot be captured; capture a Stream")
        if isinstance(stream, Stream) and (<Stream>stream).handle == NULL:
            raise ValueError("stream is closed or is the legacy default stream, which cannot be captured")
        stream_handle(stream, &self.hs)
        if self.hs == NULL or self.hs == CU_STREAM_LEGACY:
            raise ValueError("the legacy default stream cannot be captured; capture a Stream")
        self.stream = stream
        self.mode = _MODES[mode]
        self.active = False

    def __enter__(self):
        cdef Device dev = (<Stream>self.stream).device if isinstance(self.stream, Stream) else device_of(None)
        if self.active:
            raise RuntimeError("this capture is already running")
        ensure_driver(ST)
        need(<void *>D.cuStreamBeginCapture, "cuStreamBeginCapture")
        dev.activate()
        self.graph = graph_shell(dev)
        self.graph.captured = True
        self.graph.capturing = True
        self.graph._keep.append(self.stream)
        check(D.cuStreamBeginCapture(self.hs, <CUstreamCaptureMode>self.mode), b"cuStreamBeginCapture")
        self.active = True
        _pool._capture_started()
        _active_captures.append(self)
        set_capture_hook(_record_launch)
        capture_use_slot()[0] = _record_use
        return self.graph

    def __exit__(self, exc_type, exc, tb):
        cdef CUgraph g = NULL
        cdef CUresult rc
        if not self.active:
            return False
        self.active = False
        self.graph.capturing = False
        _active_captures.remove(self)
        if not _active_captures:
            set_capture_hook(NULL)
            capture_use_slot()[0] = NULL
        set_current(self.graph.ctx)
        rc = D.cuStreamEndCapture(self.hs, &g)
        _pool._capture_ended()
        if not _active_captures:
            flush_capture_frees()
        if exc_type is not None:
            # Discard the partial graph; the block's exception propagates.
            if g != NULL:
                D.cuGraphDestroy(g)
            return False
        if rc != 0:
            if g != NULL:
                D.cuGraphDestroy(g)
            raise make_error(rc, "cuStreamEndCapture",
                             "the capture was invalidated: an operation that cannot be captured (a synchronize, "
                             "a query, a blocking or pageable copy, an allocation outside the stream order) ran "
                             "during it; the partial graph was discarded and the stream is usable again")
        self.graph.handle = g
        self.graph.owned = True
        return False


cdef list _active_captures = []     # Capture objects running now (any thread)


cdef int _record_launch(size_t hs, object obj, object args) except -1:
    """The launch paths' capture hook (_launch.set_capture_hook), set while a capture
    runs: a launch on a capturing stream makes its graph hold the kernel (or plan) and
    the arguments, and remember the kernel by its CUfunction (Graph.kernel_nodes)."""
    cdef Capture c
    cdef Kernel k
    cdef CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE
    targets = None
    for c in _active_captures:
        if <size_t>c.hs == hs:
            targets = (c,)
            break
    if targets is None:
        # Another stream: in a capture only when joined to one (event wait). Which one
        # is not asked: holding the references in every running capture is safe.
        if hs == 0 or D.cuStreamIsCapturing(<CUstream>hs, &status) != 0 or status == CU_STREAM_CAPTURE_STATUS_NONE:
            return 0
        targets = tuple(_active_captures)
    if isinstance(obj, Kernel):
        k = <Kernel>obj
    else:                               # a LaunchPlan: it holds its arguments itself
        k = obj.kernel
        args = obj.args
    if args:
        args = [a for a in args if not _graph_memory(a)]
    for c in targets:
        c.graph._keep.append(obj)
        if obj is not k:
            c.graph._keep.append(k)
        if args:
            hold(c.graph._keep, args)
        c.graph._funcs[<size_t>k.func] = k
    return 0


cdef object _targets(size_t hs):
    """The running captures that work queued on stream hs goes into (a tuple), or None
    (as _record_launch finds them)."""
    cdef Capture c
    cdef CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE
    for c in _active_captures:
        if <size_t>c.hs == hs:
            return (c,)
    # Another stream: in a capture only when joined to one (event wait). Which one
    # is not asked: holding the references in every running capture is safe.
    if hs == 0 or D.cuStreamIsCapturing(<CUstream>hs, &status) != 0 or status == CU_STREAM_CAPTURE_STATUS_NONE:
        return None
    return tuple(_active_captures)


cdef int _record_use(CUstream hs, object a, object b) except -1:
    """The copies' and memsets' capture hook (_buffer.pxd, capture_use_t), set while a
    capture runs: a copy or memset on a capturing stream makes its graph hold both
    sides (DeviceBuffers pinned, PinnedBuffers pinned: their close() defers the free),
    except graph memory (the graph owns it). 1 when hs is in a capture, else 0."""
    cdef Capture c
    targets = _targets(<size_t>hs)
    if targets is None:
        return 0
    objs = [o for o in (a, b) if o is not None and not _graph_memory(o)]
    if objs:
        for c in targets:
            hold(c.graph._keep, objs)
    return 1


cdef bint _graph_memory(object a):
    """a is a buffer the capture allocated from the caching allocator (a graph allocation
    node): the graph owns that memory, and holding the object would keep the user's free
    out of the graph (no free node, so the executable could not be relaunched)."""
    cdef DeviceBuffer o
    if type(a) is not DeviceBuffer:
        return False
    o = owner_of(<DeviceBuffer>a)
    if o._graph_alloc:                  # driver allocators' graph allocations (_driver_pool)
        return True
    return o._kind == KIND_POOL and o._block != NULL and (<bc_block *>o._block).from_async == FROM_GRAPH


def capture(stream, mode="global"):
    """Capture the work queued on ``stream`` into a :class:`Graph`.

    Parameters
    ----------
    stream : Stream
        Not the legacy default stream (the driver cannot capture it).
    mode : {"global", "thread_local", "relaxed"}
        ``cuStreamBeginCapture`` mode: which calls made by other threads (global) or
        this thread (thread_local) during the capture are refused as unsafe; relaxed
        refuses none.

    Returns
    -------
    Capture
        A context manager whose ``__enter__`` gives the (still empty) Graph.

    Examples
    --------
    >>> with capture(s) as g:             # doctest: +SKIP
    ...     kernel.launch(grid, block, x, n, stream=s)
    >>> exe = g.instantiate(); exe.launch(s)
    """
    return Capture(stream, mode)


def is_capturing(stream):
    """True while ``stream`` is capturing (``cuStreamIsCapturing``; invalidated counts)."""
    cdef CUstream hs = NULL
    cdef CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE
    ensure_driver(ST)
    need(<void *>D.cuStreamIsCapturing, "cuStreamIsCapturing")
    stream_handle(stream, &hs)
    check(D.cuStreamIsCapturing(hs, &st), b"cuStreamIsCapturing")
    return st != CU_STREAM_CAPTURE_STATUS_NONE

