"""Raw C baselines of the benchmark wing (``python -m barecuda.bench``).

Owns: the one clock every benchmark figure is taken with (``now_ns``, the C
``bc_now_ns`` of include/barecuda/bc_clock.h that the staging pipeline uses too),
pre-packed kernel parameter arrays (``ParamBlock``), and C loops that call the
driver the way a C program would (include/barecuda/bc_baseline.h) --
``cuLaunchKernel`` / ``cuLaunchKernelEx`` with a ready ``void**``, launch +
``cuStreamSynchronize``, ``cuMemAlloc``/``cuMemFree`` and the stream-ordered pair,
``cuMemcpyHtoD``/``DtoH`` -- with the GIL released and the clock read in C. These
are the "raw C" rows every other row is a ratio to. Also ``bench_copy``: staged
pageable copies (the ``staged_htod`` / ``staged_dtoh`` C entry points of
src/barecuda/_staging.pxd) against the driver's pageable and pinned copies.
Nothing here is on the package's hot path.

All functions expect the caller's thread to have a context current
(``use_device(ordinal)`` makes the primary context current).
"""
cimport cython
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memcpy, memset, memcmp
from libc.stdint cimport int32_t, int64_t, uint64_t, uintptr_t
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, symbol_version_text
from barecuda._device cimport Device, activate_device, device_of
from barecuda._stream cimport stream_handle
from barecuda._staging cimport staged_htod, staged_dtoh
from barecuda._dlpack cimport DLTensor, bc_dlpack_exchange_api, BC_DLPACK_EXCHANGE_CAPSULE, kDLCUDA
from cpython.pycapsule cimport PyCapsule_IsValid, PyCapsule_GetPointer
from cpython.object cimport PyObject, PyTypeObject

cdef extern from "barecuda/bc_clock.h" nogil:
    int64_t bc_now_ns()

cdef extern from "barecuda/bc_baseline.h" nogil:
    ctypedef struct bc_bench_launch:
        CUfunction f
        unsigned int grid[3]
        unsigned int block[3]
        unsigned int shared_mem
        CUstream stream
        void **params
        int ex
        CUlaunchConfig cfg
        CUlaunchAttribute attrs[4]
    CUresult bc_bench_launch_n(const bc_driver_t *D, const bc_bench_launch *L, long n)
    CUresult bc_bench_launch_batches(const bc_driver_t *D, const bc_bench_launch *L, long nb, long bs, int64_t *out)
    CUresult bc_bench_launch_throughput(const bc_driver_t *D, const bc_bench_launch *L, long n, int64_t *out)
    CUresult bc_bench_launch_roundtrip(const bc_driver_t *D, const bc_bench_launch *L, long n, int64_t *out)
    CUresult bc_bench_alloc_free(const bc_driver_t *D, size_t size, long nb, long bs, int64_t *out)
    CUresult bc_bench_alloc_free_async(const bc_driver_t *D, size_t size, CUstream stream, long nb, long bs, int64_t *out)
    CUresult bc_bench_memcpy(const bc_driver_t *D, int dir, CUdeviceptr dptr, void *host, size_t nbytes, long reps, int64_t *out)
    ctypedef struct bc_bench_dlx:
        const bc_dlpack_exchange_api *api
        void **objs
        int n
        int32_t device_id
    CUresult bc_bench_dlx_batches(const bc_driver_t *D, const bc_bench_launch *L, const bc_bench_dlx *X,
                                  int launch, long nb, long bs, int64_t *out, int *pyerr)

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()



def now_ns():
    """The package's clock, in nanoseconds (monotonic; only differences mean anything).

    CLOCK_MONOTONIC (QueryPerformanceCounter on Windows), the same C function the
    staging pipeline and every C loop of this module read.
    """
    return bc_now_ns()


def use_device(int ordinal=0):
    """Make device ``ordinal``'s primary context current on the calling thread."""
    activate_device(ordinal)


