"""CUDA graphs: executable graphs.

Owns: ``GraphExec`` (made by ``Graph.instantiate``: instantiate with upload and flags,
launch, upload, synchronize, whole-graph update with the failing node named, node
enable/disable); it makes the kernel-node handles and argument updates of
``_args.pyx``.

Lifetimes: an executable holds the graph it came from and a snapshot of that graph's
references taken at instantiation and at each update, and each handled node's
parameters (``_args._KernelParams``: the block and the values packed in it); when a
reference goes while launched work may use it (update, set_arg replacing a buffer, the
executable's destruction), the buffer is first marked as used on the launch stream(s),
so that its stream-ordered free waits for that work.
"""
__all__ = ["GraphExec"]

cimport cython
from libc.string cimport memcpy, memset
from cpython.mem cimport PyMem_Malloc
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM

import operator

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable, CUDA_SUCCESS, warn_destroy_failed
from barecuda._loader cimport driver_table, runtime_state, set_current
from barecuda._stream cimport stream_handle
from barecuda._wait cimport wait_interruptible, query_fn
from barecuda._buffer cimport DeviceBuffer, note_use
from barecuda._launch cimport Kernel, kernels_closed
from barecuda.graph._graph cimport Graph
from barecuda.graph._nodes cimport GraphNode, KernelNode, need
from barecuda.graph._args cimport _KernelParams, ExecKernelNode, ArgUpdate, _arg_slot, handle_token
from barecuda._errors import make_error
from barecuda.graph._host_node import check_host_errors

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()
cdef const size_t *_closed = kernels_closed()       # kernels invalidated so far (_launch.pyx)

_TOKEN = object()

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


