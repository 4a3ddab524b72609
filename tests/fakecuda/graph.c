/*
 * fakecuda graph.c -- CUDA graphs in the driver double: explicit graphs and nodes, the
 * graph registries; stream capture is in capture.c, executable graphs (instantiate,
 * launch, update, per-node parameters) in exec.c, their shared structs in fake_graph.h.
 *
 * Uses the double's registries, lock, launch validation and pending-work model
 * (fake_internal.h); the other files call its capture hooks (fk_cap_*, declared
 * there). What it simulates:
 * - Capture: cuStreamBeginCapture puts a stream in capture; kernel launches, async
 *   copies/memsets, host functions and stream-ordered allocations/frees on it become
 *   nodes (each depends on the stream's previous node; an event recorded in the capture
 *   and waited on by another stream brings that stream into the capture, a fork/join).
 *   Captured work does not run. cuStreamSynchronize/cuStreamQuery of a capturing stream
 *   and cuCtxSynchronize during any capture fail with 900 and invalidate the capture;
 *   "unsafe" calls (cuMemAlloc, cuMemFree, synchronous copies) fail with 900 while a
 *   GLOBAL capture runs on any thread or a THREAD_LOCAL one on this thread.
 *   cuStreamEndCapture returns 901 for an invalidated capture (the stream leaves capture
 *   either way).
 * - Allocation nodes: memory from cuMemAllocAsync in a capture is allocated at once (its
 *   address is fixed); a free node in the same graph leaves it to the graph, which gives
 *   it back when the graph and every executable made from it are destroyed.
 * - Launch (cuGraphLaunch) replays the nodes in order: kernels go through the same
 *   validation and launch log as cuLaunchKernel (and the pending-work model), copies and
 *   memsets run with range checks (host sides must be live page-locked memory), event-record nodes record, host nodes are called
 *   after the replay, outside the lock. Disabled nodes are skipped. Kernel nodes keep a
 *   priority attribute (the only attribute kept); an executable instantiated with
 *   USE_NODE_PRIORITY logs its kernels with their node's priority, others with 0.
 * - Conditionals: handles hold a value (reset to the default at each launch with
 *   CU_GRAPH_COND_ASSIGN_DEFAULT). Kernels do not run here, so no kernel can end a
 *   WHILE loop: a WHILE body runs once per launch when the value is non-zero and the
 *   value is then cleared. fakecuda_graph_set_conditional sets a value from the test.
 * - cuGraphExecUpdate pairs nodes by position: node count, types, dependencies and the
 *   kernel's context must match (else 910 with the result info naming the node).
 */

#include "fake_graph.h"

fk_vec g_graphs, g_execs;
fk_cond *g_conds;
size_t g_nconds, g_capconds;
fk_galloc *g_gallocs;
size_t g_ngallocs, g_capgallocs;
fk_cap g_caps[64];
int g_ncaps;
fk_capev g_capevs[64];
int g_ncapevs;
long long g_graph_launches;

int graph_valid(CUgraph g) { return g && vec_has(&g_graphs, g) && g->magic == FK_GMAGIC; }
int exec_valid(CUgraphExec x) { return x && vec_has(&g_execs, x) && x->magic == FK_XMAGIC; }

CUgraph graph_new(void) {
    CUgraph g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->magic = FK_GMAGIC;
    g->refs = 1;
    if (vec_add(&g_graphs, g)) { free(g); return NULL; }
    return g;
}

fk_galloc *galloc_find(uintptr_t base, unsigned long long id) {
    size_t i;
    for (i = 0; i < g_ngallocs; i++)
        if (g_gallocs[i].base == base && g_gallocs[i].id == id) return &g_gallocs[i];
    return NULL;
}

static void galloc_release(uintptr_t base, unsigned long long id) {
    fk_galloc *ga = galloc_find(base, id);
    fk_alloc *a;
    if (!ga || --ga->holders > 0) return;
    a = find_alloc_exact(base);
    if (a && a->id == id && ga->has_free_node) do_free((CUdeviceptr)base, 0);
    *ga = g_gallocs[--g_ngallocs];
}


static void node_free(CUgraphNode n) {
    unsigned int i;
    if (!n) return;
    free(n->deps);
    free(n->etype);
    free(n->eport);
    free(n->params);
    free(n->pptrs);
    if (n->child) graph_free(n->child);
    for (i = 0; i < n->nbodies; i++) graph_free(n->bodies[i]);
    free(n->bodies);
    if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) galloc_release(n->abase, n->aid);
    n->magic = 0xDEADu;
    free(n);
}

