/* barecuda/bc_state.h -- process-wide state shared by every barecuda module.
 * There is exactly one instance, inside the _loader extension; other modules hold
 * a pointer to it (see _loader.pxd). */
#ifndef BARECUDA_BC_STATE_H
#define BARECUDA_BC_STATE_H

typedef struct bc_state_t {
    int loaded;          /* 1 once the table is filled and cuInit succeeded */
    int forked;          /* 1 in a child forked after the driver was loaded */
    int finalizing;      /* 1 once interpreter shutdown began (set from atexit) */
    int driver_version;  /* cuDriverGetVersion, e.g. 13000 */
    int pid;             /* process that loaded the driver */
    void *handle;        /* dlopen/LoadLibrary handle */
    char path[1024];     /* what was opened */
    /* Counters the lower modules read without calling up into the graph wing (GIL held): */
    long host_errors;    /* exceptions host-node callables stored (graph/_host_node.pyx) */
    long capture_frees;  /* frees _driver_pool set aside until the last capture ends */
} bc_state_t;

/* Destructors call the driver only when this holds; otherwise they leak. */
static inline int bc_driver_usable(const bc_state_t *st) {
    return st->loaded && !st->forked && !st->finalizing;
}
#endif