def _instantiate(Graph g, upload, unsigned long long flags):
    """Graph.instantiate's work (flags already made from its keywords): the executable."""
    cdef CUgraphExec x = NULL
    cdef CUDA_GRAPH_INSTANTIATE_PARAMS ip
    cdef CUstream hs = NULL
    cdef CUresult rc
    cdef GraphExec e
    set_current(g.ctx)
    if upload is not None or D.cuGraphInstantiateWithFlags == NULL:
        need(<void *>D.cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams")
        if upload is not None:
            stream_handle(upload, &hs)
            flags |= CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD
        memset(&ip, 0, sizeof(ip))
        ip.flags = flags
        ip.hUploadStream = hs
        rc = D.cuGraphInstantiateWithParams(&x, g.handle, &ip)
        if rc != 0:
            why = _INSTANTIATE_REASONS.get(<int>ip.result_out, "")
            raise make_error(rc, "cuGraphInstantiateWithParams",
                             f"instantiation failed at {g._describe(ip.hErrNode_out)}"
                             + (f": {why}" if why else ""))
    else:
        rc = D.cuGraphInstantiateWithFlags(&x, g.handle, flags)
        if rc != 0:
            check(rc, b"cuGraphInstantiateWithFlags")
    e = GraphExec.__new__(GraphExec, _TOKEN)
    e.handle = x
    e.graph = g
    e.device = g.device
    e.ctx = g.ctx
    e.flags = flags
    e._graphs = [g]
    e._hold_refs(g)
    e._source = g
    if upload is not None:
        e._last_stream = upload
        e.last = hs
    return e


cdef int _raise_unloaded(Kernel k) except -1:
    raise ValueError(f"the executable graph runs kernel {k.name!r}, whose module was closed: it would run "
                     "unloaded code. Fix: keep the module open while its graphs are launched (or "
                     "instantiate a graph of kernels from a loaded module)")


@cython.no_gc_clear     # __dealloc__ needs _bufs and _params (to mark buffers used) even when a collected cycle held it
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
        self._kernels = ()

    def __dealloc__(self):
        if self.handle != NULL and bc_driver_usable(ST):
            self._mark_used()
            rc = D.cuGraphExecDestroy(self.handle)
            if rc != CUDA_SUCCESS:
                warn_destroy_failed(rc, b"cuGraphExecDestroy", "GraphExec.__dealloc__")
        self.handle = NULL

    cdef void _mark_used(self) noexcept:
        """Buffers this executable used are about to lose a reference: make their free
        wait for the launch streams."""
        if self.launched and self._bufs is not None:
            _mark_list(self._bufs, self.last, self.multi)
        self._mark_params()

    cdef void _mark_params(self) noexcept:
        """_mark_used for the values kernel-node handles set (an update replaces them)."""
        cdef _KernelParams st
        if self.launched and self._params:
            for st in self._params.values():
                _mark_list(st.vals, self.last, self.multi)

    cdef int _hold_refs(self, Graph graph) except -1:
        """Hold what graph references now (its snapshot, shared with other executables
        of the unchanged graph)."""
        graph._take_refs()
        self._refs = graph._refs
        self._bufs = graph._refs_buffers
        self._kernels = graph._refs_kernels
        self._kernels_ok = False
        return 0

    cdef int _check_kernels(self) except -1:
        """Raise if a kernel this executable runs lost its module; else remember that
        they were all alive at the current kernels_closed() count (launch checks one
        number, not every kernel, until a module is closed somewhere)."""
        cdef size_t seen = _closed[0]
        cdef Py_ssize_t i
        for i in range(PyTuple_GET_SIZE(self._kernels)):
            if (<Kernel>PyTuple_GET_ITEM(self._kernels, i)).func == NULL:
                _raise_unloaded(<Kernel>PyTuple_GET_ITEM(self._kernels, i))
        self._kernels_seen = seen
        self._kernels_ok = True
        return 0

    def close(self):
        """Destroy the executable now (launched work still completes). Idempotent."""
        if self.handle != NULL:
            self._mark_used()
            set_current(self.ctx)
            check(D.cuGraphExecDestroy(self.handle), b"cuGraphExecDestroy")
        self.handle = NULL
        self._graphs = []
        self._refs = None
        self._bufs = None
        self._params = {}
        self._kernels = ()
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

    @cython.binding(False)      # a plain method descriptor: CPython calls it straight (no CyFunction)
    def launch(self, stream=None):
        """Launch the graph on ``stream`` (default: the legacy default stream).

        Raises first a stored exception of a host-node callable, if any.
        """
        cdef CUstream hs = NULL
        cdef CUresult rc
        cdef CUgraphExec x = self.handle
        if x == NULL:
            self._live()
        if ST.host_errors:
            check_host_errors()
        if not self._kernels_ok or self._kernels_seen != _closed[0]:
            self._check_kernels()
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
        need(<void *>D.cuGraphUpload, "cuGraphUpload")
        stream_handle(stream, &hs)
        set_current(self.ctx)
        check(D.cuGraphUpload(self.handle, hs), b"cuGraphUpload")

    def synchronize(self):
        """Wait for the stream of the latest launch, then raise a stored host-node exception."""
        self._live()
        if self.launched:
            set_current(self.ctx)
            wait_interruptible(<query_fn>D.cuStreamQuery, <void *>self.last, b"cuStreamSynchronize")
        if ST.host_errors:
            check_host_errors()

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
        need(<void *>D.cuGraphExecUpdate, "cuGraphExecUpdate")
        if graph.captured and self._params:
            graph._enumerate()          # node objects (and positions) for the handles' refresh
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
        # From the same unchanged graph again, the snapshot is the same: nothing goes.
        graph._take_refs()
        if graph._refs is not self._refs:
            self._mark_used()
        else:
            self._mark_params()
        self._graphs = [self.graph, graph]
        self._hold_refs(graph)
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
        need(<void *>D.cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams")
        st = self._params.get(node.index)
        if st is None:
            # The parameters the executable runs: the latest update's (same position), else the node's.
            src = node
            if self._source is not None and self._source is not self.graph:
                src = self._source._kernels.get(node.index, node)
            st = _KernelParams.__new__(_KernelParams)
            st.load(<KernelNode>src, node.handle)
            self._params[node.index] = st
        h = ExecKernelNode.__new__(ExecKernelNode, handle_token())
        h.exec = self
        h.node = node
        h.st = st
        return h

    def prepare_args(self, slots):
        """An :class:`ArgUpdate` for ``slots``, a sequence of ``(node, index)`` pairs
        (``node``: an :class:`ExecKernelNode` of this executable, or a
        :class:`~barecuda.KernelNode` of its graph): ``upd.set(*values)`` then sets all
        of them in one call, with one ``cuGraphExecKernelNodeSetParams`` per node.

        Raises
        ------
        TypeError, ValueError, IndexError
            A malformed pair, a node of another executable or graph, an index out of
            range for the node's kernel, or the same slot twice.
        """
        cdef ArgUpdate u
        cdef ExecKernelNode h
        cdef Py_ssize_t i, n, j, ix
        self._live()
        slots = tuple(slots)
        n = len(slots)
        handles = []
        nodes = []
        pos = {}                        # id(_KernelParams) -> position in nodes
        seen = set()
        u = ArgUpdate.__new__(ArgUpdate, handle_token())
        u.slots = <_arg_slot *>PyMem_Malloc(max(n, 1) * sizeof(_arg_slot))
        if u.slots == NULL:
            raise MemoryError()
        for i in range(n):
            pair = slots[i]
            if not isinstance(pair, tuple) or len(<tuple>pair) != 2:
                raise TypeError(f"slot {i}: expected a (node, index) pair, got {pair!r}")
            node, index = <tuple>pair
            if isinstance(node, ExecKernelNode):
                h = <ExecKernelNode>node
                if h.exec is not self:
                    raise ValueError(f"slot {i}: the handle belongs to another executable")
            elif isinstance(node, KernelNode):
                h = self.kernel_node(<KernelNode>node)
            else:
                raise TypeError(f"slot {i}: expected an ExecKernelNode or a KernelNode, got {type(node).__name__}")
            ix = operator.index(index)
            if not 0 <= ix < h.st.nparams:
                raise IndexError(f"slot {i}: kernel {h.st.kernel.name!r} has {h.st.nparams} parameters, "
                                 f"index {index} is out of range")
            key = (id(h.st), ix)
            if key in seen:
                raise ValueError(f"slot {i}: parameter {ix} of node #{h.node.index} appears twice")
            seen.add(key)
            j = pos.setdefault(id(h.st), len(nodes))
            if j == len(nodes):
                nodes.append(h.st)
            handles.append(h)
            u.slots[i].st = <PyObject *>h.st
            u.slots[i].index = ix
            u.slots[i].node = j
            u.slots[i].saved = 0
        u.exec = self
        u.n = n
        u._handles = tuple(handles)
        u._nodes = tuple(nodes)
        u._saved_big = [None] * n
        return u

    def set_enabled(self, GraphNode node not None, bint enabled):
        """Enable or disable a kernel, memcpy or memset node in this executable."""
        self._live()
        need(<void *>D.cuGraphNodeSetEnabled, "cuGraphNodeSetEnabled")
        set_current(self.ctx)
        check(D.cuGraphNodeSetEnabled(self.handle, node.handle, 1 if enabled else 0), b"cuGraphNodeSetEnabled")

    def is_enabled(self, GraphNode node not None):
        """Whether ``node`` runs in this executable."""
        cdef unsigned int on = 0
        self._live()
        need(<void *>D.cuGraphNodeGetEnabled, "cuGraphNodeGetEnabled")
        set_current(self.ctx)
        check(D.cuGraphNodeGetEnabled(self.handle, node.handle, &on), b"cuGraphNodeGetEnabled")
        return bool(on)


cdef void _mark_list(object items, CUstream last, bint multi) noexcept:
    """DeviceBuffers in items (a list or tuple) were used by launches on `last` (and on
    other streams when multi)."""
    cdef DeviceBuffer b
    for o in items:
        if type(o) is DeviceBuffer:
            b = <DeviceBuffer>o
            note_use(b, last)
            if multi:
                b.use_flag[0] = 1     # marks the allocation owner