void graph_free(CUgraph g) {
    int i;
    if (!g) return;
    for (i = 0; i < g->n; i++) node_free(g->nodes[i]);
    free(g->nodes);
    vec_remove(&g_graphs, g);
    g->magic = 0xDEADu;
    free(g);
}

CUresult add_node(CUgraph g, CUgraphNodeType type, const CUgraphNode *deps, size_t ndeps, CUgraphNode *out) {
    CUgraphNode n;
    size_t i;
    if (!graph_valid(g)) return CUDA_ERROR_INVALID_HANDLE;
    if (ndeps && !deps) return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < ndeps; i++)
        if (!deps[i] || deps[i]->magic != FK_NMAGIC || deps[i]->graph != g) return CUDA_ERROR_INVALID_VALUE;
    if (g->n == g->cap) {
        int nc = g->cap ? g->cap * 2 : 16;
        CUgraphNode *nv = realloc(g->nodes, (size_t)nc * sizeof(*nv));
        if (!nv) return CUDA_ERROR_OUT_OF_MEMORY;
        g->nodes = nv;
        g->cap = nc;
    }
    n = calloc(1, sizeof(*n));
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    n->deps = ndeps ? malloc(ndeps * sizeof(int)) : NULL;
    if (ndeps && !n->deps) { free(n); return CUDA_ERROR_OUT_OF_MEMORY; }
    for (i = 0; i < ndeps; i++) n->deps[i] = deps[i]->index;
    n->ndeps = (int)ndeps;
    n->magic = FK_NMAGIC;
    n->graph = g;
    n->type = type;
    n->index = g->n;
    n->enabled = 1;
    g->nodes[g->n++] = n;
    if (out) *out = n;
    return CUDA_SUCCESS;
}


static CUgraphNode node_clone(CUgraph dst, CUgraphNode s, int keep_orig) {
    CUgraphNode n = calloc(1, sizeof(*n));
    unsigned int i;
    size_t pb = s->func ? s->func->param_bytes : 0;
    if (!n) return NULL;
    *n = *s;
    n->graph = dst;
    n->orig = keep_orig ? s : NULL;
    n->deps = s->ndeps ? malloc((size_t)s->ndeps * sizeof(int)) : NULL;
    if (s->ndeps) memcpy(n->deps, s->deps, (size_t)s->ndeps * sizeof(int));
    n->etype = n->eport = NULL;
    if (s->etype) {
        n->etype = malloc((size_t)s->ndeps);
        n->eport = malloc((size_t)s->ndeps);
        memcpy(n->etype, s->etype, (size_t)s->ndeps);
        memcpy(n->eport, s->eport, (size_t)s->ndeps);
    }
    n->params = NULL;
    n->pptrs = NULL;
    if (s->params && pb) {
        n->params = malloc(pb);
        memcpy(n->params, s->params, pb);
    }
    n->child = s->child ? graph_clone(s->child, keep_orig) : NULL;
    n->bodies = NULL;
    if (s->nbodies) {
        n->bodies = calloc(s->nbodies, sizeof(CUgraph));
        for (i = 0; i < s->nbodies; i++) n->bodies[i] = graph_clone(s->bodies[i], keep_orig);
    }
    if (s->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        fk_galloc *ga = galloc_find(s->abase, s->aid);
        if (ga) ga->holders++;
    }
    return n;
}

CUgraph graph_clone(CUgraph src, int keep_orig) {
    CUgraph g = graph_new();
    int i;
    if (!g) return NULL;
    g->body = src->body;
    g->nodes = src->n ? calloc((size_t)src->n, sizeof(CUgraphNode)) : NULL;
    g->cap = src->n;
    for (i = 0; i < src->n; i++) g->nodes[g->n++] = node_clone(g, src->nodes[i], keep_orig);
    return g;
}

