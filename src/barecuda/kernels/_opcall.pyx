"""The op fast path: an op function's repeated call is one launch, not Python doing work.

Owns ``Op`` (what ``@op`` turns a family module's prep function into) and its memo.
A family module writes each op as a Python function that checks its arguments and
returns the launch it wants, ``(kernel, grid, block, args, result)`` (optionally a
sixth item, the dynamic shared memory; ``result`` may be None: nothing to return), without
launching (a falsy ``grid``: the function did its work itself, nothing to launch or record;
a ``_cublaslt.Matmul`` as ``kernel``: the function ran that cuBLASLt call, recorded and
reissued by ``_oplt``); ``@op`` makes the public
op of it. The first call with a given *signature* runs that function (every check,
every error, exactly as written), launches, and records in a small per-op memo what
the checks depended on and how the launch was built from the arguments. A later call
with the same signature skips the Python function: it reads the signature in C,
finds the record, and issues the recorded launch with this call's arrays (a few
hundred ns on top of the raw launch) from the record's pre-packed parameter block
(``_issue_direct``; through ``Kernel.launch``'s C entry while a capture runs or launches
release the GIL). The record the last hit used is checked first, reading and comparing
each argument in one pass (``_opkey.match_call``); the other records only when it
differs (``read_call``, then ``keys_match`` per record). The binding of the arguments to
the parameters is kept for the next call with the same keyword-name tuple and positional
count (``_bind``).

The signature (what every check of a family module reads; anything else is not
cached and takes the Python path every time; read and compared by ``_opkey``, inline
from its ``.pxd`` on the hit path):
- each array argument (a DeviceBuffer, or a tensor whose type publishes DLPack's C
  exchange API, e.g. ``torch.Tensor`` from PyTorch 2.10): its exact type, dtype,
  shape, strides, device, read-only flag and the low 4 bits of its address (every
  alignment rule, the 16-byte vector paths included); a closed DeviceBuffer never
  matches, so the Python path raises as before;
- which array arguments are the same object and which have the same address (the
  ``out is x`` / ``residual_out is residual`` rules);
- a ``QuantWeight`` (the class ``_opkey.keyed_weight_class`` registers; immutable): its
  format and shape by value and its ``data`` DeviceBuffer as an array argument (launch
  arguments that are that buffer, or addresses in it, map onto it);
- each other argument: None, or an exact bool/int/float/str, or a tuple of exact ints, by value; ``stream`` is not
  in the key (no check reads it: it is passed on to Kernel.launch, and to the allocation
  of a new output).
The record: the kernel (held weakly; gone or its module closed: the record is dropped), grid, block, shared
memory; each launch argument as a constant (the packed scalars), "array argument i"
(its address written into the slot, the buffer's use noted on the stream and a tensor's
stream ordered before ours, as the launch packer does), "array i's address + c"
(a derived pointer, e.g. silu_mul's up half) or "new output j" (an ``out=None``
allocation, made again on each call as ``_buffer.empty`` made it, by its allocation
call ``new_buffer`` with the recorded shape and dtype (``_new_like``): heap work the caller
asked for); the result the same way. A call whose arguments cannot be keyed, or
whose prep result cannot be mapped unambiguously onto the arguments, is simply not
recorded. The op returns the caller's own object for an output the caller gave
(``out=``, ``residual_out=``, in place), on both paths.

Why a vectorcall object and not a ``def``: a Python function around the C memo
costs about as much as the whole budget (the op must issue within 1.10x the raw
``cuLaunchKernel``); ``Op`` is called through CPython's vectorcall slot, so the
arguments are read where the caller left them (no tuple, no dict), as
``Kernel.launch`` does. Its ``__dict__`` carries ``plan``, ``__doc__``,
``__wrapped__`` (``inspect.signature`` and ``help`` show the family's function).
"""
import ctypes
import sys
import types
import weakref

cimport cython
from cpython.object cimport PyObject, PyTypeObject
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.long cimport PyLong_FromUnsignedLongLong
from cpython.weakref cimport PyWeakref_NewRef, PyWeakref_GetObject
from libc.stdint cimport uint64_t, int64_t
from libc.string cimport memset, memcpy

