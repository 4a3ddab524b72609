"""CUDA graphs: stream capture.

Owns: ``capture(stream, mode)`` / ``Stream.capture`` (the ``Capture`` context manager:
``cuStreamBeginCapture`` .. ``cuStreamEndCapture``, a failed capture ended and
discarded), ``is_capturing``, and the recorder the launch paths call while a capture
runs (``_launch.set_capture_hook``): a launch on a capturing stream makes the captured
graph hold the kernel (or plan) and its arguments, and remember the kernel by its
CUfunction so that ``Graph.kernel_nodes`` can map captured kernel nodes back to it.
The caching allocator's capture path (graph memory) is in ``_pool.pyx``.
"""
__all__ = ["Capture", "capture", "is_capturing"]
cimport cython
from libc.string cimport memset
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from cpython.ref cimport PyObject
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.object cimport PyTypeObject, Py_TYPE

cdef extern from "Python.h":
    PyTypeObject PyLong_Type
    PyTypeObject PyFloat_Type
    PyTypeObject PyBool_Type

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current
from barecuda._device cimport Device, device_of, make_current
from barecuda._stream cimport Stream, stream_handle
from barecuda._buffer cimport DeviceBuffer, owner_of, KIND_POOL, capture_use_slot
from barecuda._driver_pool cimport flush_capture_frees
from barecuda._pool cimport bc_block, FROM_GRAPH
from barecuda._launch cimport Kernel, set_capture_hook
from barecuda.graph._graph cimport Graph, graph_shell
from barecuda.graph._nodes cimport need, hold
from barecuda._errors import make_error

cdef bc_driver_t *D = driver_table()

cdef struct _seen_t:
    void **slots            # NULL or an address; mask + 1 of them (a power of two)
    size_t mask
    size_t n

cdef enum:
    _SEEN_START = 64        # first size of a capture's address set
    _RECENT = 8             # argument positions whose latest held object a capture remembers
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
    cdef list keep                  # the graph's reference list the recorder appends to
    cdef _seen_t seen               # addresses of the objects the recorder put in keep
    # The latest launch's kernel (or plan) and its held arguments by position: all in
    # `seen` (so held, their addresses not reusable), a launch that repeats them skips
    # the set's lookups. NULL where the position held nothing.
    cdef void *recent_obj
    cdef void *recent[_RECENT]

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

    def __dealloc__(self):
        _seen_free(&self.seen)

    def __enter__(self):
        cdef Device dev = (<Stream>self.stream).device if isinstance(self.stream, Stream) else device_of(None)
        if self.active:
            raise RuntimeError("this capture is already running")
        for other in _active_captures:
            if (<Capture>other).hs == self.hs:
                # Before the driver (which would answer CUDA_ERROR_ILLEGAL_STATE and leave
                # the running capture alone): one stream, one capture at a time.
                raise ValueError(f"stream 0x{<size_t>self.hs:x} is already capturing: captures on one stream "
                                 "do not nest (end the running capture first, or capture on another stream)")
        ensure_driver(ST)
        need(<void *>D.cuStreamBeginCapture, "cuStreamBeginCapture")
        make_current(dev)
        self.graph = graph_shell(dev)
        self.graph.captured = True
        self.graph.capturing = True
        self.graph._keep.append(self.stream)
        self.keep = self.graph._keep
        _seen_free(&self.seen)
        _seen_init(&self.seen)
        _recent_reset(self)
        check(D.cuStreamBeginCapture(self.hs, <CUstreamCaptureMode>self.mode), b"cuStreamBeginCapture")
        self.active = True
        if type(self.stream) is Stream:
            (<Stream>self.stream)._captures += 1        # Stream.close() refuses while it runs
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
        if type(self.stream) is Stream:
            (<Stream>self.stream)._captures -= 1
        _active_captures.remove(self)
        self.keep = None
        _seen_free(&self.seen)
        if not _active_captures:
            set_capture_hook(NULL)
            capture_use_slot()[0] = NULL
        set_current(self.graph.ctx)
        rc = D.cuStreamEndCapture(self.hs, &g)
        if not _active_captures and ST.capture_frees:
            flush_capture_frees()      # frees _driver_pool set aside while captures ran
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


cdef int _record_launch(size_t hs, object obj, Kernel k, object args) except -1:
    """The launch paths' capture hook (_launch.set_capture_hook), set while a capture
    runs: a launch on a capturing stream makes its graph hold the kernel (or plan) and
    the arguments, and remember the kernel by its CUfunction (Graph.kernel_nodes)."""
    cdef Py_ssize_t i
    for i in range(PyList_GET_SIZE(_active_captures)):     # the common case, with no tuple made
        if <size_t>(<Capture>PyList_GET_ITEM(_active_captures, i)).hs == hs:
            return _record_into(<Capture>PyList_GET_ITEM(_active_captures, i), obj, k, args)
    targets = _targets(hs)              # another stream, joined to a capture or not
    if targets is not None:
        for c in targets:
            _record_into(<Capture>c, obj, k, args)
    return 0


