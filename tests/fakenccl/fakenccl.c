/*
 * tests/fakenccl/fakenccl.c -- a small test double of libnccl.so.2 for CPU-only runs.
 *
 * Exports the entry points barecuda declares in include/barecuda/nccl_abi.h (the file
 * includes that header, so a signature that differs from what barecuda calls does not
 * compile). It runs every rank of a communicator in ONE process, on the driver
 * double's "device" memory (tests/fakecuda: device pointers are host addresses):
 *   - ncclCommInitAll makes n ranks at once; ncclCommInitRank joins the rank to the
 *     clique of its unique id and returns at once (the real one blocks until all
 *     ranks joined), so one thread can make every rank;
 *   - a collective runs when the last rank of the clique has issued it (ranks issue
 *     their k-th collective in any order), on host memory, for every data type but
 *     fp8 (ncclInvalidArgument) and every reduction op;
 *   - ncclSend/ncclRecv run when the matching call of the peer arrives;
 *   - ncclCommCuDevice reports devlist[i] (InitAll) or the rank (InitRank).
 * It never stands in for NCCL when judging correctness or speed on a GPU.
 *
 * Control (ctypes): fakenccl_fail(name, result, message) makes the next call of
 * `name` fail with `result`, and ncclGetLastError return `message`;
 * fakenccl_set_async_error(result) is what ncclCommGetAsyncError reports next;
 * fakenccl_calls(name); fakenccl_live_comms(); fakenccl_aborts();
 * fakenccl_last_call(out[3]): count, data type and stream of the last collective/send/recv;
 * FAKENCCL_VERSION=22805 sets ncclGetVersion.
 *
 * Build: cc -shared -fPIC -O1 -std=gnu11 -I include tests/fakenccl/fakenccl.c -o libfakenccl.so
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>
#include <pthread.h>

#include "barecuda/nccl_abi.h"

#define FN_EXPORT __attribute__((visibility("default")))
#define FN_MAX_RANKS 16
#define FN_RING 64

typedef struct fn_op {
    int kind;                 /* 1 allreduce 2 broadcast 3 reduce 4 allgather 5 reducescatter */
    const void *send;
    void *recv;
    size_t count;
    int dtype, op, root;
    int posted;
} fn_op;

typedef struct fn_clique {
    char id[BC_NCCL_UNIQUE_ID_BYTES];
    int nranks, joined, live;
    struct ncclComm *ranks[FN_MAX_RANKS];
    fn_op ops[FN_RING][FN_MAX_RANKS];
    unsigned long long done;  /* collectives completed */
} fn_clique;

struct ncclComm {
    unsigned magic;
    fn_clique *clique;
    int rank, device;
    unsigned long long seq;   /* collectives issued by this rank */
};

typedef struct fn_p2p {
    int is_send, src, dst, dtype;
    fn_clique *clique;
    void *buf;
    size_t count;
    struct fn_p2p *next;
} fn_p2p;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static fn_clique *g_cliques[256];
static int g_ncliques;
static fn_p2p *g_p2p;
static unsigned long long g_idseq;
static int g_live, g_aborts, g_group_depth;
static char g_last[512];
static int g_async = ncclSuccess;

static struct { char name[64]; int result; char msg[256]; int armed; } g_fail;

#define FN_NAMES(X) X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommInitAll) \
    X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommGetAsyncError) X(ncclCommCount) X(ncclCommCuDevice) \
    X(ncclCommUserRank) X(ncclAllReduce) X(ncclBroadcast) X(ncclReduce) X(ncclAllGather) X(ncclReduceScatter) \
    X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd)
#define FN_ENUM(n) FI_##n,
enum { FN_NAMES(FN_ENUM) FI_COUNT };
#define FN_STR(n) #n,
static const char *g_names[] = { FN_NAMES(FN_STR) };
static long long g_calls[FI_COUNT];

static ncclResult_t fn_enter(int idx) {
    g_calls[idx]++;
    if (g_fail.armed && !strcmp(g_fail.name, g_names[idx])) {
        g_fail.armed = 0;
        snprintf(g_last, sizeof(g_last), "%s", g_fail.msg);
        return (ncclResult_t)g_fail.result;
    }
    return ncclSuccess;
}

