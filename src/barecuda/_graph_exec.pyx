"""CUDA graphs: executable graphs and kernel-node handles.

Owns: ``GraphExec`` (made by ``Graph.instantiate``: instantiate with upload and flags,
launch, upload, synchronize, whole-graph update with the failing node named, node
enable/disable) and kernel-node handles (``ExecKernelNode``: one argument checked and
packed in C into the node's parameter block in the executable, pushed with
``cuGraphExecKernelNodeSetParams``).

Lifetimes: an executable holds the graph it came from and a snapshot of that graph's
references taken at instantiation and at each update, and each handled node's
parameters (``_KernelParams``: the block and the values packed in it); when a reference
goes while launched work may use it (update, set_arg replacing a buffer, the
executable's destruction), the buffer is first marked as used on the launch stream(s),
so that its stream-ordered free waits for that work.
"""
cimport cython
from libc.string cimport memcpy, memset
from libc.stdint cimport uint8_t, uint16_t, uint32_t
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.list cimport PyList_GET_ITEM, PyList_SET_ITEM
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.object cimport PyTypeObject, Py_TYPE

cdef extern from "Python.h":
    PyTypeObject PyLong_Type


from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable, CUDA_SUCCESS, warn_destroy_failed
from barecuda._loader cimport driver_table, runtime_state, set_current
from barecuda._stream cimport stream_handle, wait_interruptible, _query_fn
from barecuda._buffer cimport DeviceBuffer, note_use, pin, unpin
from barecuda._launch cimport Kernel, pack_arg, check_dims, kernels_closed
from barecuda._pack cimport bc_param, bc_store_int, int_ok, _bc_as_ll
from barecuda._signature cimport bc_kind_min, bc_kind_max, bc_kind_is_pointer
from barecuda._graph cimport Graph, GraphNode, KernelNode, need
from barecuda._host_node cimport pending_host_errors
from barecuda._errors import make_error
from barecuda._host_node import check_host_errors
import operator

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()
cdef Py_ssize_t *_nerr = pending_host_errors()      # host-node exceptions stored (_host_node.pyx)
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
        if _nerr[0]:
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
            wait_interruptible(<_query_fn>D.cuStreamQuery, <void *>self.last, b"cuStreamSynchronize")
        if _nerr[0]:
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
        h = ExecKernelNode.__new__(ExecKernelNode, _TOKEN)
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
        u = ArgUpdate.__new__(ArgUpdate, _TOKEN)
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


@cython.final
cdef class _KernelParams:
    """One kernel node's parameters in one executable: the block pushed with
    ``cuGraphExecKernelNodeSetParams`` and the values packed in it. Held by the
    executable (so the values live as long as it may run them) and shared by every
    handle on the node."""

    def __cinit__(self):
        self.buf = NULL
        self.ptrs = NULL
        self.pinned = NULL
        self.params = NULL
        self.nparams = 0
        self.seen = <size_t>-1
        self.vals = []

    def __dealloc__(self):
        # The executable marked the values used on its launch streams first (_mark_used).
        self._unpin_all()
        PyMem_Free(self.buf)
        PyMem_Free(self.ptrs)
        PyMem_Free(self.pinned)
        self.buf = NULL
        self.ptrs = NULL
        self.pinned = NULL

    cdef void _unpin_all(self) noexcept:
        cdef Py_ssize_t i
        if self.pinned == NULL or self.vals is None:
            return
        for i in range(len(self.vals)):
            if self.pinned[i]:
                self.pinned[i] = 0
                unpin(<DeviceBuffer>self.vals[i])

    cdef int load(self, KernelNode src, CUgraphNode node) except -1:
        """Take src's kernel, dimensions and parameter block; `node` is the handle the
        executable knows the node by."""
        cdef Kernel k = src.kernel
        cdef char *buf
        cdef Py_ssize_t i
        self._unpin_all()               # the values set_arg put here go (already marked used)
        if k is not self.kernel:        # (the same kernel again, after an update: same sizes)
            buf = <char *>PyMem_Realloc(self.buf, max(k.argbytes, 1))
            if buf == NULL:
                raise MemoryError()
            self.buf = buf
            buf = <char *>PyMem_Realloc(self.ptrs, max(k.nparams, 1) * sizeof(void *))
            if buf == NULL:
                raise MemoryError()
            self.ptrs = <void **>buf
            buf = <char *>PyMem_Realloc(self.pinned, max(k.nparams, 1))
            if buf == NULL:
                raise MemoryError()
            self.pinned = buf
            memset(self.pinned, 0, max(k.nparams, 1))
            for i in range(k.nparams):
                self.ptrs[i] = self.buf + k.params[i].offset
            self.kernel = k
            self.params = k.params
            self.nparams = max(k.nparams, 0)
            self.seen = <size_t>-1          # the hot path checks the kernel's module once first
        memcpy(self.buf, src.buf, max(k.argbytes, 1))
        self.p = src.p
        self.p.kernelParams = self.ptrs if k.nparams > 0 else NULL
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


