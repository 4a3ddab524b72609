"""CUDA graphs.

Owns: stream capture (``capture(stream, mode)``, ``Stream.capture``), explicit graphs
(``Graph``: kernel, memcpy, memset, host-function, event, child-graph, empty and
conditional nodes with explicit dependencies), executable graphs (``GraphExec``:
instantiate, launch, upload, whole-graph update, node enable/disable) and kernel-node
handles (``ExecKernelNode``: one argument repacked in C and pushed to the executable
with ``cuGraphExecKernelNodeSetParams``), plus the C trampoline that runs Python
host-node callables.

Lifetimes: a Graph holds every object its nodes reference (buffers, kernels, callables,
events, child graphs); an executable holds the graph it came from and a snapshot of
those references taken at instantiation and at each update, and marks the buffers as
used on its launch stream(s) when it goes, so that their stream-ordered free waits for
launched work. Graphs made by capture hold only what ``keep_alive`` is given (the
driver records addresses, not objects): see docs/graphs.md.

Host-node exceptions are stored (never lost) and raised by the next
``GraphExec.launch``/``synchronize``/``check_host_errors`` in the process.
"""
cimport cython
from libc.string cimport memcpy, memset
from libc.stdint cimport uintptr_t, uint8_t, uint16_t, uint32_t
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.list cimport PyList_GET_ITEM, PyList_SET_ITEM
from cpython.object cimport PyTypeObject, Py_TYPE

cdef extern from "Python.h":
    PyTypeObject PyLong_Type

import os
import warnings
import weakref

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current
from barecuda._device cimport Device, device_of
from barecuda._stream cimport Stream, Event, stream_handle, wait_interruptible, _query_fn
from barecuda._buffer cimport DeviceBuffer, note_use
from barecuda._host cimport PinnedBuffer
from barecuda._launch cimport Kernel, pack_arg, check_dims
from barecuda._pack cimport bc_param, bc_store_int, int_ok, _bc_as_ll
from barecuda._signature cimport bc_kind_min, bc_kind_max, bc_kind_is_pointer
from barecuda._errors import make_error, CudaWarning, CudaStreamCaptureError
from barecuda._loader import require_symbol
from barecuda import _pool

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()

_TOKEN = object()

_MODES = {"global": CU_STREAM_CAPTURE_MODE_GLOBAL, "thread_local": CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
          "relaxed": CU_STREAM_CAPTURE_MODE_RELAXED}

_KINDS = ("kernel", "memcpy", "memset", "host", "graph", "empty", "event_wait", "event_record",
          "ext_semaphore_signal", "ext_semaphore_wait", "mem_alloc", "mem_free", "batch_mem_op", "conditional")

_UPDATE_REASONS = {
    1: "an unexpected error (see the CUresult)",
    2: "the topology changed (nodes or dependencies were added or removed)",
    3: "the node's type changed",
    4: "the kernel's function changed",
    5: "its parameters changed in a way an update cannot apply",
    6: "something about the node cannot be updated",
    7: "the kernel's function changed in an unsupported way (another context, or different launch attributes)",
    8: "its attributes changed in a way an update cannot apply",
}

_INSTANTIATE_REASONS = {
    1: "an unexpected error",
    2: "the graph's structure is invalid (a cycle?)",
    3: "a node cannot run in a graph launched from the device",
    4: "nodes belong to more than one context",
    5: "a conditional handle is not used by any conditional node",
}

# Symbols by feature, with the CUDA version that brought them (for DriverVersionError).
cdef dict _SYMBOL_VERSION = {
    "cuStreamBeginCapture": 10010, "cuGraphCreate": 10000, "cuGraphAddKernelNode": 12000,
    "cuGraphKernelNodeSetParams": 12000, "cuGraphInstantiateWithParams": 12000,
    "cuGraphInstantiateWithFlags": 11040, "cuGraphExecUpdate": 12000, "cuGraphExecKernelNodeSetParams": 12000,
    "cuGraphAddEventRecordNode": 11010, "cuGraphAddEventWaitNode": 11010, "cuGraphAddNode": 12030,
    "cuGraphConditionalHandleCreate": 12030, "cuGraphDebugDotPrint": 11030, "cuGraphUpload": 11010,
    "cuGraphNodeSetEnabled": 11060, "cuGraphNodeGetEnabled": 11060,
}


cdef int _need(void *fn, str name) except -1:
    if fn == NULL:
        require_symbol(name, "CUDA graphs", _SYMBOL_VERSION.get(name, 10000))
    return 0


# ------------------------------------------------------------- host nodes
cdef list _host_errors = []
cdef Py_ssize_t _n_host_errors = 0
cdef Py_ssize_t _n_host_errors_dropped = 0


@cython.final
cdef class _HostCall:
    """One host node's callable; the C trampoline's userData (kept alive by its Graph)."""
    cdef object fn
    cdef str where

    def __repr__(self):
        return f"<host node {self.where}>"


cdef void _run_host(PyObject *user) noexcept:
    global _n_host_errors, _n_host_errors_dropped
    cdef _HostCall c = <_HostCall><object>user
    try:
        c.fn()
    except BaseException as e:
        # Stored, not raised: the driver's thread has nowhere to raise to.
        if len(_host_errors) < 1000:
            try:
                e.add_note(f"raised by the host-node callable {c.fn!r} ({c.where})")
            except AttributeError:       # Python < 3.11: no add_note; PEP 678's attribute itself
                try:
                    e.__notes__ = [*getattr(e, "__notes__", ()),
                                   f"raised by the host-node callable {c.fn!r} ({c.where})"]
                except Exception:
                    pass
            except Exception:
                pass
            _host_errors.append(e)
        else:
            _n_host_errors_dropped += 1
        _n_host_errors += 1


cdef void _host_trampoline(void *user) noexcept nogil:
    # Never touch an interpreter that is going away.
    if ST.finalizing or ST.forked:
        return
    with gil:
        _run_host(<PyObject *>user)


def check_host_errors():
    """Raise the first stored exception of a host-node callable, if any (and forget it;
    later ones are raised by later calls). Called by ``GraphExec.launch`` and
    ``GraphExec.synchronize``; call it after synchronizing a stream yourself."""
    global _n_host_errors, _n_host_errors_dropped
    if _n_host_errors == 0:
        return
    if not _host_errors:
        n = _n_host_errors_dropped
        _n_host_errors = 0
        _n_host_errors_dropped = 0
        raise RuntimeError(f"{n} more host-node callables raised (their exceptions were not kept: over 1000 stored)")
    e = _host_errors.pop(0)
    _n_host_errors -= 1
    raise e


def _warn_unraised_at_exit():
    if _host_errors:
        warnings.warn(f"{len(_host_errors)} exception(s) raised by CUDA graph host nodes were never "
                      f"retrieved; the first: {_host_errors[0]!r}", CudaWarning)


import atexit
atexit.register(_warn_unraised_at_exit)


cdef inline int _raise_pending() except -1:
    if _n_host_errors:
        check_host_errors()
    return 0


