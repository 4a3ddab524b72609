/*
 * barecuda/bc_bench_graph.h -- raw C baselines of the CUDA graph benchmark rows
 * (src/barecuda/bench/graph_rows.py through src/barecuda/bench/_graphbench.pyx).
 *
 * Each loop calls the driver as a C program would (no checks beyond the returned
 * CUresult) and times itself with bc_now_ns() (barecuda/bc_clock.h), the clock of
 * every other row.
 * A "chain" is a graph of n kernel nodes, node i depending on node i-1, all launching
 * the same function with the same pre-packed kernelParams.
 */
#ifndef BARECUDA_BC_BENCH_GRAPH_H
#define BARECUDA_BC_BENCH_GRAPH_H

#include <stdint.h>
#include <string.h>
#include "barecuda/cuda_abi.h"
#include "barecuda/bc_clock.h"

#define bc_gb_now_ns bc_now_ns

typedef struct bc_gb_kernel {
    CUfunction f;
    unsigned int grid, block;
    void **params;
} bc_gb_kernel;

static inline void bc_gb_node_params(const bc_gb_kernel *k, CUDA_KERNEL_NODE_PARAMS_v2 *p) {
    memset(p, 0, sizeof(*p));
    p->func = k->f;
    p->gridDimX = k->grid; p->gridDimY = 1; p->gridDimZ = 1;
    p->blockDimX = k->block; p->blockDimY = 1; p->blockDimZ = 1;
    p->kernelParams = k->params;
}

/* A chain of n kernel nodes in a new graph; nodes[] (n entries) receives the nodes. */
static CUresult bc_gb_chain(const bc_driver_t *D, const bc_gb_kernel *k, long n, CUgraph *g, CUgraphNode *nodes) {
    CUDA_KERNEL_NODE_PARAMS_v2 p;
    CUresult rc;
    long i;
    bc_gb_node_params(k, &p);
    if ((rc = D->cuGraphCreate(g, 0))) return rc;
    for (i = 0; i < n; i++)
        if ((rc = D->cuGraphAddKernelNode(&nodes[i], *g, i ? &nodes[i - 1] : NULL, i ? 1 : 0, &p))) return rc;
    return CUDA_SUCCESS;
}

/* n cuGraphLaunch calls of x on s, then one sync. *out (ns): the launches and the sync
 * (with_sync: the replay row) or the launches alone (the issue cost). */
static CUresult bc_gb_launches(const bc_driver_t *D, CUgraphExec x, CUstream s, long n, int with_sync,
                               int64_t *out) {
    CUresult rc = CUDA_SUCCESS;
    long i;
    int64_t t0 = bc_gb_now_ns();
    for (i = 0; i < n; i++)
        if ((rc = D->cuGraphLaunch(x, s))) return rc;
    if (with_sync)
        rc = D->cuStreamSynchronize(s);
    *out = bc_gb_now_ns() - t0;
    return with_sync ? rc : D->cuStreamSynchronize(s);
}

/* reps launches of exec on s, then a sync; *out = the whole time (ns). */
static CUresult bc_gb_replay(const bc_driver_t *D, CUgraphExec x, CUstream s, long reps, int64_t *out) {
    return bc_gb_launches(D, x, s, reps, 1, out);
}

/* Issue cost: n cuGraphLaunch calls timed, the sync after them not. */
static CUresult bc_gb_issue(const bc_driver_t *D, CUgraphExec x, CUstream s, long n, int64_t *out) {
    return bc_gb_launches(D, x, s, n, 0, out);
}

/* steps rounds of: nodes[0..nnodes) each get a changed last parameter (*slot = i + j, an
 * int written as the caller's packer would) by cuGraphExecKernelNodeSetParams, then, when
 * `launch`, x is launched on s (and s synchronized once at the end, timed). */
