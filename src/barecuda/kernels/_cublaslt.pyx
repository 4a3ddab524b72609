"""cuBLASLt matmul for ``barecuda.kernels.matmul(backend="cublaslt")``, loaded at run time.

Owns: finding and loading ``libcublasLt`` (``load``, ``is_available``, ``library_path``,
``version``), one cuBLASLt handle per device, ``Matmul`` (the descriptors and the
heuristic's algorithm for one geometry, row-major terms), ``MatmulPlan`` (one matmul
bound to its buffers, replayed by ``launch``) and ``issue`` (one ``cublasLtMatmul`` from
C, declared in _cublaslt.pxd: ``Matmul.run``, the plan and the op's recorded call,
``_oplt``, all go through it). The ABI is declared in
include/barecuda/cublaslt_abi.h: no cuBLAS header or import library is needed to build,
and nothing here loads the library at import.

Where libcublasLt is looked for: ``_libfind.CUBLASLT`` (``BARECUDA_CUBLASLT``, exclusively
when set; ``cuda-pathfinder`` when installed; the pip wheels ``nvidia-cublas`` (CUDA 13) /
``nvidia-cublas-cu12`` (CUDA 12); ``CUDA_HOME`` and the system folders; the loader's path).

Why Cython and not ctypes: the plan's ``launch`` is one C call (``cublasLtMatmul`` with
everything prepared), so a replay costs what cuBLASLt itself costs; a ctypes call with 16
arguments adds a few microseconds each time, about the host cost of cublasLtMatmul itself.
"""
import threading

cimport cython
from libc.stdint cimport uint64_t, int64_t, int32_t, uintptr_t

from barecuda._abi cimport CUstream
from barecuda._libopen cimport OpenedLibrary, opened_library
from barecuda._loader cimport forget_current
from barecuda._device cimport Device, device_of, make_current
from barecuda._stream cimport stream_handle

from barecuda._errors import BarecudaError, _LibraryNotFoundError
from barecuda import _libfind

cdef bc_cublaslt_t LT
_load_lock = threading.RLock()   # _handles
_handles = {}                # device ordinal -> cublasLtHandle_t (as int), never destroyed

# cuBLASLt's own recommendation for Hopper and newer; the heuristic is told this much.
DEFAULT_WORKSPACE = 32 << 20
# the highest rank Matmul(heuristic=) takes (the heuristic is asked for rank + 1 entries)
cdef enum:
    _MAX_RANK = 15
MAX_HEURISTIC = _MAX_RANK

DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}

_STATUS_NAMES = {
    0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
    7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
    13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED",
    16: "CUBLAS_STATUS_LICENSE_ERROR",
}


class CublasLtError(BarecudaError, RuntimeError):
    """A cuBLASLt call failed: ``status`` is the ``cublasStatus_t``, ``name`` its name,
    ``call`` the function."""

    def __init__(self, status, call=""):
        self.status = status
        self.call = call
        self.name = _STATUS_NAMES.get(status, f"cublasStatus {status}")
        super().__init__(f"{call}: {self.name}")

    def __reduce__(self):
        return (CublasLtError, (self.status, self.call))


class CublasLtNotFoundError(_LibraryNotFoundError):
    """libcublasLt could not be found or loaded; ``tried`` lists the candidates and why
    each failed. The message names the pip package to install."""


cdef int _ck(cublasStatus_t st, str call) except -1:
    if st == 0:
        return 0
    raise CublasLtError(st, call)


cdef OpenedLibrary _lib = opened_library(_libfind.CUBLASLT, bc_cublaslt_symbols, BC_CUBLASLT_NSYMBOLS, &LT, (), None,
                                         CublasLtNotFoundError)
candidates = _lib.candidates        # load(): libcublasLt, once; CublasLtNotFoundError when none will do
load = _lib.load
is_available = _lib.is_available
library_path = _lib.library_path