/* ----------------------------------------------------------- explicit graphs */
CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
    FK_ENTER(cuGraphCreate);
    if (!phGraph || flags) return CUDA_ERROR_INVALID_VALUE;
    *phGraph = graph_new();
    return *phGraph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
    FK_ENTER(cuGraphDestroy);
    if (!graph_valid(hGraph) || hGraph->body) return CUDA_ERROR_INVALID_VALUE;
    graph_free(hGraph);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
    size_t i;
    FK_ENTER(cuGraphGetNodes);
    if (!graph_valid(hGraph) || !numNodes) return CUDA_ERROR_INVALID_VALUE;
    if (nodes)
        for (i = 0; i < *numNodes && i < (size_t)hGraph->n; i++) nodes[i] = hGraph->nodes[i];
    *numNodes = (size_t)hGraph->n;
    return CUDA_SUCCESS;
}

static int node_valid(CUgraphNode n) {
    return n && n->magic == FK_NMAGIC && graph_valid(n->graph);
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
    FK_ENTER(cuGraphNodeGetType);
    if (!node_valid(hNode) || !type) return CUDA_ERROR_INVALID_VALUE;
    *type = hNode->type;
    return CUDA_SUCCESS;
}

/* Same checks as an eager launch (do_launch's, without running it): function, context, dims. */
CUresult check_kernel_params(const CUDA_KERNEL_NODE_PARAMS_v2 *p) {
    CUcontext c = cur_ctx();
    const int *a;
    int i;
    unsigned long long threads;
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (!vec_has(&g_funcs, p->func)) return fk_reject(CUDA_ERROR_INVALID_HANDLE, "unknown function handle");
    if (p->func->mod->ctx != c) return fk_reject(CUDA_ERROR_INVALID_CONTEXT, "function belongs to another context");
    if (p->kern) return fk_reject(CUDA_ERROR_INVALID_VALUE, "kern is not supported by fakecuda");
    if (p->ctx && p->ctx != c) return fk_reject(CUDA_ERROR_INVALID_CONTEXT, "ctx is not the current context");
    a = g_dev[c->dev].attrs;
    for (i = 0; i < 3; i++) {
        unsigned int gd = i == 0 ? p->gridDimX : i == 1 ? p->gridDimY : p->gridDimZ;
        unsigned int bd = i == 0 ? p->blockDimX : i == 1 ? p->blockDimY : p->blockDimZ;
        if (gd == 0 || gd > (unsigned int)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X + i])
            return fk_reject(CUDA_ERROR_INVALID_VALUE, "grid dim %d = %u out of range", i, gd);
        if (bd == 0 || bd > (unsigned int)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X + i])
            return fk_reject(CUDA_ERROR_INVALID_VALUE, "block dim %d = %u out of range", i, bd);
    }
    threads = (unsigned long long)p->blockDimX * p->blockDimY * p->blockDimZ;
    if (threads > (unsigned long long)p->func->max_threads)
        return fk_reject(CUDA_ERROR_INVALID_VALUE, "%llu threads per block > %d", threads, p->func->max_threads);
    if (p->sharedMemBytes > (unsigned int)p->func->max_dyn_smem)
        return fk_reject(CUDA_ERROR_INVALID_VALUE, "%u bytes of dynamic shared memory > %d", p->sharedMemBytes,
                         p->func->max_dyn_smem);
    if (p->kernelParams && p->extra) return fk_reject(CUDA_ERROR_INVALID_VALUE, "both kernelParams and extra");
    if (p->func->nparams && !p->kernelParams && !p->extra)
        return fk_reject(CUDA_ERROR_INVALID_VALUE, "kernelParams is NULL for %d parameters", p->func->nparams);
    for (i = 0; p->kernelParams && i < p->func->nparams; i++)
        if (!p->kernelParams[i]) return fk_reject(CUDA_ERROR_INVALID_VALUE, "kernelParams[%d] is NULL", i);
    return CUDA_SUCCESS;
}

/* Copy the parameter values now (the driver does: the caller's buffers may change after). */
CUresult store_kernel_params(CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v2 *p) {
    CUfunction f = p->func;
    unsigned char *buf = NULL;
    int i;
    if (f->param_bytes) {
        buf = calloc(1, f->param_bytes);
        if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
        for (i = 0; p->kernelParams && i < f->nparams; i++)
            memcpy(buf + f->params[i].offset, p->kernelParams[i], f->params[i].size);
    }
    free(n->params);
    free(n->pptrs);
    n->pptrs = NULL;
    n->params = buf;
    n->func = f;
    n->grid[0] = p->gridDimX; n->grid[1] = p->gridDimY; n->grid[2] = p->gridDimZ;
    n->block[0] = p->blockDimX; n->block[1] = p->blockDimY; n->block[2] = p->blockDimZ;
    n->smem = p->sharedMemBytes;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) {
    CUresult rc;
    CUgraphNode n;
    FK_ENTER(cuGraphAddKernelNode);
    if (!phGraphNode) return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_kernel_params(nodeParams))) return rc;
    if (nodeParams->extra) return fk_reject(CUDA_ERROR_INVALID_VALUE, "fakecuda graphs take kernelParams, not extra");
    if ((rc = add_node(hGraph, CU_GRAPH_NODE_TYPE_KERNEL, dependencies, numDependencies, &n))) return rc;
    if ((rc = store_kernel_params(n, nodeParams))) return rc;
    *phGraphNode = n;
    return CUDA_SUCCESS;
}