static CUresult bc_gb_set_steps(const bc_driver_t *D, CUgraphExec x, const CUgraphNode *nodes, int nnodes,
                                const bc_gb_kernel *k, unsigned int *slot, int launch, CUstream s, long steps,
                                int64_t *out) {
    CUDA_KERNEL_NODE_PARAMS_v2 p;
    CUresult rc = CUDA_SUCCESS;
    long i;
    int j;
    int64_t t0;
    bc_gb_node_params(k, &p);
    t0 = bc_gb_now_ns();
    for (i = 0; i < steps; i++) {
        for (j = 0; j < nnodes; j++) {
            *slot = (unsigned int)(i + j);
            if ((rc = D->cuGraphExecKernelNodeSetParams(x, nodes[j], &p))) return rc;
        }
        if (launch && (rc = D->cuGraphLaunch(x, s))) return rc;
    }
    if (launch) rc = D->cuStreamSynchronize(s);
    *out = bc_gb_now_ns() - t0;
    return rc;
}

/* n cuGraphExecKernelNodeSetParams calls on one node, the last parameter's value
 * changed each time. */
static CUresult bc_gb_setparams(const bc_driver_t *D, CUgraphExec x, CUgraphNode node, const bc_gb_kernel *k,
                                unsigned int *slot, long n, int64_t *out) {
    return bc_gb_set_steps(D, x, &node, 1, k, slot, 0, NULL, n, out);
}

/* n whole-graph updates of x from g. */
static CUresult bc_gb_update(const bc_driver_t *D, CUgraphExec x, CUgraph g, long n, int64_t *out) {
    CUgraphExecUpdateResultInfo info;
    CUresult rc;
    long i;
    int64_t t0 = bc_gb_now_ns();
    for (i = 0; i < n; i++)
        if ((rc = D->cuGraphExecUpdate(x, g, &info))) return rc;
    *out = bc_gb_now_ns() - t0;
    return CUDA_SUCCESS;
}

/* n captures of `launches` launches on s (begin, launches, end, destroy). */
static CUresult bc_gb_capture(const bc_driver_t *D, const bc_gb_kernel *k, CUstream s, long launches, long n,
                              int64_t *out) {
    CUresult rc;
    CUgraph g;
    long i, j;
    int64_t t0 = bc_gb_now_ns();
    for (i = 0; i < n; i++) {
        if ((rc = D->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL))) return rc;
        for (j = 0; j < launches; j++)
            if ((rc = D->cuLaunchKernel(k->f, k->grid, 1, 1, k->block, 1, 1, 0, s, k->params, NULL))) return rc;
        if ((rc = D->cuStreamEndCapture(s, &g))) return rc;
        if ((rc = D->cuGraphDestroy(g))) return rc;
    }
    *out = bc_gb_now_ns() - t0;
    return CUDA_SUCCESS;
}

/* n instantiations (and destructions) of g. */
static CUresult bc_gb_instantiate(const bc_driver_t *D, CUgraph g, long n, int64_t *out) {
    CUresult rc;
    CUgraphExec x;
    long i;
    int64_t t0 = bc_gb_now_ns();
    for (i = 0; i < n; i++) {
        if ((rc = D->cuGraphInstantiateWithFlags(&x, g, 0))) return rc;
        if ((rc = D->cuGraphExecDestroy(x))) return rc;
    }
    *out = bc_gb_now_ns() - t0;
    return CUDA_SUCCESS;
}

/* The inference-loop step: per step, three nodes get a changed last u32 parameter
 * (cuGraphExecKernelNodeSetParams each) and the graph is launched; one sync at the end. */
static CUresult bc_gb_loop(const bc_driver_t *D, CUgraphExec x, const CUgraphNode nodes[3], const bc_gb_kernel *k,
                           unsigned int *slot, CUstream s, long steps, int64_t *out) {
    return bc_gb_set_steps(D, x, nodes, 3, k, slot, 1, s, steps, out);
}

/* The same step launched eagerly: n launches per step, one sync at the end. */
static CUresult bc_gb_eager_loop(const bc_driver_t *D, const bc_gb_kernel *k, unsigned int *slot, CUstream s,
                                 long nodes, long steps, int64_t *out) {
    CUresult rc;
    long i, j;
    int64_t t0 = bc_gb_now_ns();
    for (i = 0; i < steps; i++)
        for (j = 0; j < nodes; j++) {
            *slot = (unsigned int)(i + j);
            if ((rc = D->cuLaunchKernel(k->f, k->grid, 1, 1, k->block, 1, 1, 0, s, k->params, NULL))) return rc;
        }
    rc = D->cuStreamSynchronize(s);
    *out = bc_gb_now_ns() - t0;
    return rc;
}

#endif /* BARECUDA_BC_BENCH_GRAPH_H */