#define FN_ENTER(n)                                                 \
    ncclResult_t fn_rc_;                                            \
    pthread_mutex_lock(&g_lock);                                    \
    fn_rc_ = fn_enter(FI_##n);                                      \
    if (fn_rc_ != ncclSuccess) { pthread_mutex_unlock(&g_lock); return fn_rc_; }
#define FN_RETURN(v) do { ncclResult_t r_ = (v); pthread_mutex_unlock(&g_lock); return r_; } while (0)

static ncclResult_t fn_bad(const char *msg) {
    snprintf(g_last, sizeof(g_last), "%s", msg);
    return ncclInvalidArgument;
}

static int valid_comm(ncclComm_t c) { return c && c->magic == 0xC0AAu; }

static size_t dt_size(int dt) {
    switch (dt) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

/* ------------------------------------------------ half / bfloat16 <-> double */
static double h2d(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp(m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp(m + 1024, e - 25);
    return s ? -v : v;
}
static uint16_t d2h(double d) {
    float f = (float)d;
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t s = (x >> 16) & 0x8000, e = (x >> 23) & 255, m = x & 0x7fffff;
    if (e == 255) return (uint16_t)(s | 0x7c00 | (m ? 0x200 : 0));
    int ne = (int)e - 127 + 15;
    if (ne >= 31) return (uint16_t)(s | 0x7c00);
    if (ne <= 0) {
        if (ne < -10) return (uint16_t)s;
        m |= 0x800000;
        uint32_t shift = (uint32_t)(14 - ne);
        uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1))) hm++;
        return (uint16_t)(s | hm);
    }
    uint32_t hm = m >> 13, rem = m & 0x1fff;
    uint32_t out = s | ((uint32_t)ne << 10) | hm;
    if (rem > 0x1000 || (rem == 0x1000 && (hm & 1))) out++;
    return (uint16_t)out;
}
static double b2d(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}
static uint16_t d2b(double d) {
    float f = (float)d;
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* Element i of buffer p as double (floats) or as integers (exact). */
typedef union { double f; long long i; unsigned long long u; } fn_val;

static int dt_is_float(int dt) { return dt == ncclFloat16 || dt == ncclFloat32 || dt == ncclFloat64 || dt == ncclBfloat16; }
static int dt_is_unsigned(int dt) { return dt == ncclUint8 || dt == ncclUint32 || dt == ncclUint64; }

static fn_val load(const void *p, size_t i, int dt) {
    fn_val v;
    switch (dt) {
    case ncclInt8: v.i = ((const int8_t *)p)[i]; break;
    case ncclUint8: v.u = ((const uint8_t *)p)[i]; break;
    case ncclInt32: v.i = ((const int32_t *)p)[i]; break;
    case ncclUint32: v.u = ((const uint32_t *)p)[i]; break;
    case ncclInt64: v.i = ((const int64_t *)p)[i]; break;
    case ncclUint64: v.u = ((const uint64_t *)p)[i]; break;
    case ncclFloat16: v.f = h2d(((const uint16_t *)p)[i]); break;
    case ncclBfloat16: v.f = b2d(((const uint16_t *)p)[i]); break;
    case ncclFloat32: v.f = ((const float *)p)[i]; break;
    default: v.f = ((const double *)p)[i]; break;
    }
    return v;
}

static void store(void *p, size_t i, int dt, fn_val v) {
    switch (dt) {
    case ncclInt8: ((int8_t *)p)[i] = (int8_t)v.i; break;
    case ncclUint8: ((uint8_t *)p)[i] = (uint8_t)v.u; break;
    case ncclInt32: ((int32_t *)p)[i] = (int32_t)v.i; break;
    case ncclUint32: ((uint32_t *)p)[i] = (uint32_t)v.u; break;
    case ncclInt64: ((int64_t *)p)[i] = (int64_t)v.i; break;
    case ncclUint64: ((uint64_t *)p)[i] = (uint64_t)v.u; break;
    case ncclFloat16: ((uint16_t *)p)[i] = d2h(v.f); break;
    case ncclBfloat16: ((uint16_t *)p)[i] = d2b(v.f); break;
    case ncclFloat32: ((float *)p)[i] = (float)v.f; break;
    default: ((double *)p)[i] = v.f; break;
    }
}

static fn_val combine(fn_val a, fn_val b, int dt, int op) {
    fn_val r;
    if (dt_is_float(dt)) {
        switch (op) {
        case ncclProd: r.f = a.f * b.f; break;
        case ncclMax: r.f = a.f > b.f ? a.f : b.f; break;
        case ncclMin: r.f = a.f < b.f ? a.f : b.f; break;
        default: r.f = a.f + b.f; break;
        }
    } else if (dt_is_unsigned(dt)) {
        switch (op) {
        case ncclProd: r.u = a.u * b.u; break;
        case ncclMax: r.u = a.u > b.u ? a.u : b.u; break;
        case ncclMin: r.u = a.u < b.u ? a.u : b.u; break;
        default: r.u = a.u + b.u; break;
        }
    } else {
        switch (op) {
        case ncclProd: r.i = a.i * b.i; break;
        case ncclMax: r.i = a.i > b.i ? a.i : b.i; break;
        case ncclMin: r.i = a.i < b.i ? a.i : b.i; break;
        default: r.i = a.i + b.i; break;
        }
    }
    return r;
}

/* Reduce element i of every rank's send buffer (at element offset `off`). */
static fn_val reduce_elem(fn_op *ops, int n, size_t i, int dt, int op) {
    fn_val acc = load(ops[0].send, i, dt);
    int r;
    for (r = 1; r < n; r++) acc = combine(acc, load(ops[r].send, i, dt), dt, op);
    if (op == ncclAvg) {
        if (dt_is_float(dt)) acc.f /= n;
        else if (dt_is_unsigned(dt)) acc.u /= (unsigned)n;
        else acc.i /= n;
    }
    return acc;
}

static void run_collective(fn_clique *c, fn_op *ops) {
    int n = c->nranks, r, dt = ops[0].dtype, op = ops[0].op, root = ops[0].root;
    size_t i, cnt = ops[0].count, es = dt_size(dt);
    /* Like NCCL before 2.29.7 (NVIDIA/nccl issue 1950): a one-rank avg leaves the last
     * count % 32 elements of the result unwritten. */
    size_t w = (n == 1 && op == ncclAvg) ? (cnt - cnt % 32) * es : cnt * es;
    switch (ops[0].kind) {
    case 1: {   /* all-reduce: compute into a scratch first (buffers may alias) */
        unsigned char *tmp = malloc(cnt * es + 1);
        for (i = 0; i < cnt; i++) store(tmp, i, dt, reduce_elem(ops, n, i, dt, op));
        for (r = 0; r < n; r++) memcpy(ops[r].recv, tmp, w);
        free(tmp);
        break;
    }
    case 2: {
        unsigned char *tmp = malloc(cnt * es + 1);
        memcpy(tmp, ops[root].send, cnt * es);
        for (r = 0; r < n; r++) memcpy(ops[r].recv, tmp, cnt * es);
        free(tmp);
        break;
    }
    case 3: {
        unsigned char *tmp = malloc(cnt * es + 1);
        for (i = 0; i < cnt; i++) store(tmp, i, dt, reduce_elem(ops, n, i, dt, op));
        memcpy(ops[root].recv, tmp, w);
        free(tmp);
        break;
    }
    case 4: {   /* all-gather: count is per rank */
        unsigned char *tmp = malloc(cnt * es * (size_t)n + 1);
        for (r = 0; r < n; r++) memcpy(tmp + (size_t)r * cnt * es, ops[r].send, cnt * es);
        for (r = 0; r < n; r++) memcpy(ops[r].recv, tmp, cnt * es * (size_t)n);
        free(tmp);
        break;
    }
    case 5: {   /* reduce-scatter: count is per rank (recvcount) */
        size_t total = cnt * (size_t)n;
        unsigned char *tmp = malloc(total * es + 1);
        for (i = 0; i < total; i++) store(tmp, i, dt, reduce_elem(ops, n, i, dt, op));
        for (r = 0; r < n; r++) memcpy(ops[r].recv, tmp + (size_t)r * cnt * es, w);
        free(tmp);
        break;
    }
    }
}

/* What the last collective or send/recv was given (fakenccl_last_call): the count,
 * data type and stream barecuda derived from its buffers. */
static struct { unsigned long long count, dtype, stream; } g_note;
#define FN_NOTE(cnt, dt, st) do { g_note.count = (cnt); g_note.dtype = (unsigned long long)(dt); \
                                  g_note.stream = (unsigned long long)(uintptr_t)(st); } while (0)