/* As the driver: kernelParams points at the node's own copy of each parameter (valid
 * until the node's parameters change or it is destroyed); ctx is the function's. */
CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) {
    CUfunction f;
    int i;
    FK_ENTER(cuGraphKernelNodeGetParams);
    if (!node_valid(hNode) || hNode->type != CU_GRAPH_NODE_TYPE_KERNEL || !nodeParams) return CUDA_ERROR_INVALID_VALUE;
    f = hNode->func;
    if (f->nparams && !hNode->pptrs) {
        if (!hNode->params && !(hNode->params = calloc(1, f->param_bytes ? f->param_bytes : 1)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (!(hNode->pptrs = calloc((size_t)f->nparams, sizeof(void *)))) return CUDA_ERROR_OUT_OF_MEMORY;
        for (i = 0; i < f->nparams; i++) hNode->pptrs[i] = hNode->params + f->params[i].offset;
    }
    memset(nodeParams, 0, sizeof(*nodeParams));
    nodeParams->kernelParams = f->nparams ? hNode->pptrs : NULL;
    nodeParams->ctx = f->mod->ctx;
    nodeParams->func = hNode->func;
    nodeParams->gridDimX = hNode->grid[0]; nodeParams->gridDimY = hNode->grid[1]; nodeParams->gridDimZ = hNode->grid[2];
    nodeParams->blockDimX = hNode->block[0]; nodeParams->blockDimY = hNode->block[1];
    nodeParams->blockDimZ = hNode->block[2];
    nodeParams->sharedMemBytes = hNode->smem;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) {
    CUresult rc;
    FK_ENTER(cuGraphKernelNodeSetParams);
    if (!node_valid(hNode) || hNode->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_kernel_params(nodeParams))) return rc;
    return store_kernel_params(hNode, nodeParams);
}

/* Kernel node attributes: the double keeps the priority, the cluster dimensions and the
 * cooperative flag (what barecuda sets); replays launch with them. */
CUresult CUDAAPI cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUlaunchAttributeID attr,
                                               CUlaunchAttributeValue *value_out) {
    FK_ENTER(cuGraphKernelNodeGetAttribute);
    if (!node_valid(hNode) || hNode->type != CU_GRAPH_NODE_TYPE_KERNEL || !value_out) return CUDA_ERROR_INVALID_VALUE;
    memset(value_out, 0, sizeof(*value_out));
    switch ((int)attr) {
    case CU_LAUNCH_ATTRIBUTE_PRIORITY: value_out->priority = hNode->priority; break;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE: value_out->cooperative = hNode->cooperative; break;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        value_out->clusterDim.x = hNode->has_cluster ? hNode->cluster[0] : 0;
        value_out->clusterDim.y = hNode->has_cluster ? hNode->cluster[1] : 0;
        value_out->clusterDim.z = hNode->has_cluster ? hNode->cluster[2] : 0;
        break;
    default:
        return fk_reject(CUDA_ERROR_INVALID_VALUE, "fakecuda keeps the priority, cluster and cooperative attributes of kernel nodes only");
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUlaunchAttributeID attr,
                                               const CUlaunchAttributeValue *value) {
    FK_ENTER(cuGraphKernelNodeSetAttribute);
    if (!node_valid(hNode) || hNode->type != CU_GRAPH_NODE_TYPE_KERNEL || !value) return CUDA_ERROR_INVALID_VALUE;
    switch ((int)attr) {
    case CU_LAUNCH_ATTRIBUTE_PRIORITY: hNode->priority = value->priority; break;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE: hNode->cooperative = value->cooperative != 0; break;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        if (!value->clusterDim.x || !value->clusterDim.y || !value->clusterDim.z) return CUDA_ERROR_INVALID_VALUE;
        if (hNode->grid[0] % value->clusterDim.x || hNode->grid[1] % value->clusterDim.y ||
            hNode->grid[2] % value->clusterDim.z)
            return fk_reject(CUDA_ERROR_INVALID_VALUE, "grid is not a multiple of the cluster");
        hNode->has_cluster = 1;
        hNode->cluster[0] = value->clusterDim.x;
        hNode->cluster[1] = value->clusterDim.y;
        hNode->cluster[2] = value->clusterDim.z;
        break;
    default:
        return fk_reject(CUDA_ERROR_INVALID_VALUE, "fakecuda keeps the priority, cluster and cooperative attributes of kernel nodes only");
    }
    return CUDA_SUCCESS;
}

/* Edges with data (12.3+). The double keeps nodes in creation order, so an edge must go
 * from an earlier node to a later one (what barecuda adds). Programmatic edges join two
 * kernel nodes from the PROGRAMMATIC or LAUNCH_ORDER port, as the driver asks. */
static CUresult check_edge(CUgraph g, CUgraphNode from, CUgraphNode to, const CUgraphEdgeData *e) {
    int j;
    if (!node_valid(from) || !node_valid(to) || from->graph != g || to->graph != g) return CUDA_ERROR_INVALID_VALUE;
    if (from->index >= to->index) return fk_reject(CUDA_ERROR_INVALID_VALUE, "fakecuda: an edge must go from an earlier node to a later one");
    for (j = 0; j < to->ndeps; j++)
        if (to->deps[j] == from->index) return fk_reject(CUDA_ERROR_INVALID_VALUE, "edge already exists");
    if (!e) return CUDA_SUCCESS;
    if (e->to_port || e->reserved[0] || e->reserved[1] || e->reserved[2] || e->reserved[3] || e->reserved[4])
        return CUDA_ERROR_INVALID_VALUE;
    if (e->type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT)
        return e->from_port == CU_GRAPH_KERNEL_NODE_PORT_DEFAULT ||
               (e->from_port == CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER && from->type == CU_GRAPH_NODE_TYPE_KERNEL)
                   ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (e->type != CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC) return CUDA_ERROR_INVALID_VALUE;
    if (from->type != CU_GRAPH_NODE_TYPE_KERNEL || to->type != CU_GRAPH_NODE_TYPE_KERNEL)
        return fk_reject(CUDA_ERROR_INVALID_VALUE, "a programmatic edge joins two kernel nodes");
    if (e->from_port != CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC && e->from_port != CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER)
        return fk_reject(CUDA_ERROR_INVALID_VALUE, "a programmatic edge leaves the PROGRAMMATIC or LAUNCH_ORDER port");
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                        const CUgraphEdgeData *edgeData, size_t numDependencies) {
    size_t i;
    CUresult rc;
    FK_ENTER(cuGraphAddDependencies);
    if (!graph_valid(hGraph)) return CUDA_ERROR_INVALID_HANDLE;
    if (numDependencies && (!from || !to)) return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < numDependencies; i++)
        if ((rc = check_edge(hGraph, from[i], to[i], edgeData ? &edgeData[i] : NULL))) return rc;
    for (i = 0; i < numDependencies; i++) {
        CUgraphNode t = to[i];
        int k = t->ndeps;
        int *nd = malloc((size_t)(k + 1) * sizeof(int));
        unsigned char *nt = malloc((size_t)(k + 1)), *np = malloc((size_t)(k + 1));
        if (!nd || !nt || !np) { free(nd); free(nt); free(np); return CUDA_ERROR_OUT_OF_MEMORY; }
        if (k) memcpy(nd, t->deps, (size_t)k * sizeof(int));
        memset(nt, 0, (size_t)k + 1);
        memset(np, 0, (size_t)k + 1);
        if (t->etype) { memcpy(nt, t->etype, (size_t)k); memcpy(np, t->eport, (size_t)k); }
        free(t->deps); free(t->etype); free(t->eport);
        t->deps = nd; t->etype = nt; t->eport = np;
        t->deps[k] = from[i]->index;
        t->etype[k] = edgeData ? edgeData[i].type : 0;
        t->eport[k] = edgeData ? edgeData[i].from_port : 0;
        t->ndeps = k + 1;
    }
    return CUDA_SUCCESS;
}

