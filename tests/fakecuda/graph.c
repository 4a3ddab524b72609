/*
 * fakecuda graph.c -- CUDA graphs in the driver double: stream capture, explicit
 * graphs, executable graphs (instantiate, launch, update, per-node parameters).
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

#include "fake_internal.h"

#define FK_GMAGIC 0x47524150u   /* graph */
#define FK_NMAGIC 0x4E4F4445u   /* node */
#define FK_XMAGIC 0x45584543u   /* exec */

struct CUgraphNode_st {
    unsigned magic;
    CUgraph graph;
    CUgraphNodeType type;
    int index;
    int ndeps;
    int *deps;                       /* indices of earlier nodes */
    int enabled;
    CUgraphNode orig;                /* in an executable's copy: the node it was made from */
    /* kernel */
    CUfunction func;
    unsigned int grid[3], block[3], smem;
    unsigned char *params;
    void **pptrs;                    /* cuGraphKernelNodeGetParams's kernelParams (into params), made on demand */
    int priority;                    /* CU_LAUNCH_ATTRIBUTE_PRIORITY (0 until set) */
    /* memcpy / memset / host / events / child */
    CUDA_MEMCPY3D copy;
    CUDA_MEMSET_NODE_PARAMS set;
    CUhostFn fn;
    void *user;
    CUevent event;
    CUgraph child;
    /* conditional */
    CUgraphConditionalHandle handle;
    int ctype;
    unsigned int nbodies;
    CUgraph *bodies;
    /* memory nodes */
    uintptr_t abase;
    unsigned long long aid;
};

struct CUgraph_st {
    unsigned magic;
    int n, cap;
    CUgraphNode *nodes;
    int body;                        /* owned by a conditional node: not destroyable by the user */
    int refs;                        /* the graph itself + executables sharing its allocations */
};

struct CUgraphExec_st {
    unsigned magic;
    CUgraph g;                       /* private deep copy */
    CUgraph source;                  /* the graph it was instantiated from (node pairing) */
    unsigned long long flags;
};

typedef struct fk_cond {
    CUgraph graph;
    unsigned int dflt, flags, value;
    int used;
} fk_cond;

/* Allocations made by allocation nodes: freed when no graph or executable holds them. */
typedef struct fk_galloc {
    uintptr_t base;
    unsigned long long id;
    int holders;
    int has_free_node;
} fk_galloc;

typedef struct fk_cap {
    CUstream stream;
    CUgraph graph;                   /* shared by every stream in one capture sequence */
    CUstream origin;
    int mode;
    int invalid;
    pthread_t thread;
    int deps[8];
    int ndeps;
} fk_cap;

typedef struct fk_capev {
    CUevent event;
    CUgraph graph;
    int deps[8];
    int ndeps;
} fk_capev;

static fk_vec g_graphs, g_execs;
static fk_cond *g_conds;
static size_t g_nconds, g_capconds;
static fk_galloc *g_gallocs;
static size_t g_ngallocs, g_capgallocs;
static fk_cap g_caps[64];
static int g_ncaps;
static fk_capev g_capevs[64];
static int g_ncapevs;
static long long g_graph_launches;

static int graph_valid(CUgraph g) { return g && vec_has(&g_graphs, g) && g->magic == FK_GMAGIC; }
static int exec_valid(CUgraphExec x) { return x && vec_has(&g_execs, x) && x->magic == FK_XMAGIC; }

static CUgraph graph_new(void) {
    CUgraph g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->magic = FK_GMAGIC;
    g->refs = 1;
    if (vec_add(&g_graphs, g)) { free(g); return NULL; }
    return g;
}

static fk_galloc *galloc_find(uintptr_t base, unsigned long long id) {
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

static void graph_free(CUgraph g);

static void node_free(CUgraphNode n) {
    unsigned int i;
    if (!n) return;
    free(n->deps);
    free(n->params);
    free(n->pptrs);
    if (n->child) graph_free(n->child);
    for (i = 0; i < n->nbodies; i++) graph_free(n->bodies[i]);
    free(n->bodies);
    if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) galloc_release(n->abase, n->aid);
    n->magic = 0xDEADu;
    free(n);
}

static void graph_free(CUgraph g) {
    int i;
    if (!g) return;
    for (i = 0; i < g->n; i++) node_free(g->nodes[i]);
    free(g->nodes);
    vec_remove(&g_graphs, g);
    g->magic = 0xDEADu;
    free(g);
}