cdef inline bint _word(uint32_t size) noexcept nogil:
    """A slot of 1, 2, 4 or 8 bytes: _load_slot / bc_store_int move exactly its bytes
    (other sizes, structs, take the slow paths)."""
    return size - 1 < 8 and (size & (size - 1)) == 0


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
    def set_arg(self, Py_ssize_t index, value, /):
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
        # st.seen == kernels_closed(): the kernel's module was open when last looked at and
        # no module was closed since (one compare instead of a hop to the Kernel).
        if (self.exec.handle == NULL or self.st.seen != _closed[0]
                or <size_t>index >= <size_t>self.st.nparams or not _word(self.st.params[index].size)):
            return self._set_arg_slow(index, value)
        p = &self.st.params[index]
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
        _replace_val(self.exec, self.st, index, value)

    cdef object _set_arg_slow(self, Py_ssize_t index, object value):
        """set_arg for a closed executable or module, a bad index (these raise) and
        slots over 8 bytes (structs)."""
        cdef GraphExec x = self.exec
        cdef _KernelParams st = self.st
        cdef Kernel k = st.kernel
        cdef char *slot
        x._live()
        if k.func == NULL or <size_t>index >= <size_t>st.nparams:
            return pack_arg(k, index, value, st.buf, x.last, _NO_KEEP)     # raises
        st.seen = _closed[0]            # alive now: the hot path may skip the look
        slot = st.buf + k.params[index].offset
        saved = slot[:k.params[index].size]
        pack_arg(k, index, value, st.buf, x.last, _NO_KEEP)
        set_current(x.ctx)
        rc = D.cuGraphExecKernelNodeSetParams(x.handle, st.node, &st.p)
        if rc != 0:
            memcpy(slot, <char *>saved, k.params[index].size)
            check(rc, b"cuGraphExecKernelNodeSetParams")
        _replace_val(x, st, index, value)

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
            _replace_val(x, st, i, args[i])

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


cdef inline int _replace_val(GraphExec x, _KernelParams st, Py_ssize_t index, object value) except -1:
    """st.vals[index] = value (index checked by the caller), after the push."""
    cdef PyObject *old = PyList_GET_ITEM(st.vals, index)
    if old == <PyObject *>value:        # the same object again (a buffer re-set): its pin stays
        return 0
    if (st.pinned[index] or Py_TYPE(<object>old) is <PyTypeObject *>DeviceBuffer
            or Py_TYPE(value) is not &PyLong_Type):
        return _replace_buffer_val(x, st, index, value)
    Py_INCREF(value)                    # an int replaces a value that holds nothing
    PyList_SET_ITEM(st.vals, index, value)
    Py_XDECREF(old)
    return 0


cdef int _replace_buffer_val(GraphExec x, _KernelParams st, Py_ssize_t index, object value) except -1:
    """_replace_val where a buffer comes or goes. The executable pins a buffer it got this
    way (its close() defers the free); a replaced buffer was used by earlier launches: its
    free waits for them."""
    cdef PyObject *old = PyList_GET_ITEM(st.vals, index)
    cdef char was_pinned = st.pinned[index]
    if Py_TYPE(<object>old) is <PyTypeObject *>DeviceBuffer and x.launched:
        note_use(<DeviceBuffer><object>old, x.last)
        if x.multi:
            (<DeviceBuffer><object>old).use_flag[0] = 1
    st.pinned[index] = 0
    if isinstance(value, DeviceBuffer):
        pin(<DeviceBuffer>value)        # open: packing refused a closed one
        st.pinned[index] = 1
    Py_INCREF(value)
    PyList_SET_ITEM(st.vals, index, value)
    if was_pinned:
        unpin(<DeviceBuffer><object>old)
    Py_XDECREF(old)
    return 0