static ncclResult_t post(ncclComm_t comm, int kind, const void *send, void *recv, size_t count, int dt, int op,
                         int root) {
    fn_clique *c;
    fn_op *slot;
    int r, all = 1;
    if (!valid_comm(comm)) return fn_bad("invalid communicator");
    if (!dt_size(dt)) return fn_bad("invalid data type");
    if (dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2) return fn_bad("fakenccl: fp8 is not simulated");
    if (op < 0 || op > ncclAvg) return fn_bad("invalid reduction operation");
    if (count && (!send || !recv)) return fn_bad("NULL buffer");
    c = comm->clique;
    if (c->joined != c->nranks) return fn_bad("communicator not complete");
    if ((kind == 2 || kind == 3) && (root < 0 || root >= c->nranks)) return fn_bad("invalid root");
    slot = &c->ops[comm->seq % FN_RING][0];
    slot[comm->rank] = (fn_op){kind, send, recv, count, dt, op, root, 1};
    comm->seq++;
    for (r = 0; r < c->nranks; r++) all &= slot[r].posted;
    if (all) {
        for (r = 1; r < c->nranks; r++)
            if (slot[r].kind != slot[0].kind || slot[r].count != slot[0].count || slot[r].dtype != slot[0].dtype ||
                slot[r].op != slot[0].op || slot[r].root != slot[0].root) {
                memset(slot, 0, sizeof(fn_op) * FN_MAX_RANKS);
                snprintf(g_last, sizeof(g_last), "ranks issued mismatched collectives");
                return ncclInvalidUsage;
            }
        run_collective(c, slot);
        memset(slot, 0, sizeof(fn_op) * FN_MAX_RANKS);
        c->done++;
    }
    return ncclSuccess;
}

