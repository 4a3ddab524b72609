"""NCCL collectives on barecuda buffers and streams, with NCCL loaded at run time.

Owns: finding and loading ``libnccl.so.2`` (``load``, ``library_path``, ``version``),
the unique id (``UniqueId``, ``get_unique_id``), ``Communicator`` and its operations,
group calls (``group``), and the ``NcclError`` hierarchy. NCCL's ABI is declared in
include/barecuda/nccl_abi.h; no NCCL header or import library is needed to build.

Where libnccl.so.2 is looked for: ``_libfind.NCCL``, the finder every library shares
(``BARECUDA_NCCL``, a file or a folder, exclusively when set; ``cuda-pathfinder`` when
installed; the pip wheels ``nvidia-nccl-cu13`` / ``nvidia-nccl-cu12``; ``CUDA_HOME`` and
the system folders; the dynamic loader's own search).

barecuda never calls ``cuMulticastCreate`` and never changes the user's NCCL settings:
whether NCCL uses NVLink multicast is ``NCCL_NVLS_ENABLE``'s to say (docs/multi-gpu.md
says when to turn it off).
"""

from libc.string cimport memcpy
from libc.stdlib cimport malloc, free

from barecuda._dtype cimport resolve_dtype
from libc.stdint cimport uintptr_t
from barecuda._abi cimport CUstream, CUdeviceptr, bc_symbol_info
from barecuda._libopen cimport OpenedLibrary, opened_library
from barecuda._errors cimport bc_state_t, bc_driver_usable
from barecuda._loader cimport runtime_state, ensure_driver, set_current, forget_current
from barecuda._device cimport Device, device_of
from barecuda._stream cimport Stream, stream_handle, stream_use, stream_done
from barecuda._buffer cimport DeviceBuffer, use_begin, use_end
from barecuda._interop cimport bc_array, array_of, order_array

from barecuda._errors import BarecudaError, LibraryNotFoundError, _renamed
from barecuda import _libfind

cdef extern from "barecuda/nccl_abi.h" nogil:
    ctypedef struct ncclUniqueId:
        char internal[128]
    cdef struct ncclComm
    ctypedef ncclComm *ncclComm_t
    ctypedef CUstream bc_nccl_stream_t
    ctypedef enum ncclResult_t:
        ncclSuccess
        ncclInProgress
    ctypedef enum ncclDataType_t:
        pass
    ctypedef enum ncclRedOp_t:
        pass
    ctypedef struct bc_nccl_t:
        ncclResult_t (*ncclGetVersion)(int *version) nogil
        ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *uniqueId) nogil
        ncclResult_t (*ncclCommInitRank)(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) nogil
        ncclResult_t (*ncclCommInitAll)(ncclComm_t *comm, int ndev, const int *devlist) nogil
        ncclResult_t (*ncclCommDestroy)(ncclComm_t comm) nogil
        ncclResult_t (*ncclCommAbort)(ncclComm_t comm) nogil
        ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t comm, ncclResult_t *asyncError) nogil
        const char *(*ncclGetErrorString)(ncclResult_t result) nogil
        const char *(*ncclGetLastError)(ncclComm_t comm) nogil
        ncclResult_t (*ncclCommCount)(const ncclComm_t comm, int *count) nogil
        ncclResult_t (*ncclCommCuDevice)(const ncclComm_t comm, int *device) nogil
        ncclResult_t (*ncclCommUserRank)(const ncclComm_t comm, int *rank) nogil
        ncclResult_t (*ncclAllReduce)(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                      ncclRedOp_t op, ncclComm_t comm, bc_nccl_stream_t stream) nogil
        ncclResult_t (*ncclBroadcast)(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                      int root, ncclComm_t comm, bc_nccl_stream_t stream) nogil
        ncclResult_t (*ncclReduce)(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                   ncclRedOp_t op, int root, ncclComm_t comm, bc_nccl_stream_t stream) nogil
        ncclResult_t (*ncclAllGather)(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                      ncclComm_t comm, bc_nccl_stream_t stream) nogil
        ncclResult_t (*ncclReduceScatter)(const void *sendbuff, void *recvbuff, size_t recvcount,
                                          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                          bc_nccl_stream_t stream) nogil
        ncclResult_t (*ncclSend)(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                 ncclComm_t comm, bc_nccl_stream_t stream) nogil
        ncclResult_t (*ncclRecv)(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                 ncclComm_t comm, bc_nccl_stream_t stream) nogil
        ncclResult_t (*ncclGroupStart)() nogil
        ncclResult_t (*ncclGroupEnd)() nogil
    size_t BC_NCCL_NSYMBOLS
    const bc_symbol_info bc_nccl_symbols[]