/* Every edge in (to node, dependency) order; numEdges in: the arrays' room, out: the count
 * (all of them when from is NULL). Non-default edges asked for without edgeData: the
 * driver's CUDA_ERROR_LOSSY_QUERY, which the double answers as INVALID_VALUE. */
CUresult CUDAAPI cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edgeData,
                                 size_t *numEdges) {
    size_t total = 0, k = 0;
    int i, j, lossy = 0;
    FK_ENTER(cuGraphGetEdges);
    if (!graph_valid(hGraph) || !numEdges) return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < hGraph->n; i++) total += (size_t)hGraph->nodes[i]->ndeps;
    if (!from || !to) {
        if (from || to || edgeData) return CUDA_ERROR_INVALID_VALUE;
        *numEdges = total;
        return CUDA_SUCCESS;
    }
    for (i = 0; i < hGraph->n; i++) {
        CUgraphNode n = hGraph->nodes[i];
        for (j = 0; j < n->ndeps; j++) {
            unsigned char t = n->etype ? n->etype[j] : 0, p = n->eport ? n->eport[j] : 0;
            if (k < *numEdges) {
                from[k] = hGraph->nodes[n->deps[j]];
                to[k] = n;
                if (edgeData) {
                    memset(&edgeData[k], 0, sizeof(edgeData[k]));
                    edgeData[k].type = t;
                    edgeData[k].from_port = p;
                } else if (t || p) {
                    lossy = 1;
                }
            }
            k++;
        }
    }
    for (; k < *numEdges; k++) {
        from[k] = to[k] = NULL;
        if (edgeData) memset(&edgeData[k], 0, sizeof(edgeData[k]));
    }
    *numEdges = total;
    return lossy ? fk_reject(CUDA_ERROR_INVALID_VALUE, "lossy edge query (edgeData NULL)") : CUDA_SUCCESS;
}