cdef inline uintptr_t _handle(obj) except? 0:
    """An int handle, or anything with ``handle_int`` / ``handle`` / ``__int__``."""
    if obj is None:
        return 0
    if isinstance(obj, int):
        return <uintptr_t>obj
    for attr in ("handle_int", "handle"):
        v = getattr(obj, attr, None)
        if isinstance(v, int):
            return <uintptr_t>v
    return <uintptr_t>int(obj)


cdef int _dim3(obj, unsigned int *out, str what) except -1:
    if isinstance(obj, int):
        out[0] = obj
        out[1] = 1
        out[2] = 1
        return 0
    t = tuple(obj)
    if not 1 <= len(t) <= 3:
        raise ValueError(f"{what} must be an int or a tuple of 1 to 3 ints, not {obj!r}")
    out[0] = t[0]
    out[1] = t[1] if len(t) > 1 else 1
    out[2] = t[2] if len(t) > 2 else 1
    return 0


@cython.final
cdef class ParamBlock:
    """A pre-packed ``kernelParams`` array: one 8-byte-aligned slot per argument.

    Parameters
    ----------
    args : sequence of bytes-like
        The bytes of each kernel argument, in order (``struct.pack('<Q', ptr)``,
        ``struct.pack('<I', n)``...). An empty sequence gives ``kernelParams=NULL``.
    """
    cdef void **params
    cdef char *storage
    cdef readonly int count
    cdef readonly size_t nbytes

    def __cinit__(self, args=()):
        cdef list parts = [bytes(a) for a in args]
        cdef size_t total = 0, off = 0, n
        cdef int i
        cdef bytes b
        self.params = NULL
        self.storage = NULL
        self.count = len(parts)
        for b in parts:
            total += (len(b) + 7) & ~(<size_t>7)
        self.nbytes = total
        if self.count == 0:
            return
        self.storage = <char *>calloc(total if total else 8, 1)
        self.params = <void **>calloc(self.count, sizeof(void *))
        if self.storage == NULL or self.params == NULL:
            raise MemoryError()
        for i in range(self.count):
            b = parts[i]
            n = len(b)
            memcpy(self.storage + off, <const char *>b, n)
            self.params[i] = self.storage + off
            off += (n + 7) & ~(<size_t>7)

    def __dealloc__(self):
        free(self.params)
        free(self.storage)

    @property
    def address(self):
        """Address of the ``void*[count]`` array (0 when there are no arguments), for
        callers that take a pre-packed ``kernelParams`` (ctypes, cuda.bindings)."""
        return <uintptr_t>self.params