from barecuda._abi cimport CUstream, CUdeviceptr, bc_driver_t
from barecuda._loader cimport driver_table
from barecuda._buffer cimport DeviceBuffer, KIND_CLOSED, note_use, new_buffer
from barecuda._dtype cimport nbytes_of
from barecuda._stream cimport Stream, stream_handle
from barecuda._pack cimport bc_launch_rec, bc_store_int, BC_SMALL_ARGBYTES, BC_SMALL_NPARAMS
from barecuda._signature cimport bc_kind_is_pointer, BC_K_F32
from barecuda._launch cimport Kernel, check_dims, pack_slot, issue, capture_hook_slot, releases_gil_slot
from barecuda._interop cimport tensor_pointer, bc_stream_memo
from barecuda.kernels._opkey cimport (pfact, pkey, P_NONE, P_BUF, P_DLX, P_VAL, P_NOKEY, P_QW, read_arg,
                                      read_call, keys_match, match_call, make_keys)
from barecuda.kernels._oplt cimport LtCall, lt_call, lt_hit, lt_noted
from barecuda.kernels._cublaslt cimport Matmul as LtMatmul
from barecuda._launch cimport capture_hook_t


__all__ = ["Op", "op", "stats", "clear", "set_direct"]

cdef extern from "Python.h":
    PyTypeObject *Py_TYPE(PyObject *o)
    ctypedef PyObject *(*vectorcallfunc)(PyObject *, PyObject *const *, size_t, PyObject *)
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    object PyObject_Vectorcall(object callable, PyObject **args, size_t nargsf, PyObject *kwnames)
    object PyVectorcall_Call(object callable, object tuple, object dict)
    unsigned long Py_TPFLAGS_HAVE_VECTORCALL
    ctypedef struct _TypeSlots "PyTypeObject":
        Py_ssize_t tp_vectorcall_offset
        unsigned long tp_flags
    void PyType_Modified(PyTypeObject *t)
    bint PyLong_CheckExact(object o)

cdef enum:
    MAXP = 16       # parameters of an op
    MAXE = 8        # records per op
    MAXA = 40       # launch arguments

cdef bc_driver_t *D = driver_table()

cdef enum:          # launch-argument and result sources
    A_CONST = 0     # the recorded object
    A_PARAM = 1     # the caller's array argument
    A_ADDR = 2      # the caller's array argument's address + offset (an int)
    A_ALLOC = 3     # a new output


@cython.final
cdef class _Record:
    cdef pkey keys[MAXP]
    cdef object kernel       # a weak reference: the registry owns kernels (a reset unloads them)
    cdef object grid
    cdef object block
    cdef object smem
    cdef Py_ssize_t nargs
    cdef int asrc[MAXA]
    cdef int aref[MAXA]
    cdef int64_t aoff[MAXA]
    cdef PyObject *aconst[MAXA]
    cdef int nres            # 1: one result; 2: a pair
    cdef int rsrc[2]
    cdef int rref[2]
    cdef int nalloc
    cdef object alloc        # tuple of (nbytes, device ordinal, shape, dtype key, itemsize) (_new_like)
    cdef list keep
    # the direct issue (see _issue_direct): the constants packed once, the geometry parsed
    # once, and the slots a call writes listed (nptr entries: slot offset, source, argument,
    # offset), so that a hit touches a few cache lines of the record
    cdef bint direct
    cdef int nptr
    cdef int argbytes
    cdef unsigned int dgrid[3]
    cdef unsigned int dblock[3]
    cdef unsigned int dsmem
    cdef unsigned int pslot[MAXA]
    cdef int psrc[MAXA]
    cdef int pref[MAXA]
    cdef int64_t poff[MAXA]
    cdef unsigned short soff[MAXA]                 # every parameter's offset in the block
    cdef char block_bytes[BC_SMALL_ARGBYTES]
    cdef LtCall lt                                 # a cuBLASLt call (_oplt), else None: kernel unused


# ------------------------------------------------------------------ the op object
cdef object _S_STREAM = sys.intern("stream")
cdef object _S_SMEM = sys.intern("shared_mem")
cdef tuple _KW_S = (_S_STREAM,)
cdef tuple _KW_SM = (_S_STREAM, _S_SMEM)
cdef object _launch = None          # Kernel.launch (the method descriptor of its C entry)
cdef bint _direct = True           # set_direct(False): every hit through Kernel.launch (the benchmark's row)
cdef Py_ssize_t _hits = 0
cdef Py_ssize_t _misses = 0
cdef Py_ssize_t _records = 0
cdef object _MISS = object()         # _lt_hit: the recorded cuBLASLt call cannot be issued here
cdef object _ops = weakref.WeakSet()   # every Op made (clear(), _FamilyModule)
cdef capture_hook_t *_hook_slot = capture_hook_slot()    # _launch's switches, read on each hit
cdef bint *_gil_slot = releases_gil_slot()