cdef inline int _pack_fast(_KernelParams st, Py_ssize_t index, object value, CUstream last) except -1:
    """Pack value into slot index of st's block (index < st.nparams, a slot of at most 8
    bytes): exact ints and open DeviceBuffers inline, anything else with launch's packer
    (which raises on a bad value and leaves the slot as it was)."""
    cdef const bc_param *p = &st.params[index]
    cdef char *slot = st.buf + p.offset
    cdef int kind = p.kind
    cdef PyTypeObject *t = Py_TYPE(value)
    cdef long long v
    cdef int ovf = 0
    if t is &PyLong_Type and int_ok(kind):
        v = _bc_as_ll(value, &ovf)
        if ovf == 0 and v >= bc_kind_min[kind] and (v < 0 or <unsigned long long>v <= bc_kind_max[kind]):
            bc_store_int(slot, p.size, <unsigned long long>v)
            return 0
    elif t is <PyTypeObject *>DeviceBuffer and bc_kind_is_pointer(kind) and (<DeviceBuffer>value).ptr != 0:
        note_use(<DeviceBuffer>value, last)
        bc_store_int(slot, 8, (<DeviceBuffer>value).ptr)
        return 0
    return pack_arg(st.kernel, index, value, st.buf, last, _NO_KEEP)