/* ------------------------------------------------------------------ API */
FN_EXPORT ncclResult_t ncclGetVersion(int *version) {
    const char *e = getenv("FAKENCCL_VERSION");
    FN_ENTER(ncclGetVersion);
    if (!version) FN_RETURN(fn_bad("NULL version"));
    *version = e ? atoi(e) : 22805;
    FN_RETURN(ncclSuccess);
}

FN_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
    FN_ENTER(ncclGetUniqueId);
    if (!uniqueId) FN_RETURN(fn_bad("NULL uniqueId"));
    memset(uniqueId, 0, sizeof(*uniqueId));
    snprintf(uniqueId->internal, sizeof(uniqueId->internal), "fakenccl:%d:%llu", (int)getpid(), ++g_idseq);
    FN_RETURN(ncclSuccess);
}

static fn_clique *clique_for(const char *id, int nranks) {
    int i;
    fn_clique *c;
    for (i = 0; i < g_ncliques; i++)
        if (g_cliques[i]->live && !memcmp(g_cliques[i]->id, id, BC_NCCL_UNIQUE_ID_BYTES)) return g_cliques[i];
    if (g_ncliques == 256) return NULL;
    c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    memcpy(c->id, id, BC_NCCL_UNIQUE_ID_BYTES);
    c->nranks = nranks;
    c->live = 1;
    g_cliques[g_ncliques++] = c;
    return c;
}

static ncclComm_t new_comm(fn_clique *c, int rank, int device) {
    ncclComm_t m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->magic = 0xC0AAu;
    m->clique = c;
    m->rank = rank;
    m->device = device;
    c->ranks[rank] = m;
    c->joined++;
    g_live++;
    return m;
}

FN_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    fn_clique *c;
    FN_ENTER(ncclCommInitRank);
    if (!comm) FN_RETURN(fn_bad("NULL comm"));
    if (nranks < 1 || nranks > FN_MAX_RANKS) FN_RETURN(fn_bad("invalid nranks"));
    if (rank < 0 || rank >= nranks) FN_RETURN(fn_bad("invalid rank"));
    if (strncmp(commId.internal, "fakenccl:", 9)) FN_RETURN(fn_bad("unique id not from ncclGetUniqueId"));
    c = clique_for(commId.internal, nranks);
    if (!c) FN_RETURN(ncclSystemError);
    if (c->nranks != nranks) FN_RETURN(fn_bad("nranks differs from the other ranks'"));
    if (c->ranks[rank]) FN_RETURN(fn_bad("rank already joined"));
    *comm = new_comm(c, rank, rank);
    FN_RETURN(*comm ? ncclSuccess : ncclSystemError);
}