@cython.final
cdef class Op:
    """An op function with a memo of call signatures (see the module docstring).
    Calling it is calling the family's function (same arguments, errors, result),
    launching what that function returned."""
    cdef vectorcallfunc vcall
    cdef readonly object prep
    """The family's function: the checks, returning (kernel, grid, block, args, result)."""
    cdef int nparams
    cdef int npos                   # positional-or-keyword parameters
    cdef int stream_at              # index of `stream` among the parameters, -1 if none
    cdef PyObject *names[MAXP]      # parameter names (interned; kept by `_names`)
    cdef PyObject *defaults[MAXP]   # default per parameter, NULL where required (kept by `_defaults`)
    cdef tuple _names
    cdef list _defaults
    cdef list records               # most recently used first
    cdef _Record mru                # the record the last hit used (or the last made): checked first
    cdef object kw_last             # the keyword names (a tuple) of the last call bound here ...
    cdef Py_ssize_t kw_nargs        # ... with this many positional arguments ...
    cdef signed char kw_at[MAXP]    # ... and the parameter each keyword bound to
    cdef Py_ssize_t min_pos         # positional arguments that bind every required parameter (no keywords)
    cdef Py_ssize_t misses_in_row
    cdef dict __dict__
    cdef object __weakref__

    def __init__(self, prep):
        code = prep.__code__
        if code.co_flags & 0x0C:                 # *args / **kwargs
            raise TypeError("an op's function takes named parameters only")
        npos, nkw = code.co_argcount, code.co_kwonlyargcount
        if npos + nkw > MAXP:
            raise TypeError(f"an op takes at most {MAXP} parameters")
        self.prep = prep
        self.npos = npos
        self.nparams = npos + nkw
        self._names = tuple(sys.intern(n) for n in code.co_varnames[:npos + nkw])
        defs = [None] * self.nparams
        has = [False] * self.nparams
        pd = prep.__defaults__ or ()
        for i, v in enumerate(pd):
            defs[npos - len(pd) + i] = v
            has[npos - len(pd) + i] = True
        for n, v in (prep.__kwdefaults__ or {}).items():
            j = self._names.index(n)
            defs[j] = v
            has[j] = True
        self._defaults = defs
        self.stream_at = self._names.index("stream") if "stream" in self._names else -1
        for i in range(self.nparams):
            self.names[i] = <PyObject *>self._names[i]
            self.defaults[i] = <PyObject *>defs[i] if has[i] else NULL
        self.records = []
        self.mru = None
        self.kw_last = None
        req = [i for i in range(self.nparams) if not has[i]]
        self.min_pos = MAXP + 1 if any(i >= npos for i in req) else (max(req) + 1 if req else 0)
        self.misses_in_row = 0
        self.vcall = <vectorcallfunc><void *>_op_vcall
        for a in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(self, a, getattr(prep, a, None))
        self.__wrapped__ = prep
        _ops.add(self)
        _watch(getattr(prep, "__module__", None))

    def __call__(self, *args, **kwargs):
        return PyVectorcall_Call(self, args, kwargs)

    def __repr__(self):
        return f"<op {self.__qualname__}>"

    def __reduce__(self):
        # pickled by name, as the function it replaces was (the memo is per process)
        return self.__qualname__

    def clear(self):
        """Forget every recorded signature (the next call of each runs the checks, and is
        recorded: the count of misses in a row, which thins out recording, starts again)."""
        with cython.critical_section(self):
            self.records, self.mru, self.misses_in_row = [], None, 0

    @property
    def memo_size(self):
        """Signatures recorded now."""
        return len(self.records)

    # (a plain method: `plan` and the docs are instance attributes in __dict__)


cdef inline int _bind(Op self, PyObject **argv, Py_ssize_t nargs, PyObject *kwnames, PyObject **vals) noexcept:
    """vals[0..nparams) for a call (defaults filled in); -1 when the C binder does not take
    it (too many positional arguments, an unknown, repeated or missing parameter: the
    function's own argument parsing then words the error). A call with the keyword names
    and positional count of the last call bound here reuses that binding."""
    cdef Py_ssize_t i, j, m, nkw
    cdef PyObject *name
    if nargs > self.npos:
        return -1
    memcpy(vals, self.defaults, self.nparams * sizeof(PyObject *))
    for i in range(nargs):
        vals[i] = argv[i]
    if kwnames == NULL:
        return 0 if nargs >= self.min_pos else _missing(self, vals)
    nkw = PyTuple_GET_SIZE(<object>kwnames)
    if kwnames == <PyObject *>self.kw_last and nargs == self.kw_nargs:
        for j in range(nkw):
            vals[self.kw_at[j]] = argv[nargs + j]
        return 0
    for j in range(nkw):
        name = PyTuple_GET_ITEM(<object>kwnames, j)
        for i in range(self.nparams):
            if self.names[i] == name:
                break
        else:
            for i in range(self.nparams):            # a keyword string that is not the interned one
                if <object>self.names[i] == <object>name:
                    break
            else:
                return -1
        if i < nargs:                               # also given by position
            return -1
        for m in range(j):
            if self.kw_at[m] == i:                  # (not from CPython's call sites; kept exact)
                return -1
        self.kw_at[j] = <signed char>i
        vals[i] = argv[nargs + j]
    if _missing(self, vals):
        return -1
    self.kw_last = <object>kwnames                 # (its kw_at are the ones just written)
    self.kw_nargs = nargs
    return 0