static CUresult add_node(CUgraph g, CUgraphNodeType type, const CUgraphNode *deps, size_t ndeps, CUgraphNode *out) {
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

static CUgraph graph_clone(CUgraph src, int keep_orig);

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

static CUgraph graph_clone(CUgraph src, int keep_orig) {
    CUgraph g = graph_new();
    int i;
    if (!g) return NULL;
    g->body = src->body;
    g->nodes = src->n ? calloc((size_t)src->n, sizeof(CUgraphNode)) : NULL;
    g->cap = src->n;
    for (i = 0; i < src->n; i++) g->nodes[g->n++] = node_clone(g, src->nodes[i], keep_orig);
    return g;
}

/* ------------------------------------------------------------------ capture */
static fk_cap *cap_of(CUstream s) {
    int i;
    s = pend_norm(s);
    for (i = 0; i < g_ncaps; i++)
        if (g_caps[i].stream == s) return &g_caps[i];
    return NULL;
}

static void cap_invalidate_graph(CUgraph g) {
    int i;
    for (i = 0; i < g_ncaps; i++)
        if (g_caps[i].graph == g) g_caps[i].invalid = 1;
}

/* Capture hooks (declared in fake_internal.h), called by the files of the recorded calls. */
static CUresult fk_cap_node(CUstream s, CUgraphNodeType type, CUgraphNode *out, int *taken) {
    fk_cap *c = cap_of(s);
    CUgraphNode deps[8];
    int i;
    CUresult rc;
    *taken = 0;
    if (!c) return CUDA_SUCCESS;
    *taken = 1;
    if (c->invalid) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    for (i = 0; i < c->ndeps; i++) deps[i] = c->graph->nodes[c->deps[i]];
    rc = add_node(c->graph, type, deps, (size_t)c->ndeps, out);
    if (rc) return rc;
    c->deps[0] = (*out)->index;
    c->ndeps = 1;
    return CUDA_SUCCESS;
}

CUresult fk_cap_kernel(CUfunction f, const launch_req *r, unsigned char *buf, int *taken) {
    CUgraphNode n;
    CUresult rc = fk_cap_node(r->stream, CU_GRAPH_NODE_TYPE_KERNEL, &n, taken);
    if (!*taken || rc) return rc;
    n->func = f;
    memcpy(n->grid, r->grid, sizeof(n->grid));
    memcpy(n->block, r->block, sizeof(n->block));
    n->smem = r->shared;
    n->params = buf;
    return CUDA_SUCCESS;
}

CUresult fk_cap_copy(CUstream s, CUmemorytype dt, void *dh, CUdeviceptr dd, CUmemorytype st,
                            const void *sh, CUdeviceptr sd, size_t bytes, int *taken) {
    CUgraphNode n;
    CUresult rc;
    if (!cap_of(s)) { *taken = 0; return CUDA_SUCCESS; }
    if ((dt == CU_MEMORYTYPE_DEVICE && bytes && !dev_range_ok((uintptr_t)dd, bytes)) ||
        (st == CU_MEMORYTYPE_DEVICE && bytes && !dev_range_ok((uintptr_t)sd, bytes))) {
        *taken = 1;
        return CUDA_ERROR_INVALID_VALUE;
    }
    rc = fk_cap_node(s, CU_GRAPH_NODE_TYPE_MEMCPY, &n, taken);
    if (rc) return rc;
    memset(&n->copy, 0, sizeof(n->copy));
    n->copy.dstMemoryType = dt;
    n->copy.dstHost = dh;
    n->copy.dstDevice = dd;
    n->copy.srcMemoryType = st;
    n->copy.srcHost = sh;
    n->copy.srcDevice = sd;
    n->copy.WidthInBytes = bytes;
    n->copy.dstPitch = n->copy.srcPitch = bytes;
    n->copy.Height = n->copy.Depth = 1;
    n->copy.dstHeight = n->copy.srcHeight = 1;
    return CUDA_SUCCESS;
}

CUresult fk_cap_copy3d(CUstream s, const CUDA_MEMCPY3D *c, int *taken) {
    CUgraphNode n;
    CUresult rc;
    if (!cap_of(s)) { *taken = 0; return CUDA_SUCCESS; }
    rc = fk_cap_node(s, CU_GRAPH_NODE_TYPE_MEMCPY, &n, taken);
    if (rc) return rc;
    n->copy = *c;
    return CUDA_SUCCESS;
}

CUresult fk_cap_memset(CUstream s, CUdeviceptr dst, unsigned int value, unsigned int esize, size_t count,
                              int *taken) {
    CUgraphNode n;
    CUresult rc;
    if (!cap_of(s)) { *taken = 0; return CUDA_SUCCESS; }
    rc = fk_cap_node(s, CU_GRAPH_NODE_TYPE_MEMSET, &n, taken);
    if (rc) return rc;
    memset(&n->set, 0, sizeof(n->set));
    n->set.dst = dst;
    n->set.value = value;
    n->set.elementSize = esize;
    n->set.width = count;
    n->set.height = 1;
    n->set.pitch = count * esize;
    return CUDA_SUCCESS;
}

CUresult fk_cap_host(CUstream s, CUhostFn fn, void *user, int *taken) {
    CUgraphNode n;
    CUresult rc = fk_cap_node(s, CU_GRAPH_NODE_TYPE_HOST, &n, taken);
    if (!*taken || rc) return rc;
    n->fn = fn;
    n->user = user;
    return CUDA_SUCCESS;
}

CUresult fk_cap_alloc(CUstream s, CUdeviceptr *dptr, size_t bytes, int dev, struct CUmemPoolHandle_st *pool,
                             int *taken) {
    CUgraphNode n;
    CUresult rc;
    fk_alloc *a;
    if (!cap_of(s)) { *taken = 0; return CUDA_SUCCESS; }
    rc = fk_cap_node(s, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &n, taken);
    if (rc) return rc;
    rc = do_alloc(dptr, bytes, MK_DEVICE, dev, pool, 0);
    if (rc) { cap_of(s)->invalid = 1; return rc; }
    a = find_alloc_exact((uintptr_t)*dptr);
    if (g_ngallocs == g_capgallocs) {
        size_t nc = g_capgallocs ? g_capgallocs * 2 : 16;
        fk_galloc *nv = realloc(g_gallocs, nc * sizeof(*nv));
        if (!nv) return CUDA_ERROR_OUT_OF_MEMORY;
        g_gallocs = nv;
        g_capgallocs = nc;
    }
    g_gallocs[g_ngallocs].base = a->base;
    g_gallocs[g_ngallocs].id = a->id;
    g_gallocs[g_ngallocs].holders = 1;
    g_gallocs[g_ngallocs].has_free_node = 0;
    g_ngallocs++;
    n->abase = a->base;
    n->aid = a->id;
    return CUDA_SUCCESS;
}

CUresult fk_cap_free(CUstream s, CUdeviceptr dptr, int *taken) {
    CUgraphNode n;
    CUresult rc;
    fk_alloc *a;
    fk_galloc *ga;
    if (!cap_of(s)) { *taken = 0; return CUDA_SUCCESS; }
    a = find_alloc_exact((uintptr_t)dptr);
    ga = a ? galloc_find(a->base, a->id) : NULL;
    *taken = 1;
    if (!ga) return CUDA_ERROR_INVALID_VALUE;  /* only memory allocated by a graph can be freed in a capture */
    rc = fk_cap_node(s, CU_GRAPH_NODE_TYPE_MEM_FREE, &n, taken);
    if (rc) return rc;
    n->abase = a->base;
    n->aid = a->id;
    ga->has_free_node = 1;
    return CUDA_SUCCESS;
}

/* cuEventRecord on a capturing stream: the event marks the stream's position. */
int fk_cap_event_record(CUevent e, CUstream s) {
    fk_cap *c = cap_of(s);
    int i;
    if (!c) return 0;
    for (i = 0; i < g_ncapevs && g_capevs[i].event != e; i++) {}
    if (i == g_ncapevs) {
        if (g_ncapevs == 64) return 1;
        g_ncapevs++;
    }
    g_capevs[i].event = e;
    g_capevs[i].graph = c->graph;
    memcpy(g_capevs[i].deps, c->deps, sizeof(c->deps));
    g_capevs[i].ndeps = c->ndeps;
    return 1;
}

/* cuStreamWaitEvent: an event recorded in a capture joins the waiting stream to it. */
int fk_cap_event_wait(CUstream s, CUevent e) {
    fk_cap *c = cap_of(s);
    int i, j;
    for (i = 0; i < g_ncapevs && g_capevs[i].event != e; i++) {}
    if (i == g_ncapevs || !graph_valid(g_capevs[i].graph)) return c != NULL;
    if (!c) {
        fk_cap *o = NULL;
        for (j = 0; j < g_ncaps; j++)
            if (g_caps[j].graph == g_capevs[i].graph) { o = &g_caps[j]; break; }
        if (!o || g_ncaps == 64) return 0;
        c = &g_caps[g_ncaps++];
        *c = *o;
        c->stream = pend_norm(s);
        c->ndeps = 0;
    }
    for (j = 0; j < g_capevs[i].ndeps && c->ndeps < 8; j++) c->deps[c->ndeps++] = g_capevs[i].deps[j];
    return 1;
}

/* Calls that cannot be captured, on a capturing stream: invalidate, report 900. */
int fk_cap_forbid(CUstream s) {
    fk_cap *c = cap_of(s);
    if (!c) return 0;
    cap_invalidate_graph(c->graph);
    return 1;
}

/* "Potentially unsafe" calls while a GLOBAL capture (or a THREAD_LOCAL one of this thread) runs. */
int fk_cap_unsafe(void) {
    int i, hit = 0;
    for (i = 0; i < g_ncaps; i++) {
        if (g_caps[i].mode == CU_STREAM_CAPTURE_MODE_GLOBAL ||
            (g_caps[i].mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL && pthread_equal(g_caps[i].thread, pthread_self()))) {
            g_caps[i].invalid = 1;
            hit = 1;
        }
    }
    return hit;
}

/* A context-wide synchronization during a capture: every capture is invalidated. */
int fk_cap_any(void) {
    int i;
    for (i = 0; i < g_ncaps; i++) g_caps[i].invalid = 1;
    return g_ncaps > 0;
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode) {
    fk_cap *c;
    FK_ENTER(cuStreamBeginCapture);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    if ((int)mode < 0 || (int)mode > 2) return CUDA_ERROR_INVALID_VALUE;
    if (pend_norm(hStream) == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;   /* the legacy stream cannot be captured */
    if (cap_of(hStream)) return CUDA_ERROR_INVALID_VALUE;   /* already capturing */
    if (g_ncaps == 64) return CUDA_ERROR_OUT_OF_MEMORY;
    c = &g_caps[g_ncaps];
    memset(c, 0, sizeof(*c));
    c->graph = graph_new();
    if (!c->graph) return CUDA_ERROR_OUT_OF_MEMORY;
    c->stream = c->origin = hStream;
    c->mode = (int)mode;
    c->thread = pthread_self();
    g_ncaps++;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
    fk_cap *c;
    CUgraph g;
    int invalid = 0, i = 0;
    FK_ENTER(cuStreamEndCapture);
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    c = cap_of(hStream);
    if (!c || c->origin != hStream) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self()))
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    g = c->graph;
    while (i < g_ncaps) {
        if (g_caps[i].graph == g) {
            invalid |= g_caps[i].invalid;
            g_caps[i] = g_caps[--g_ncaps];
        } else {
            i++;
        }
    }
    for (i = 0; i < g_ncapevs;)
        if (g_capevs[i].graph == g) g_capevs[i] = g_capevs[--g_ncapevs];
        else i++;
    *phGraph = NULL;
    if (invalid) {
        graph_free(g);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *phGraph = g;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
    fk_cap *c;
    FK_ENTER(cuStreamIsCapturing);
    if (!captureStatus) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    c = cap_of(hStream);
    *captureStatus = !c ? CU_STREAM_CAPTURE_STATUS_NONE
                        : (c->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE);
    return CUDA_SUCCESS;
}

static __thread int tls_capture_mode;

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
    int old;
    FK_ENTER(cuThreadExchangeStreamCaptureMode);
    if (!mode || (int)*mode < 0 || (int)*mode > 2) return CUDA_ERROR_INVALID_VALUE;
    old = tls_capture_mode;
    tls_capture_mode = (int)*mode;
    *mode = (CUstreamCaptureMode)old;
    return CUDA_SUCCESS;
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
static CUresult check_kernel_params(const CUDA_KERNEL_NODE_PARAMS_v2 *p) {
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
static CUresult store_kernel_params(CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v2 *p) {
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

/* Kernel node attributes: the double keeps the priority only (what barecuda sets). */
CUresult CUDAAPI cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUlaunchAttributeID attr,
                                               CUlaunchAttributeValue *value_out) {
    FK_ENTER(cuGraphKernelNodeGetAttribute);
    if (!node_valid(hNode) || hNode->type != CU_GRAPH_NODE_TYPE_KERNEL || !value_out) return CUDA_ERROR_INVALID_VALUE;
    if (attr != CU_LAUNCH_ATTRIBUTE_PRIORITY)
        return fk_reject(CUDA_ERROR_INVALID_VALUE, "fakecuda keeps only the priority attribute of kernel nodes");
    memset(value_out, 0, sizeof(*value_out));
    value_out->priority = hNode->priority;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUlaunchAttributeID attr,
                                               const CUlaunchAttributeValue *value) {
    FK_ENTER(cuGraphKernelNodeSetAttribute);
    if (!node_valid(hNode) || hNode->type != CU_GRAPH_NODE_TYPE_KERNEL || !value) return CUDA_ERROR_INVALID_VALUE;
    if (attr != CU_LAUNCH_ATTRIBUTE_PRIORITY)
        return fk_reject(CUDA_ERROR_INVALID_VALUE, "fakecuda keeps only the priority attribute of kernel nodes");
    hNode->priority = value->priority;
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

static fk_cond *cond_of(CUgraphConditionalHandle h) {
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
        for (j = 0; j < n->ndeps; j++) fprintf(f, "  \"%s%d\" -> \"%s%d\";\n", prefix, n->deps[j], prefix, i);
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

/* ------------------------------------------------------- executable graphs */
static CUresult instantiate(CUgraphExec *ph, CUgraph g, unsigned long long flags, CUgraphNode *err_node,
                            CUgraphInstantiateResult *res) {
    CUgraphExec x;
    int i;
    if (res) *res = CUDA_GRAPH_INSTANTIATE_ERROR;
    if (!ph || !graph_valid(g) || (flags & ~0xFULL)) return CUDA_ERROR_INVALID_VALUE;
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    for (i = 0; i < g->n; i++) {
        CUgraphNode n = g->nodes[i];
        if (n->type == CU_GRAPH_NODE_TYPE_KERNEL && !vec_has(&g_funcs, n->func)) {
            if (err_node) *err_node = n;
            return CUDA_ERROR_INVALID_HANDLE;   /* the module was unloaded */
        }
        if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) && n->type == CU_GRAPH_NODE_TYPE_HOST) {
            if (err_node) *err_node = n;
            if (res) *res = CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED;
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    x = calloc(1, sizeof(*x));
    if (!x) return CUDA_ERROR_OUT_OF_MEMORY;
    x->magic = FK_XMAGIC;
    x->g = graph_clone(g, 1);
    x->source = g;
    x->flags = flags;
    if (!x->g || vec_add(&g_execs, x)) {
        graph_free(x->g);
        free(x);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ph = x;
    if (res) *res = CUDA_GRAPH_INSTANTIATE_SUCCESS;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
    FK_ENTER(cuGraphInstantiateWithFlags);
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) return CUDA_ERROR_INVALID_VALUE;   /* needs WithParams (an upload stream) */
    return instantiate(phGraphExec, hGraph, flags, NULL, NULL);
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
    FK_ENTER(cuGraphInstantiateWithParams);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    p->hErrNode_out = NULL;
    if ((p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) && !valid_stream(p->hUploadStream)) return CUDA_ERROR_INVALID_HANDLE;
    return instantiate(phGraphExec, hGraph, p->flags, &p->hErrNode_out, &p->result_out);
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
    FK_ENTER(cuGraphExecDestroy);
    if (!exec_valid(hGraphExec)) return CUDA_ERROR_INVALID_VALUE;
    vec_remove(&g_execs, hGraphExec);
    graph_free(hGraphExec->g);
    hGraphExec->magic = 0xDEADu;
    free(hGraphExec);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
    FK_ENTER(cuGraphUpload);
    if (!exec_valid(hGraphExec)) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

typedef struct fk_hostcall {
    CUhostFn fn;
    void *user;
} fk_hostcall;

typedef struct fk_replay {
    CUstream stream;
    int node_priority;               /* instantiated with USE_NODE_PRIORITY: launches carry the node's */
    fk_hostcall *calls;
    size_t ncalls, capcalls;
} fk_replay;

static CUresult replay_graph(CUgraph g, fk_replay *rp);

static int host_locked(const void *p) {
    fk_alloc *a = find_alloc((uintptr_t)p);
    return a && (a->kind == MK_HOST_ALLOC || a->kind == MK_HOST_REG);
}

static CUresult replay_node(CUgraphNode n, fk_replay *rp) {
    CUresult rc = CUDA_SUCCESS;
    unsigned int b;
    if (!n->enabled) return CUDA_SUCCESS;
    switch (n->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        void *ptrs[512];
        launch_req r;
        int i;
        if (!vec_has(&g_funcs, n->func)) return fk_reject(CUDA_ERROR_INVALID_HANDLE, "graph kernel's module was unloaded");
        if (n->func->nparams > 512) return CUDA_ERROR_INVALID_VALUE;
        for (i = 0; i < n->func->nparams; i++) ptrs[i] = n->params + n->func->params[i].offset;
        memset(&r, 0, sizeof(r));
        memcpy(r.grid, n->grid, sizeof(r.grid));
        memcpy(r.block, n->block, sizeof(r.block));
        r.shared = n->smem;
        r.stream = rp->stream;
        r.cluster[0] = r.cluster[1] = r.cluster[2] = 1;
        if (rp->node_priority) r.priority = n->priority;
        return do_launch(n->func, &r, n->func->nparams ? ptrs : NULL, NULL);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
        const CUDA_MEMCPY3D *c = &n->copy;
        /* A graph copies host memory by DMA: it must still be page-locked (a freed
           PinnedBuffer, or pageable memory a capture let through, is an error here). */
        if ((c->srcMemoryType == CU_MEMORYTYPE_HOST && !host_locked(c->srcHost)) ||
            (c->dstMemoryType == CU_MEMORYTYPE_HOST && !host_locked(c->dstHost)))
            return fk_reject(CUDA_ERROR_INVALID_VALUE, "graph copy with host memory that is not (or no longer) page-locked");
        return copy3d(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch,
                      c->srcHeight, c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ,
                      c->dstPitch, c->dstHeight, c->WidthInBytes, c->Height, c->Depth);
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS *p = &n->set;
        size_t y, i, rowbytes = p->width * p->elementSize;
        size_t span = p->height ? (p->height - 1) * p->pitch + rowbytes : 0;
        if (span && !dev_range_ok((uintptr_t)p->dst, span)) return CUDA_ERROR_INVALID_VALUE;
        for (y = 0; y < p->height; y++) {
            unsigned char *row = (unsigned char *)(uintptr_t)(p->dst + y * p->pitch);
            for (i = 0; i < p->width; i++) {
                if (p->elementSize == 1) row[i] = (unsigned char)p->value;
                else if (p->elementSize == 2) ((unsigned short *)row)[i] = (unsigned short)p->value;
                else ((unsigned int *)row)[i] = p->value;
            }
        }
        return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_HOST:
        if (rp->ncalls == rp->capcalls) {
            size_t nc = rp->capcalls ? rp->capcalls * 2 : 8;
            fk_hostcall *nv = realloc(rp->calls, nc * sizeof(*nv));
            if (!nv) return CUDA_ERROR_OUT_OF_MEMORY;
            rp->calls = nv;
            rp->capcalls = nc;
        }
        rp->calls[rp->ncalls].fn = n->fn;
        rp->calls[rp->ncalls].user = n->user;
        rp->ncalls++;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        if (!vec_has(&g_events, n->event)) return CUDA_ERROR_INVALID_HANDLE;
        n->event->recorded = 1;
        n->event->t_ms = now_ms();
        n->event->pend_stream = pend_norm(rp->stream);
        n->event->pend_seq = g_pend_seq;
        n->event->pend_polls = 0;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return vec_has(&g_events, n->event) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    case CU_GRAPH_NODE_TYPE_GRAPH:
        return replay_graph(n->child, rp);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
        fk_cond *cd = cond_of(n->handle);
        if (!cd) return CUDA_ERROR_INVALID_VALUE;
        if (n->ctype == CU_GRAPH_COND_TYPE_IF) {
            if (cd->value) rc = replay_graph(n->bodies[0], rp);
            else if (n->nbodies == 2) rc = replay_graph(n->bodies[1], rp);
        } else if (n->ctype == CU_GRAPH_COND_TYPE_WHILE) {
            if (cd->value) {
                rc = replay_graph(n->bodies[0], rp);
                cd->value = 0;   /* no kernel runs here to end the loop: one pass */
            }
        } else {
            b = cd->value;
            if (b < n->nbodies) rc = replay_graph(n->bodies[b], rp);
        }
        return rc;
    }
    default:
        return CUDA_SUCCESS;   /* empty, allocation and free nodes: nothing to do */
    }
}

static CUresult replay_graph(CUgraph g, fk_replay *rp) {
    int i;
    CUresult rc;
    for (i = 0; i < g->n; i++)
        if ((rc = replay_node(g->nodes[i], rp))) return rc;
    return CUDA_SUCCESS;
}

static void reset_conditionals(CUgraph g) {
    int i;
    unsigned int b;
    for (i = 0; i < g->n; i++) {
        CUgraphNode n = g->nodes[i];
        if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
            fk_cond *cd = cond_of(n->handle);
            if (cd && (cd->flags & CU_GRAPH_COND_ASSIGN_DEFAULT)) cd->value = cd->dflt;
            for (b = 0; b < n->nbodies; b++) reset_conditionals(n->bodies[b]);
        }
        if (n->child) reset_conditionals(n->child);
    }
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    fk_replay rp;
    CUresult rc;
    size_t i;
    memset(&rp, 0, sizeof(rp));
    {
        FK_ENTER(cuGraphLaunch);
        if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
        if (!exec_valid(hGraphExec)) return CUDA_ERROR_INVALID_VALUE;
        if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
        if (cap_of(hStream)) {
            /* launching an executable graph into a capture adds it as a child graph */
            int taken;
            CUgraphNode n;
            rc = fk_cap_node(hStream, CU_GRAPH_NODE_TYPE_GRAPH, &n, &taken);
            if (rc) return rc;
            n->child = graph_clone(hGraphExec->g, 0);
            return n->child ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
        }
        reset_conditionals(hGraphExec->g);
        rp.stream = hStream;
        rp.node_priority = (hGraphExec->flags & CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY) != 0;
        rc = replay_graph(hGraphExec->g, &rp);
        g_graph_launches++;
    }
    /* host nodes run outside the lock: the callback may take the GIL */
    for (i = 0; rc == CUDA_SUCCESS && i < rp.ncalls; i++) rp.calls[i].fn(rp.calls[i].user);
    free(rp.calls);
    return rc;
}

static CUresult update_fail(CUgraphExecUpdateResultInfo *info, CUgraphExecUpdateResult why, CUgraphNode n,
                            CUgraphNode from) {
    if (info) {
        info->result = why;
        info->errorNode = n;
        info->errorFromNode = from;
    }
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
}

static CUresult update_check(CUgraph x, CUgraph g, CUgraphExecUpdateResultInfo *info) {
    int i, j;
    unsigned int b;
    CUresult rc;
    if (x->n != g->n) return update_fail(info, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, NULL, NULL);
    for (i = 0; i < g->n; i++) {
        CUgraphNode a = x->nodes[i], n = g->nodes[i];
        if (a->type != n->type) return update_fail(info, CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, n, NULL);
        if (a->ndeps != n->ndeps) return update_fail(info, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, n, NULL);
        for (j = 0; j < n->ndeps; j++)
            if (a->deps[j] != n->deps[j])
                return update_fail(info, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, n, g->nodes[n->deps[j]]);
        if (n->type == CU_GRAPH_NODE_TYPE_KERNEL &&
            (!vec_has(&g_funcs, n->func) || n->func->mod->ctx != a->func->mod->ctx))
            return update_fail(info, CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE, n, NULL);
        if ((n->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD || n->type == CU_GRAPH_NODE_TYPE_WAIT_EVENT) &&
            !vec_has(&g_events, n->event))
            return update_fail(info, CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, n, NULL);
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || n->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
            if (a->abase != n->abase || a->aid != n->aid)
                return update_fail(info, CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED, n, NULL);
        }
        if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && (rc = update_check(a->child, n->child, info))) return rc;
        if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
            if (a->ctype != n->ctype || a->nbodies != n->nbodies)
                return update_fail(info, CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, n, NULL);
            for (b = 0; b < n->nbodies; b++)
                if ((rc = update_check(a->bodies[b], n->bodies[b], info))) return rc;
        }
    }
    return CUDA_SUCCESS;
}