def version():
    """cuBLASLt's version number, e.g. 130100 for 13.1.0 (loads it)."""
    _lib.open()
    return LT.cublasLtGetVersion()


cdef cublasLtHandle_t _device_handle(Device d) except NULL:
    """The device's handle (created once, with its primary context current)."""
    cdef cublasLtHandle_t h = NULL
    cached = _handles.get(d.ordinal)
    if cached is not None:
        return <cublasLtHandle_t><uintptr_t>cached
    _lib.open()
    with _load_lock:
        cached = _handles.get(d.ordinal)
        if cached is not None:
            return <cublasLtHandle_t><uintptr_t>cached
        d.activate()
        st = LT.cublasLtCreate(&h)
        forget_current()        # the CUDA runtime inside cuBLASLt may have moved the binding
        _ck(st, "cublasLtCreate")
        _handles[d.ordinal] = <uintptr_t>h
        return h


cdef class Matmul:
    """One cuBLASLt matmul geometry, row-major: ``C[b] = alpha op(A[b]) op(B[b]) + beta C[b]``.

    ``A`` is ``M x K`` with row stride ``lda`` (``K x M`` with ``trans_a``), ``B`` is
    ``K x N`` (``N x K`` with ``trans_b``), ``C`` is ``M x N`` with row stride ``ldc``;
    ``batch`` matrices ``sa``/``sb``/``sc`` elements apart (0 broadcasts one operand).
    ``dtype``: ``"float32"``, ``"float16"`` or ``"bfloat16"`` (fp32 accumulation and
    scaling; float32 computes in full fp32, no TF32). The algorithm is the heuristic's choice
    of rank ``heuristic`` (0, the default: its first) for a workspace of at most
    ``max_workspace`` bytes; ``workspace_size`` is what it needs (give at least that much to
    ``run``). A rank the heuristic does not reach for this geometry (it offers at most
    ``MAX_HEURISTIC`` + 1) raises ``ValueError``: try ranks from 0 up to time them.
    """
    def __cinit__(self):
        self.desc = NULL
        self.la = self.lb = self.lc = NULL

    def __init__(self, device, str dtype, int m, int n, int k, bint trans_a, long long lda, bint trans_b,
                 long long ldb, long long ldc, int batch=1, long long sa=0, long long sb=0, long long sc=0,
                 size_t max_workspace=DEFAULT_WORKSPACE, int heuristic=0):
        cdef int dt, opa, opb
        cdef int32_t op32, nb = batch
        cdef int64_t s64
        cdef uint64_t ws = max_workspace
        cdef cublasLtMatmulPreference_t pref = NULL
        cdef cublasLtMatmulHeuristicResult_t res[_MAX_RANK + 1]
        cdef int returned = 0
        if dtype not in DTYPE_CODES:
            raise TypeError(f"dtype {dtype}: cuBLASLt matmul takes float32, float16 or bfloat16")
        if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
            raise ValueError(f"empty matmul (m={m}, n={n}, k={k}, batch={batch})")
        if heuristic < 0 or heuristic > _MAX_RANK:
            raise ValueError(f"heuristic={heuristic}: a rank from 0 to {_MAX_RANK}")
        dt = (BC_CUDA_R_32F, BC_CUDA_R_16F, BC_CUDA_R_16BF)[DTYPE_CODES[dtype]]
        self.device = device_of(device)
        self.key = (dtype, m, n, k, trans_a, lda, trans_b, ldb, ldc, batch, sa, sb, sc)
        self.lt = _device_handle(self.device)
        # cuBLASLt is column-major: the row-major C (M x N) is the column-major C^T (N x M)
        # = op(B)^T op(A)^T, so cuBLAS's "A" is our B and its "B" is our A. A row-major
        # matrix R x C with row stride ld is the column-major C x R with the same ld.
        opa = BC_CUBLAS_OP_T if trans_b else BC_CUBLAS_OP_N     # cuBLAS A = our B
        opb = BC_CUBLAS_OP_T if trans_a else BC_CUBLAS_OP_N     # cuBLAS B = our A
        _ck(LT.cublasLtMatmulDescCreate(&self.desc, BC_CUBLAS_COMPUTE_32F, BC_CUDA_R_32F),
            "cublasLtMatmulDescCreate")
        op32 = opa
        _ck(LT.cublasLtMatmulDescSetAttribute(self.desc, BC_LT_DESC_TRANSA, &op32, sizeof(op32)),
            "cublasLtMatmulDescSetAttribute")
        op32 = opb
        _ck(LT.cublasLtMatmulDescSetAttribute(self.desc, BC_LT_DESC_TRANSB, &op32, sizeof(op32)),
            "cublasLtMatmulDescSetAttribute")
        # stored shapes (column-major rows x cols): our B is K x N row-major = N x K col-major
        if trans_b:
            _ck(LT.cublasLtMatrixLayoutCreate(&self.la, dt, k, n, ldb), "cublasLtMatrixLayoutCreate")
        else:
            _ck(LT.cublasLtMatrixLayoutCreate(&self.la, dt, n, k, ldb), "cublasLtMatrixLayoutCreate")
        if trans_a:
            _ck(LT.cublasLtMatrixLayoutCreate(&self.lb, dt, m, k, lda), "cublasLtMatrixLayoutCreate")
        else:
            _ck(LT.cublasLtMatrixLayoutCreate(&self.lb, dt, k, m, lda), "cublasLtMatrixLayoutCreate")
        _ck(LT.cublasLtMatrixLayoutCreate(&self.lc, dt, n, m, ldc), "cublasLtMatrixLayoutCreate")
        if batch > 1:
            for lay, stride in ((0, sb), (1, sa), (2, sc)):
                s64 = stride
                _ck(LT.cublasLtMatrixLayoutSetAttribute(self._layout(lay), BC_LT_LAYOUT_BATCH_COUNT, &nb,
                                                        sizeof(nb)), "cublasLtMatrixLayoutSetAttribute")
                _ck(LT.cublasLtMatrixLayoutSetAttribute(self._layout(lay), BC_LT_LAYOUT_STRIDED_BATCH_OFFSET,
                                                        &s64, sizeof(s64)), "cublasLtMatrixLayoutSetAttribute")
        _ck(LT.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate")
        try:
            _ck(LT.cublasLtMatmulPreferenceSetAttribute(pref, BC_LT_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                "cublasLtMatmulPreferenceSetAttribute")
            self.device.activate()
            _ck(LT.cublasLtMatmulAlgoGetHeuristic(self.lt, self.desc, self.la, self.lb, self.lc, self.lc, pref,
                                                  heuristic + 1, res, &returned), "cublasLtMatmulAlgoGetHeuristic")
        finally:
            LT.cublasLtMatmulPreferenceDestroy(pref)
        if returned < 1:
            raise CublasLtError(15, "cublasLtMatmulAlgoGetHeuristic (no algorithm for this geometry)")
        if returned <= heuristic:
            raise ValueError(f"heuristic={heuristic}: cuBLASLt's heuristic offers {returned} algorithm"
                             f"{'s' if returned > 1 else ''} for this geometry (ranks 0 to {returned - 1})")
        self.heuristic = heuristic
        self.algo = res[heuristic].algo
        self.workspace_size = res[heuristic].workspaceSize

    cdef cublasLtMatrixLayout_t _layout(self, int i):
        return self.la if i == 0 else (self.lb if i == 1 else self.lc)

    cdef int run_c(self, const void *a, const void *b, void *c, float alpha, float beta, void *ws,
                   size_t ws_bytes, CUstream s) except -1:
        return issue(self, a, b, c, alpha, beta, ws, ws_bytes, s, True)

    def run(self, uintptr_t a, uintptr_t b, uintptr_t c, float alpha=1.0, float beta=0.0, uintptr_t workspace=0,
            size_t workspace_bytes=0, stream=None):
        """Queue the matmul on ``stream`` with device pointers ``a``, ``b``, ``c``
        (``c`` is read when ``beta != 0`` and written) and the workspace (at least
        ``workspace_size`` bytes, used by one matmul at a time)."""
        cdef CUstream s
        if workspace_bytes < self.workspace_size:
            raise ValueError(f"workspace: {workspace_bytes} bytes < the {self.workspace_size} this algorithm needs")
        stream_handle(stream, &s)
        self.run_c(<const void *>a, <const void *>b, <void *>c, alpha, beta, <void *>workspace, workspace_bytes, s)

    def __dealloc__(self):
        if _lib.handle == NULL:
            return
        if self.la != NULL:
            LT.cublasLtMatrixLayoutDestroy(self.la)
        if self.lb != NULL:
            LT.cublasLtMatrixLayoutDestroy(self.lb)
        if self.lc != NULL:
            LT.cublasLtMatrixLayoutDestroy(self.lc)
        if self.desc != NULL:
            LT.cublasLtMatmulDescDestroy(self.desc)


cdef int issue(Matmul mm, const void *a, const void *b, void *c, float alpha, float beta, void *ws,
               size_t ws_bytes, CUstream s, bint release_gil) except -1:
    """See _cublaslt.pxd. cuBLAS's "A" is our B and its "B" our A (Matmul.__init__)."""
    cdef cublasStatus_t st
    make_current(mm.device)
    if release_gil:
        with nogil:
            st = LT.cublasLtMatmul(mm.lt, mm.desc, &alpha, b, mm.la, a, mm.lb, &beta, c, mm.lc, c, mm.lc, &mm.algo,
                                   ws, ws_bytes, s)
    else:
        st = LT.cublasLtMatmul(mm.lt, mm.desc, &alpha, b, mm.la, a, mm.lb, &beta, c, mm.lc, c, mm.lc, &mm.algo,
                               ws, ws_bytes, s)
    if st != 0:
        _ck(st, "cublasLtMatmul")
    return 0


@cython.auto_pickle(False)      # raw device pointers: a pickled plan would be meaningless
cdef class MatmulPlan:
    """A :class:`Matmul` bound to its buffers, scalars, workspace and stream: ``launch()``
    queues it again (one C call). Under stream capture it records cuBLASLt's kernels into
    the graph (the workspace is fixed here, so replays need no allocation). ``keep``
    holds the objects whose memory the pointers name."""
    cdef readonly Matmul matmul
    cdef uintptr_t a, b, c, ws
    cdef size_t ws_bytes
    cdef float alpha, beta
    cdef object stream
    cdef readonly tuple keep

    def __init__(self, Matmul matmul, uintptr_t a, uintptr_t b, uintptr_t c, float alpha, float beta,
                 uintptr_t workspace, size_t workspace_bytes, stream=None, keep=()):
        if workspace_bytes < matmul.workspace_size:
            raise ValueError(f"workspace: {workspace_bytes} bytes < the {matmul.workspace_size} this algorithm needs")
        self.matmul = matmul
        self.a, self.b, self.c = a, b, c
        self.alpha, self.beta = alpha, beta
        self.ws, self.ws_bytes = workspace, workspace_bytes
        self.stream = stream
        self.keep = tuple(keep)

    def launch(self, stream=None):
        """Queue the matmul (on ``stream``, or the plan's own stream when None)."""
        cdef CUstream s
        stream_handle(self.stream if stream is None else stream, &s)
        self.matmul.run_c(<const void *>self.a, <const void *>self.b, <void *>self.c, self.alpha, self.beta,
                          <void *>self.ws, self.ws_bytes, s)

    def __call__(self, stream=None):
        self.launch(stream)
