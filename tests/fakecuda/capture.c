/*
 * fakecuda capture.c -- stream capture in the driver double (what it simulates: graph.c's
 * header comment); the other files call its hooks (fk_cap_*, declared in fake_internal.h).
 */

#include "fake_graph.h"

/* ------------------------------------------------------------------ capture */
fk_cap *cap_of(CUstream s) {
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
CUresult fk_cap_node(CUstream s, CUgraphNodeType type, CUgraphNode *out, int *taken) {
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