cdef inline int _missing(Op self, PyObject **vals) noexcept:
    cdef Py_ssize_t i
    for i in range(self.nparams):
        if vals[i] == NULL:
            return -1
    return 0


cdef DeviceBuffer _new_like(tuple a, object stream):
    """A new output (out=None) as ``_buffer.empty(shape, dtype, device=, stream=)`` made it
    when the call was recorded: the same allocation call (``new_buffer``: the device's
    default allocator, ordered on the stream), then the shape, dtype key and item size that
    ``empty`` set (a = the record's (nbytes, device ordinal, shape, dtype key, itemsize))."""
    cdef DeviceBuffer b = new_buffer(<size_t>a[0], a[1], stream, None)
    b._shape = a[2]
    b._dtype = a[3]
    b._itemsize = <size_t>a[4]
    return b


cdef object _op_vcall(object callable, PyObject **argv, size_t nargsf, PyObject *kwnames):
    """Op's vectorcall: bind the arguments in C, look the signature up, launch."""
    cdef Op self = <Op>callable
    cdef Py_ssize_t nargs = PyVectorcall_NARGS(nargsf)
    cdef PyObject *vals[MAXP]
    cdef pfact f[MAXP]
    cdef Py_ssize_t i
    cdef _Record r = None
    cdef int keyed, bound
    with cython.critical_section(self):
        bound = _bind(self, argv, nargs, kwnames, vals)
        if bound:
            self.kw_last = None                     # (its kw_at may be half rewritten)
        r = self.mru
    if bound:
        return _slow(self, argv, nargsf, kwnames, NULL, NULL)
    if r is not None and match_call(r.keys, self.nparams, self.stream_at, vals, f):
        if r.lt is None:
            k = <object>PyWeakref_GetObject(r.kernel)
            if k is not None and (<Kernel>k).func != NULL:
                return _hit(self, r, k, vals, f)
        else:
            k = _lt_hit(self, r, vals, f)
            if k is not _MISS:
                return k
    r = None
    keyed = read_call(vals, self.nparams, self.stream_at, f) == 0
    if keyed:
        with cython.critical_section(self):
            for i in range(len(self.records)):
                r = <_Record>self.records[i]
                if keys_match(r.keys, self.nparams, f):
                    if i:
                        del self.records[i]
                        self.records.insert(0, r)
                    self.mru = r
                    break
            else:
                r = None
        k = _lt_hit(self, r, vals, f) if r is not None and r.lt is not None else _MISS
        if k is not _MISS:
            return k
        if r is not None and r.lt is None:
            k = <object>PyWeakref_GetObject(r.kernel)
            if k is not None and (<Kernel>k).func != NULL:
                return _hit(self, r, k, vals, f)
            with cython.critical_section(self):       # the kernel is gone or its module closed: forget it
                self.records = [x for x in self.records if x is not r]
                if self.mru is r:
                    self.mru = None
    return _slow(self, argv, nargsf, kwnames, vals, f if keyed else NULL)


cdef object _hit(Op self, _Record r, object k, PyObject **vals, const pfact *f):
    """Launch as recorded with this call's arrays; the result as recorded."""
    global _hits
    cdef list made = None           # new outputs (out=None)
    cdef PyObject *stream = vals[self.stream_at] if self.stream_at >= 0 else <PyObject *>None
    if r.nalloc:
        made = []
        for a in r.alloc:
            made.append(_new_like(<tuple>a, <object>stream))
    if not (r.direct and _direct and _hook_slot[0] == NULL and not _gil_slot[0]
            and _issue_direct(r, <Kernel>k, vals, f, made, <object>stream) == 0):
        _issue_launch(r, k, vals, f, made, <object>stream)
    _hits += 1
    self.misses_in_row = 0
    if r.nres == 1:
        return _res(r, 0, vals, made)
    if r.nres == 0:
        return None
    return (_res(r, 0, vals, made), _res(r, 1, vals, made))


