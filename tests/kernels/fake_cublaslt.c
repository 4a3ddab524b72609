/* A test double of libcublasLt for the CPU suite (tests/kernels/test_matmul.py builds it
 * and points BARECUDA_CUBLASLT at it in a child interpreter): every entry point of
 * include/barecuda/cublaslt_abi.h; cublasLtMatmul queues nothing and records its
 * arguments (fake_lt_calls, fake_lt_last); fake_lt_fail makes it return a status. */
#include <stdlib.h>
#include <string.h>
#include "barecuda/cublaslt_abi.h"

static long calls;
static uint64_t last[8];         /* A, B, C, D, workspace, size, stream, layout a's rows */
static float last_ab[2];         /* alpha, beta */
static uint64_t last_algo;       /* data[0] of the last call's algorithm (its rank + 1) */
static int fail_status;

struct bc_lt_layout_opaque { uint64_t rows, cols; };

long fake_lt_calls(void) { return calls; }
void fake_lt_last(uint64_t *out, float *ab) { memcpy(out, last, sizeof(last)); ab[0] = last_ab[0]; ab[1] = last_ab[1]; }
uint64_t fake_lt_last_algo(void) { return last_algo; }
void fake_lt_fail(int status) { fail_status = status; }

size_t cublasLtGetVersion(void) { return 130100; }
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = (cublasLtHandle_t)malloc(8); return 0; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { free(h); return 0; }
const char *cublasLtGetStatusString(cublasStatus_t s) { (void)s; return "fake"; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, int c, int s) {
    (void)c; (void)s; *d = (cublasLtMatmulDesc_t)malloc(8); return 0;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { free(d); return 0; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, int a, const void *b, size_t n) {
    (void)d; (void)a; (void)b; (void)n; return 0;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, int t, uint64_t r, uint64_t c, int64_t ld) {
    (void)t; (void)ld;
    *l = malloc(sizeof(struct bc_lt_layout_opaque));
    (*l)->rows = r;
    (*l)->cols = c;
    return 0;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { free(l); return 0; }
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, int a, const void *b, size_t n) {
    (void)l; (void)a; (void)b; (void)n; return 0;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = (cublasLtMatmulPreference_t)malloc(8); return 0;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { free(p); return 0; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, int a, const void *b, size_t n) {
    (void)p; (void)a; (void)b; (void)n; return 0;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int req,
                                              cublasLtMatmulHeuristicResult_t *res, int *ret) {
    (void)h; (void)d; (void)a; (void)b; (void)c; (void)dd; (void)p;
    /* FAKE_LT_ALGOS algorithms (4 unless set), ranked: rank i's algo carries i + 1 in data[0]
       and needs (i + 1) MiB of workspace, so a test can tell which rank a Matmul took */
    const char *env = getenv("FAKE_LT_ALGOS");
    int n = env ? atoi(env) : 4;
    if (req < n)
        n = req;
    for (int i = 0; i < n; ++i) {
        memset(&res[i], 0, sizeof(res[i]));
        res[i].algo.data[0] = (uint64_t)(i + 1);
        res[i].workspaceSize = (size_t)(i + 1) << 20;
    }
    *ret = n;
    return 0;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, const void *beta,
                              const void *C, cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsn, bc_lt_stream_t s) {
    (void)h; (void)d; (void)lb; (void)lc; (void)ld;
    if (fail_status)
        return fail_status;
    calls++;
    last_algo = algo->data[0];
    last[0] = (uint64_t)(uintptr_t)A;
    last[1] = (uint64_t)(uintptr_t)B;
    last[2] = (uint64_t)(uintptr_t)C;
    last[3] = (uint64_t)(uintptr_t)D;
    last[4] = (uint64_t)(uintptr_t)ws;
    last[5] = (uint64_t)wsn;
    last[6] = (uint64_t)(uintptr_t)s;
    last[7] = la->rows;
    last_ab[0] = *(const float *)alpha;
    last_ab[1] = *(const float *)beta;
    return 0;
}