cdef int _record_into(Capture c, object obj, Kernel k, object args) except -1:
    """Make c's graph hold obj (a Kernel or a LaunchPlan), its kernel and the arguments
    that can reference memory. Each object is held (and a buffer pinned) once per
    capture: the graph holds it until it goes, whatever the number of launches that use
    it; ints, floats, bools and None hold nothing and are skipped."""
    cdef Py_ssize_t i, n
    cdef PyObject *a
    cdef PyTypeObject *t
    if c.graph._keep is not c.keep:     # the graph was closed during the capture: a new list
        _seen_reset(&c.seen)
        _recent_reset(c)
        c.keep = c.graph._keep
    if <void *>obj != c.recent_obj:
        if _seen_add(&c.seen, <void *>obj):
            c.keep.append(obj)
            if <object>k is not obj:
                if _seen_add(&c.seen, <void *>k):
                    c.keep.append(k)
                    c.graph._funcs[<size_t>k.func] = k
            else:
                c.graph._funcs[<size_t>k.func] = k
        c.recent_obj = <void *>obj
    if type(args) is tuple:
        n = PyTuple_GET_SIZE(args)
    else:
        n = PyList_GET_SIZE(args)        # a plan's argument list
    for i in range(n):
        a = PyTuple_GET_ITEM(args, i) if type(args) is tuple else PyList_GET_ITEM(args, i)
        if i < _RECENT and <void *>a == c.recent[i]:
            continue            # the object the previous launch had here: held already
        t = Py_TYPE(<object>a)
        if t is &PyLong_Type or t is &PyFloat_Type or t is &PyBool_Type or a == <PyObject *>None:
            continue
        if not _seen_has(&c.seen, <void *>a):
            if _graph_memory(<object>a):
                continue        # (graph memory is not held, so not in the set: its address may be reused)
            _seen_add(&c.seen, <void *>a)
            hold(c.keep, (<object>a,))
        if i < _RECENT:
            c.recent[i] = <void *>a
    return 0


cdef inline void _recent_reset(Capture c) noexcept:
    cdef int i
    c.recent_obj = NULL
    for i in range(_RECENT):
        c.recent[i] = NULL


cdef object _targets(size_t hs):
    """The running captures that work queued on stream hs goes into (a tuple), or None
    (_record_launch and _record_use)."""
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


# ---- the objects a capture already holds: a set of addresses (open addressing, linear
# probing, grown at half full). Every address in it is of an object in the capture's
# reference list, alive until that list goes, so an address cannot be reused meanwhile
# (objects not held, such as graph memory, are never put in it).
cdef int _seen_init(_seen_t *s) except -1:
    s.slots = <void **>PyMem_Calloc(_SEEN_START, sizeof(void *))
    if s.slots == NULL:
        raise MemoryError()
    s.mask = _SEEN_START - 1
    s.n = 0
    return 0


cdef void _seen_free(_seen_t *s) noexcept:
    PyMem_Free(s.slots)
    s.slots = NULL
    s.mask = 0
    s.n = 0


cdef void _seen_reset(_seen_t *s) noexcept:
    if s.slots != NULL:
        memset(s.slots, 0, (s.mask + 1) * sizeof(void *))
    s.n = 0


cdef inline size_t _seen_slot(size_t p, size_t mask) noexcept nogil:
    return ((p >> 4) * <size_t>0x9E3779B97F4A7C15ULL >> 20) & mask


cdef int _seen_grow(_seen_t *s) except -1:
    cdef size_t cap = (s.mask + 1) * 2, i, j
    cdef void **old = s.slots
    cdef void **new = <void **>PyMem_Calloc(cap, sizeof(void *))
    if new == NULL:
        raise MemoryError()
    for i in range(s.mask + 1):
        if old[i] != NULL:
            j = _seen_slot(<size_t>old[i], cap - 1)
            while new[j] != NULL:
                j = (j + 1) & (cap - 1)
            new[j] = old[i]
    s.slots = new
    s.mask = cap - 1
    PyMem_Free(old)
    return 0


cdef inline bint _seen_has(_seen_t *s, void *p) noexcept:
    cdef size_t j = _seen_slot(<size_t>p, s.mask)
    while s.slots[j] != NULL:
        if s.slots[j] == p:
            return True
        j = (j + 1) & s.mask
    return False


cdef inline int _seen_add(_seen_t *s, void *p) except -1:
    """1 when p was not in the set (now it is), 0 when it was."""
    cdef size_t j = _seen_slot(<size_t>p, s.mask)
    while s.slots[j] != NULL:
        if s.slots[j] == p:
            return 0
        j = (j + 1) & s.mask
    s.slots[j] = p
    s.n += 1
    if 2 * s.n > s.mask:
        _seen_grow(s)
    return 1


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