cdef int _prepare(bc_bench_launch *L, func, grid, block, ParamBlock params, stream,
                  unsigned int shared_mem, dict ex) except -1:
    """Fill a launch description; ex=None for cuLaunchKernel, else a dict of
    cuLaunchKernelEx attributes (priority, cluster, cooperative,
    programmatic_serialization)."""
    cdef int na = 0
    memset(L, 0, sizeof(bc_bench_launch))
    L.f = <CUfunction><uintptr_t>_handle(func)
    _dim3(grid, L.grid, "grid")
    _dim3(block, L.block, "block")
    L.shared_mem = shared_mem
    L.stream = <CUstream>_handle(stream)
    L.params = params.params if params is not None else NULL
    if ex is None:
        return 0
    if D.cuLaunchKernelEx == NULL:
        raise NotImplementedError(f"cuLaunchKernelEx needs a {symbol_version_text(b'cuLaunchKernelEx')} "
                                  "driver or newer")
    L.ex = 1
    L.cfg.gridDimX, L.cfg.gridDimY, L.cfg.gridDimZ = L.grid[0], L.grid[1], L.grid[2]
    L.cfg.blockDimX, L.cfg.blockDimY, L.cfg.blockDimZ = L.block[0], L.block[1], L.block[2]
    L.cfg.sharedMemBytes = shared_mem
    L.cfg.hStream = L.stream
    if ex.get("priority") is not None:
        L.attrs[na].id = CU_LAUNCH_ATTRIBUTE_PRIORITY
        L.attrs[na].value.priority = ex["priority"]
        na += 1
    if ex.get("cluster") is not None:
        c = ex["cluster"]
        c = (c, 1, 1) if isinstance(c, int) else tuple(c) + (1,) * (3 - len(tuple(c)))
        L.attrs[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        L.attrs[na].value.clusterDim.x = c[0]
        L.attrs[na].value.clusterDim.y = c[1]
        L.attrs[na].value.clusterDim.z = c[2]
        na += 1
    if ex.get("cooperative"):
        L.attrs[na].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        L.attrs[na].value.cooperative = 1
        na += 1
    if ex.get("programmatic_serialization"):
        L.attrs[na].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        L.attrs[na].value.programmaticStreamSerializationAllowed = 1
        na += 1
    L.cfg.attrs = L.attrs if na else NULL
    L.cfg.numAttrs = na
    return 0


cdef list _to_list(int64_t *v, long n):
    return [v[i] for i in range(n)]


def launch_loop(func, grid, block, ParamBlock params, stream=None, long n=100, *,
                unsigned int shared_mem=0, dict ex=None):
    """``n`` launches back to back, no sync; returns the elapsed ns (GIL released)."""
    cdef bc_bench_launch L
    cdef CUresult rc
    cdef int64_t t0, t1
    _prepare(&L, func, grid, block, params, stream, shared_mem, ex)
    with nogil:
        t0 = bc_now_ns()
        rc = bc_bench_launch_n(D, &L, n)
        t1 = bc_now_ns()
    check(rc, b"cuLaunchKernelEx" if L.ex else b"cuLaunchKernel")
    return t1 - t0


def launch_batches(func, grid, block, ParamBlock params, stream=None, long batches=10,
                   long batch=100, *, unsigned int shared_mem=0, dict ex=None):
    """Issue cost: ``batches`` batches of ``batch`` asynchronous launches; returns the
    ns of each batch (the stream sync after each batch is not timed)."""
    return _launch_series(func, grid, block, params, stream, batches, batch, False, shared_mem, ex)


def launch_throughput(func, grid, block, ParamBlock params, stream=None, long n=2000, *,
                      unsigned int shared_mem=0, dict ex=None):
    """``n`` launches then one stream sync; returns the total ns."""
    cdef bc_bench_launch L
    cdef CUresult rc
    cdef int64_t out = 0
    _prepare(&L, func, grid, block, params, stream, shared_mem, ex)
    with nogil:
        rc = bc_bench_launch_throughput(D, &L, n, &out)
    check(rc, b"cuLaunchKernelEx" if L.ex else b"cuLaunchKernel")
    return out


def launch_roundtrip(func, grid, block, ParamBlock params, stream=None, long n=50, *,
                     unsigned int shared_mem=0, dict ex=None):
    """``n`` times launch + ``cuStreamSynchronize``; returns the ns of each."""
    return _launch_series(func, grid, block, params, stream, n, 0, True, shared_mem, ex)


cdef list _launch_series(func, grid, block, ParamBlock params, stream, long n, long batch, bint roundtrip,
                         unsigned int shared_mem, dict ex):
    """``n`` timings in ns: of batches of ``batch`` launches (launch_batches), or of
    single launches each with its sync (roundtrip: launch_roundtrip)."""
    cdef bc_bench_launch L
    cdef CUresult rc
    cdef int64_t *out = <int64_t *>calloc(max(n, 1), sizeof(int64_t))
    if out == NULL:
        raise MemoryError()
    try:
        _prepare(&L, func, grid, block, params, stream, shared_mem, ex)
        with nogil:
            if roundtrip:
                rc = bc_bench_launch_roundtrip(D, &L, n, out)
            else:
                rc = bc_bench_launch_batches(D, &L, n, batch, out)
        check(rc, b"cuLaunchKernelEx" if L.ex else b"cuLaunchKernel")
        return _to_list(out, n)
    finally:
        free(out)


cdef int _raise_set() except -1:
    """Propagate the exception a library's C function set."""
    return -1


def dlx_launch_batches(func, grid, block, ParamBlock params, stream, tensors, long batches=10,
                       long batch=100, *, bint launch=True):
    """The raw C form of a launch with tensors of a library that publishes DLPack's C
    exchange API (``__dlpack_c_exchange_api__`` on its tensor type; PyTorch 2.10+): per
    launch, each tensor's address read by the API into parameter slot i of ``params``,
    the library's current stream read once, then ``cuLaunchKernel`` (``launch=False``:
    the reads alone). Issue cost as launch_batches: the ns of each batch. The GIL is
    held (the library's functions need it). Raises TypeError when the tensors' type
    has no usable exchange API."""
    cdef bc_bench_launch L
    cdef bc_bench_dlx X
    cdef void *objs[8]
    cdef DLTensor dl
    cdef CUresult rc
    cdef int pyerr = 0
    cdef int i
    cdef list keep = list(tensors)
    cdef const bc_dlpack_exchange_api *api
    if not 1 <= len(keep) <= 8 or params is None or params.count < len(keep):
        raise ValueError("dlx_launch_batches needs 1 to 8 tensors and a ParamBlock with a slot for each")
    api = _exchange_api(keep)
    for i in range(len(keep)):
        objs[i] = <void *>keep[i]
    if api.dltensor_from_py_object_no_sync(objs[0], &dl) != 0:
        _raise_set()
    if dl.device.device_type != kDLCUDA:
        raise ValueError("the tensors must be on a CUDA device")
    X.api = api
    X.objs = objs
    X.n = len(keep)
    X.device_id = dl.device.device_id
    cdef int64_t *out = <int64_t *>calloc(max(batches, 1), sizeof(int64_t))
    if out == NULL:
        raise MemoryError()
    try:
        _prepare(&L, func, grid, block, params, stream, 0, None)
        rc = bc_bench_dlx_batches(D, &L, &X, launch, batches, batch, out, &pyerr)
        if pyerr:
            _raise_set()
        check(rc, b"cuLaunchKernel")
        return _to_list(out, batches)
    finally:
        free(out)


# ------------------------------------------------------------------ floors
from barecuda._pymethod cimport PyMethodDef, METH_FASTCALL, METH_KEYWORDS, PyDescr_NewMethod, \
    PyType_Modified, _TypeWithDict


@cython.final
cdef class LaunchFloor:
    """The least a Python-callable launch can cost: ``floor.launch(grid, block, a, b,
    c, d, stream=s)`` is called exactly as ``Kernel.launch`` (a METH_FASTCALL |
    METH_KEYWORDS C method: no tuple or dict made per call) and does nothing but the
    raw ``cuLaunchKernel`` of ``func`` with ``params`` on ``stream``, geometry fixed
    here (the call's grid, block and stream are not read). With ``tensors`` (a
    sample, one per leading 8-byte slot of ``params``, all of one type publishing
    DLPack's C exchange API), each call first reads its tensor arguments' addresses
    into those slots and the library's current stream of their device through that
    API (``dlx_launch_batches``' reads): what any binding that honours the library's
    stream rule must do. No check of the arguments beyond their count: the benchmark's
    floor rows, not a launch API.
    """
    cdef CUfunction f
    cdef unsigned int grid[3]
    cdef unsigned int block[3]
    cdef CUstream stream
    cdef ParamBlock params
    cdef const bc_dlpack_exchange_api *api
    cdef int32_t device_id
    cdef readonly int nargs
    cdef readonly bint reads

    def __cinit__(self, func, grid, block, ParamBlock params not None, stream, tensors=None):
        cdef DLTensor dl
        cdef bc_bench_launch L
        _prepare(&L, func, grid, block, params, stream, 0, None)
        self.f = L.f
        self.grid[0], self.grid[1], self.grid[2] = L.grid[0], L.grid[1], L.grid[2]
        self.block[0], self.block[1], self.block[2] = L.block[0], L.block[1], L.block[2]
        self.stream = L.stream
        self.params = params
        self.api = NULL
        self.nargs = params.count
        self.reads = tensors is not None
        if tensors is None:
            return
        keep = list(tensors)
        if not 1 <= len(keep) <= params.count:
            raise ValueError(f"LaunchFloor reads 1 to {params.count} tensors (one per parameter slot), "
                             f"got {len(keep)}")
        self.api = _exchange_api(keep)
        if self.api.dltensor_from_py_object_no_sync(<void *>keep[0], &dl) != 0:
            _raise_set()
        if dl.device.device_type != kDLCUDA:
            raise ValueError("the tensors must be on a CUDA device")
        self.device_id = dl.device.device_id
        self.nargs = len(keep)


cdef const bc_dlpack_exchange_api *_exchange_api(list tensors) except NULL:
    """The DLPack C exchange API of the tensors' one type (TypeError without one)."""
    t = type(tensors[0])
    cap = getattr(t, "__dlpack_c_exchange_api__", None)
    if cap is None or not PyCapsule_IsValid(cap, BC_DLPACK_EXCHANGE_CAPSULE):
        raise TypeError(f"{t.__module__}.{t.__name__} publishes no DLPack C exchange API")
    api = <const bc_dlpack_exchange_api *>PyCapsule_GetPointer(cap, BC_DLPACK_EXCHANGE_CAPSULE)
    if api.version.major != 1 or api.dltensor_from_py_object_no_sync == NULL or api.current_work_stream == NULL:
        raise TypeError(f"{t.__name__}'s DLPack C exchange API has no tensor or stream reader")
    for x in tensors:
        if type(x) is not t:
            raise TypeError("the tensors must be of one type")
    return api


cdef object _floor_launch(object self, PyObject **argv, Py_ssize_t nargs, PyObject *kwnames):
    """LaunchFloor.launch (METH_FASTCALL | METH_KEYWORDS): the reads (if any) and the
    raw launch; keywords are accepted and not read."""
    cdef LaunchFloor fl = <LaunchFloor>self
    cdef DLTensor dl
    cdef void *cur = NULL
    cdef int i
    cdef CUresult rc
    if nargs != 2 + fl.nargs:
        raise TypeError(f"LaunchFloor.launch takes grid, block and {fl.nargs} arguments, got {nargs} in all")
    if fl.api != NULL:
        for i in range(fl.nargs):
            if fl.api.dltensor_from_py_object_no_sync(<void *>argv[2 + i], &dl) != 0:
                return _raise_set()
            (<uint64_t *>fl.params.params[i])[0] = <uint64_t><uintptr_t>dl.data + dl.byte_offset
        if fl.api.current_work_stream(kDLCUDA, fl.device_id, &cur) != 0:
            return _raise_set()
    rc = D.cuLaunchKernel(fl.f, fl.grid[0], fl.grid[1], fl.grid[2], fl.block[0], fl.block[1], fl.block[2],
                          0, fl.stream, fl.params.params, NULL)
    if rc != CUDA_SUCCESS:
        check(rc, b"cuLaunchKernel")
    return None


cdef PyMethodDef _floor_def


cdef int _install_floor() except -1:
    _floor_def.ml_name = b"launch"
    _floor_def.ml_meth = <void *>_floor_launch
    _floor_def.ml_flags = METH_FASTCALL | METH_KEYWORDS
    _floor_def.ml_doc = b"launch($self, grid, block, *args, stream=None)\n--\n\nThe floor's call (see the class)."
    (<dict>(<object>(<_TypeWithDict *>LaunchFloor).tp_dict))["launch"] = \
        PyDescr_NewMethod(<PyTypeObject *>LaunchFloor, &_floor_def)
    PyType_Modified(<PyTypeObject *>LaunchFloor)
    return 0


_install_floor()


def stream_sync(stream=None):
    """``cuStreamSynchronize`` with the GIL released."""
    cdef CUstream s = <CUstream>_handle(stream)
    cdef CUresult rc
    with nogil:
        rc = D.cuStreamSynchronize(s)
    check(rc, b"cuStreamSynchronize")


def ctx_sync():
    """``cuCtxSynchronize`` with the GIL released."""
    cdef CUresult rc
    with nogil:
        rc = D.cuCtxSynchronize()
    check(rc, b"cuCtxSynchronize")


def stream_create(unsigned int flags=0):
    """A raw ``CUstream`` (int) in the current context; destroy with stream_destroy."""
    cdef CUstream s = NULL
    check(D.cuStreamCreate(&s, flags), b"cuStreamCreate")
    return <uintptr_t>s


def stream_destroy(stream):
    check(D.cuStreamDestroy(<CUstream>_handle(stream)), b"cuStreamDestroy")


# ------------------------------------------------------------------ modules
def module_load(image):
    """``cuModuleLoadDataEx`` of a PTX/cubin/fatbin image (bytes; PTX must end in NUL,
    which is added when missing); returns the ``CUmodule`` as an int. The raw rows
    load their kernels here so that they depend on nothing but the driver."""
    cdef bytes img = bytes(image)
    cdef CUmodule m = NULL
    cdef const char *p
    cdef CUresult rc
    if not img.endswith(b"\0"):
        img += b"\0"
    p = img
    with nogil:
        rc = D.cuModuleLoadDataEx(&m, p, 0, NULL, NULL)
    check(rc, b"cuModuleLoadDataEx")
    return <uintptr_t>m


def module_get_function(module, name):
    """``cuModuleGetFunction``; returns the ``CUfunction`` as an int."""
    cdef CUfunction f = NULL
    cdef bytes bname = name.encode() if isinstance(name, str) else bytes(name)
    check(D.cuModuleGetFunction(&f, <CUmodule>_handle(module), bname), b"cuModuleGetFunction")
    return <uintptr_t>f


def module_unload(module):
    check(D.cuModuleUnload(<CUmodule>_handle(module)), b"cuModuleUnload")


# ------------------------------------------------------------------- memory
def alloc_free(size_t size=1 << 20, long batches=10, long batch=100):
    """``cuMemAlloc`` + ``cuMemFree`` pairs; returns the ns of each batch."""
    cdef CUresult rc
    cdef int64_t *out = <int64_t *>calloc(max(batches, 1), sizeof(int64_t))
    if out == NULL:
        raise MemoryError()
    try:
        with nogil:
            rc = bc_bench_alloc_free(D, size, batches, batch, out)
        check(rc, b"cuMemAlloc/cuMemFree")
        return _to_list(out, batches)
    finally:
        free(out)


def alloc_free_async(stream=None, size_t size=1 << 20, long batches=10, long batch=100):
    """``cuMemAllocAsync`` + ``cuMemFreeAsync`` pairs on ``stream``; ns of each batch
    (the sync after each batch is not timed)."""
    cdef CUresult rc
    cdef CUstream s = <CUstream>_handle(stream)
    cdef int64_t *out
    if D.cuMemAllocAsync == NULL or D.cuMemFreeAsync == NULL:
        raise NotImplementedError(f"cuMemAllocAsync needs a {symbol_version_text(b'cuMemAllocAsync')} "
                                  "driver or newer")
    out = <int64_t *>calloc(max(batches, 1), sizeof(int64_t))
    if out == NULL:
        raise MemoryError()
    try:
        with nogil:
            rc = bc_bench_alloc_free_async(D, size, s, batches, batch, out)
        check(rc, b"cuMemAllocAsync/cuMemFreeAsync")
        return _to_list(out, batches)
    finally:
        free(out)


def mem_alloc(size_t size):
    """``cuMemAlloc``; returns the device pointer as an int."""
    cdef CUdeviceptr p = 0
    with nogil:
        check(D.cuMemAlloc(&p, size), b"cuMemAlloc")
    return p


def mem_free(CUdeviceptr ptr):
    with nogil:
        check(D.cuMemFree(ptr), b"cuMemFree")


def host_alloc(size_t size):
    """Pinned host memory from ``cuMemHostAlloc`` (flags 0); returns the address."""
    cdef void *p = NULL
    with nogil:
        check(D.cuMemHostAlloc(&p, size, 0), b"cuMemHostAlloc")
    return <uintptr_t>p


def host_free(uintptr_t ptr):
    with nogil:
        check(D.cuMemFreeHost(<void *>ptr), b"cuMemFreeHost")


cdef int _host_address(obj, size_t nbytes, bint writable, void **out) except -1:
    """Address of host memory: an int, or a C-contiguous buffer of >= nbytes."""
    cdef Py_buffer view
    cdef int flags
    if isinstance(obj, int):
        out[0] = <void *><uintptr_t>obj
        return 0
    flags = PyBUF_C_CONTIGUOUS | (PyBUF_WRITABLE if writable else 0)
    PyObject_GetBuffer(obj, &view, flags)
    try:
        if <size_t>view.len < nbytes:
            raise ValueError(f"host buffer holds {view.len} bytes, {nbytes} needed")
        out[0] = view.buf
    finally:
        PyBuffer_Release(&view)   # the caller keeps obj alive for the copy
    return 0



def memcpy_htod(CUdeviceptr dptr, host, size_t nbytes, long reps=1):
    """``reps`` synchronous ``cuMemcpyHtoD`` of ``nbytes`` from ``host`` (an address or
    a buffer); returns the ns of each (timed up to ``cuCtxSynchronize``)."""
    return _memcpy(0, dptr, host, nbytes, reps)


def memcpy_dtoh(host, CUdeviceptr dptr, size_t nbytes, long reps=1):
    """``reps`` synchronous ``cuMemcpyDtoH`` of ``nbytes`` into ``host``; ns of each."""
    return _memcpy(1, dptr, host, nbytes, reps)


cdef list _memcpy(int direction, CUdeviceptr dptr, host, size_t nbytes, long reps):
    cdef void *h = NULL
    cdef CUresult rc
    cdef int64_t *out
    _host_address(host, nbytes, direction == 1, &h)
    out = <int64_t *>calloc(max(reps, 1), sizeof(int64_t))
    if out == NULL:
        raise MemoryError()
    try:
        with nogil:
            rc = bc_bench_memcpy(D, direction, dptr, h, nbytes, reps, out)
        check(rc, b"cuMemcpyDtoH" if direction else b"cuMemcpyHtoD")
        return _to_list(out, reps)
    finally:
        free(out)


# ------------------------------------------------------- Python callables
def time_calls(f, tuple args=(), long n=1000):
    """ns to call ``f(*args)`` ``n`` times in a C loop, with the benchmark clock."""
    cdef int64_t t0, t1
    cdef long i
    t0 = bc_now_ns()
    for i in range(n):
        f(*args)
    t1 = bc_now_ns()
    return t1 - t0


def time_batches(f, tuple args=(), long batches=10, long batch=100, sync=None):
    """Like launch_batches for a Python callable: the ns of each batch of ``batch``
    calls of ``f(*args)``; ``sync()`` after each batch is not timed."""
    cdef int64_t t0, t1
    cdef long i, j
    cdef list out = []
    for i in range(batches):
        t0 = bc_now_ns()
        for j in range(batch):
            f(*args)
        t1 = bc_now_ns()
        if sync is not None:
            sync()
        out.append(t1 - t0)
    return out


# ------------------------------------------------------------ staged copies
def bench_copy(direction, size_t nbytes, int repeats=5, *, device=None, stream=None):
    """Raw bandwidth of one direction, measured three ways in this process.

    Parameters
    ----------
    direction : {"htod", "dtoh"}
    nbytes : int
        Bytes per copy.
    repeats : int
        Timed copies per method (after one untimed warm-up each); the median counts.
    device, stream : optional
        Where to copy (default: current device; a stream created for the run).

    Returns
    -------
    tuple of float
        GB/s (1e9 bytes per second) for (staged from pageable memory, the driver's
        plain copy from the same pageable memory, the driver's copy from pinned
        memory). Each copy is timed from issue to completion on the stream with
        ``now_ns``, GIL released. The staged copy goes through ``staged_htod`` /
        ``staged_dtoh`` (src/barecuda/_staging.pxd), the entry points every
        barecuda copy uses. The pageable buffer is touched before timing; the staged
        result is checked byte for byte against the pinned one.
    """
    cdef bint htod
    if direction in ("htod", "h2d"):
        htod = True
    elif direction in ("dtoh", "d2h"):
        htod = False
    else:
        raise ValueError(f"direction must be 'htod' or 'dtoh', got {direction!r}")
    if nbytes == 0 or repeats < 1:
        raise ValueError("nbytes and repeats must be positive")
    cdef Device dev = device_of(device)
    dev.activate()
    cdef CUcontext ctx = dev.ctx
    cdef CUstream s = NULL
    cdef bint own_stream = stream is None
    cdef CUdeviceptr d = 0
    cdef char *pageable = NULL
    cdef char *check_buf = NULL
    cdef void *pinned = NULL
    cdef int64_t *times = <int64_t *>malloc(3 * repeats * sizeof(int64_t))
    cdef int64_t t0
    cdef int method, r
    cdef size_t i
    cdef CUresult rc = 0
    cdef const char *call = b""
    if times == NULL:
        raise MemoryError()
    try:
        if own_stream:
            check(D.cuStreamCreate(&s, 0), b"cuStreamCreate")
        else:
            stream_handle(stream, &s)
        check(D.cuMemAlloc(&d, nbytes), b"cuMemAlloc")
        check(D.cuMemHostAlloc(&pinned, nbytes, 0), b"cuMemHostAlloc")
        pageable = <char *>malloc(nbytes)
        check_buf = <char *>malloc(nbytes)
        if pageable == NULL or check_buf == NULL:
            raise MemoryError(f"could not allocate {nbytes} bytes of host memory")
        with nogil:
            for i in range(nbytes):
                pageable[i] = <char>((i * <size_t>2654435761) >> 13)
                (<char *>pinned)[i] = <char>((i * <size_t>40503) >> 7)
            memset(check_buf, 0, nbytes)
            if not htod:   # device holds the pinned pattern
                rc = D.cuMemcpyHtoD(d, pinned, nbytes)
        check(rc, b"cuMemcpyHtoD")
        for method in range(3):
            for r in range(-1, repeats):   # r == -1: warm-up
                with nogil:
                    t0 = bc_now_ns()
                    if method == 0:
                        if htod:
                            staged_htod(d, pageable, nbytes, s, ctx)
                        else:
                            staged_dtoh(pageable, d, nbytes, s, ctx, False)
                    elif method == 1:
                        if htod:
                            rc = D.cuMemcpyHtoDAsync(d, pageable, nbytes, s); call = b"cuMemcpyHtoDAsync"
                        else:
                            rc = D.cuMemcpyDtoHAsync(pageable, d, nbytes, s); call = b"cuMemcpyDtoHAsync"
                    else:
                        if htod:
                            rc = D.cuMemcpyHtoDAsync(d, pinned, nbytes, s); call = b"cuMemcpyHtoDAsync"
                        else:
                            rc = D.cuMemcpyDtoHAsync(pinned, d, nbytes, s); call = b"cuMemcpyDtoHAsync"
                    if rc == 0:
                        rc = D.cuStreamSynchronize(s)
                        if rc != 0:
                            call = b"cuStreamSynchronize"
                    if r >= 0:
                        times[method * repeats + r] = bc_now_ns() - t0
                check(rc, call)
            if method == 0:
                # the staged result must be right before its speed means anything
                with nogil:
                    if htod:
                        rc = D.cuMemcpyDtoH(check_buf, d, nbytes)
                        if rc == 0 and memcmp(check_buf, pageable, nbytes) != 0:
                            rc = -1
                    else:
                        if memcmp(pageable, pinned, nbytes) != 0:
                            rc = -1
                if rc == -1:
                    raise RuntimeError("bench_copy: the staged copy did not reproduce the source bytes")
                check(rc, b"cuMemcpyDtoH")
        result = []
        for method in range(3):
            ts = sorted(times[method * repeats + r] for r in range(repeats))
            med = ts[repeats // 2] if repeats % 2 else (ts[repeats // 2 - 1] + ts[repeats // 2]) / 2
            result.append(nbytes / med if med > 0 else float("inf"))   # bytes/ns == GB/s
        return tuple(result)
    finally:
        free(times)
        free(pageable)
        free(check_buf)
        if pinned != NULL:
            D.cuMemFreeHost(pinned)
        if d != 0:
            D.cuMemFree(d)
        if own_stream and s != NULL:
            D.cuStreamDestroy(s)
