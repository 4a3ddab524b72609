/*
 * fakecuda exec.c -- executable graphs in the driver double: instantiate, launch
 * (replay), update, per-node parameters (what it simulates: graph.c's header comment).
 */

#include "fake_graph.h"

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
        if (n->has_cluster) {
            r.has_cluster = 1;
            memcpy(r.cluster, n->cluster, sizeof(r.cluster));
        }
        r.cooperative = n->cooperative;
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