/* Removes the node and its edges; later nodes move down one place (the double's indices
 * are positions). */
CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode hNode) {
    CUgraph g;
    int i, j, k, idx;
    FK_ENTER(cuGraphDestroyNode);
    if (!node_valid(hNode)) return CUDA_ERROR_INVALID_VALUE;
    g = hNode->graph;
    if (!graph_valid(g)) return CUDA_ERROR_INVALID_VALUE;
    idx = hNode->index;
    for (i = idx + 1; i < g->n; i++) {
        CUgraphNode n = g->nodes[i];
        for (j = k = 0; j < n->ndeps; j++) {
            if (n->deps[j] == idx) continue;
            n->deps[k] = n->deps[j] > idx ? n->deps[j] - 1 : n->deps[j];
            if (n->etype) { n->etype[k] = n->etype[j]; n->eport[k] = n->eport[j]; }
            k++;
        }
        n->ndeps = k;
        n->index = i - 1;
        g->nodes[i - 1] = n;
    }
    g->n--;
    node_free(hNode);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx) {
    CUresult rc;
    CUgraphNode n;
    FK_ENTER(cuGraphAddMemcpyNode);
    if (!phGraphNode || !copyParams) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ctx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    if (copyParams->srcLOD || copyParams->dstLOD || copyParams->reserved0 || copyParams->reserved1)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = add_node(hGraph, CU_GRAPH_NODE_TYPE_MEMCPY, dependencies, numDependencies, &n))) return rc;
    n->copy = *copyParams;
    *phGraphNode = n;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                      CUcontext ctx) {
    CUresult rc;
    CUgraphNode n;
    const CUDA_MEMSET_NODE_PARAMS *p = memsetParams;
    FK_ENTER(cuGraphAddMemsetNode);
    if (!phGraphNode || !p) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ctx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    if (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) return CUDA_ERROR_INVALID_VALUE;
    if (p->height > 1 && p->pitch < p->width * p->elementSize) return CUDA_ERROR_INVALID_VALUE;
    if ((rc = add_node(hGraph, CU_GRAPH_NODE_TYPE_MEMSET, dependencies, numDependencies, &n))) return rc;
    n->set = *p;
    *phGraphNode = n;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                    size_t numDependencies, const CUDA_HOST_NODE_PARAMS *nodeParams) {
    CUresult rc;
    CUgraphNode n;
    FK_ENTER(cuGraphAddHostNode);
    if (!phGraphNode || !nodeParams || !nodeParams->fn) return CUDA_ERROR_INVALID_VALUE;
    if ((rc = add_node(hGraph, CU_GRAPH_NODE_TYPE_HOST, dependencies, numDependencies, &n))) return rc;
    n->fn = nodeParams->fn;
    n->user = nodeParams->userData;
    *phGraphNode = n;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          size_t numDependencies, CUgraph childGraph) {
    CUresult rc;
    CUgraphNode n;
    FK_ENTER(cuGraphAddChildGraphNode);
    if (!phGraphNode || !graph_valid(childGraph) || childGraph == hGraph) return CUDA_ERROR_INVALID_VALUE;
    if ((rc = add_node(hGraph, CU_GRAPH_NODE_TYPE_GRAPH, dependencies, numDependencies, &n))) return rc;
    n->child = graph_clone(childGraph, 0);   /* the driver clones the child */
    *phGraphNode = n;
    return n->child ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                     size_t numDependencies) {
    FK_ENTER(cuGraphAddEmptyNode);
    if (!phGraphNode) return CUDA_ERROR_INVALID_VALUE;
    return add_node(hGraph, CU_GRAPH_NODE_TYPE_EMPTY, dependencies, numDependencies, phGraphNode);
}