cdef object _lt_hit(Op self, _Record r, PyObject **vals, const pfact *f):
    """A recorded cuBLASLt call issued with this call's arrays (_oplt.lt_hit); _MISS when
    it cannot be here (another stream, ...: the caller runs the Python path)."""
    global _hits
    cdef list made = [] if r.nalloc else None
    if not lt_hit(r.lt, vals, f, <object>vals[self.stream_at], r.alloc, made, _new_like):
        return _MISS
    _hits += 1
    self.misses_in_row = 0
    return _res(r, 0, vals, made)


cdef int _issue_direct(_Record r, Kernel k, PyObject **vals, const pfact *f, list made, object stream) except -1:
    """The recorded launch issued here: the record's packed constants copied to the stack,
    this call's addresses written into the pointer slots (each DeviceBuffer noted as used
    on the stream, each tensor read and its library's stream ordered before ours by
    _interop.tensor_pointer: what the launch packer does with them), one launch record
    through _launch.issue (the kernel and stream checked alive there). Taken with no
    capture running and the GIL held (else Kernel.launch: _issue_launch). Returns 1,
    having issued nothing, for a tensor tensor_pointer does not take (Kernel.launch then
    words the error)."""
    cdef char sbuf[BC_SMALL_ARGBYTES]
    cdef void *sptrs[BC_SMALL_NPARAMS]
    cdef bc_launch_rec rec
    cdef bc_stream_memo memo
    cdef CUdeviceptr addr
    cdef Py_ssize_t i
    cdef int src, ref
    cdef DeviceBuffer b
    cdef CUstream hs = NULL
    cdef PyTypeObject *ttype = NULL     # the tensor class tensor_pointer took first, on device tdev
    cdef int tdev = -1
    memo.source = NULL
    memo.ordinal = -1
    stream_handle(stream, &hs)
    memcpy(sbuf, r.block_bytes, r.argbytes)
    for i in range(r.nptr):
        src = r.psrc[i]
        ref = r.pref[i]
        if src == A_ADDR:
            bc_store_int(sbuf + r.pslot[i], 8, f[ref].addr + <uint64_t>r.poff[i])
        elif src == A_PARAM and f[ref].kind == P_DLX:
            if Py_TYPE(vals[ref]) == ttype and f[ref].dl.device.device_id == tdev:
                # a tensor of the class and device tensor_pointer took already in this launch:
                # it would read the address the key read (f) and find the stream ordered (memo)
                bc_store_int(sbuf + r.pslot[i], 8, f[ref].addr)
                continue
            if tensor_pointer(<object>vals[ref], k.device, hs, &memo, &addr) != 1:
                return 1
            ttype = Py_TYPE(vals[ref])
            tdev = f[ref].dl.device.device_id
            bc_store_int(sbuf + r.pslot[i], 8, addr)
        else:
            b = <DeviceBuffer>f[ref].buf if src == A_PARAM else <DeviceBuffer>made[ref]
            note_use(b, hs)
            bc_store_int(sbuf + r.pslot[i], 8, b.ptr)
    for i in range(r.nargs):
        sptrs[i] = sbuf + r.soff[i]
    rec.pfunc = &k.func
    rec.ctx = k.ctx
    rec.grid[0], rec.grid[1], rec.grid[2] = r.dgrid[0], r.dgrid[1], r.dgrid[2]
    rec.block[0], rec.block[1], rec.block[2] = r.dblock[0], r.dblock[1], r.dblock[2]
    rec.smem = r.dsmem
    rec.stream = hs
    rec.stream_closed = <int *>&(<Stream>stream).closed if type(stream) is Stream else NULL
    rec.params = sptrs if r.nargs else NULL
    rec.nattrs = 0
    issue(D, k, &rec, False)     # the direct path runs only with the GIL switch off (above)
    return 0


cdef int _issue_launch(_Record r, object k, PyObject **vals, const pfact *f, list made, object stream) except -1:
    """The recorded launch through Kernel.launch (its C entry, by vectorcall)."""
    cdef PyObject *av[MAXA + 5]
    cdef list ints = None           # derived addresses (the only objects made per call)
    cdef Py_ssize_t i, n
    cdef int src
    av[0] = <PyObject *>k
    av[1] = <PyObject *>r.grid
    av[2] = <PyObject *>r.block
    for i in range(r.nargs):
        src = r.asrc[i]
        if src == A_CONST:
            av[3 + i] = r.aconst[i]
        elif src == A_PARAM:
            av[3 + i] = f[r.aref[i]].buf if f[r.aref[i]].kind == P_QW else vals[r.aref[i]]
        elif src == A_ALLOC:
            av[3 + i] = <PyObject *>made[r.aref[i]]
        else:
            if ints is None:
                ints = []
            x = PyLong_FromUnsignedLongLong(f[r.aref[i]].addr + <uint64_t>r.aoff[i])
            ints.append(x)
            av[3 + i] = <PyObject *>x
    n = 3 + r.nargs
    av[n] = <PyObject *>stream
    if r.smem is None:
        PyObject_Vectorcall(_launch, av, n, <PyObject *>_KW_S)
    else:
        av[n + 1] = <PyObject *>r.smem
        PyObject_Vectorcall(_launch, av, n, <PyObject *>_KW_SM)
    return 0