# --------------------------------------------------------------- helpers
cdef object _kind_name(CUgraphNodeType t):
    return _KINDS[<int>t] if 0 <= <int>t < len(_KINDS) else f"type {<int>t}"


cdef CUgraphNode *_dep_array(Graph g, object depends_on, size_t *n) except? NULL:
    """CUgraphNode array for depends_on (a node or an iterable of nodes of g); NULL when empty.
    The caller frees it with PyMem_Free."""
    cdef GraphNode d
    cdef CUgraphNode *arr
    cdef size_t i = 0
    if depends_on is None:
        n[0] = 0
        return NULL
    if isinstance(depends_on, GraphNode):
        deps = (depends_on,)
    else:
        deps = tuple(depends_on)
    n[0] = len(deps)
    if n[0] == 0:
        return NULL
    for x in deps:
        if not isinstance(x, GraphNode):
            raise TypeError(f"depends_on takes graph nodes, got {type(x).__name__}")
        if (<GraphNode>x)._graph_ref() is not g:
            raise ValueError(f"dependency {x!r} belongs to another graph")
    arr = <CUgraphNode *>PyMem_Malloc(n[0] * sizeof(CUgraphNode))
    if arr == NULL:
        raise MemoryError()
    for x in deps:
        arr[i] = (<GraphNode>x).handle
        i += 1
    return arr


cdef int _ptr_of(object obj, CUdeviceptr *dev, void **host, size_t *size, str what) except -1:
    """Device or pinned-host address of a copy/memset operand."""
    if isinstance(obj, DeviceBuffer):
        (<DeviceBuffer>obj)._check_open()
        dev[0] = (<DeviceBuffer>obj).ptr
        host[0] = NULL
        size[0] = (<DeviceBuffer>obj).nbytes
        return 0
    if isinstance(obj, PinnedBuffer):
        if (<PinnedBuffer>obj)._closed:
            raise ValueError(f"{what}: the PinnedBuffer is closed")
        dev[0] = 0
        host[0] = (<PinnedBuffer>obj).ptr
        size[0] = (<PinnedBuffer>obj).nbytes_
        return 1
    # an array over pinned memory (bc.pinned_empty gives numpy arrays whose base is a PinnedBuffer)
    base = getattr(obj, "base", None)
    for _ in range(6):
        if base is None or isinstance(base, PinnedBuffer):
            break
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    iface = getattr(obj, "__array_interface__", None)
    if isinstance(base, PinnedBuffer) and iface is not None and not (<PinnedBuffer>base)._closed:
        addr = iface["data"][0]
        nbytes = obj.nbytes
        start = <size_t>(<PinnedBuffer>base).ptr
        if iface.get("strides") is not None and not obj.flags.c_contiguous:
            raise ValueError(f"{what}: the pinned array must be contiguous")
        if not (start <= addr and addr + nbytes <= start + (<PinnedBuffer>base).nbytes_):
            raise ValueError(f"{what}: the array lies outside its PinnedBuffer")
        dev[0] = 0
        host[0] = <void *><size_t>addr
        size[0] = nbytes
        return 1
    raise TypeError(f"{what} must be a DeviceBuffer, a PinnedBuffer or an array over one, got "
                    f"{type(obj).__name__} (graph copies cannot stage pageable host memory)")


# ------------------------------------------------------------------ capture
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
        _need(<void *>D.cuStreamBeginCapture, "cuStreamBeginCapture")
        dev.activate()
        self.graph = Graph.__new__(Graph, _TOKEN)
        self.graph.device = dev
        self.graph.ctx = dev.ctx
        self.graph.captured = True
        self.graph.capturing = True
        self.graph._keep.append(self.stream)
        check(D.cuStreamBeginCapture(self.hs, <CUstreamCaptureMode>self.mode), b"cuStreamBeginCapture")
        self.active = True
        _pool._capture_started()
        return self.graph

    def __exit__(self, exc_type, exc, tb):
        cdef CUgraph g = NULL
        cdef CUresult rc
        if not self.active:
            return False
        self.active = False
        self.graph.capturing = False
        set_current(self.graph.ctx)
        rc = D.cuStreamEndCapture(self.hs, &g)
        _pool._capture_ended()
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
    _need(<void *>D.cuStreamIsCapturing, "cuStreamIsCapturing")
    stream_handle(stream, &hs)
    check(D.cuStreamIsCapturing(hs, &st), b"cuStreamIsCapturing")
    return st != CU_STREAM_CAPTURE_STATUS_NONE


# -------------------------------------------------------------------- nodes
cdef class GraphNode:
    """A node of a :class:`Graph` (returned by the ``add_*`` methods)."""

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("graph nodes come from Graph.add_* methods")
        self.handle = NULL

    def __repr__(self):
        return f"<barecuda.GraphNode {self.kind} #{self.index}>"

    @property
    def graph(self):
        """The graph of this node (a node does not keep its graph alive)."""
        return _graph_of(self)

    @property
    def handle_int(self):
        """The ``CUgraphNode`` as an int."""
        return <size_t>self.handle


cdef Graph _graph_of(GraphNode n):
    g = n._graph_ref() if n._graph_ref is not None else None
    if g is None:
        raise ValueError(f"the graph of {n!r} is gone")
    return <Graph>g


@cython.final
cdef class KernelNode(GraphNode):
    """A kernel node: the kernel, its launch dimensions and its own parameter block.

    ``set_arg`` on this node changes the graph (later instantiations and
    ``GraphExec.update``); to change an executable graph use
    ``GraphExec.kernel_node(node).set_arg``.
    """

    def __dealloc__(self):
        PyMem_Free(self.buf)
        PyMem_Free(self.ptrs)
        self.buf = NULL
        self.ptrs = NULL

    def __repr__(self):
        return f"<barecuda.KernelNode {self.kernel.name!r} #{self.index}>"

    @property
    def grid(self):
        return (self.p.gridDimX, self.p.gridDimY, self.p.gridDimZ)

    @property
    def block(self):
        return (self.p.blockDimX, self.p.blockDimY, self.p.blockDimZ)

    @property
    def shared_mem(self):
        return self.p.sharedMemBytes

    @property
    def args(self):
        """The values last packed, one per parameter."""
        return tuple(self._vals)

    def set_arg(self, Py_ssize_t index, value):
        """Repack parameter ``index`` of this node in the graph (``cuGraphKernelNodeSetParams``)."""
        cdef list keep = []
        cdef Graph g = _graph_of(self)
        g._live()
        pack_arg(self.kernel, index, value, self.buf, NULL, keep)
        set_current(g.ctx)
        check(D.cuGraphKernelNodeSetParams(self.handle, &self.p), b"cuGraphKernelNodeSetParams")
        self._vals[index] = value
        g._keep.append(value)           # executables made earlier may hold the old value themselves
        if keep:
            g._keep.extend(keep)