FN_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist) {
    char id[BC_NCCL_UNIQUE_ID_BYTES];
    fn_clique *c;
    int i;
    FN_ENTER(ncclCommInitAll);
    if (!comm || ndev < 1 || ndev > FN_MAX_RANKS) FN_RETURN(fn_bad("invalid arguments"));
    memset(id, 0, sizeof(id));
    snprintf(id, sizeof(id), "fakenccl-all:%llu", ++g_idseq);
    c = clique_for(id, ndev);
    if (!c) FN_RETURN(ncclSystemError);
    for (i = 0; i < ndev; i++) comm[i] = new_comm(c, i, devlist ? devlist[i] : i);
    FN_RETURN(ncclSuccess);
}

static void drop_comm(ncclComm_t comm) {
    fn_clique *c = comm->clique;
    c->ranks[comm->rank] = NULL;
    if (--c->joined == 0) c->live = 0;
    comm->magic = 0xDEADu;
    free(comm);
    g_live--;
}

FN_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    FN_ENTER(ncclCommDestroy);
    if (!valid_comm(comm)) FN_RETURN(fn_bad("invalid communicator"));
    drop_comm(comm);
    FN_RETURN(ncclSuccess);
}

FN_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
    FN_ENTER(ncclCommAbort);
    if (!valid_comm(comm)) FN_RETURN(fn_bad("invalid communicator"));
    drop_comm(comm);
    g_aborts++;
    FN_RETURN(ncclSuccess);
}

FN_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    FN_ENTER(ncclCommGetAsyncError);
    if (!valid_comm(comm) || !asyncError) FN_RETURN(fn_bad("invalid arguments"));
    *asyncError = (ncclResult_t)g_async;
    if (g_async != ncclSuccess) snprintf(g_last, sizeof(g_last), "fakenccl: injected asynchronous error");
    g_async = ncclSuccess;
    FN_RETURN(ncclSuccess);
}

FN_EXPORT const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

FN_EXPORT const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return g_last;
}

FN_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    FN_ENTER(ncclCommCount);
    if (!valid_comm(comm) || !count) FN_RETURN(fn_bad("invalid arguments"));
    *count = comm->clique->nranks;
    FN_RETURN(ncclSuccess);
}

FN_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
    FN_ENTER(ncclCommCuDevice);
    if (!valid_comm(comm) || !device) FN_RETURN(fn_bad("invalid arguments"));
    *device = comm->device;
    FN_RETURN(ncclSuccess);
}

FN_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    FN_ENTER(ncclCommUserRank);
    if (!valid_comm(comm) || !rank) FN_RETURN(fn_bad("invalid arguments"));
    *rank = comm->rank;
    FN_RETURN(ncclSuccess);
}

FN_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                     ncclRedOp_t op, ncclComm_t comm, bc_nccl_stream_t stream) {
    FN_ENTER(ncclAllReduce);
    FN_NOTE(count, datatype, stream);
    FN_RETURN(post(comm, 1, sendbuff, recvbuff, count, datatype, op, 0));
}

FN_EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                     int root, ncclComm_t comm, bc_nccl_stream_t stream) {
    FN_ENTER(ncclBroadcast);
    FN_NOTE(count, datatype, stream);
    FN_RETURN(post(comm, 2, sendbuff, recvbuff, count, datatype, 0, root));
}

FN_EXPORT ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclRedOp_t op, int root, ncclComm_t comm, bc_nccl_stream_t stream) {
    FN_ENTER(ncclReduce);
    FN_NOTE(count, datatype, stream);
    FN_RETURN(post(comm, 3, sendbuff, recvbuff, count, datatype, op, root));
}

FN_EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                     ncclComm_t comm, bc_nccl_stream_t stream) {
    FN_ENTER(ncclAllGather);
    FN_NOTE(sendcount, datatype, stream);
    FN_RETURN(post(comm, 4, sendbuff, recvbuff, sendcount, datatype, 0, 0));
}