@cython.final
cdef class ArgUpdate:
    """A prepared set of kernel-node parameter slots of one executable graph (from
    :meth:`GraphExec.prepare_args`): ``set(*values)`` changes them all in one call.

    ``set`` checks and packs every value in C first (the checks of :meth:`Kernel.launch`:
    type, range, closed buffer; and a closed executable or module), so a bad value
    changes nothing; then it pushes each touched node's block with one
    ``cuGraphExecKernelNodeSetParams`` (one per node, however many of its slots
    changed), in the order the nodes first appear in the slots. If the push of the
    k-th node fails, the nodes before it hold their new values in the executable (and
    in their handles' ``args``), that node and the later ones keep their old values, and
    the :class:`CudaError` names the node. The update shares the nodes' parameters with
    their :class:`ExecKernelNode` handles and follows :meth:`GraphExec.update`.
    """

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("argument updates come from GraphExec.prepare_args()")
        self.slots = NULL
        self.n = 0

    def __dealloc__(self):
        PyMem_Free(self.slots)
        self.slots = NULL

    def __len__(self):
        return self.n

    def __repr__(self):
        return f"<barecuda.ArgUpdate {self.n} slots on {len(self._nodes)} nodes>"

    @property
    def slots(self):
        """The ``(ExecKernelNode, index)`` pairs, in the order ``set`` takes values."""
        return tuple((self._handles[i], self.slots[i].index) for i in range(self.n))

    @cython.binding(False)      # a plain method descriptor (see ExecKernelNode.set_arg)
    def set(self, *values):
        """Set every slot, ``values[i]`` into slot ``i`` (one value per slot).

        Raises
        ------
        TypeError, OverflowError, ValueError, IndexError
            As :meth:`ExecKernelNode.set_arg`, before any driver call; nothing changed.
        CudaError
            A failed ``cuGraphExecKernelNodeSetParams``: see the class docstring for
            what state remains.
        """
        # The nodes' blocks are read through borrowed pointers (self._nodes holds them):
        # no reference counting per slot.
        cdef Py_ssize_t i = 0, j, nn
        cdef _arg_slot *sl
        cdef PyObject *stp
        cdef const bc_param *p
        cdef CUresult rc
        cdef CUgraphExec x
        if PyTuple_GET_SIZE(values) != self.n:
            raise TypeError(f"this update sets {self.n} slots, got {PyTuple_GET_SIZE(values)} values")
        if self.exec.handle == NULL:
            self.exec._live()
        try:
            while i < self.n:
                sl = &self.slots[i]
                stp = sl.st
                if ((<_KernelParams>stp).seen == _closed[0] and <size_t>sl.index < <size_t>(<_KernelParams>stp).nparams
                        and _word((<_KernelParams>stp).params[sl.index].size)):
                    p = &(<_KernelParams>stp).params[sl.index]
                    sl.saved = _load_slot((<_KernelParams>stp).buf + p.offset, p.size)
                    _pack_fast(<_KernelParams>stp, sl.index, <object>PyTuple_GET_ITEM(values, i), self.exec.last)
                else:
                    self._pack_slow(i, <_KernelParams>stp, sl.index, <object>PyTuple_GET_ITEM(values, i))
                i += 1
            x = self.exec.handle            # (a packer may have run Python code: look again)
            if x == NULL:
                self.exec._live()
            set_current(self.exec.ctx)
        except BaseException:
            self._restore(i, 0)
            raise
        nn = PyTuple_GET_SIZE(self._nodes)
        for j in range(nn):
            stp = PyTuple_GET_ITEM(self._nodes, j)
            rc = D.cuGraphExecKernelNodeSetParams(x, (<_KernelParams>stp).node, &(<_KernelParams>stp).p)
            if rc != 0:
                self._restore(self.n, j)
                self._commit(values, j)
                raise make_error(rc, "cuGraphExecKernelNodeSetParams",
                                 f"pushing kernel node #{self._node_index(j)} "
                                 f"({(<_KernelParams>stp).kernel.name!r}; node {j + 1} of {nn} in this update; "
                                 "the ones before it were set)")
        self._commit(values, nn)

    cdef int _pack_slow(self, Py_ssize_t i, _KernelParams st, Py_ssize_t index, object value) except -1:
        """Slot i after a module close somewhere, an update that changed the node's kernel,
        or a slot that is not 1, 2, 4 or 8 bytes (structs): launch's packer, which raises
        on a closed module or a bad index."""
        cdef Kernel k = st.kernel
        cdef uint32_t size
        if k.func == NULL or <size_t>index >= <size_t>st.nparams:
            return pack_arg(k, index, value, st.buf, self.exec.last, _NO_KEEP)     # raises
        st.seen = _closed[0]
        size = st.params[index].size
        if _word(size):
            self.slots[i].saved = _load_slot(st.buf + st.params[index].offset, size)
        else:
            self._saved_big[i] = (st.buf + st.params[index].offset)[:size]
            self._any_big = True
        try:
            pack_arg(k, index, value, st.buf, self.exec.last, _NO_KEEP)
        except BaseException:
            self._saved_big[i] = None
            raise
        return 0

    cdef int _restore(self, Py_ssize_t upto, Py_ssize_t first_node) except -1:
        """Put back the bytes slots [0, upto) held, for slots of nodes >= first_node (last
        packed first: the restored state of each slot is the one before its packing)."""
        cdef Py_ssize_t i
        cdef _arg_slot *sl
        cdef _KernelParams st
        cdef const bc_param *p
        for i in range(upto - 1, -1, -1):
            sl = &self.slots[i]
            if sl.node < first_node:
                continue
            st = <_KernelParams>sl.st
            if <size_t>sl.index >= <size_t>st.nparams:
                continue
            p = &st.params[sl.index]
            big = self._saved_big[i]
            if big is not None:
                memcpy(st.buf + p.offset, <char *>big, p.size)
                self._saved_big[i] = None
            elif _word(p.size):
                bc_store_int(st.buf + p.offset, p.size, sl.saved)
        return 0

    cdef int _commit(self, tuple values, Py_ssize_t nodes_done) except -1:
        """The values of slots whose node was pushed (position < nodes_done) now belong
        to it (held, buffers pinned; replaced buffers marked used)."""
        cdef Py_ssize_t i
        cdef _arg_slot *sl
        if self._any_big:
            for i in range(self.n):
                self._saved_big[i] = None
            self._any_big = False
        for i in range(self.n):
            sl = &self.slots[i]
            if sl.node < nodes_done:
                _replace_val(self.exec, <_KernelParams>sl.st, sl.index, <object>PyTuple_GET_ITEM(values, i))
        return 0

    cdef Py_ssize_t _node_index(self, Py_ssize_t j):
        cdef Py_ssize_t i
        for i in range(self.n):
            if self.slots[i].node == j:
                return (<ExecKernelNode>self._handles[i]).node.index
        return -1
