"""CUDA graphs: the nodes of a graph (the graph: _graph.pxd)."""
from barecuda._abi cimport CUgraphNode, CUcontext, CUDA_KERNEL_NODE_PARAMS_v2
from barecuda._device cimport Device
from barecuda._launch cimport Kernel


cdef class GraphNode:
    cdef CUgraphNode handle
    cdef object _graph_ref          # weak reference to the Graph (nodes never keep a graph alive: no cycle)
    cdef object __weakref__
    cdef readonly str kind
    """The node's type as a short name (``'kernel'``, ``'memcpy'``, ``'memset'``, ``'host'``, ...)."""
    cdef readonly Py_ssize_t index
    """The node's position among its graph's nodes (the order of :meth:`Graph.nodes`)."""


cdef class KernelNode(GraphNode):
    cdef readonly Kernel kernel
    """The Kernel the node launches (a captured kernel barecuda did not launch is a plain GraphNode)."""
    cdef char *buf                  # the node's parameter block (kernel.argbytes)
    cdef void **ptrs                # kernelParams: one pointer per slot into buf
    cdef CUDA_KERNEL_NODE_PARAMS_v2 p
    cdef list _vals                 # the Python value packed in each slot (keeps buffers alive)


# The token the node and graph constructors take (objects of the wing come from Graph only).
cdef object node_token()
# Append objs to a graph's reference list, pinning DeviceBuffers (their close() defers).
cdef int hold(list keep, object objs) except -1
# DriverVersionError naming the version of the optional entry point `name` unless fn is set.
cdef int need(void *fn, str name) except -1
# A KernelNode of k with a zeroed parameter block and its slot pointers (not yet adopted).
cdef KernelNode new_kernel_node(Kernel k)
# `value` as a launch priority of dev (ctx: its context); TypeError / ValueError before
# any node is touched.
cdef int check_priority(Device dev, CUcontext ctx, object value) except? -999999
# Set node h's launch priority attribute.
cdef int set_node_priority(CUcontext ctx, CUgraphNode h, int priority) except -1
