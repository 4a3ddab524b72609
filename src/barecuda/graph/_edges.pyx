"""CUDA graphs: edges with data, and the kernel nodes that carry launch attributes.

Owns: ``Graph.add_plan`` of a plan bound with a :class:`LaunchConfig` (the kernel node,
its cluster / cooperative / priority attributes, and programmatic edges from the kernel
nodes it depends on: ``cuGraphAddDependencies`` with edge data, CUDA 12.3+), and
``Graph.edges`` (``cuGraphGetEdges``: every dependency with its kind).

``_graph`` imports this module on first use (``_lazy.pxd``): it cimports ``_graph``
for the Graph it works on. Nothing here is public; the entry points are Graph's methods.
"""
__all__ = []

from libc.string cimport memset
from cpython cimport PyMem_Malloc, PyMem_Free

from operator import index as operator_index

from barecuda._abi cimport *
from barecuda._errors cimport check
from barecuda._loader cimport driver_table, set_current
from barecuda._launch cimport Kernel
from barecuda._launch_config cimport LaunchConfig
from barecuda.graph._graph cimport Graph, dep_array
from barecuda.graph._nodes cimport GraphNode, KernelNode, hold, need, check_priority, set_node_priority

cdef bc_driver_t *D = driver_table()


def add_configured(Graph g, plan, LaunchConfig cfg, depends_on, priority):
    """Graph.add_plan of a plan bound with cfg: the node, then its attributes and
    programmatic edges; a failure after the node is in the graph removes it again
    (``cuGraphDestroyNode`` before the node object is adopted)."""
    cdef KernelNode n
    cdef Kernel kernel = plan.kernel
    cdef CUgraphNode *deps = NULL
    cdef CUgraphNode *pfrom = NULL
    cdef CUgraphNode *pto = NULL
    cdef CUgraphEdgeData *edata = NULL
    cdef size_t nd = 0, k
    cdef CUgraphNode h = NULL
    cdef CUlaunchAttributeValue v
    cdef list keep = []
    cdef int prio = 0
    g._live()
    need(<void *>D.cuGraphAddKernelNode, "cuGraphAddKernelNode")
    if priority is not None and cfg.priority is not None and operator_index(priority) != cfg.priority:
        raise ValueError(f"priority={priority} contradicts the plan's LaunchConfig priority {cfg.priority}; "
                         f"give one of them")
    if priority is None:
        priority = cfg.priority
    if priority is not None:
        prio = check_priority(g.device, g.ctx, priority)
    full, prog = [], []
    if depends_on is not None:
        for x in ((depends_on,) if isinstance(depends_on, GraphNode) else tuple(depends_on)):
            (prog if cfg.programmatic_serialization and isinstance(x, GraphNode)
             and (<GraphNode>x).kind == "kernel" else full).append(x)
    if priority is not None or cfg.has_cluster or cfg.cooperative:
        need(<void *>D.cuGraphKernelNodeSetAttribute, "cuGraphKernelNodeSetAttribute")
    if prog:
        need(<void *>D.cuGraphAddDependencies, "cuGraphAddDependencies")
    need(<void *>D.cuGraphDestroyNode, "cuGraphDestroyNode")
    n = g._kernel_node(kernel, plan.grid, plan.block, tuple(plan.args), plan.shared_mem, keep)
    dep_array(g, prog, &pfrom, &nd)         # checks they belong to this graph
    PyMem_Free(pfrom)
    pfrom = NULL
    dep_array(g, full, &deps, &nd)
    try:
        set_current(g.ctx)
        check(D.cuGraphAddKernelNode(&h, g.handle, deps, nd, &n.p), b"cuGraphAddKernelNode")
    finally:
        PyMem_Free(deps)
    try:
        memset(&v, 0, sizeof(v))
        if cfg.has_cluster:
            v.clusterDim.x = cfg.cluster_[0]
            v.clusterDim.y = cfg.cluster_[1]
            v.clusterDim.z = cfg.cluster_[2]
            check(D.cuGraphKernelNodeSetAttribute(h, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v),
                  b"cuGraphKernelNodeSetAttribute")
        if cfg.cooperative:
            memset(&v, 0, sizeof(v))
            v.cooperative = 1
            check(D.cuGraphKernelNodeSetAttribute(h, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &v),
                  b"cuGraphKernelNodeSetAttribute")
        if priority is not None:
            set_node_priority(g.ctx, h, prio)
        if prog:
            nd = len(prog)
            pfrom = <CUgraphNode *>PyMem_Malloc(nd * sizeof(CUgraphNode))
            pto = <CUgraphNode *>PyMem_Malloc(nd * sizeof(CUgraphNode))
            edata = <CUgraphEdgeData *>PyMem_Malloc(nd * sizeof(CUgraphEdgeData))
            if pfrom == NULL or pto == NULL or edata == NULL:
                raise MemoryError()
            memset(edata, 0, nd * sizeof(CUgraphEdgeData))
            for k in range(nd):
                pfrom[k] = (<GraphNode>prog[k]).handle
                pto[k] = h
                edata[k].type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
                edata[k].from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
            check(D.cuGraphAddDependencies(g.handle, pfrom, pto, edata, nd), b"cuGraphAddDependencies")
    except BaseException:
        D.cuGraphDestroyNode(h)             # never adopted: the graph is as it was
        raise
    finally:
        PyMem_Free(pfrom)
        PyMem_Free(pto)
        PyMem_Free(edata)
    n.handle = h
    g._adopt(n)
    g._keep.append(kernel)
    hold(g._keep, tuple(plan.args))
    if keep:
        hold(g._keep, keep)
    return n


