"""CUDA graphs: the nodes of a graph.

Owns: ``GraphNode`` (any node, as ``Graph.add_*`` and ``Graph.nodes`` return it),
``KernelNode`` (the kernel, its dimensions and its own parameter block: ``set_arg``
changes the graph), how a graph holds what its nodes reference (``hold``: buffers are
pinned, so their close() defers), and the check that an optional graph entry point
was resolved (``need``).

Nodes never hold their graph (a weak reference: no cycle). The graph module
(``_graph``) makes the nodes; a node reaches its graph's state through ``_graph.pxd``
(the one upward reference in this wing's cimports, resolved when both modules are
loaded: see docs/architecture.md, "The graph wing").
"""
__all__ = ["GraphNode", "KernelNode"]

cimport cython
from libc.string cimport memset
from cpython.mem cimport PyMem_Malloc, PyMem_Free

from barecuda._abi cimport *
from barecuda._loader cimport driver_table, set_current, require
from barecuda._errors cimport check
from barecuda._buffer cimport DeviceBuffer, pin, unpin, KIND_CLOSED
from barecuda._host cimport PinnedBuffer, hold_host
from barecuda._launch cimport Kernel, pack_arg
from barecuda.graph._graph cimport Graph

import operator
import warnings

cdef bc_driver_t *D = driver_table()

_TOKEN = object()


def _deprecated(old, new):
    warnings.warn(f"{old} is deprecated and goes in the next release; use {new}", DeprecationWarning,
                  stacklevel=3)


cdef object node_token():
    """The token the node and graph constructors take (nodes come from Graph only)."""
    return _TOKEN


cdef int need(void *fn, str name) except -1:
    """DriverVersionError naming the version of optional entry point `name` (from the ABI
    table, through _loader.require) unless it was resolved."""
    if fn == NULL:
        bname = name.encode()
        require(<const void *>fn, bname, b"CUDA graphs")
    return 0


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
        """The grid dimensions as ``(x, y, z)``."""
        return (self.p.gridDimX, self.p.gridDimY, self.p.gridDimZ)

    @property
    def block(self):
        """The block dimensions as ``(x, y, z)``."""
        return (self.p.blockDimX, self.p.blockDimY, self.p.blockDimZ)

    @property
    def shared_mem(self):
        """The dynamic shared memory per block, in bytes."""
        return self.p.sharedMemBytes

    @property
    def args(self):
        """The values last packed, one per parameter."""
        return tuple(self._vals)

    def get_priority(self):
        """The node's launch priority attribute (``CU_LAUNCH_ATTRIBUTE_PRIORITY``; 0 until
        set; captured launches carry their stream's), read from the driver. Lower numbers
        are higher priority. It takes effect in executables instantiated with
        ``use_node_priority=True``; otherwise kernels run at the priority of the stream
        the graph is launched into."""
        cdef CUlaunchAttributeValue v
        cdef Graph g = _graph_of(self)
        g._live()
        need(<void *>D.cuGraphKernelNodeGetAttribute, "cuGraphKernelNodeGetAttribute")
        memset(&v, 0, sizeof(v))
        set_current(g.ctx)
        check(D.cuGraphKernelNodeGetAttribute(self.handle, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v),
              b"cuGraphKernelNodeGetAttribute")
        return v.priority

    def set_priority(self, value):
        """Set the node's launch priority attribute: changes the graph (later
        instantiations), not existing executables; ``value`` is checked against
        ``Device.stream_priority_range()`` first."""
        cdef Graph g = _graph_of(self)
        g._live()
        set_node_priority(g.ctx, self.handle, check_priority(g.device, g.ctx, value))

    @property
    def priority(self):
        """Deprecated alias of :meth:`get_priority` / :meth:`set_priority` (a property
        must not call the driver); removed in the next release."""
        _deprecated("KernelNode.priority", "KernelNode.get_priority()")
        return self.get_priority()

    @priority.setter
    def priority(self, value):
        _deprecated("KernelNode.priority = ...", "KernelNode.set_priority(...)")
        self.set_priority(value)

    def set_arg(self, Py_ssize_t index, value):
        """Repack parameter ``index`` of this node in the graph (``cuGraphKernelNodeSetParams``)."""
        cdef list keep = []
        cdef Graph g = _graph_of(self)
        g._live()
        pack_arg(self.kernel, index, value, self.buf, NULL, keep)
        set_current(g.ctx)
        check(D.cuGraphKernelNodeSetParams(self.handle, &self.p), b"cuGraphKernelNodeSetParams")
        self._vals[index] = value
        hold(g._keep, (value,))         # executables made earlier may hold the old value themselves
        if keep:
            hold(g._keep, keep)