static CUresult add_event_node(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t nd, CUevent e,
                               CUgraphNodeType t) {
    CUresult rc;
    if (!ph) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_events, e)) return CUDA_ERROR_INVALID_HANDLE;
    if ((rc = add_node(g, t, deps, nd, ph))) return rc;
    (*ph)->event = e;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                           size_t numDependencies, CUevent event) {
    FK_ENTER(cuGraphAddEventRecordNode);
    return add_event_node(phGraphNode, hGraph, dependencies, numDependencies, event, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, CUevent event) {
    FK_ENTER(cuGraphAddEventWaitNode);
    return add_event_node(phGraphNode, hGraph, dependencies, numDependencies, event, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

CUresult CUDAAPI cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out, CUgraph hGraph, CUcontext ctx,
                                                unsigned int defaultLaunchValue, unsigned int flags) {
    FK_ENTER(cuGraphConditionalHandleCreate);
    if (!pHandle_out || !graph_valid(hGraph) || (flags & ~CU_GRAPH_COND_ASSIGN_DEFAULT)) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ctx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    if (g_nconds == g_capconds) {
        size_t nc = g_capconds ? g_capconds * 2 : 16;
        fk_cond *nv = realloc(g_conds, nc * sizeof(*nv));
        if (!nv) return CUDA_ERROR_OUT_OF_MEMORY;
        g_conds = nv;
        g_capconds = nc;
    }
    g_conds[g_nconds].graph = hGraph;
    g_conds[g_nconds].dflt = defaultLaunchValue;
    g_conds[g_nconds].flags = flags;
    g_conds[g_nconds].value = defaultLaunchValue;
    g_conds[g_nconds].used = 0;
    *pHandle_out = ++g_nconds;   /* 1-based */
    return CUDA_SUCCESS;
}

fk_cond *cond_of(CUgraphConditionalHandle h) {
    return h >= 1 && h <= g_nconds ? &g_conds[h - 1] : NULL;
}

CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                CUgraphNodeParams *nodeParams) {
    CUresult rc;
    CUgraphNode n;
    CUDA_CONDITIONAL_NODE_PARAMS *cp;
    fk_cond *cd;
    unsigned int i;
    size_t k;
    FK_ENTER(cuGraphAddNode);
    if (!phGraphNode || !nodeParams) return CUDA_ERROR_INVALID_VALUE;
    for (k = 0; dependencyData && k < numDependencies; k++)
        if (dependencyData[k].from_port || dependencyData[k].to_port || dependencyData[k].type) return CUDA_ERROR_INVALID_VALUE;
    if (nodeParams->type != CU_GRAPH_NODE_TYPE_CONDITIONAL)
        return fk_reject(CUDA_ERROR_INVALID_VALUE, "fakecuda's cuGraphAddNode builds conditional nodes only");
    cp = &nodeParams->conditional;
    cd = cond_of(cp->handle);
    if (!cd || cd->graph != hGraph) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ctx(cp->ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    if ((cp->type == CU_GRAPH_COND_TYPE_WHILE && cp->size != 1) ||
        (cp->type == CU_GRAPH_COND_TYPE_IF && (cp->size < 1 || cp->size > 2)) ||
        (cp->type == CU_GRAPH_COND_TYPE_SWITCH && cp->size < 1) || (int)cp->type < 0 || (int)cp->type > 2)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = add_node(hGraph, CU_GRAPH_NODE_TYPE_CONDITIONAL, dependencies, numDependencies, &n))) return rc;
    n->handle = cp->handle;
    n->ctype = (int)cp->type;
    n->nbodies = cp->size;
    n->bodies = calloc(cp->size, sizeof(CUgraph));
    for (i = 0; i < cp->size; i++) {
        n->bodies[i] = graph_new();
        n->bodies[i]->body = 1;
    }
    /* Like the driver: phGraph_out is an output; whatever the caller put there is ignored and
     * replaced by a pointer to an array the node owns (valid for the node's lifetime). */
    cp->phGraph_out = n->bodies;
    cd->used = 1;
    *phGraphNode = n;
    return CUDA_SUCCESS;
}