FN_EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         bc_nccl_stream_t stream) {
    FN_ENTER(ncclReduceScatter);
    FN_NOTE(recvcount, datatype, stream);
    FN_RETURN(post(comm, 5, sendbuff, recvbuff, recvcount, datatype, op, 0));
}

static ncclResult_t p2p(int is_send, void *buf, size_t count, int dt, int peer, ncclComm_t comm) {
    fn_p2p **pp, *m;
    int src, dst;
    if (!valid_comm(comm)) return fn_bad("invalid communicator");
    if (!dt_size(dt)) return fn_bad("invalid data type");
    if (peer < 0 || peer >= comm->clique->nranks) return fn_bad("invalid peer");
    src = is_send ? comm->rank : peer;
    dst = is_send ? peer : comm->rank;
    for (pp = &g_p2p; *pp; pp = &(*pp)->next) {
        m = *pp;
        if (m->clique == comm->clique && m->is_send != is_send && m->src == src && m->dst == dst) {
            if (m->count != count || m->dtype != dt) {
                snprintf(g_last, sizeof(g_last), "send/recv size or type mismatch");
                return ncclInvalidUsage;
            }
            if (is_send) memcpy(m->buf, buf, count * dt_size(dt));
            else memcpy(buf, m->buf, count * dt_size(dt));
            *pp = m->next;
            free(m);
            return ncclSuccess;
        }
    }
    m = calloc(1, sizeof(*m));
    if (!m) return ncclSystemError;
    *m = (fn_p2p){is_send, src, dst, dt, comm->clique, buf, count, NULL};
    for (pp = &g_p2p; *pp; pp = &(*pp)->next) {}
    *pp = m;
    return ncclSuccess;
}

FN_EXPORT ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                ncclComm_t comm, bc_nccl_stream_t stream) {
    FN_ENTER(ncclSend);
    FN_NOTE(count, datatype, stream);
    FN_RETURN(p2p(1, (void *)sendbuff, count, datatype, peer, comm));
}

FN_EXPORT ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                ncclComm_t comm, bc_nccl_stream_t stream) {
    FN_ENTER(ncclRecv);
    FN_NOTE(count, datatype, stream);
    FN_RETURN(p2p(0, recvbuff, count, datatype, peer, comm));
}

FN_EXPORT ncclResult_t ncclGroupStart(void) {
    FN_ENTER(ncclGroupStart);
    g_group_depth++;
    FN_RETURN(ncclSuccess);
}

FN_EXPORT ncclResult_t ncclGroupEnd(void) {
    FN_ENTER(ncclGroupEnd);
    if (g_group_depth == 0) {
        snprintf(g_last, sizeof(g_last), "ncclGroupEnd without ncclGroupStart");
        FN_RETURN(ncclInvalidUsage);
    }
    g_group_depth--;
    FN_RETURN(ncclSuccess);
}

/* ------------------------------------------------------------------ control */
FN_EXPORT void fakenccl_fail(const char *name, int result, const char *message) {
    pthread_mutex_lock(&g_lock);
    snprintf(g_fail.name, sizeof(g_fail.name), "%s", name);
    snprintf(g_fail.msg, sizeof(g_fail.msg), "%s", message ? message : "");
    g_fail.result = result;
    g_fail.armed = 1;
    pthread_mutex_unlock(&g_lock);
}

FN_EXPORT void fakenccl_set_async_error(int result) {
    pthread_mutex_lock(&g_lock);
    g_async = result;
    pthread_mutex_unlock(&g_lock);
}

FN_EXPORT long long fakenccl_calls(const char *name) {
    int i;
    for (i = 0; i < FI_COUNT; i++)
        if (!strcmp(g_names[i], name)) return g_calls[i];
    return -1;
}

FN_EXPORT int fakenccl_live_comms(void) { return g_live; }
FN_EXPORT void fakenccl_last_call(unsigned long long out[3]) {
    out[0] = g_note.count;
    out[1] = g_note.dtype;
    out[2] = g_note.stream;
}
FN_EXPORT int fakenccl_aborts(void) { return g_aborts; }
FN_EXPORT int fakenccl_group_depth(void) { return g_group_depth; }