static void update_apply(CUgraph x, CUgraph g) {
    int i;
    unsigned int b;
    for (i = 0; i < g->n; i++) {
        CUgraphNode a = x->nodes[i], n = g->nodes[i];
        size_t pb = n->func ? n->func->param_bytes : 0;
        switch (n->type) {
        case CU_GRAPH_NODE_TYPE_KERNEL:
            free(a->params);
            a->params = NULL;
            if (pb) {
                a->params = malloc(pb);
                memcpy(a->params, n->params, pb);
            }
            a->func = n->func;
            memcpy(a->grid, n->grid, sizeof(a->grid));
            memcpy(a->block, n->block, sizeof(a->block));
            a->smem = n->smem;
            break;
        case CU_GRAPH_NODE_TYPE_MEMCPY: a->copy = n->copy; break;
        case CU_GRAPH_NODE_TYPE_MEMSET: a->set = n->set; break;
        case CU_GRAPH_NODE_TYPE_HOST: a->fn = n->fn; a->user = n->user; break;
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        case CU_GRAPH_NODE_TYPE_WAIT_EVENT: a->event = n->event; break;
        case CU_GRAPH_NODE_TYPE_GRAPH: update_apply(a->child, n->child); break;
        case CU_GRAPH_NODE_TYPE_CONDITIONAL:
            a->handle = n->handle;
            for (b = 0; b < n->nbodies; b++) update_apply(a->bodies[b], n->bodies[b]);
            break;
        default: break;
        }
    }
}

CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo) {
    CUresult rc;
    FK_ENTER(cuGraphExecUpdate);
    if (!exec_valid(hGraphExec) || !graph_valid(hGraph) || !resultInfo) return CUDA_ERROR_INVALID_VALUE;
    memset(resultInfo, 0, sizeof(*resultInfo));
    if ((rc = update_check(hGraphExec->g, hGraph, resultInfo))) return rc;
    update_apply(hGraphExec->g, hGraph);
    resultInfo->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    return CUDA_SUCCESS;
}

/* The executable's copy of `node` (a node of the graph it was instantiated from). */
static CUgraphNode exec_node(CUgraph xg, CUgraphNode node) {
    int i;
    unsigned int b;
    CUgraphNode r;
    for (i = 0; i < xg->n; i++) {
        CUgraphNode n = xg->nodes[i];
        if (n->orig == node) return n;
        if (n->child && (r = exec_node(n->child, node))) return r;
        for (b = 0; b < n->nbodies; b++)
            if ((r = exec_node(n->bodies[b], node))) return r;
    }
    return NULL;
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) {
    CUresult rc;
    CUgraphNode n;
    FK_ENTER(cuGraphExecKernelNodeSetParams);
    if (!exec_valid(hGraphExec) || !hNode) return CUDA_ERROR_INVALID_VALUE;
    n = exec_node(hGraphExec->g, hNode);
    if (!n || n->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_kernel_params(nodeParams))) return rc;
    if (nodeParams->func->mod->ctx != n->func->mod->ctx) return CUDA_ERROR_INVALID_VALUE;
    return store_kernel_params(n, nodeParams);
}

CUresult CUDAAPI cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled) {
    CUgraphNode n;
    FK_ENTER(cuGraphNodeSetEnabled);
    if (!exec_valid(hGraphExec) || !hNode) return CUDA_ERROR_INVALID_VALUE;
    n = exec_node(hGraphExec->g, hNode);
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    if (n->type != CU_GRAPH_NODE_TYPE_KERNEL && n->type != CU_GRAPH_NODE_TYPE_MEMCPY &&
        n->type != CU_GRAPH_NODE_TYPE_MEMSET)
        return CUDA_ERROR_INVALID_VALUE;
    n->enabled = isEnabled != 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int *isEnabled) {
    CUgraphNode n;
    FK_ENTER(cuGraphNodeGetEnabled);
    if (!exec_valid(hGraphExec) || !hNode || !isEnabled) return CUDA_ERROR_INVALID_VALUE;
    n = exec_node(hGraphExec->g, hNode);
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    *isEnabled = (unsigned int)n->enabled;
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