@cython.final
cdef class _Pin:
    """Pins a DeviceBuffer's allocation while it lives: the buffer's close() then defers
    the free (see _buffer.pxd, pin/unpin). Held next to the buffer in a graph's references."""
    cdef DeviceBuffer buf

    def __dealloc__(self):
        if self.buf is not None:
            unpin(self.buf)


cdef int hold(list keep, object objs) except -1:
    """Append objs to keep, each open DeviceBuffer with a _Pin and each open PinnedBuffer
    with its pin (hold_host) (a closed one is left to the caller's own check)."""
    cdef _Pin p
    for o in objs:
        keep.append(o)
        if isinstance(o, DeviceBuffer) and (<DeviceBuffer>o)._kind != KIND_CLOSED:
            p = _Pin.__new__(_Pin)
            pin(<DeviceBuffer>o)
            p.buf = <DeviceBuffer>o
            keep.append(p)
        elif type(o) is PinnedBuffer and not (<PinnedBuffer>o)._closed:
            keep.append(hold_host(<PinnedBuffer>o))
    return 0


cdef KernelNode new_kernel_node(Kernel k):
    """A KernelNode of k with a zeroed parameter block and its slot pointers (not yet adopted)."""
    cdef KernelNode n = KernelNode.__new__(KernelNode, _TOKEN)
    cdef Py_ssize_t i
    n.kind = "kernel"
    n.kernel = k
    memset(&n.p, 0, sizeof(n.p))
    n.buf = <char *>PyMem_Malloc(max(k.argbytes, 1))
    n.ptrs = <void **>PyMem_Malloc(max(k.nparams, 1) * sizeof(void *))
    if n.buf == NULL or n.ptrs == NULL:
        raise MemoryError()
    memset(n.buf, 0, max(k.argbytes, 1))
    for i in range(k.nparams):
        n.ptrs[i] = n.buf + k.params[i].offset
    return n


cdef int check_priority(Device dev, CUcontext ctx, object value) except? -999999:
    """``value`` as a launch priority of dev (ctx: its context): an int within
    ``cuCtxGetStreamPriorityRange`` (greatest <= value <= least), else TypeError /
    ValueError before the node is touched."""
    cdef int least = 0, greatest = 0
    if isinstance(value, bool):
        raise TypeError("priority must be an int, not bool")
    p = operator.index(value)
    need(<void *>D.cuGraphKernelNodeSetAttribute, "cuGraphKernelNodeSetAttribute")
    set_current(ctx)
    check(D.cuCtxGetStreamPriorityRange(&least, &greatest), b"cuCtxGetStreamPriorityRange")
    if not greatest <= p <= least:
        raise ValueError(f"priority {p} is outside device {dev.ordinal}'s range {greatest}..{least} "
                         f"(lower numbers are higher priority; Device.stream_priority_range())")
    return p


cdef int set_node_priority(CUcontext ctx, CUgraphNode h, int priority) except -1:
    cdef CUlaunchAttributeValue v
    memset(&v, 0, sizeof(v))
    v.priority = priority
    set_current(ctx)
    check(D.cuGraphKernelNodeSetAttribute(h, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v),
          b"cuGraphKernelNodeSetAttribute")
    return 0