cdef bc_state_t *ST = runtime_state()
cdef bc_nccl_t NC
# Symbols a libnccl may lack (older than 2.13); everything else is required.
_OPTIONAL = {"ncclGetLastError"}


# ------------------------------------------------------------------ errors
class NcclError(BarecudaError, RuntimeError):
    """An NCCL call failed. ``result`` is the ``ncclResult_t``, ``name`` its name,
    ``call`` the function, and the message includes NCCL's own (``ncclGetLastError``)."""

    def __init__(self, result, call="", message=""):
        self.result = result
        self.name = _RESULT_NAMES.get(result, f"ncclResult {result}")
        self.call = call
        self.detail = message
        super().__init__(f"{call}: {self.name}" + (f": {message}" if message else ""))

    def __reduce__(self):
        return (_rebuild_nccl_error, (self.result, self.call, self.detail))


def _rebuild_nccl_error(result, call, message):
    return nccl_error_class(result)(result, call, message)


class NcclNotFoundError(LibraryNotFoundError):
    """libnccl.so.2 could not be found or loaded; ``tried`` lists the candidates and why
    each failed."""


class NcclUnhandledCudaError(NcclError):
    """ncclUnhandledCudaError: a CUDA call inside NCCL failed."""


class NcclSystemError(NcclError):
    """ncclSystemError: a system call (socket, memory, ...) failed."""


class NcclInternalError(NcclError):
    """ncclInternalError: an NCCL bug or corrupted state."""


class NcclInvalidArgument(NcclError, ValueError):
    """ncclInvalidArgument: a bad argument (pointer, count, rank, ...)."""


class NcclInvalidUsage(NcclError):
    """ncclInvalidUsage: calls in the wrong order or mismatched across ranks."""


class NcclRemoteError(NcclError):
    """ncclRemoteError: a remote peer failed or the network went away."""


class NcclInProgress(NcclError):
    """ncclInProgress: a non-blocking operation has not finished."""


_RESULT_NAMES = {
    0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
    4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress",
}
_RESULT_CLASSES = {
    1: NcclUnhandledCudaError, 2: NcclSystemError, 3: NcclInternalError, 4: NcclInvalidArgument,
    5: NcclInvalidUsage, 6: NcclRemoteError, 7: NcclInProgress,
}


def nccl_error_class(result):
    """The NcclError subclass raised for ``ncclResult_t`` ``result``."""
    return _RESULT_CLASSES.get(result, NcclError)


cdef int _raise(int rc, str call, ncclComm_t comm) except -1:
    msg = ""
    cdef const char *s
    if NC.ncclGetErrorString != NULL:
        s = NC.ncclGetErrorString(<ncclResult_t>rc)
        if s != NULL:
            msg = s.decode("utf-8", "replace")
    if NC.ncclGetLastError != NULL:
        s = NC.ncclGetLastError(comm)
        if s != NULL and s[0] != 0:
            last = s.decode("utf-8", "replace")
            msg = f"{msg} ({last})" if msg else last
    raise nccl_error_class(rc)(rc, call, msg)


cdef inline int _ck(int rc, str call, ncclComm_t comm) except -1:
    if rc == ncclSuccess:
        return 0
    return _raise(rc, call, comm)


# ------------------------------------------------------------------ loading
cdef OpenedLibrary _lib = opened_library(_libfind.NCCL, bc_nccl_symbols, BC_NCCL_NSYMBOLS, &NC, _OPTIONAL,
                                         "NCCL older than 2.7?", NcclNotFoundError)
