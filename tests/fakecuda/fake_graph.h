/*
 * fakecuda fake_graph.h -- what the graph files of the driver double share: the graph,
 * node and executable structs, the capture records, the registries, and the helpers
 * one file defines and another calls. graph.c: graphs and nodes (and the registries);
 * capture.c: stream capture; exec.c: executable graphs (instantiate, launch, update).
 */
#ifndef FAKE_GRAPH_H
#define FAKE_GRAPH_H

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
    unsigned char *etype, *eport;    /* per dependency: edge type and from_port (NULL: all default) */
    int enabled;
    CUgraphNode orig;                /* in an executable's copy: the node it was made from */
    /* kernel */
    CUfunction func;
    unsigned int grid[3], block[3], smem;
    unsigned char *params;
    void **pptrs;                    /* cuGraphKernelNodeGetParams's kernelParams (into params), made on demand */
    int priority;                    /* CU_LAUNCH_ATTRIBUTE_PRIORITY (0 until set) */
    unsigned int cluster[3];         /* CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (has_cluster: set) */
    int has_cluster, cooperative;    /* ... and CU_LAUNCH_ATTRIBUTE_COOPERATIVE */
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

extern fk_vec g_graphs, g_execs;
extern fk_cond *g_conds;
extern size_t g_nconds, g_capconds;
extern fk_galloc *g_gallocs;
extern size_t g_ngallocs, g_capgallocs;
extern fk_cap g_caps[64];
extern int g_ncaps;
extern fk_capev g_capevs[64];
extern int g_ncapevs;
extern long long g_graph_launches;

CUresult add_node(CUgraph g, CUgraphNodeType type, const CUgraphNode *deps, size_t ndeps, CUgraphNode *out);
int exec_valid(CUgraphExec x);
fk_galloc *galloc_find(uintptr_t base, unsigned long long id);
CUgraph graph_clone(CUgraph src, int keep_orig);
void graph_free(CUgraph g);
CUgraph graph_new(void);
int graph_valid(CUgraph g);
fk_cap *cap_of(CUstream s);
CUresult fk_cap_node(CUstream s, CUgraphNodeType type, CUgraphNode *out, int *taken);
CUresult check_kernel_params(const CUDA_KERNEL_NODE_PARAMS_v2 *p);
fk_cond *cond_of(CUgraphConditionalHandle h);
CUresult store_kernel_params(CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v2 *p);

#endif
