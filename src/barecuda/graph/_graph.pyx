"""CUDA graphs: the graph.

Owns: explicit graphs (``Graph``: kernel, memcpy, memset, host-function, event,
child-graph, empty and conditional nodes with explicit dependencies), conditional
nodes and their handles (``ConditionalNode``, ``ConditionalHandle``), node objects for
captured graphs (``Graph.nodes``/``kernel_nodes``: kernel nodes mapped back to the
Kernels the capture saw launched), kernel-node priorities.

The rest of the graph wing (``barecuda.graph``): the node classes in ``_nodes.pyx``,
stream capture in ``_capture.pyx``, executable graphs in ``_exec.pyx``
(``Graph.instantiate`` makes them there), kernel-node handles and batched argument
updates in ``_args.pyx``, the host-node trampoline and its exception store in
``_host_node.pyx``, edges with data and configured-plan nodes in ``_edges.pyx``.

Lifetimes: a Graph holds every object its nodes reference (buffers, kernels, callables,
events, child graphs); a captured graph holds what barecuda launched into it (see
``_capture.pyx``). Nodes never hold their graph (no cycle).

Host-node exceptions are stored (never lost) and raised by the next
``GraphExec.launch``/``synchronize``/``check_host_errors`` in the process.
"""
__all__ = ["Graph", "ConditionalNode", "ConditionalHandle"]

cimport cython
from libc.string cimport memcpy, memset
from cpython cimport PyMem_Malloc, PyMem_Free, PyObject, PyList_GET_SIZE

import os
import weakref

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable, CUDA_SUCCESS, warn_destroy_failed
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current
from barecuda._device cimport Device, device_of
from barecuda._stream cimport Event
from barecuda._buffer cimport DeviceBuffer
from barecuda._host cimport PinnedBuffer
from barecuda._launch cimport Kernel, pack_arg, check_dims
from barecuda.graph._host_node cimport _HostCall, host_trampoline
from barecuda.graph._nodes cimport GraphNode, KernelNode, hold, need, new_kernel_node, node_token, \
    check_priority, set_node_priority
from barecuda._lazy cimport lazy_module

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()


_KINDS = ("kernel", "memcpy", "memset", "host", "graph", "empty", "event_wait", "event_record",
          "ext_semaphore_signal", "ext_semaphore_wait", "mem_alloc", "mem_free", "batch_mem_op", "conditional")


# --------------------------------------------------------------- helpers
cdef object _kind_name(CUgraphNodeType t):
    return _KINDS[<int>t] if 0 <= <int>t < len(_KINDS) else f"type {<int>t}"


cdef int dep_array(Graph g, object depends_on, CUgraphNode **out, size_t *n) except -1:
    """In out, the CUgraphNode array for depends_on (a node or an iterable of nodes of g);
    NULL when empty. The caller frees it with PyMem_Free."""
    cdef GraphNode d
    cdef CUgraphNode *arr
    cdef size_t i = 0
    if depends_on is None:
        n[0] = 0
        out[0] = NULL
        return 0
    if isinstance(depends_on, GraphNode):
        deps = (depends_on,)
    else:
        deps = tuple(depends_on)
    n[0] = len(deps)
    if n[0] == 0:
        out[0] = NULL
        return 0
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
    out[0] = arr
    return 0


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