candidates = _lib.candidates        # load(): libnccl.so.2, once; NcclNotFoundError when none will do
load = _lib.load
is_available = _lib.is_available
library_path = _lib.library_path


def version():
    """NCCL's version as ``(major, minor, patch)`` (loads it)."""
    cdef int v = 0
    _lib.open()
    _ck(NC.ncclGetVersion(&v), "ncclGetVersion", NULL)
    if v >= 10000:          # 2.9 and later: major*10000 + minor*100 + patch
        return (v // 10000, (v % 10000) // 100, v % 100)
    return (v // 1000, (v % 1000) // 100, v % 100)


cdef int _bind(Device d) except -1:
    """Make d's context current for an NCCL call. NCCL moves the thread's current
    device itself (through the CUDA runtime), so barecuda's cached binding is dropped
    and set again -- before the call, and (forget_current) after it."""
    d.activate()
    forget_current()
    set_current(d.ctx)
    return 0


cdef int _ready() except -1:
    if _lib.handle == NULL:
        _lib.open()
    return 0


# ------------------------------------------------------------------ dtypes / ops
# NCCL's data type of each dtype barecuda knows (_dtype.pyx's canonical names: one table
# of names, so "float" is float64 and "int" is int64 here too, as in numpy and every
# other barecuda call), with its size in bytes (the fp8 types are NCCL's only).
_NCCL_TYPES = {
    "int8": (0, 1), "uint8": (1, 1), "int32": (2, 4), "uint32": (3, 4), "int64": (4, 8), "uint64": (5, 8),
    "float16": (6, 2), "float32": (7, 4), "float64": (8, 8), "bfloat16": (9, 2),
    "float8_e4m3fn": (10, 1), "float8_e5m2": (11, 1),
}
# NCCL's own spellings of two of them (ncclChar, and fp8 e4m3 without "fn").
_NCCL_SPELLINGS = {"char": "int8", "float8_e4m3": "float8_e4m3fn"}
_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}

#: The dtype names every operation accepts (``dtype=`` or the buffer's own dtype);
#: any spelling barecuda's dtype table resolves to one of them works too.
DTYPES = tuple(_NCCL_TYPES)
#: The reduction operations.
OPS = ("sum", "prod", "max", "min", "avg")


cdef tuple _dtype_of(object dtype):
    """(NCCL data type, itemsize) of `dtype`: a name of DTYPES, a torch dtype, or any
    spelling of barecuda's dtype table (numpy's meanings: "float" is float64)."""
    key = str(dtype).lower() if not isinstance(dtype, str) else dtype.lower()
    if key.startswith("torch."):
        key = key[6:]
    found = _NCCL_TYPES.get(_NCCL_SPELLINGS.get(key, key))
    if found is not None:
        return found
    try:
        name = resolve_dtype(dtype)[0]
    except TypeError:
        name = None
    found = _NCCL_TYPES.get(name)
    if found is None:
        raise TypeError(f"NCCL has no data type for {dtype!r}; supported: {', '.join(DTYPES)}")
    return found


cdef int _op_of(object op) except -1:
    if isinstance(op, str):
        try:
            return _OPS[op.lower()]
        except KeyError:
            pass
    raise ValueError(f"unknown reduction op {op!r}; supported: {', '.join(OPS)}")


cdef int _op_for(object op, int nranks) except -1:
    # With one rank, avg is the identity, exactly as sum is. NCCL before 2.29.7 runs a
    # one-rank avg through its oneRankReduce kernel, whose per-block split rounds down and
    # leaves the last (count % blocks) elements unwritten (NVIDIA/nccl issue 1950; seen
    # here as the last float64 of 4099 coming back as garbage); one-rank sum is a plain
    # copy. So one-rank avg is sent as sum, which gives the same values on every version.
    cdef int o = _op_of(op)
    if o == _OPS["avg"] and nranks == 1:
        return _OPS["sum"]
    return o


# The collectives, in the order of _CALLS; one helper (Communicator._run) issues all.
cdef enum:
    C_ALL_REDUCE = 0
    C_BROADCAST = 1
    C_REDUCE = 2
    C_ALL_GATHER = 3
    C_REDUCE_SCATTER = 4
    C_SEND = 5
    C_RECV = 6

_CALLS = ("ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter", "ncclSend",
          "ncclRecv")
_METHODS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "send", "recv")