cdef inline object _res(_Record r, int i, PyObject **vals, list made):
    if r.rsrc[i] == A_PARAM:
        return <object>vals[r.rref[i]]
    return made[r.rref[i]]


cdef object _slow(Op self, PyObject **argv, size_t nargsf, PyObject *kwnames, PyObject **vals, const pfact *f):
    """The family's function (all checks), the launch it returns; record the call when
    it was keyed (f) and maps onto its arguments."""
    global _misses, _records
    _misses += 1
    got = PyObject_Vectorcall(self.prep, argv, nargsf, kwnames)
    if type(got) is not tuple or not 5 <= len(<tuple>got) <= 6:
        raise TypeError(f"{self.__qualname__}: the op's function must return (kernel, grid, block, args, "
                        f"result[, shared_mem]), got {type(got).__name__}")
    k, grid, block, args, res = (<tuple>got)[:5]
    smem = (<tuple>got)[5] if len(<tuple>got) == 6 else None
    stream = <object>vals[self.stream_at] if vals != NULL and self.stream_at >= 0 else \
        _stream_of(self, argv, nargsf, kwnames)
    if grid:
        if smem is None:
            k.launch(grid, block, *args, stream=stream)
        else:
            k.launch(grid, block, *args, stream=stream, shared_mem=smem)
    lt = not grid and type(k) is LtMatmul       # a cuBLASLt call the function ran (_oplt)
    if lt:
        lt_noted(tuple(args), stream)
    if vals == NULL:
        return _give_back(res, None)
    self.misses_in_row += 1
    rec = None
    if f != NULL and (lt or grid and type(k) is Kernel) and \
            (self.misses_in_row <= 32 or self.misses_in_row % 32 == 0):
        try:
            rec = _record(self, f, k, stream if lt else grid, block, tuple(args), res, smem)
        except Exception:           # (an argument the recorder cannot read: not recorded)
            rec = None
    if rec is not None:
        _records += 1
        with cython.critical_section(self):
            if lt:                  # a record of this signature that could not issue (another stream...)
                self.records = [x for x in self.records if not keys_match((<_Record>x).keys, self.nparams, f)]
            self.records.insert(0, rec)
            del self.records[MAXE:]
            self.mru = rec
    return _give_back(res, <object>_vals_tuple(self, vals))


cdef object _stream_of(Op self, PyObject **argv, size_t nargsf, PyObject *kwnames):
    """The `stream` argument of a call the C binder did not take (it then fails in the
    function's own argument parsing anyway, or names stream by keyword)."""
    cdef Py_ssize_t nargs = PyVectorcall_NARGS(nargsf)
    cdef Py_ssize_t j
    if kwnames != NULL:
        for j in range(PyTuple_GET_SIZE(<object>kwnames)):
            if <object>PyTuple_GET_ITEM(<object>kwnames, j) == "stream":
                return <object>argv[nargs + j]
    if 0 <= self.stream_at < nargs:
        return <object>argv[self.stream_at]
    return None


cdef tuple _vals_tuple(Op self, PyObject **vals):
    return tuple([<object>vals[i] for i in range(self.nparams)])


cdef object _give_back(object res, object vals):
    """The result with views of the caller's tensors replaced by the caller's objects
    (an output the caller gave comes back as given)."""
    if vals is None:
        return res
    if type(res) is tuple:
        return tuple([_own(x, vals) for x in <tuple>res])
    return _own(res, vals)


cdef object _own(object x, tuple vals):
    cdef DeviceBuffer b
    cdef pfact g
    if type(x) is not DeviceBuffer:
        return x
    for v in vals:
        if v is x:
            return x
    b = <DeviceBuffer>x
    for v in vals:                # a view of a tensor argument: the first tensor argument there
        if type(v) is not DeviceBuffer and read_arg(<PyObject *>v, &g) == P_DLX and g.addr == b.ptr:
            return v
    return x