@cython.final
cdef class ConditionalHandle:
    """A conditional node's condition (``CUgraphConditionalHandle``). Pass it to a kernel
    as an unsigned 64-bit argument; device code sets it with ``cudaGraphSetConditional``."""

    def __cinit__(self, token=None):
        if token is not node_token():
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
        self._clear()
        self.captured = False
        if token is node_token() or device is node_token():
            return
        cdef Device dev = device_of(device)
        cdef CUgraph g = NULL
        ensure_driver(ST)
        need(<void *>D.cuGraphCreate, "cuGraphCreate")
        dev.activate()
        check(D.cuGraphCreate(&g, 0), b"cuGraphCreate")
        self.handle = g
        self.owned = True
        self.device = dev
        self.ctx = dev.ctx

    def __dealloc__(self):
        if self.owned and self.handle != NULL and bc_driver_usable(ST):
            rc = D.cuGraphDestroy(self.handle)
            if rc != CUDA_SUCCESS:
                warn_destroy_failed(rc, b"cuGraphDestroy", "Graph.__dealloc__")
        self.handle = NULL

    def close(self):
        """Destroy the graph now (executables made from it are independent). Idempotent."""
        if self.owned and self.handle != NULL:
            set_current(self.ctx)
            check(D.cuGraphDestroy(self.handle), b"cuGraphDestroy")
        self.handle = NULL
        self.owned = False
        self._clear()

    cdef int _clear(self) except -1:
        """No nodes and no references: a new graph's state, and a closed one's."""
        self._keep = []
        self._nodes = []
        self._by_handle = {}
        self._info = {}
        self._kernels = {}
        self._funcs = {}
        self._refs = None
        self._refs_kernels = None
        self._refs_buffers = None
        self._refs_of = None
        return 0

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
        Captured graphs hold what barecuda launched into them; this is for the rest
        (copies, memsets, other libraries' work: see docs/graphs.md)."""
        self._live()
        hold(self._keep, objs)

    cdef int _take_refs(self) except -1:
        """Fill _refs/_refs_kernels/_refs_buffers with what the graph references now
        (executables hold these tuples). Kept while _keep is unchanged, so instantiating
        or updating from the same graph again shares one snapshot."""
        cdef list keep = self._keep
        if (self._refs is not None and self._refs_of is keep and PyList_GET_SIZE(keep) == self._refs_len
                and not self._nested):
            return 0
        out = []
        todo = [keep]
        nested = False
        while todo:
            for o in todo.pop():
                if type(o) is list:
                    todo.append(o)
                    nested = True
                else:
                    out.append(o)
        self._nested = nested
        self._refs = tuple(out)
        self._refs_kernels = tuple({id(o): o for o in out if type(o) is Kernel}.values())
        self._refs_buffers = tuple({id(o): o for o in out if type(o) is DeviceBuffer}.values())
        self._refs_of = keep
        self._refs_len = PyList_GET_SIZE(keep)
        return 0

    cdef list _snapshot(self):
        """Every object the graph references, flat (nested _keep lists of bodies and children unrolled)."""
        self._take_refs()
        return list(self._refs)

    # ----------------------------------------------------------- node builders
    def add_kernel(self, Kernel kernel not None, grid, block, *args, shared_mem=0, depends_on=None,
                   priority=None):
        """Add a kernel node; arguments are checked and packed as :meth:`Kernel.launch` does.

        ``priority`` (an int in ``Device.stream_priority_range()``; lower is higher)
        sets the node's launch priority attribute (:attr:`KernelNode.priority`), which
        executables instantiated with ``use_node_priority=True`` run it at.

        Returns
        -------
        KernelNode
        """
        cdef KernelNode n
        cdef size_t nd = 0
        cdef CUgraphNode *deps = NULL
        cdef CUgraphNode h = NULL
        cdef list keep = []
        cdef int prio = 0
        self._live()
        need(<void *>D.cuGraphAddKernelNode, "cuGraphAddKernelNode")
        if priority is not None:
            prio = check_priority(self.device, self.ctx, priority)
        if priority is not None:
            need(<void *>D.cuGraphDestroyNode, "cuGraphDestroyNode")
        n = self._kernel_node(kernel, grid, block, args, shared_mem, keep)
        dep_array(self, depends_on, &deps, &nd)
        try:
            set_current(self.ctx)
            check(D.cuGraphAddKernelNode(&h, self.handle, deps, nd, &n.p), b"cuGraphAddKernelNode")
        finally:
            PyMem_Free(deps)
        if priority is not None:
            try:
                set_node_priority(self.ctx, h, prio)
            except BaseException:
                D.cuGraphDestroyNode(h)         # never adopted: the graph is as it was
                raise
        n.handle = h
        self._adopt(n)
        self._keep.append(kernel)
        hold(self._keep, args)
        if keep:
            hold(self._keep, keep)
        return n

    cdef KernelNode _kernel_node(self, Kernel kernel, grid, block, tuple args, shared_mem, list keep):
        """A KernelNode of kernel with its geometry and arguments checked and packed (not
        yet in the graph); what the arguments need held goes into keep."""
        cdef KernelNode n
        cdef unsigned int smem
        cdef Py_ssize_t i
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
        n = new_kernel_node(kernel)
        check_dims(kernel, grid, block, smem, &n.p.gridDimX, &n.p.blockDimX)
        n.p.sharedMemBytes = smem
        for i in range(kernel.nparams):
            pack_arg(kernel, i, args[i], n.buf, NULL, keep)
        n._vals = list(args)
        n.p.func = kernel.func
        n.p.kernelParams = n.ptrs if kernel.nparams > 0 else NULL
        n.p.ctx = kernel.ctx
        return n

    def add_plan(self, plan, depends_on=None, priority=None):
        """Add a kernel node from a :class:`LaunchPlan` (its kernel, dimensions, shared
        memory and arguments; the plan's stream does not matter in a graph).
        ``priority`` as for :meth:`add_kernel`.

        A plan bound with a :class:`LaunchConfig` (``Kernel.bind_config``) carries its
        launch attributes into the node: the cluster dimensions, the cooperative flag and
        the priority (``priority=`` may repeat it, not contradict it). With
        ``programmatic_serialization`` the edges from the kernel nodes in ``depends_on``
        are programmatic, as stream capture makes them: this kernel may start once those
        kernels trigger (``griddepcontrol.launch_dependents``) or end, and waits for their
        memory with ``griddepcontrol.wait``; edges from other nodes stay full. That needs a
        driver of CUDA 12.3 or later. The node is added with all of these or not at all.
        """
        cfg = plan.config
        if cfg is None:
            return self.add_kernel(plan.kernel, plan.grid, plan.block, *plan.args, shared_mem=plan.shared_mem,
                                   depends_on=depends_on, priority=priority)
        # _edges cimports this module: imported on first use (_lazy.pxd)
        return lazy_module(&_edges_mod, "barecuda.graph._edges").add_configured(self, plan, cfg, depends_on,
                                                                                 priority)

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
        need(<void *>D.cuGraphAddMemcpyNode, "cuGraphAddMemcpyNode")
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
        need(<void *>D.cuGraphAddMemsetNode, "cuGraphAddMemsetNode")
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
        need(<void *>D.cuGraphAddHostNode, "cuGraphAddHostNode")
        c = _HostCall()
        c.fn = fn
        c.where = f"node #{len(self._nodes)}"
        p.fn = host_trampoline
        p.userData = <void *>c
        return self._add_simple("host", depends_on, (c,), NULL, NULL, &p, None)

    def add_event_record(self, Event event not None, depends_on=None):
        """Add a node recording ``event``."""
        self._live()
        need(<void *>D.cuGraphAddEventRecordNode, "cuGraphAddEventRecordNode")
        return self._add_simple("event_record", depends_on, (event,), NULL, NULL, NULL, event)

    def add_event_wait(self, Event event not None, depends_on=None):
        """Add a node waiting for ``event``."""
        self._live()
        need(<void *>D.cuGraphAddEventWaitNode, "cuGraphAddEventWaitNode")
        return self._add_simple("event_wait", depends_on, (event,), NULL, NULL, NULL, event)

    def add_child(self, Graph child not None, depends_on=None):
        """Add ``child`` as a node (the driver copies it; ``child`` may change afterwards
        without affecting this graph). Its references are held too."""
        self._live()
        child._live()
        if child is self:
            raise ValueError("a graph cannot be its own child")
        need(<void *>D.cuGraphAddChildGraphNode, "cuGraphAddChildGraphNode")
        return self._add_simple("graph", depends_on, (child._snapshot(),), NULL, NULL, NULL, child)

    def add_empty(self, depends_on=None):
        """Add an empty node (a join point for dependencies)."""
        self._live()
        need(<void *>D.cuGraphAddEmptyNode, "cuGraphAddEmptyNode")
        return self._add_simple("empty", depends_on, (), NULL, NULL, NULL, None)

    cdef GraphNode _add_simple(self, str kind, object depends_on, tuple refs, CUDA_MEMCPY3D *cp,
                               CUDA_MEMSET_NODE_PARAMS *sp, CUDA_HOST_NODE_PARAMS *hp, object obj):
        cdef size_t nd = 0
        cdef CUgraphNode *deps = NULL
        cdef CUgraphNode h = NULL
        cdef CUresult rc
        dep_array(self, depends_on, &deps, &nd)
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
        n = GraphNode.__new__(GraphNode, node_token())
        n.handle = h
        n.kind = kind
        self._adopt(n)
        hold(self._keep, refs)
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
        need(<void *>D.cuGraphConditionalHandleCreate, "cuGraphConditionalHandleCreate")
        set_current(self.ctx)
        check(D.cuGraphConditionalHandleCreate(&h, self.handle, self.ctx, default,
                                               CU_GRAPH_COND_ASSIGN_DEFAULT if assign_default else 0),
              b"cuGraphConditionalHandleCreate")
        c = ConditionalHandle.__new__(ConditionalHandle, node_token())
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
        need(<void *>D.cuGraphAddNode, "cuGraphAddNode")
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
            dep_array(self, depends_on, &deps, &nd)
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
            b = Graph.__new__(Graph, node_token())
            b.handle = bodies[i]
            b.owned = False
            b.device = self.device
            b.ctx = self.ctx
            b._parent = self        # the body's handle lives as long as this graph
            self._keep.append(b._keep)   # what the body's nodes reference (a list, not the body: no cycle)
            out.append(b)
        n = ConditionalNode.__new__(ConditionalNode, node_token())
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
        this object are returned as those objects; others (capture) as new node objects:
        :class:`KernelNode` for kernels launched through barecuda, else :class:`GraphNode`."""
        self._live()
        return self._enumerate()

    def kernel_nodes(self):
        """The kernel nodes whose kernel barecuda knows, in the driver's order: the ones
        added with :meth:`add_kernel`/:meth:`add_plan`, and in a captured graph those of
        launches made through barecuda during the capture (kernels launched by other
        libraries are left out). Pass them to :meth:`GraphExec.kernel_node`.

        A captured node's ``args`` are ``None`` (the driver keeps bytes, not objects);
        its kernel, dimensions and parameter bytes are the driver's."""
        self._live()
        return [n for n in self._enumerate() if isinstance(n, KernelNode)]

    def edges(self):
        """Every dependency as ``(from_node, to_node, kind)``, in the driver's order
        (``cuGraphGetEdges``; CUDA 12.3 or later). ``kind`` is ``"full"`` (the node
        starts after the other ends), ``"programmatic"`` (programmatic dependent launch:
        from the kernel's programmatic port, as :meth:`add_plan` of a plan with
        ``programmatic_serialization`` and stream capture of such launches make them) or
        ``"launch_order"`` (it starts once every block of the other kernel has started)."""
        self._live()
        return lazy_module(&_edges_mod, "barecuda.graph._edges").edges(self)


    cdef list _enumerate(self):
        """Node objects for every node in the driver's order; nodes not seen yet are
        adopted in that order (so a captured graph's node indices are driver positions,
        which is how an update pairs nodes)."""
        cdef size_t n = 0, i
        cdef CUgraphNode *arr
        need(<void *>D.cuGraphGetNodes, "cuGraphGetNodes")
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
                    known = self._wrap(arr[i])
                out.append(known)
        finally:
            PyMem_Free(arr)
        return out

    cdef GraphNode _wrap(self, CUgraphNode h):
        """A node object for a node this object did not add (capture)."""
        cdef CUgraphNodeType t
        cdef CUDA_KERNEL_NODE_PARAMS_v2 p
        cdef GraphNode gn
        cdef KernelNode kn
        cdef Kernel k = None
        cdef Py_ssize_t i
        check(D.cuGraphNodeGetType(h, &t), b"cuGraphNodeGetType")
        if t == CU_GRAPH_NODE_TYPE_KERNEL and self._funcs and D.cuGraphKernelNodeGetParams != NULL:
            memset(&p, 0, sizeof(p))
            check(D.cuGraphKernelNodeGetParams(h, &p), b"cuGraphKernelNodeGetParams")
            k = self._funcs.get(<size_t>p.func)
            if k is not None and (k.nparams < 0 or k.func == NULL or (k.nparams > 0 and p.kernelParams == NULL)):
                k = None                # no layout, module closed, or parameters given as `extra`
        if k is None:
            gn = GraphNode.__new__(GraphNode, node_token())
            gn.handle = h
            gn.kind = _kind_name(t)
            self._adopt(gn)
            return gn
        kn = new_kernel_node(k)
        for i in range(k.nparams):
            memcpy(kn.ptrs[i], p.kernelParams[i], k.params[i].size)
        kn.p = p
        kn.p.func = k.func
        kn.p.kernelParams = kn.ptrs if k.nparams > 0 else NULL
        kn.p.extra = NULL
        kn.p.ctx = k.ctx
        kn._vals = [None] * k.nparams
        kn.handle = h
        self._adopt(kn)
        return kn

    def num_nodes(self):
        """Number of nodes (``cuGraphGetNodes``)."""
        cdef size_t n = 0
        self._live()
        need(<void *>D.cuGraphGetNodes, "cuGraphGetNodes")
        set_current(self.ctx)
        check(D.cuGraphGetNodes(self.handle, NULL, &n), b"cuGraphGetNodes")
        return n

    def to_dot(self, path, bint verbose=False):
        """Write the driver's DOT picture of the graph to ``path`` (``cuGraphDebugDotPrint``)."""
        self._live()
        need(<void *>D.cuGraphDebugDotPrint, "cuGraphDebugDotPrint")
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
            Run kernel nodes at their own priority attribute (:meth:`KernelNode.get_priority`,
            ``add_kernel(..., priority=)``; captured launches carry their stream's)
            instead of the priority of the stream the graph is launched into.

        Returns
        -------
        GraphExec
        """
        cdef unsigned long long flags = 0
        self._live()
        if not self.owned:
            raise ValueError("a conditional body cannot be instantiated on its own")
        if auto_free_on_launch:
            flags |= CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
        if device_launch:
            flags |= CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
        if use_node_priority:
            flags |= CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY
        # _exec cimports this module: imported on first use (_lazy.pxd)
        return lazy_module(&_exec_mod, "barecuda.graph._exec")._instantiate(self, upload, flags)


cdef PyObject *_exec_mod = NULL       # barecuda.graph._exec, once instantiate first ran
cdef PyObject *_edges_mod = NULL      # barecuda.graph._edges, once add_plan of a configured plan or edges ran


cdef Graph graph_shell(Device dev):
    """An empty Graph object without a handle (a capture fills it)."""
    cdef Graph g = Graph.__new__(Graph, node_token())
    g.device = dev
    g.ctx = dev.ctx
    return g