def edges(Graph g):
    """Graph.edges: every dependency as ``(from_node, to_node, kind)``, in the driver's order
    (``cuGraphGetEdges``; CUDA 12.3 or later). ``kind`` is ``"full"`` (the node
    starts after the other ends), ``"programmatic"`` (programmatic dependent launch:
    from the kernel's programmatic port, as :meth:`add_plan` of a plan with
    ``programmatic_serialization`` and stream capture of such launches make them) or
    ``"launch_order"`` (it starts once every block of the other kernel has started)."""
    cdef size_t n = 0, i
    cdef CUgraphNode *fr = NULL
    cdef CUgraphNode *to = NULL
    cdef CUgraphEdgeData *ed = NULL
    g._live()
    need(<void *>D.cuGraphGetEdges, "cuGraphGetEdges")
    nodes = {<size_t>(<GraphNode>x).handle: x for x in g._enumerate()}
    set_current(g.ctx)
    check(D.cuGraphGetEdges(g.handle, NULL, NULL, NULL, &n), b"cuGraphGetEdges")
    if n == 0:
        return []
    fr = <CUgraphNode *>PyMem_Malloc(n * sizeof(CUgraphNode))
    to = <CUgraphNode *>PyMem_Malloc(n * sizeof(CUgraphNode))
    ed = <CUgraphEdgeData *>PyMem_Malloc(n * sizeof(CUgraphEdgeData))
    out = []
    try:
        if fr == NULL or to == NULL or ed == NULL:
            raise MemoryError()
        check(D.cuGraphGetEdges(g.handle, fr, to, ed, &n), b"cuGraphGetEdges")
        for i in range(n):
            if ed[i].from_port == CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER:
                kind = "launch_order"
            elif ed[i].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC:
                kind = "programmatic"
            elif ed[i].type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT and ed[i].from_port == 0:
                kind = "full"
            else:
                kind = f"type {ed[i].type} port {ed[i].from_port}"
            out.append((nodes[<size_t>fr[i]], nodes[<size_t>to[i]], kind))
    finally:
        PyMem_Free(fr)
        PyMem_Free(to)
        PyMem_Free(ed)
    return out