cdef _Record _record(Op self, const pfact *f, object k, object grid, object block, tuple args, object res,
                     object smem):
    """A record of this call, or None when the prep result does not map onto the
    arguments unambiguously."""
    cdef _Record r = _Record.__new__(_Record)
    cdef Py_ssize_t i, n
    cdef int src, ref
    cdef int64_t off
    cdef bint lt = type(k) is LtMatmul          # args: (a, b, c, alpha, beta, workspace); grid: the stream
    if lt:
        ws, args = args[5], args[:5]
    n = len(args)
    if n > MAXA:
        return None
    r.keep = []
    if make_keys(f, self.nparams, r.keys, r.keep):
        return None
    # the outputs this call allocated: result items that are none of the arguments
    items = [] if res is None else list(res) if type(res) is tuple else [res]
    if len(items) > 2:
        return None
    r.nres = len(items)
    allocs = []
    for i in range(r.nres):
        x = items[i]
        src, ref, off = _source(self, f, x)
        if src == A_CONST:
            if type(x) is not DeviceBuffer or (<DeviceBuffer>x)._root is not None or \
                    (<DeviceBuffer>x)._owner is not None or (<DeviceBuffer>x)._strides is not None:
                return None
            for a in allocs:
                if a is x:
                    break
            else:
                allocs.append(x)
            src, ref = A_ALLOC, [a is x for a in allocs].index(True)
        elif src != A_PARAM:
            return None
        r.rsrc[i] = src
        r.rref[i] = ref
    r.nalloc = len(allocs)
    for a in allocs:
        if type((<DeviceBuffer>a)._shape) is not tuple:
            return None
    r.alloc = tuple([(nbytes_of((<DeviceBuffer>a)._shape, (<DeviceBuffer>a)._itemsize), (<DeviceBuffer>a).device.ordinal,
                      (<DeviceBuffer>a)._shape, (<DeviceBuffer>a)._dtype, (<DeviceBuffer>a)._itemsize) for a in allocs])
    for i in range(n):
        x = args[i]
        for ref in range(len(allocs)):
            if allocs[ref] is x:
                r.asrc[i], r.aref[i], r.aoff[i] = A_ALLOC, ref, 0
                break
        else:
            src, ref, off = _source(self, f, x)
            if src < 0:
                return None
            r.asrc[i], r.aref[i], r.aoff[i] = src, ref, off
            if src == A_CONST:
                if type(x) is DeviceBuffer:           # a buffer that is no argument and no new output
                    return None
                if type(x) is _c_float and i < (<Kernel>k).nparams and (<Kernel>k).params[i].kind == BC_K_F32:
                    x = (<object>x).value                 # a known f32 slot packs a float on the fast path
                r.aconst[i] = <PyObject *>x
                r.keep.append(x)
    r.nargs = n
    if lt:                          # A, B, C: array argument i or new output j (-1 - j), at its address
        if r.nres != 1 or self.stream_at < 0 or \
                [i for i in range(3) if r.asrc[i] not in (A_PARAM, A_ALLOC) or r.aoff[i]]:
            return None
        s3 = [r.aref[i] if r.asrc[i] == A_PARAM else -1 - r.aref[i] for i in range(3)]
        r.lt = lt_call(k, ws, grid, s3[0], s3[1], s3[2], args[3], args[4])
        return r if r.lt is not None else None
    r.direct = _can_direct(r, <Kernel>k, grid, block, smem)
    r.kernel = PyWeakref_NewRef(k, None)
    r.grid = grid
    r.block = block
    r.smem = smem
    return r


cdef bint _can_direct(_Record r, Kernel k, object grid, object block, object smem) except -1:
    """Prepare r for _issue_direct: the kernel's layout known and small, every address
    slot a pointer; the constants packed (by the
    launch packer's own slot packer) and the geometry parsed (by its own check), once."""
    cdef Py_ssize_t i
    if k.nparams != r.nargs or k.nparams > BC_SMALL_NPARAMS or k.argbytes > BC_SMALL_ARGBYTES:
        return False
    for i in range(r.nargs):
        if r.asrc[i] != A_CONST and not (bc_kind_is_pointer(k.params[i].kind) and k.params[i].size == 8):
            return False
    memset(r.block_bytes, 0, sizeof(r.block_bytes))
    r.nptr = 0
    r.argbytes = k.argbytes
    for i in range(r.nargs):
        r.soff[i] = <unsigned short>k.params[i].offset
        if r.asrc[i] == A_CONST:
            pack_slot(k, i, <object>r.aconst[i], r.block_bytes + k.params[i].offset, NULL)
        else:
            r.pslot[r.nptr] = k.params[i].offset
            r.psrc[r.nptr] = r.asrc[i]
            r.pref[r.nptr] = r.aref[i]
            r.poff[r.nptr] = r.aoff[i]
            r.nptr += 1
    check_dims(k, grid, block, 0 if smem is None else smem, r.dgrid, r.dblock)
    r.dsmem = 0 if smem is None else smem
    return True