cdef int _whole(const bc_array *a, str what, int isz) except -1:
    if a.nbytes % <size_t>isz:
        raise ValueError(f"{what} has {a.nbytes} bytes, not a whole number of {isz}-byte elements")
    return 0


cdef object _read(object obj, str what, CUstream s, bc_array *a):
    """The one foreign-array reader (_interop.array_of) for buffer `what`; its dtype name."""
    try:
        return array_of(obj, s, a)
    except TypeError as e:
        raise TypeError(f"{what}: expected a DeviceBuffer or a device array (torch/CuPy tensor, "
                        f"__cuda_array_interface__, DLPack), not {type(obj).__name__}: {e}") from None


# ------------------------------------------------------------------ unique id
class UniqueId:
    """The 128-byte id that ties the ranks of one communicator together. Make it once
    (:func:`get_unique_id`, on one rank), send it to every rank (it pickles; ``bytes(uid)``
    gives the raw bytes, ``UniqueId(raw)`` takes them back)."""

    __slots__ = ("_data",)

    def __init__(self, data):
        data = bytes(data)
        if len(data) != 128:
            raise ValueError(f"an NCCL unique id is 128 bytes, not {len(data)}")
        self._data = data

    @property
    def data(self):
        """The id's 128 raw bytes."""
        return self._data

    def __bytes__(self):
        return self.data

    def __eq__(self, other):
        return isinstance(other, UniqueId) and other.data == self.data

    def __hash__(self):
        return hash(self.data)

    def __reduce__(self):
        return (UniqueId, (self.data,))

    def __repr__(self):
        return f"<barecuda.nccl.UniqueId {self.data[:8].hex()}...>"


def get_unique_id():
    """A new :class:`UniqueId` (``ncclGetUniqueId``; opens NCCL's bootstrap socket here)."""
    cdef ncclUniqueId uid
    cdef int rc
    _ready()
    with nogil:
        rc = NC.ncclGetUniqueId(&uid)
    _ck(rc, "ncclGetUniqueId", NULL)
    return UniqueId((<char *>uid.internal)[:128])


# ------------------------------------------------------------------ groups
def group_start():
    """``ncclGroupStart``: the following operations are issued together at :func:`group_end`."""
    _ready()
    _ck(NC.ncclGroupStart(), "ncclGroupStart", NULL)


def group_end():
    """``ncclGroupEnd``."""
    cdef int rc
    _ready()
    with nogil:
        rc = NC.ncclGroupEnd()
        forget_current()
    _ck(rc, "ncclGroupEnd", NULL)


class group:
    """Context manager around ``ncclGroupStart`` / ``ncclGroupEnd`` (nestable).

    Needed when one thread drives several ranks (:meth:`Communicator.for_devices`), and
    to pair :meth:`Communicator.send` / :meth:`Communicator.recv` without deadlock::

        with bc.nccl.group():
            for comm, buf in zip(comms, bufs):
                comm.all_reduce(buf)
    """

    def __enter__(self):
        group_start()
        return self

    def __exit__(self, *exc):
        group_end()
        return False