@cython.final
cdef class ConditionalHandle:
    """A conditional node's condition (``CUgraphConditionalHandle``). Pass it to a kernel
    as an unsigned 64-bit argument; device code sets it with ``cudaGraphSetConditional``."""

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("conditional handles come from Graph.conditional_handle()")

    @property
    def value(self):
        """The handle as an int (what a kernel's ``cudaGraphConditionalHandle`` parameter takes)."""
        return <unsigned long long>self.h

    def __index__(self):
        return <unsigned long long>self.h

    def __int__(self):
        return <unsigned long long>self.h

    def __repr__(self):
        return f"<barecuda.ConditionalHandle {<unsigned long long>self.h} default={self.default}>"


@cython.final
cdef class ConditionalNode(GraphNode):
    """An IF, WHILE or SWITCH node; ``bodies`` are the graphs it runs (fill them with
    ``add_*`` like any graph)."""


# -------------------------------------------------------------------- graph
cdef class Graph:
    """A CUDA graph built node by node, or by :func:`capture`.

    Parameters
    ----------
    device : Device or int, optional

    Every ``add_*`` method takes ``depends_on`` (a node or an iterable of nodes of
    this graph): the new node runs after those. Nodes without dependencies may run
    concurrently.
    """

    def __cinit__(self, device=None, token=None):
        self.handle = NULL
        self.owned = False
        self._keep = []
        self._nodes = []
        self._by_handle = {}
        self._info = {}
        self._kernels = {}
        self.captured = False
        if token is _TOKEN or device is _TOKEN:
            return
        cdef Device dev = device_of(device)
        cdef CUgraph g = NULL
        ensure_driver(ST)
        _need(<void *>D.cuGraphCreate, "cuGraphCreate")
        dev.activate()
        check(D.cuGraphCreate(&g, 0), b"cuGraphCreate")
        self.handle = g
        self.owned = True
        self.device = dev
        self.ctx = dev.ctx

    def __dealloc__(self):
        if self.owned and self.handle != NULL and bc_driver_usable(ST):
            rc = D.cuGraphDestroy(self.handle)
            if rc != 0:
                warnings.warn(f"cuGraphDestroy in Graph.__dealloc__: {make_error(rc, 'cuGraphDestroy')}",
                              CudaWarning)
        self.handle = NULL

    def close(self):
        """Destroy the graph now (executables made from it are independent). Idempotent."""
        if self.owned and self.handle != NULL:
            set_current(self.ctx)
            check(D.cuGraphDestroy(self.handle), b"cuGraphDestroy")
        self.handle = NULL
        self.owned = False
        self._keep = []
        self._nodes = []
        self._by_handle = {}
        self._info = {}
        self._kernels = {}

    def __repr__(self):
        state = "closed" if self.handle == NULL else f"{len(self._nodes)} nodes added"
        return f"<barecuda.Graph {'captured ' if self.captured else ''}{state}>"

    cdef int _live(self) except -1:
        if self.handle == NULL:
            if self.capturing:
                raise ValueError("the graph is still being captured (use it after the with block)")
            raise ValueError("the graph is closed")
        return 0

    cdef int _adopt(self, object node) except -1:
        cdef GraphNode n = <GraphNode>node
        n._graph_ref = weakref.ref(self)
        n.index = len(self._nodes)
        ref = weakref.ref(n)
        self._nodes.append(ref)
        self._by_handle[<size_t>n.handle] = ref
        if isinstance(n, KernelNode):
            self._kernels[n.index] = n
            self._info[<size_t>n.handle] = (n.index, n.kind, (<KernelNode>n).kernel.name)
        else:
            self._info[<size_t>n.handle] = (n.index, n.kind, None)
        return 0

    @property
    def handle_int(self):
        """The ``CUgraph`` as an int."""
        return <size_t>self.handle

    def keep_alive(self, *objs):
        """Hold ``objs`` as long as this graph (and executables made from it) live.
        Captured graphs need it for the buffers their work uses (see docs/graphs.md)."""
        self._live()
        self._keep.extend(objs)

    cdef list _snapshot(self):
        """Every object the graph references, flat (nested _keep lists of bodies and children unrolled)."""
        out = []
        todo = [self._keep]
        while todo:
            for o in todo.pop():
                if type(o) is list:
                    todo.append(o)
                else:
                    out.append(o)
        return out

    # ----------------------------------------------------------- node builders
    def add_kernel(self, Kernel kernel not None, grid, block, *args, shared_mem=0, depends_on=None):
        """Add a kernel node; arguments are checked and packed as :meth:`Kernel.launch` does.

        Returns
        -------
        KernelNode
        """
        cdef KernelNode n
        cdef size_t nd = 0
        cdef CUgraphNode *deps = NULL
        cdef CUgraphNode h = NULL
        cdef Py_ssize_t i
        cdef list keep = []
        cdef unsigned int smem
        self._live()
        _need(<void *>D.cuGraphAddKernelNode, "cuGraphAddKernelNode")
        if kernel.func == NULL:
            raise ValueError(f"kernel {kernel.name!r}: its module is closed")
        if kernel.nparams < 0:
            raise TypeError(f"kernel {kernel.name!r} has no known parameter layout; give a signature to get_kernel")
        if len(args) != kernel.nparams:
            raise TypeError(f"kernel {kernel.name!r} takes {kernel.nparams} arguments, got {len(args)}")
        if type(shared_mem) is not int or shared_mem < 0:
            import operator
            shared_mem = operator.index(shared_mem)
            if shared_mem < 0:
                raise ValueError(f"shared_mem must be >= 0, got {shared_mem}")
        if shared_mem > 0xFFFFFFFF:
            raise ValueError(f"shared_mem={shared_mem} bytes exceeds kernel {kernel.name!r}'s limit")
        smem = shared_mem
        n = KernelNode.__new__(KernelNode, _TOKEN)
        n.kind = "kernel"
        n.kernel = kernel
        memset(&n.p, 0, sizeof(n.p))
        check_dims(kernel, grid, block, smem, &n.p.gridDimX, &n.p.blockDimX)
        n.p.sharedMemBytes = smem
        n.buf = <char *>PyMem_Malloc(max(kernel.argbytes, 1))
        n.ptrs = <void **>PyMem_Malloc(max(kernel.nparams, 1) * sizeof(void *))
        if n.buf == NULL or n.ptrs == NULL:
            raise MemoryError()
        memset(n.buf, 0, max(kernel.argbytes, 1))
        for i in range(kernel.nparams):
            n.ptrs[i] = n.buf + kernel.params[i].offset
            pack_arg(kernel, i, args[i], n.buf, NULL, keep)
        n._vals = list(args)
        self._keep.append(kernel)
        self._keep.extend(args)
        n.p.func = kernel.func
        n.p.kernelParams = n.ptrs if kernel.nparams > 0 else NULL
        n.p.ctx = kernel.ctx
        deps = _dep_array(self, depends_on, &nd)
        try:
            set_current(self.ctx)
            check(D.cuGraphAddKernelNode(&h, self.handle, deps, nd, &n.p), b"cuGraphAddKernelNode")
        finally:
            PyMem_Free(deps)
        n.handle = h
        self._adopt(n)
        if keep:
            self._keep.extend(keep)
        return n

    def add_plan(self, plan, depends_on=None):
        """Add a kernel node from a :class:`LaunchPlan` (its kernel, dimensions, shared
        memory and arguments; the plan's stream does not matter in a graph)."""
        if plan.config is not None:
            raise ValueError("plans bound with a LaunchConfig (clusters, cooperative, priority) cannot become "
                             "graph nodes here; capture them instead")
        return self.add_kernel(plan.kernel, plan.grid, plan.block, *plan.args, shared_mem=plan.shared_mem,
                               depends_on=depends_on)

    def add_memcpy(self, dst, src, nbytes=None, depends_on=None):
        """Add a copy node between DeviceBuffers and/or PinnedBuffers (``nbytes`` default:
        the smaller of the two)."""
        cdef CUDA_MEMCPY3D c
        cdef CUdeviceptr dd = 0, sd = 0
        cdef void *dh = NULL
        cdef void *sh = NULL
        cdef size_t dn = 0, sn = 0, n
        cdef int dhost, shost
        self._live()
        _need(<void *>D.cuGraphAddMemcpyNode, "cuGraphAddMemcpyNode")
        dhost = _ptr_of(dst, &dd, &dh, &dn, "dst")
        shost = _ptr_of(src, &sd, &sh, &sn, "src")
        if dhost and shost:
            raise ValueError("a graph copy needs device memory on at least one side")
        n = min(dn, sn) if nbytes is None else nbytes
        if n > dn or n > sn:
            raise ValueError(f"nbytes={n} exceeds dst ({dn} bytes) or src ({sn} bytes)")
        if n == 0:
            raise ValueError("a copy node of 0 bytes")
        memset(&c, 0, sizeof(c))
        c.dstMemoryType = CU_MEMORYTYPE_HOST if dhost else CU_MEMORYTYPE_DEVICE
        c.dstHost = dh
        c.dstDevice = dd
        c.srcMemoryType = CU_MEMORYTYPE_HOST if shost else CU_MEMORYTYPE_DEVICE
        c.srcHost = sh
        c.srcDevice = sd
        c.WidthInBytes = n
        c.Height = 1
        c.Depth = 1
        return self._add_simple("memcpy", depends_on, (dst, src), &c, NULL, NULL, None)

    def add_memset(self, dst, value, count=None, element_size=1, depends_on=None):
        """Add a memset node: ``count`` elements of ``element_size`` (1, 2 or 4) bytes set
        to ``value`` (default count: the whole buffer)."""
        cdef CUDA_MEMSET_NODE_PARAMS p
        cdef CUdeviceptr dd = 0
        cdef void *dh = NULL
        cdef size_t dn = 0
        self._live()
        _need(<void *>D.cuGraphAddMemsetNode, "cuGraphAddMemsetNode")
        if element_size not in (1, 2, 4):
            raise ValueError(f"element_size must be 1, 2 or 4, got {element_size!r}")
        if _ptr_of(dst, &dd, &dh, &dn, "dst"):
            raise TypeError("a memset node needs device memory (a DeviceBuffer)")
        if count is None:
            count = dn // element_size
        if count <= 0 or count * element_size > dn:
            raise ValueError(f"count={count} elements of {element_size} bytes do not fit dst ({dn} bytes)")
        if not 0 <= value < (1 << (8 * element_size)):
            raise OverflowError(f"value {value} does not fit {element_size} byte(s)")
        if dd % element_size:
            raise ValueError(f"dst is not aligned to {element_size} bytes")
        memset(&p, 0, sizeof(p))
        p.dst = dd
        p.value = value
        p.elementSize = element_size
        p.width = count
        p.height = 1
        p.pitch = count * element_size
        return self._add_simple("memset", depends_on, (dst,), NULL, &p, NULL, None)

    def add_host(self, fn, depends_on=None):
        """Add a host node that calls ``fn()`` (a Python callable) on a driver thread.

        An exception it raises is stored, never lost, and raised by the next
        ``GraphExec.launch``/``synchronize`` or :func:`check_host_errors`. The callable
        must not call CUDA (the driver forbids it in host nodes).
        """
        cdef CUDA_HOST_NODE_PARAMS p
        cdef _HostCall c
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self._live()
        _need(<void *>D.cuGraphAddHostNode, "cuGraphAddHostNode")
        c = _HostCall()
        c.fn = fn
        c.where = f"node #{len(self._nodes)}"
        p.fn = _host_trampoline
        p.userData = <void *>c
        return self._add_simple("host", depends_on, (c,), NULL, NULL, &p, None)

    def add_event_record(self, Event event not None, depends_on=None):
        """Add a node recording ``event``."""
        self._live()
        _need(<void *>D.cuGraphAddEventRecordNode, "cuGraphAddEventRecordNode")
        return self._add_simple("event_record", depends_on, (event,), NULL, NULL, NULL, event)

    def add_event_wait(self, Event event not None, depends_on=None):
        """Add a node waiting for ``event``."""
        self._live()
        _need(<void *>D.cuGraphAddEventWaitNode, "cuGraphAddEventWaitNode")
        return self._add_simple("event_wait", depends_on, (event,), NULL, NULL, NULL, event)

    def add_child(self, Graph child not None, depends_on=None):
        """Add ``child`` as a node (the driver copies it; ``child`` may change afterwards
        without affecting this graph). Its references are held too."""
        self._live()
        child._live()
        if child is self:
            raise ValueError("a graph cannot be its own child")
        _need(<void *>D.cuGraphAddChildGraphNode, "cuGraphAddChildGraphNode")
        return self._add_simple("graph", depends_on, (child._snapshot(),), NULL, NULL, NULL, child)

    def add_empty(self, depends_on=None):
        """Add an empty node (a join point for dependencies)."""
        self._live()
        _need(<void *>D.cuGraphAddEmptyNode, "cuGraphAddEmptyNode")
        return self._add_simple("empty", depends_on, (), NULL, NULL, NULL, None)

    cdef GraphNode _add_simple(self, str kind, object depends_on, tuple refs, CUDA_MEMCPY3D *cp,
                               CUDA_MEMSET_NODE_PARAMS *sp, CUDA_HOST_NODE_PARAMS *hp, object obj):
        cdef size_t nd = 0
        cdef CUgraphNode *deps = _dep_array(self, depends_on, &nd)
        cdef CUgraphNode h = NULL
        cdef CUresult rc
        cdef GraphNode n
        try:
            set_current(self.ctx)
            if kind == "memcpy":
                rc = D.cuGraphAddMemcpyNode(&h, self.handle, deps, nd, cp, self.ctx)
                call = b"cuGraphAddMemcpyNode"
            elif kind == "memset":
                rc = D.cuGraphAddMemsetNode(&h, self.handle, deps, nd, sp, self.ctx)
                call = b"cuGraphAddMemsetNode"
            elif kind == "host":
                rc = D.cuGraphAddHostNode(&h, self.handle, deps, nd, hp)
                call = b"cuGraphAddHostNode"
            elif kind == "event_record":
                rc = D.cuGraphAddEventRecordNode(&h, self.handle, deps, nd, (<Event>obj).handle)
                call = b"cuGraphAddEventRecordNode"
            elif kind == "event_wait":
                rc = D.cuGraphAddEventWaitNode(&h, self.handle, deps, nd, (<Event>obj).handle)
                call = b"cuGraphAddEventWaitNode"
            elif kind == "graph":
                rc = D.cuGraphAddChildGraphNode(&h, self.handle, deps, nd, (<Graph>obj).handle)
                call = b"cuGraphAddChildGraphNode"
            else:
                rc = D.cuGraphAddEmptyNode(&h, self.handle, deps, nd)
                call = b"cuGraphAddEmptyNode"
            check(rc, call)
        finally:
            PyMem_Free(deps)
        n = GraphNode.__new__(GraphNode, _TOKEN)
        n.handle = h
        n.kind = kind
        self._adopt(n)
        self._keep.extend(refs)
        return n

    # ------------------------------------------------------------ conditionals
    def conditional_handle(self, unsigned int default=0, bint assign_default=True):
        """A condition for conditional nodes of this graph (``cuGraphConditionalHandleCreate``).

        Parameters
        ----------
        default : int
            The value at each launch when ``assign_default`` (else at creation only).
        assign_default : bool
            Reset the value to ``default`` at every launch (``CU_GRAPH_COND_ASSIGN_DEFAULT``).
        """
        cdef ConditionalHandle c
        cdef CUgraphConditionalHandle h = 0
        self._live()
        _need(<void *>D.cuGraphConditionalHandleCreate, "cuGraphConditionalHandleCreate")
        set_current(self.ctx)
        check(D.cuGraphConditionalHandleCreate(&h, self.handle, self.ctx, default,
                                               CU_GRAPH_COND_ASSIGN_DEFAULT if assign_default else 0),
              b"cuGraphConditionalHandleCreate")
        c = ConditionalHandle.__new__(ConditionalHandle, _TOKEN)
        c.graph = self
        c.h = h
        c.default = default
        c.assign_default = assign_default
        return c

    cdef ConditionalNode _add_conditional(self, ConditionalHandle cond, CUgraphConditionalNodeType t,
                                          unsigned int size, str tname, object depends_on):
        cdef CUgraphNodeParams p
        cdef size_t nd = 0
        cdef CUgraphNode *deps = NULL
        cdef CUgraphNode h = NULL
        cdef CUgraph *bodies
        cdef ConditionalNode n
        cdef Graph b
        cdef unsigned int i
        self._live()
        _need(<void *>D.cuGraphAddNode, "cuGraphAddNode")
        if cond.graph is not self:
            raise ValueError("the condition handle belongs to another graph")
        try:
            memset(&p, 0, sizeof(p))
            p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL
            p.conditional.handle = cond.h
            p.conditional.type = t
            p.conditional.size = size
            # phGraph_out is an output: the driver replaces the pointer with an array it owns
            # (valid for the node's lifetime) holding the body graphs; the caller passes none.
            p.conditional.phGraph_out = NULL
            p.conditional.ctx = self.ctx
            deps = _dep_array(self, depends_on, &nd)
            set_current(self.ctx)
            check(D.cuGraphAddNode(&h, self.handle, deps, NULL, nd, &p), b"cuGraphAddNode")
        finally:
            PyMem_Free(deps)
        bodies = p.conditional.phGraph_out
        if bodies == NULL:
            raise RuntimeError("cuGraphAddNode returned no body graphs for the conditional node")
        out = []
        for i in range(size):
            if bodies[i] == NULL:
                raise RuntimeError(f"cuGraphAddNode returned no body graph {i} for the conditional node")
            b = Graph.__new__(Graph, _TOKEN)
            b.handle = bodies[i]
            b.owned = False
            b.device = self.device
            b.ctx = self.ctx
            b._parent = self        # the body's handle lives as long as this graph
            self._keep.append(b._keep)   # what the body's nodes reference (a list, not the body: no cycle)
            out.append(b)
        n = ConditionalNode.__new__(ConditionalNode, _TOKEN)
        n.handle = h
        n.kind = "conditional"
        n.type = tname
        n.condition = cond
        n.bodies = tuple(out)
        self._adopt(n)
        return n

    def add_if(self, ConditionalHandle condition not None, bint with_else=False, depends_on=None):
        """IF node: ``bodies[0]`` runs when the condition is non-zero; with ``with_else``,
        ``bodies[1]`` runs when it is zero."""
        return self._add_conditional(condition, CU_GRAPH_COND_TYPE_IF, 2 if with_else else 1, "if", depends_on)

    def add_while(self, ConditionalHandle condition not None, depends_on=None):
        """WHILE node: ``bodies[0]`` runs again and again while the condition is non-zero
        (checked before each pass); a kernel in the body ends the loop by setting it to 0
        with ``cudaGraphSetConditional``."""
        return self._add_conditional(condition, CU_GRAPH_COND_TYPE_WHILE, 1, "while", depends_on)

    def add_switch(self, ConditionalHandle condition not None, unsigned int n, depends_on=None):
        """SWITCH node with ``n`` bodies: ``bodies[value]`` runs; none when value >= n."""
        if n < 1:
            raise ValueError("a switch node needs at least one body")
        return self._add_conditional(condition, CU_GRAPH_COND_TYPE_SWITCH, n, "switch", depends_on)

    # ------------------------------------------------------------------ queries
    def nodes(self):
        """Every node, in the driver's order (``cuGraphGetNodes``). Nodes added through
        this object are returned as those objects; others (capture) as plain GraphNodes."""
        cdef size_t n = 0, i
        cdef CUgraphNode *arr
        cdef CUgraphNodeType t
        cdef GraphNode gn
        self._live()
        _need(<void *>D.cuGraphGetNodes, "cuGraphGetNodes")
        set_current(self.ctx)
        check(D.cuGraphGetNodes(self.handle, NULL, &n), b"cuGraphGetNodes")
        if n == 0:
            return []
        arr = <CUgraphNode *>PyMem_Malloc(n * sizeof(CUgraphNode))
        if arr == NULL:
            raise MemoryError()
        out = []
        try:
            check(D.cuGraphGetNodes(self.handle, arr, &n), b"cuGraphGetNodes")
            for i in range(n):
                ref = self._by_handle.get(<size_t>arr[i])
                known = ref() if ref is not None else None
                if known is None:
                    check(D.cuGraphNodeGetType(arr[i], &t), b"cuGraphNodeGetType")
                    gn = GraphNode.__new__(GraphNode, _TOKEN)
                    gn.handle = arr[i]
                    gn.kind = _kind_name(t)
                    self._adopt(gn)
                    known = gn
                out.append(known)
        finally:
            PyMem_Free(arr)
        return out

    def num_nodes(self):
        """Number of nodes (``cuGraphGetNodes``)."""
        cdef size_t n = 0
        self._live()
        _need(<void *>D.cuGraphGetNodes, "cuGraphGetNodes")
        set_current(self.ctx)
        check(D.cuGraphGetNodes(self.handle, NULL, &n), b"cuGraphGetNodes")
        return n

    def to_dot(self, path, bint verbose=False):
        """Write the driver's DOT picture of the graph to ``path`` (``cuGraphDebugDotPrint``)."""
        self._live()
        _need(<void *>D.cuGraphDebugDotPrint, "cuGraphDebugDotPrint")
        bpath = os.fsencode(path)
        set_current(self.ctx)
        check(D.cuGraphDebugDotPrint(self.handle, bpath, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE if verbose else 0),
              b"cuGraphDebugDotPrint")

    cdef str _describe(self, CUgraphNode h):
        info = self._info.get(<size_t>h)
        if info is None:
            return "a node the driver did not name" if h == NULL else f"node 0x{<size_t>h:x}"
        index, kind, name = info
        if name is not None:
            return f"node #{index} (kernel {name!r})"
        return f"node #{index} ({kind})"

    # ------------------------------------------------------------- instantiate
    def instantiate(self, upload=None, *, bint auto_free_on_launch=False, bint device_launch=False,
                    bint use_node_priority=False):
        """Make an executable graph.

        Parameters
        ----------
        upload : Stream, optional
            Upload the executable on this stream now (``CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD``),
            so that the first launch does not pay for it.
        auto_free_on_launch : bool
            Free memory allocated by the graph's allocation nodes and not freed by it
            before each relaunch.
        device_launch : bool
            Make it launchable from device code.
        use_node_priority : bool
            Run kernel nodes at their own priority attribute instead of the stream's.

        Returns
        -------
        GraphExec
        """
        cdef unsigned long long flags = 0
        cdef CUgraphExec x = NULL
        cdef CUDA_GRAPH_INSTANTIATE_PARAMS ip
        cdef CUstream hs = NULL
        cdef CUresult rc
        cdef GraphExec e
        self._live()
        if not self.owned:
            raise ValueError("a conditional body cannot be instantiated on its own")
        if auto_free_on_launch:
            flags |= CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
        if device_launch:
            flags |= CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
        if use_node_priority:
            flags |= CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY
        set_current(self.ctx)
        if upload is not None or D.cuGraphInstantiateWithFlags == NULL:
            _need(<void *>D.cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams")
            if upload is not None:
                stream_handle(upload, &hs)
                flags |= CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD
            memset(&ip, 0, sizeof(ip))
            ip.flags = flags
            ip.hUploadStream = hs
            rc = D.cuGraphInstantiateWithParams(&x, self.handle, &ip)
            if rc != 0:
                why = _INSTANTIATE_REASONS.get(<int>ip.result_out, "")
                raise make_error(rc, "cuGraphInstantiateWithParams",
                                 f"instantiation failed at {self._describe(ip.hErrNode_out)}"
                                 + (f": {why}" if why else ""))
        else:
            rc = D.cuGraphInstantiateWithFlags(&x, self.handle, flags)
            if rc != 0:
                check(rc, b"cuGraphInstantiateWithFlags")
        e = GraphExec.__new__(GraphExec, _TOKEN)
        e.handle = x
        e.graph = self
        e.device = self.device
        e.ctx = self.ctx
        e.flags = flags
        e._graphs = [self, self._snapshot()]
        e._source = self
        if upload is not None:
            e._last_stream = upload
            e.last = hs
        return e


# -------------------------------------------------------------- executables
@cython.no_gc_clear     # __dealloc__ needs _graphs (to mark buffers used) even when a collected cycle held it
cdef class GraphExec:
    """An executable graph (from :meth:`Graph.instantiate`).

    It holds the graph it came from and everything that graph referenced at
    instantiation (and at each :meth:`update`), and the values its kernel-node
    handles set; when it goes, the buffers are marked as used on the streams it was
    launched on, so their stream-ordered free waits for launched work. The driver
    destroys the executable itself once launched work is done.
    """

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("executable graphs come from Graph.instantiate()")
        self.handle = NULL
        self.last = NULL
        self.launched = False
        self.multi = False
        self._graphs = []
        self._params = {}

    def __dealloc__(self):
        if self.handle != NULL and bc_driver_usable(ST):
            self._mark_used()
            rc = D.cuGraphExecDestroy(self.handle)
            if rc != 0:
                warnings.warn(f"cuGraphExecDestroy in GraphExec.__dealloc__: "
                              f"{make_error(rc, 'cuGraphExecDestroy')}", CudaWarning)
        self.handle = NULL

    cdef void _mark_used(self) noexcept:
        """Buffers this executable used are about to lose a reference: make their free
        wait for the launch streams."""
        cdef _KernelParams st
        if not self.launched or self._graphs is None:
            return
        for item in self._graphs:
            if isinstance(item, list):
                _mark_list(<list>item, self.last, self.multi)
        if self._params:
            for st in self._params.values():
                _mark_list(st.vals, self.last, self.multi)

    def close(self):
        """Destroy the executable now (launched work still completes). Idempotent."""
        if self.handle != NULL:
            self._mark_used()
            set_current(self.ctx)
            check(D.cuGraphExecDestroy(self.handle), b"cuGraphExecDestroy")
        self.handle = NULL
        self._graphs = []
        self._params = {}
        self._last_stream = None

    def __repr__(self):
        return f"<barecuda.GraphExec {'closed' if self.handle == NULL else hex(<size_t>self.handle)}>"

    cdef int _live(self) except -1:
        if self.handle == NULL:
            raise ValueError("the executable graph is closed")
        return 0

    @property
    def handle_int(self):
        """The ``CUgraphExec`` as an int."""
        return <size_t>self.handle

    def launch(self, stream=None):
        """Launch the graph on ``stream`` (default: the legacy default stream).

        Raises first a stored exception of a host-node callable, if any.
        """
        cdef CUstream hs = NULL
        cdef CUresult rc
        cdef CUgraphExec x = self.handle
        if x == NULL:
            self._live()
        if _n_host_errors:
            check_host_errors()
        stream_handle(stream, &hs)
        set_current(self.ctx)
        rc = D.cuGraphLaunch(x, hs)
        if rc != 0:
            check(rc, b"cuGraphLaunch")
        if hs != self.last or not self.launched:
            if self.launched:
                self.multi = True
            self.last = hs
            self._last_stream = stream
            self.launched = True

    def upload(self, stream=None):
        """Upload the executable to the device on ``stream`` ahead of its first launch."""
        cdef CUstream hs = NULL
        self._live()
        _need(<void *>D.cuGraphUpload, "cuGraphUpload")
        stream_handle(stream, &hs)
        set_current(self.ctx)
        check(D.cuGraphUpload(self.handle, hs), b"cuGraphUpload")

    def synchronize(self):
        """Wait for the stream of the latest launch, then raise a stored host-node exception."""
        self._live()
        if self.launched:
            set_current(self.ctx)
            wait_interruptible(<_query_fn>D.cuStreamQuery, <void *>self.last, b"cuStreamSynchronize")
        _raise_pending()

    def update(self, Graph graph not None):
        """Give this executable the parameters of ``graph`` (same topology) with
        ``cuGraphExecUpdate``; kernel-node handles stay valid.

        Raises
        ------
        CudaError
            ``CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE``, naming the node that prevented it
            and why; the executable is unchanged and usable.
        """
        cdef CUgraphExecUpdateResultInfo info
        cdef CUresult rc
        self._live()
        graph._live()
        _need(<void *>D.cuGraphExecUpdate, "cuGraphExecUpdate")
        memset(&info, 0, sizeof(info))
        set_current(self.ctx)
        rc = D.cuGraphExecUpdate(self.handle, graph.handle, &info)
        if rc != 0:
            why = _UPDATE_REASONS.get(<int>info.result, f"update result {<int>info.result}")
            where = graph._describe(info.errorNode)
            if info.errorFromNode != NULL:
                where += f" (edge from {graph._describe(info.errorFromNode)})"
            raise make_error(rc, "cuGraphExecUpdate", f"{where} of the new graph cannot update the executable: {why}")
        # Earlier launches may still run with the old parameters: their buffers are marked
        # as used on the launch stream(s) before these references go (stream-ordered free).
        self._mark_used()
        self._graphs = [self.graph, graph, graph._snapshot()]
        self._source = graph
        self._refresh_params(graph)

    cdef int _refresh_params(self, Graph graph) except -1:
        """Kernel-node handles now hold what the update gave the executable."""
        cdef _KernelParams st
        for index, st in self._params.items():
            src = graph._kernels.get(index)
            if isinstance(src, KernelNode):
                st.load(<KernelNode>src, st.node)
        return 0

    def kernel_node(self, KernelNode node not None):
        """A handle on ``node`` (a kernel node of the graph this executable came from)
        whose :meth:`ExecKernelNode.set_arg` changes this executable only.

        Every handle on one node of one executable shares its parameters (and the
        executable holds them: dropping a handle changes nothing)."""
        cdef ExecKernelNode h
        cdef _KernelParams st
        self._live()
        if node._graph_ref is None or node._graph_ref() is not self.graph:
            raise ValueError("the node belongs to another graph than the one this executable came from")
        _need(<void *>D.cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams")
        st = self._params.get(node.index)
        if st is None:
            # The parameters the executable runs: the latest update's (same position), else the node's.
            src = node
            if self._source is not None and self._source is not self.graph:
                src = self._source._kernels.get(node.index, node)
            st = _KernelParams.__new__(_KernelParams)
            st.load(<KernelNode>src, node.handle)
            self._params[node.index] = st
        h = ExecKernelNode.__new__(ExecKernelNode, _TOKEN)
        h.exec = self
        h.node = node
        h.st = st
        return h

    def set_enabled(self, GraphNode node not None, bint enabled):
        """Enable or disable a kernel, memcpy or memset node in this executable."""
        self._live()
        _need(<void *>D.cuGraphNodeSetEnabled, "cuGraphNodeSetEnabled")
        set_current(self.ctx)
        check(D.cuGraphNodeSetEnabled(self.handle, node.handle, 1 if enabled else 0), b"cuGraphNodeSetEnabled")

    def is_enabled(self, GraphNode node not None):
        """Whether ``node`` runs in this executable."""
        cdef unsigned int on = 0
        self._live()
        _need(<void *>D.cuGraphNodeGetEnabled, "cuGraphNodeGetEnabled")
        set_current(self.ctx)
        check(D.cuGraphNodeGetEnabled(self.handle, node.handle, &on), b"cuGraphNodeGetEnabled")
        return bool(on)


cdef void _mark_list(list items, CUstream last, bint multi) noexcept:
    """DeviceBuffers in items were used by launches on `last` (and on other streams when multi)."""
    cdef DeviceBuffer b
    for o in items:
        if type(o) is DeviceBuffer:
            b = <DeviceBuffer>o
            note_use(b, last)
            if multi:
                b.use_flag[0] = 1     # marks the allocation owner


@cython.final
cdef class _KernelParams:
    """One kernel node's parameters in one executable: the block pushed with
    ``cuGraphExecKernelNodeSetParams`` and the values packed in it. Held by the
    executable (so the values live as long as it may run them) and shared by every
    handle on the node."""

    def __cinit__(self):
        self.buf = NULL
        self.ptrs = NULL
        self.vals = []

    def __dealloc__(self):
        PyMem_Free(self.buf)
        PyMem_Free(self.ptrs)
        self.buf = NULL
        self.ptrs = NULL

    cdef int load(self, KernelNode src, CUgraphNode node) except -1:
        """Take src's kernel, dimensions and parameter block; `node` is the handle the
        executable knows the node by."""
        cdef Kernel k = src.kernel
        cdef char *buf = <char *>PyMem_Realloc(self.buf, max(k.argbytes, 1))
        cdef Py_ssize_t i
        if buf == NULL:
            raise MemoryError()
        self.buf = buf
        buf = <char *>PyMem_Realloc(self.ptrs, max(k.nparams, 1) * sizeof(void *))
        if buf == NULL:
            raise MemoryError()
        self.ptrs = <void **>buf
        memcpy(self.buf, src.buf, max(k.argbytes, 1))
        for i in range(k.nparams):
            self.ptrs[i] = self.buf + k.params[i].offset
        self.p = src.p
        self.p.kernelParams = self.ptrs if k.nparams > 0 else NULL
        self.kernel = k
        self.node = node
        self.vals = list(src._vals)
        return 0


cdef inline unsigned long long _load_slot(const char *slot, uint32_t size) noexcept nogil:
    """The bytes of a slot of at most 8 bytes, as bc_store_int stores them back."""
    cdef uint8_t u8
    cdef uint16_t u16
    cdef uint32_t u32
    cdef unsigned long long u64
    if size == 1:
        memcpy(&u8, slot, 1)
        return u8
    if size == 2:
        memcpy(&u16, slot, 2)
        return u16
    if size == 4:
        memcpy(&u32, slot, 4)
        return u32
    memcpy(&u64, slot, 8)
    return u64


cdef list _NO_KEEP = []     # pack_arg's keep argument where nothing needs keeping (it stays empty)


@cython.final
cdef class ExecKernelNode:
    """A kernel node of one executable graph.

    ``set_arg(i, value)`` checks and packs one argument in C (as ``Kernel.launch``
    does) into the node's parameter block and pushes the block to the executable with
    ``cuGraphExecKernelNodeSetParams``; ``set_dims`` changes grid, block and shared
    memory. The change applies to launches issued after it. Handles on one node of one
    executable share its parameters.
    """

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("kernel-node handles come from GraphExec.kernel_node()")

    def __repr__(self):
        return f"<barecuda.ExecKernelNode {self.st.kernel.name!r} #{self.node.index}>"

    @property
    def kernel(self):
        """The node's kernel (after an update, the new graph's)."""
        return self.st.kernel

    @property
    def args(self):
        """The values currently packed, one per parameter."""
        return tuple(self.st.vals)

    @property
    def grid(self):
        return (self.st.p.gridDimX, self.st.p.gridDimY, self.st.p.gridDimZ)

    @property
    def block(self):
        return (self.st.p.blockDimX, self.st.p.blockDimY, self.st.p.blockDimZ)

    @property
    def shared_mem(self):
        return self.st.p.sharedMemBytes

    # binding=False: a plain method descriptor, which CPython calls straight (a
    # CyFunction costs a generic vectorcall and its own argument parsing more).
    @cython.binding(False)
    def set_arg(self, Py_ssize_t index, value):
        """Set parameter ``index`` to ``value`` in the executable.

        The hot path: exact int/DeviceBuffer values are checked and packed in C straight
        into the persistent parameter block (other values with :meth:`Kernel.launch`'s
        packer), then one ``cuGraphExecKernelNodeSetParams``; no Python object is created.

        Raises
        ------
        IndexError, TypeError, OverflowError, ValueError
            As :meth:`Kernel.launch` for a bad index, type, range or a closed buffer
            (nothing changed).
        """
        # Written as attribute chains (self.exec.handle, ...): Cython reads those without
        # taking references, where typed locals would cost an incref/decref each.
        cdef const bc_param *p
        cdef char *slot
        cdef unsigned long long saved
        cdef PyTypeObject *t
        cdef long long v
        cdef int ovf = 0
        cdef int kind
        cdef CUresult rc
        if (self.exec.handle == NULL or self.st.kernel.func == NULL
                or <size_t>index >= <size_t>self.st.kernel.nparams or self.st.kernel.params[index].size > 8):
            return self._set_arg_slow(index, value)
        p = &self.st.kernel.params[index]
        slot = self.st.buf + p.offset
        kind = p.kind
        saved = _load_slot(slot, p.size)
        t = Py_TYPE(value)
        if t is &PyLong_Type and int_ok(kind):
            v = _bc_as_ll(value, &ovf)
            if ovf == 0 and v >= bc_kind_min[kind] and (v < 0 or <unsigned long long>v <= bc_kind_max[kind]):
                bc_store_int(slot, p.size, <unsigned long long>v)
            else:       # a u64 above 2**63, or the range error
                pack_arg(self.st.kernel, index, value, self.st.buf, self.exec.last, _NO_KEEP)
        elif t is <PyTypeObject *>DeviceBuffer and bc_kind_is_pointer(kind) and (<DeviceBuffer>value).ptr != 0:
            note_use(<DeviceBuffer>value, self.exec.last)
            bc_store_int(slot, 8, (<DeviceBuffer>value).ptr)
        else:
            pack_arg(self.st.kernel, index, value, self.st.buf, self.exec.last, _NO_KEEP)
        set_current(self.exec.ctx)
        rc = D.cuGraphExecKernelNodeSetParams(self.exec.handle, self.st.node, &self.st.p)
        if rc != 0:
            bc_store_int(slot, p.size, saved)
            check(rc, b"cuGraphExecKernelNodeSetParams")
        _replace_val(self.exec, self.st.vals, index, value)

    cdef object _set_arg_slow(self, Py_ssize_t index, object value):
        """set_arg for a closed executable or module, a bad index (these raise) and
        slots over 8 bytes (structs)."""
        cdef GraphExec x = self.exec
        cdef _KernelParams st = self.st
        cdef Kernel k = st.kernel
        cdef char *slot
        x._live()
        if k.func == NULL or <size_t>index >= <size_t>k.nparams:
            return pack_arg(k, index, value, st.buf, x.last, _NO_KEEP)     # raises
        slot = st.buf + k.params[index].offset
        saved = slot[:k.params[index].size]
        pack_arg(k, index, value, st.buf, x.last, _NO_KEEP)
        set_current(x.ctx)
        rc = D.cuGraphExecKernelNodeSetParams(x.handle, st.node, &st.p)
        if rc != 0:
            memcpy(slot, <char *>saved, k.params[index].size)
            check(rc, b"cuGraphExecKernelNodeSetParams")
        _replace_val(x, st.vals, index, value)

    def set_args(self, *args):
        """Set every parameter (one ``cuGraphExecKernelNodeSetParams``)."""
        cdef GraphExec x = self.exec
        cdef _KernelParams st = self.st
        cdef Kernel k = st.kernel
        cdef Py_ssize_t i
        x._live()
        if len(args) != k.nparams:
            raise TypeError(f"kernel {k.name!r} takes {k.nparams} arguments, got {len(args)}")
        saved = st.buf[:max(k.argbytes, 1)]
        try:
            for i in range(k.nparams):
                pack_arg(k, i, args[i], st.buf, x.last, _NO_KEEP)
            set_current(x.ctx)
            check(D.cuGraphExecKernelNodeSetParams(x.handle, st.node, &st.p), b"cuGraphExecKernelNodeSetParams")
        except BaseException:
            memcpy(st.buf, <char *>saved, max(k.argbytes, 1))
            raise
        for i in range(k.nparams):
            _replace_val(x, st.vals, i, args[i])

    def set_dims(self, grid=None, block=None, shared_mem=None):
        """Change grid, block and/or dynamic shared memory (checked as a launch checks them)."""
        cdef GraphExec x = self.exec
        cdef _KernelParams st = self.st
        cdef unsigned int g[3]
        cdef unsigned int b[3]
        cdef CUDA_KERNEL_NODE_PARAMS_v2 p = st.p
        x._live()
        if grid is None:
            grid = self.grid
        if block is None:
            block = self.block
        if shared_mem is None:
            shared_mem = st.p.sharedMemBytes
        import operator
        shared_mem = operator.index(shared_mem)
        if not 0 <= shared_mem <= 0xFFFFFFFF:
            raise ValueError(f"shared_mem must be in [0, 2**32), got {shared_mem}")
        check_dims(st.kernel, grid, block, shared_mem, g, b)
        p.gridDimX, p.gridDimY, p.gridDimZ = g[0], g[1], g[2]
        p.blockDimX, p.blockDimY, p.blockDimZ = b[0], b[1], b[2]
        p.sharedMemBytes = shared_mem
        set_current(x.ctx)
        check(D.cuGraphExecKernelNodeSetParams(x.handle, st.node, &p), b"cuGraphExecKernelNodeSetParams")
        st.p = p


cdef inline int _replace_val(GraphExec x, list vals, Py_ssize_t index, object value) except -1:
    """vals[index] = value (index checked by the caller). A replaced DeviceBuffer was
    used by earlier launches: its free waits for them (the executable held it until now)."""
    cdef PyObject *old = PyList_GET_ITEM(vals, index)
    if Py_TYPE(<object>old) is <PyTypeObject *>DeviceBuffer and x.launched:
        note_use(<DeviceBuffer><object>old, x.last)
        if x.multi:
            (<DeviceBuffer><object>old).use_flag[0] = 1
    Py_INCREF(value)
    PyList_SET_ITEM(vals, index, value)
    Py_XDECREF(old)
    return 0
