"""CUDA graphs: the graph (nodes: _nodes.pxd; executables: _exec.pxd)."""
from barecuda._abi cimport (CUgraph, CUgraphExec, CUgraphNode, CUcontext, CUstream,
                            CUDA_KERNEL_NODE_PARAMS_v2, CUgraphConditionalHandle, CUDA_MEMCPY3D,
                            CUDA_MEMSET_NODE_PARAMS, CUDA_HOST_NODE_PARAMS, CUgraphConditionalNodeType)
from barecuda._device cimport Device
from barecuda._launch cimport Kernel
from barecuda.graph._nodes cimport GraphNode, KernelNode


cdef class ConditionalHandle
cdef class ConditionalNode


cdef class Graph:
    cdef CUgraph handle             # NULL while a capture fills it, and after close()
    cdef bint owned                 # False: a conditional body (the driver owns it)
    cdef readonly Device device
    """The Device the graph's nodes run on."""
    cdef CUcontext ctx
    cdef object _parent             # body graphs: the graph whose conditional node owns them
    cdef list _keep                 # everything the nodes reference (buffers, kernels, callables, events,
                                    #   and the _keep lists of child graphs and conditional bodies)
    cdef list _nodes                # weak references to the GraphNode objects, in creation order
    cdef dict _by_handle            # <size_t>CUgraphNode -> weak reference to its GraphNode
    cdef dict _info                 # <size_t>CUgraphNode -> (index, kind, kernel name or None), for messages
    cdef dict _kernels              # node index -> KernelNode (strong: update refreshes handles from it)
    cdef dict _funcs                # <size_t>CUfunction -> Kernel launched into it during its capture
    cdef object __weakref__
    cdef readonly bint captured     # made by stream capture
    """True for a graph made by stream capture (:func:`capture`), False for one built node by node."""
    cdef bint capturing             # the capture that fills it is still running
    # _take_refs()'s snapshot of _keep, flat (reused while _keep is unchanged: it only grows,
    # so the same list at the same length holds the same objects)
    cdef tuple _refs                # every object the nodes reference (nested lists unrolled)
    cdef tuple _refs_kernels        # the distinct Kernels among them
    cdef tuple _refs_buffers        # the distinct DeviceBuffers among them
    cdef list _refs_of              # the _keep list the snapshot was taken from ...
    cdef Py_ssize_t _refs_len       # ... and its length then
    cdef bint _nested               # _keep holds lists (conditional bodies', child graphs', a user's
                                    #   in keep_alive), which may grow on their own: no reuse

    cdef int _live(self) except -1
    cdef int _clear(self) except -1
    cdef int _adopt(self, object node) except -1
    cdef KernelNode _kernel_node(self, Kernel kernel, grid, block, tuple args, shared_mem, list keep)
    cdef int _take_refs(self) except -1
    cdef list _snapshot(self)
    cdef GraphNode _add_simple(self, str kind, object depends_on, tuple refs, CUDA_MEMCPY3D *cp,
                               CUDA_MEMSET_NODE_PARAMS *sp, CUDA_HOST_NODE_PARAMS *hp, object obj)
    cdef ConditionalNode _add_conditional(self, ConditionalHandle cond, CUgraphConditionalNodeType t,
                                          unsigned int size, str tname, object depends_on)
    cdef str _describe(self, CUgraphNode h)
    cdef list _enumerate(self)
    cdef GraphNode _wrap(self, CUgraphNode h)


cdef class ConditionalHandle:
    cdef readonly Graph graph
    """The Graph the handle was made for."""
    cdef CUgraphConditionalHandle h
    cdef readonly unsigned int default
    """The value the condition takes at each launch (when ``assign_default``) or at creation."""
    cdef readonly bint assign_default
    """Whether every launch resets the condition to ``default``."""


cdef class ConditionalNode(GraphNode):
    cdef readonly ConditionalHandle condition
    """The ConditionalHandle whose value decides what the node runs."""
    cdef readonly tuple bodies
    """The body graphs the node runs (an IF with an else branch has two; a SWITCH one per case)."""
    cdef readonly str type
    """``'if'``, ``'while'`` or ``'switch'``."""


# In out, the CUgraphNode array for depends_on (a node or an iterable of nodes of g; NULL
# when empty); the caller frees it with PyMem_Free.
cdef int dep_array(Graph g, object depends_on, CUgraphNode **out, size_t *n) except -1

# An empty Graph object without a handle, on dev (_capture fills it).
cdef Graph graph_shell(Device dev)