# ------------------------------------------------------------------ communicator
cdef class Communicator:
    """One rank of an NCCL communicator, bound to one device.

    Parameters
    ----------
    rank : int
        This process's rank, ``0 <= rank < nranks``.
    nranks : int
    unique_id : UniqueId or bytes
        The same id on every rank (from :func:`get_unique_id` on one of them).
    device : Device or int, optional
        The GPU this rank uses (default: the current device).
    abort_on_error : bool
        When an operation fails, abort the communicator (``ncclCommAbort``) before
        raising, so that the other ranks are not left waiting. Default True.

    Notes
    -----
    ``ncclCommInitRank`` blocks until all ``nranks`` ranks have joined. For every
    local GPU in one process use :meth:`for_devices`.
    Operations take DeviceBuffers (or device arrays: torch/CuPy tensors, anything with
    ``__cuda_array_interface__`` or DLPack) on this communicator's device, and a
    ``stream`` (barecuda Stream, ``__cuda_stream__`` object, int handle; None: the
    legacy default stream). They are asynchronous on that stream.
    """
    cdef ncclComm_t comm
    cdef readonly int rank
    """This communicator's rank (0 to ``nranks - 1``)."""
    cdef readonly int nranks
    """The number of ranks in the communicator."""
    cdef readonly Device device
    """The Device this rank runs its collectives on."""
    cdef public bint abort_on_error
    cdef bint _owned

    def __cinit__(self):
        self.comm = NULL
        self._owned = False

    def __init__(self, int rank, int nranks, unique_id, device=None, *, bint abort_on_error=True):
        cdef ncclUniqueId uid
        cdef ncclComm_t c = NULL
        cdef int rc
        if nranks < 1:
            raise ValueError(f"nranks must be >= 1, not {nranks}")
        if not 0 <= rank < nranks:
            raise ValueError(f"rank {rank} is outside [0, {nranks})")
        if not isinstance(unique_id, UniqueId):
            unique_id = UniqueId(unique_id)
        ensure_driver(ST)
        cdef Device dev = device_of(device)
        _ready()
        memcpy(uid.internal, <char *>unique_id.data, 128)
        _bind(dev)
        with nogil:
            rc = NC.ncclCommInitRank(&c, nranks, uid, rank)
            forget_current()
        _ck(rc, "ncclCommInitRank", NULL)
        self.comm = c
        self._owned = True
        self.rank = rank
        self.nranks = nranks
        self.device = dev
        self.abort_on_error = abort_on_error

    @staticmethod
    def for_devices(devices=None, *, bint abort_on_error=True):
        """One Communicator per device, all in this process (``ncclCommInitAll``).

        Parameters
        ----------
        devices : sequence of Device or int, optional
            Default: every visible device. Rank i is ``devices[i]``.

        Returns
        -------
        list of Communicator
            Drive them from one thread inside :class:`group`.
        """
        cdef int n, i, rc
        cdef ncclComm_t *comms
        cdef int *devlist
        ensure_driver(ST)
        if devices is None:
            from barecuda._device import device_count
            devices = list(range(device_count()))
        devs = [device_of(d) for d in devices]
        n = len(devs)
        if n == 0:
            raise ValueError("for_devices needs at least one device")
        if len({(<Device>d).ordinal for d in devs}) != n:
            raise ValueError("a device is listed twice")
        _ready()
        for d in devs:
            (<Device>d).activate()
        forget_current()
        comms = <ncclComm_t *>malloc(n * sizeof(ncclComm_t))
        devlist = <int *>malloc(n * sizeof(int))
        if comms == NULL or devlist == NULL:
            free(comms)
            free(devlist)
            raise MemoryError()
        try:
            for i in range(n):
                devlist[i] = (<Device>devs[i]).ordinal
                comms[i] = NULL
            with nogil:
                rc = NC.ncclCommInitAll(comms, n, devlist)
                forget_current()
            _ck(rc, "ncclCommInitAll", NULL)
            out = []
            for i in range(n):
                c = Communicator.__new__(Communicator)
                (<Communicator>c).comm = comms[i]
                (<Communicator>c)._owned = True
                (<Communicator>c).rank = i
                (<Communicator>c).nranks = n
                (<Communicator>c).device = <Device>devs[i]
                (<Communicator>c).abort_on_error = abort_on_error
                out.append(c)
            return out
        finally:
            free(comms)
            free(devlist)

    def __dealloc__(self):
        if self.comm != NULL and self._owned and bc_driver_usable(ST) and NC.ncclCommDestroy != NULL:
            NC.ncclCommDestroy(self.comm)
            forget_current()
        self.comm = NULL

    cdef int _open(self) except -1:
        if self.comm == NULL:
            raise ValueError("operation on a closed or aborted Communicator")
        return 0

    cdef int _end(self, bint abort) except -1:
        """close() / abort(): forget the handle first (so a failure cannot be retried on a
        half-destroyed communicator), then ncclCommAbort or ncclCommDestroy on its device."""
        cdef ncclComm_t c = self.comm
        cdef int rc
        if c == NULL:
            return 0
        self.comm = NULL
        _bind(self.device)
        with nogil:
            rc = NC.ncclCommAbort(c) if abort else NC.ncclCommDestroy(c)
            forget_current()
        _ck(rc, "ncclCommAbort" if abort else "ncclCommDestroy", NULL)
        return 0

    def close(self):
        """``ncclCommDestroy`` (waits for this rank's queued operations). Idempotent."""
        self._end(False)

    def abort(self):
        """``ncclCommAbort``: drop the communicator at once, without waiting for the
        other ranks or queued work (use after an error). Idempotent."""
        self._end(True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self.abort_on_error:
            self.abort()
        else:
            self.close()

    @property
    def is_closed(self):
        """True once :meth:`close` or :meth:`abort` released the communicator."""
        return self.comm == NULL

    closed = _renamed("Communicator.closed", "is_closed")   # the old spelling, for one release

    @property
    def size(self):
        """The number of ranks (same as ``nranks``)."""
        return self.nranks

    def count(self):
        """``ncclCommCount``: the number of ranks, as NCCL reports it."""
        cdef int v = 0
        self._open()
        _ck(NC.ncclCommCount(self.comm, &v), "ncclCommCount", self.comm)
        return v

    def cu_device(self):
        """``ncclCommCuDevice``: the device ordinal, as NCCL reports it."""
        cdef int v = 0
        self._open()
        _ck(NC.ncclCommCuDevice(self.comm, &v), "ncclCommCuDevice", self.comm)
        return v

    def user_rank(self):
        """``ncclCommUserRank``: this rank, as NCCL reports it."""
        cdef int v = 0
        self._open()
        _ck(NC.ncclCommUserRank(self.comm, &v), "ncclCommUserRank", self.comm)
        return v

    def check_async_error(self):
        """Raise the error NCCL found in asynchronous work (``ncclCommGetAsyncError``),
        aborting first when ``abort_on_error``; returns None when all is well."""
        cdef ncclResult_t r = ncclSuccess
        self._open()
        _ck(NC.ncclCommGetAsyncError(self.comm, &r), "ncclCommGetAsyncError", self.comm)
        if r != ncclSuccess and r != ncclInProgress:
            self._fail(<int>r, "ncclCommGetAsyncError")

    cdef int _fail(self, int rc, str call) except -1:
        cdef ncclComm_t c
        try:
            _raise(rc, call, self.comm)
        finally:
            if self.abort_on_error and self.comm != NULL:
                c = self.comm
                self.comm = NULL
                NC.ncclCommAbort(c)
                forget_current()
        return -1

    cdef int _check_rank(self, int r, str what) except -1:
        if not 0 <= r < self.nranks:
            raise ValueError(f"{what} {r} is outside [0, {self.nranks})")
        return 0

    cdef int _on_device(self, const bc_array *a, str what) except -1:
        if a.ordinal != self.device.ordinal:
            raise ValueError(f"{what} is on device {a.ordinal}, but this communicator (rank {self.rank}) "
                             f"uses device {self.device.ordinal}")
        return 0

    cdef object _run(self, int which, object sendbuf, object recvbuf, object op, int root, object stream,
                     object dtype):
        """Every collective: read both buffers (one reader, no protocol dict for torch/CuPy),
        check devices, type, sizes and ranks, then order the stream, then one NCCL call.
        ``recvbuf`` None: in place (``recv``: the only buffer is ``recvbuf``). Returns
        the receiving object as given (None for ``send``)."""
        cdef bc_array sa, ra
        cdef CUstream s = NULL
        cdef int rc = 0, o = 0, dti, isz
        cdef size_t count, n = <size_t>self.nranks
        cdef bint p2p = which == C_SEND or which == C_RECV
        name = _METHODS[which]
        self._open()
        if which in (C_ALL_REDUCE, C_REDUCE, C_REDUCE_SCATTER):
            o = _op_for(op, self.nranks)
        if which == C_BROADCAST or which == C_REDUCE:
            self._check_rank(root, "root")
        elif p2p:
            self._check_rank(root, "peer")
        if sendbuf is None and recvbuf is None:
            raise ValueError(f"{name} needs sendbuf or recvbuf")
        if which == C_BROADCAST and sendbuf is None and self.rank == root:
            raise ValueError("the root rank must pass sendbuf")
        stream_handle(stream, &s)
        swhat, rwhat = ("buf", "buf") if p2p else ("sendbuf", "recvbuf")
        sdt = _read(sendbuf, swhat, s, &sa) if sendbuf is not None else None
        rdt = _read(recvbuf, rwhat, s, &ra) if recvbuf is not None and recvbuf is not sendbuf else sdt
        if recvbuf is None or recvbuf is sendbuf:
            ra = sa
        elif sendbuf is None:
            sa = ra
            sdt = rdt
        self._on_device(&sa, swhat)
        self._on_device(&ra, rwhat)
        # the buffer whose elements NCCL counts: the smaller one, or the only one
        by_recv = which in (C_BROADCAST, C_REDUCE_SCATTER, C_RECV)
        if dtype is None and sdt is not None and rdt is not None and sdt != rdt:
            raise TypeError(f"{name}: sendbuf is {sdt} but recvbuf is {rdt}; pass dtype= to reinterpret")
        dt, isz = _dtype_of((rdt if by_recv else sdt) if dtype is None else dtype)
        _whole(&sa, swhat, isz)
        _whole(&ra, rwhat, isz)
        if which == C_ALL_GATHER and ra.nbytes != sa.nbytes * n:
            raise ValueError(f"all_gather: recvbuf must hold nranks x sendbuf = {n} x {sa.nbytes} bytes, "
                             f"not {ra.nbytes}")
        if which == C_REDUCE_SCATTER and sa.nbytes != ra.nbytes * n:
            raise ValueError(f"reduce_scatter: sendbuf must hold nranks x recvbuf = {n} x {ra.nbytes} bytes, "
                             f"not {sa.nbytes}")
        if which <= C_REDUCE and ra.nbytes != sa.nbytes:
            raise ValueError(f"{name}: recvbuf has {ra.nbytes} bytes, sendbuf {sa.nbytes}")
        if ra.readonly and which != C_SEND:
            raise ValueError(f"{name}: {rwhat} is read-only")
        count = (ra.nbytes if by_recv else sa.nbytes) // <size_t>isz
        dti = dt
        # Only now anything is queued: the consumer stream waits for the producers' work.
        if sendbuf is not None:
            order_array(sendbuf, &sa, self.device, s)
        if recvbuf is not None and recvbuf is not sendbuf:
            order_array(recvbuf, &ra, self.device, s)
        _bind(self.device)
        # Held over the GIL-free call: a close() of either buffer or of the stream on
        # another thread waits for it (docs/architecture.md, "Close versus in-flight use").
        cdef DeviceBuffer o1 = None
        cdef DeviceBuffer o2 = None
        cdef Stream so = None
        try:
            if type(sendbuf) is DeviceBuffer:
                o1 = use_begin(<DeviceBuffer>sendbuf)
            if type(recvbuf) is DeviceBuffer and recvbuf is not sendbuf:
                o2 = use_begin(<DeviceBuffer>recvbuf)
            so = stream_use(stream)
            with nogil:
                if which == C_ALL_REDUCE:
                    rc = NC.ncclAllReduce(<const void *>sa.ptr, <void *>ra.ptr, count, <ncclDataType_t>dti,
                                          <ncclRedOp_t>o, self.comm, s)
                elif which == C_BROADCAST:
                    rc = NC.ncclBroadcast(<const void *>sa.ptr, <void *>ra.ptr, count, <ncclDataType_t>dti, root,
                                          self.comm, s)
                elif which == C_REDUCE:
                    rc = NC.ncclReduce(<const void *>sa.ptr, <void *>ra.ptr, count, <ncclDataType_t>dti,
                                       <ncclRedOp_t>o, root, self.comm, s)
                elif which == C_ALL_GATHER:
                    rc = NC.ncclAllGather(<const void *>sa.ptr, <void *>ra.ptr, count, <ncclDataType_t>dti,
                                          self.comm, s)
                elif which == C_REDUCE_SCATTER:
                    rc = NC.ncclReduceScatter(<const void *>sa.ptr, <void *>ra.ptr, count, <ncclDataType_t>dti,
                                              <ncclRedOp_t>o, self.comm, s)
                elif which == C_SEND:
                    rc = NC.ncclSend(<const void *>sa.ptr, count, <ncclDataType_t>dti, root, self.comm, s)
                else:
                    rc = NC.ncclRecv(<void *>ra.ptr, count, <ncclDataType_t>dti, root, self.comm, s)
                forget_current()
        finally:
            stream_done(so)
            use_end(o2)
            use_end(o1)
        if rc != ncclSuccess:
            self._fail(rc, _CALLS[which])
        if which == C_SEND:
            return None
        return sendbuf if recvbuf is None else recvbuf

    def all_reduce(self, sendbuf, recvbuf=None, op="sum", *, stream=None, dtype=None):
        """``recvbuf = op(sendbuf of every rank)`` (``ncclAllReduce``). ``recvbuf``
        None: in place. Both the same size. Returns the receiving buffer."""
        return self._run(C_ALL_REDUCE, sendbuf, recvbuf, op, 0, stream, dtype)

    def broadcast(self, sendbuf, recvbuf=None, int root=0, *, stream=None, dtype=None):
        """Copy ``sendbuf`` of rank ``root`` into ``recvbuf`` of every rank
        (``ncclBroadcast``). ``recvbuf`` None: in place. Off the root, ``sendbuf`` may
        be None when ``recvbuf`` is given."""
        return self._run(C_BROADCAST, sendbuf, recvbuf, None, root, stream, dtype)

    def reduce(self, sendbuf, recvbuf=None, op="sum", int root=0, *, stream=None, dtype=None):
        """``recvbuf`` of rank ``root`` = ``op(sendbuf of every rank)`` (``ncclReduce``).
        ``recvbuf`` None: in place; off the root it is not written."""
        return self._run(C_REDUCE, sendbuf, recvbuf, op, root, stream, dtype)

    def all_gather(self, sendbuf, recvbuf, *, stream=None, dtype=None):
        """``recvbuf`` = the ``sendbuf`` of every rank, concatenated in rank order
        (``ncclAllGather``). ``recvbuf`` is ``nranks`` times larger; in place when
        ``sendbuf`` is the rank-th slice of ``recvbuf``."""
        if recvbuf is None:
            raise ValueError("all_gather needs recvbuf (nranks times the size of sendbuf)")
        return self._run(C_ALL_GATHER, sendbuf, recvbuf, None, 0, stream, dtype)

    def reduce_scatter(self, sendbuf, recvbuf, op="sum", *, stream=None, dtype=None):
        """Reduce ``sendbuf`` over all ranks and leave slice ``rank`` of the result in
        ``recvbuf`` (``ncclReduceScatter``). ``sendbuf`` is ``nranks`` times larger."""
        if recvbuf is None:
            raise ValueError("reduce_scatter needs recvbuf (1/nranks of the size of sendbuf)")
        return self._run(C_REDUCE_SCATTER, sendbuf, recvbuf, op, 0, stream, dtype)

    def send(self, buf, int peer, *, stream=None, dtype=None):
        """Send ``buf`` to rank ``peer`` (``ncclSend``); pair with ``recv`` there, and
        put both directions of an exchange inside one :class:`group`."""
        if buf is None:
            raise ValueError("send needs buf")
        self._run(C_SEND, buf, buf, None, peer, stream, dtype)

    def recv(self, buf, int peer, *, stream=None, dtype=None):
        """Receive into ``buf`` from rank ``peer`` (``ncclRecv``). Returns ``buf``."""
        if buf is None:
            raise ValueError("recv needs buf")
        return self._run(C_RECV, None, buf, None, peer, stream, dtype)

    def __repr__(self):
        state = "closed" if self.comm == NULL else f"rank {self.rank}/{self.nranks}"
        dev = self.device.ordinal if self.device is not None else "?"
        return f"<barecuda.nccl.Communicator {state} device={dev}>"