cdef tuple _source(Op self, const pfact *f, object x):
    """(A_PARAM, i, 0) when x is argument i or a view at its address; (A_ADDR, i, c) for
    an int address inside argument i's array; (A_CONST, -1, 0) otherwise; (-1, ...)
    when ambiguous."""
    cdef int j, hit = -1
    cdef uint64_t a
    cdef int64_t off = 0
    for j in range(self.nparams):
        if (f[j].kind == P_BUF or f[j].kind == P_DLX) and <PyObject *>x == f[j].obj:
            return (A_PARAM, f[j].same_obj if f[j].same_obj >= 0 else j, 0)
        if f[j].kind == P_QW and <PyObject *>x == f[j].buf:      # a weight's data buffer
            return (A_PARAM, f[j].same_obj if f[j].same_obj >= 0 else j, 0)
    if type(x) is DeviceBuffer:
        if (<DeviceBuffer>x)._kind == KIND_CLOSED:
            return (-1, -1, 0)
        a = (<DeviceBuffer>x).ptr
        for j in range(self.nparams):
            if (f[j].kind == P_DLX) and f[j].addr == a and f[j].same_addr < 0:
                if hit >= 0:
                    return (-1, -1, 0)
                hit = j
        if hit >= 0:
            return (A_PARAM, hit, 0)
        for j in range(self.nparams):
            if (f[j].kind == P_BUF or f[j].kind == P_DLX or f[j].kind == P_QW) and \
                    f[j].addr <= a < f[j].addr + f[j].span:
                return (-1, -1, 0)                     # a view into an argument: not mapped
        return (A_CONST, -1, 0)
    if PyLong_CheckExact(x) and x > 0xFFFF:
        for j in range(self.nparams):
            if (f[j].kind == P_BUF or f[j].kind == P_DLX or f[j].kind == P_QW) and f[j].same_addr < 0 \
                    and f[j].addr <= <uint64_t>x < f[j].addr + f[j].span:
                if hit >= 0:
                    return (-1, -1, 0)
                hit = j
                off = <int64_t>(<uint64_t>x - f[j].addr)
        if hit >= 0:
            return (A_ADDR, hit, off)
    return (A_CONST, -1, 0)


cdef object _c_float = ctypes.c_float


# ------------------------------------------------------------------ module API
def op(prep):
    """Decorator: the public op of a family's function (see the module docstring)."""
    return Op(prep)


def set_direct(bint on):
    """Hits issue their launch record here (True, the default) or through
    ``Kernel.launch`` (False): the benchmark measures both; results are the same."""
    global _direct
    _direct = on


def stats():
    """(hits, misses, records) of every op since import: the tests' and the benchmark's view."""
    return _hits, _misses, _records


def clear():
    """Forget every record of every op (``Op.clear`` of each)."""
    for o in list(_ops):
        (<Op>o).clear()


# A family module's checks read its module-level tuning values (tiles, split sizes, the
# dispatch thresholds) at call time, and tests and benchmarks set them
# (``monkeypatch.setattr(_attention, "DEC_STAGES", 3)``); a record made before would replay
# the old choice. So a module that defines an op is a _FamilyModule: setting or deleting
# any attribute of it from outside forgets every op's records (rare; nothing on the hit
# path). Assignments by the module's own code (``global`` statements: its caches) are not
# seen and need not be.
class _FamilyModule(types.ModuleType):
    def __setattr__(self, name, value):
        types.ModuleType.__setattr__(self, name, value)
        clear()

    def __delattr__(self, name):
        types.ModuleType.__delattr__(self, name)
        clear()


cdef _watch(object modname):
    m = sys.modules.get(modname) if modname and modname.startswith("barecuda.") else None
    if m is not None and type(m) is types.ModuleType:
        m.__class__ = _FamilyModule


cdef int _install() except -1:
    """Op instances are called through CPython's vectorcall slot (the `vcall` member)."""
    global _launch
    cdef Op probe = Op.__new__(Op)
    cdef _TypeSlots *t = <_TypeSlots *><PyTypeObject *>Op
    t.tp_vectorcall_offset = <Py_ssize_t>(<char *>&probe.vcall - <char *><PyObject *>probe)
    t.tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL
    PyType_Modified(<PyTypeObject *>Op)
    _launch = Kernel.__dict__["launch"]
    return 0


_install()