static const char *node_type_name(CUgraphNodeType t) {
    static const char *names[] = {"KERNEL", "MEMCPY", "MEMSET", "HOST", "GRAPH", "EMPTY", "WAIT_EVENT",
                                  "EVENT_RECORD", "EXT_SEMAS_SIGNAL", "EXT_SEMAS_WAIT", "MEM_ALLOC", "MEM_FREE",
                                  "BATCH_MEM_OP", "CONDITIONAL"};
    return (int)t >= 0 && (int)t < 14 ? names[t] : "?";
}

static void dot_graph(FILE *f, CUgraph g, const char *prefix) {
    int i, j;
    unsigned int b;
    char sub[64];
    for (i = 0; i < g->n; i++) {
        CUgraphNode n = g->nodes[i];
        fprintf(f, "  \"%s%d\" [label=\"%s%s%s\"];\n", prefix, i, node_type_name(n->type),
                n->type == CU_GRAPH_NODE_TYPE_KERNEL ? "\\n" : "", n->type == CU_GRAPH_NODE_TYPE_KERNEL ? n->func->name : "");
        for (j = 0; j < n->ndeps; j++)
            fprintf(f, "  \"%s%d\" -> \"%s%d\"%s;\n", prefix, n->deps[j], prefix, i,
                    n->etype && n->etype[j] == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC ? " [label=\"programmatic\"]" : "");
        for (b = 0; b < n->nbodies; b++) {
            snprintf(sub, sizeof(sub), "%s%d_%u_", prefix, i, b);
            dot_graph(f, n->bodies[b], sub);
        }
    }
}

CUresult CUDAAPI cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags) {
    FILE *f;
    FK_ENTER(cuGraphDebugDotPrint);
    if (!graph_valid(hGraph) || !path || (flags & ~0x3FFFu)) return CUDA_ERROR_INVALID_VALUE;
    f = fopen(path, "w");
    if (!f) return CUDA_ERROR_UNKNOWN;   /* as the driver answers an unwritable path */
    fprintf(f, "digraph fakecuda {\n");
    dot_graph(f, hGraph, "n");
    fprintf(f, "}\n");
    fclose(f);
    return CUDA_SUCCESS;
}

/* ----------------------------------------------------------------- control */
/* Live graphs (user graphs, capture results, conditional bodies and executables' copies) and executables. */
FK_EXPORT int fakecuda_graph_live(const char *kind) {
    FK_LOCK_SCOPE;
    if (!kind) return -1;
    if (!strcmp(kind, "graph")) return (int)g_graphs.n;
    if (!strcmp(kind, "exec")) return (int)g_execs.n;
    if (!strcmp(kind, "capture")) return g_ncaps;
    return -1;
}

FK_EXPORT long long fakecuda_graph_launches(void) {
    FK_LOCK_SCOPE;
    return g_graph_launches;
}

/* Set a conditional handle's value, as a kernel's cudaGraphSetConditional would. */
FK_EXPORT int fakecuda_graph_set_conditional(unsigned long long handle, unsigned int value) {
    fk_cond *cd;
    FK_LOCK_SCOPE;
    cd = cond_of(handle);
    if (!cd) return -1;
    cd->value = value;
    return 0;
}

/* Node count of a graph (by handle), -1 if it is not a live graph. */
FK_EXPORT int fakecuda_graph_nodes(void *graph) {
    FK_LOCK_SCOPE;
    return graph_valid((CUgraph)graph) ? ((CUgraph)graph)->n : -1;
}
