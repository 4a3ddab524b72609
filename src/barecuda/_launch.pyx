"""Kernels and the launch path.

Owns: ``Kernel`` (a CUfunction with its parameter layout and limits), argument
packing (C, driven by a per-kernel table of parameter descriptors computed once),
the fast geometry check, the issue loop behind the one GIL switch, and the capture
recorder's slot. Elsewhere: plans (``LaunchPlan``, ``PlanList``, ``launch_all``:
_plan.pyx, which launches through the pieces ``_launch.pxd`` exports); function
attributes, occupancy and what a kernel is built with (_occupancy.pyx); slow-path
packing and the launch errors (_pack.pyx); signatures (_signature.pyx); geometry
against a kernel's limits, LaunchConfig (_launch_config.pyx).

The hot path (``Kernel.launch``, and the plans') does no heap allocation and no driver
call besides the launch itself: arguments are packed into a buffer on the C stack (heap
only for parameter blocks over ``BC_SMALL_ARGBYTES``), type dispatch is by exact type
against cached types, and the context binding is a per-thread compare. Whether the GIL
is released around the launch is one switch, ``set_launch_releases_gil`` (default:
kept, see bc_pack.h for the measurement behind it).
"""

__all__ = ["Kernel", "set_launch_releases_gil", "launch_releases_gil"]
cimport cython
from libc.stdint cimport uint32_t, int32_t
from libc.string cimport memset
from cpython cimport (PyMem_Malloc, PyMem_Free, PyFloat_AS_DOUBLE, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM,
                     Py_INCREF, PyTypeObject, PyObject, Py_TYPE)

cdef extern from "Python.h":
    PyTypeObject PyLong_Type
    PyTypeObject PyFloat_Type
    PyTypeObject PyBool_Type
    ctypedef struct PyTupleObject:
        PyObject *ob_item[1]
    PyObject *PyTuple_GET_ITEM(PyObject *t, Py_ssize_t i)
    Py_ssize_t PyTuple_GET_SIZE_RAW "PyTuple_GET_SIZE"(PyObject *t)
from barecuda._pymethod cimport PyMethodDef, METH_FASTCALL, METH_KEYWORDS, PyDescr_NewMethod, PyType_Modified, \
    _TypeWithDict

from barecuda._abi cimport *
from barecuda._errors cimport bc_state_t
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current
from barecuda._device cimport Device
from barecuda._stream cimport Stream, stream_handle, stream_use, stream_done
from barecuda._launch_config cimport LaunchConfig, parse_dims, validate_config, config_rec, check_limits, \
    geometry_text
from barecuda._buffer cimport DeviceBuffer, note_use, pin, unpin, owner_of, use_end, bc_use_enter, KIND_CLOSED
from barecuda._interop cimport tensor_pointer, bc_stream_memo
from barecuda._signature cimport *
from barecuda._pack cimport *
from barecuda._ft cimport BC_FREE_THREADED, bc_count_add
from barecuda cimport _occupancy as occ
# _plan cimports this module's .pxd; the reverse is here only (Kernel.bind makes plans)
from barecuda._plan cimport LaunchPlan, new_plan
from barecuda._errors import make_error, DriverVersionError, _renamed
from barecuda import _signature as _signature_mod
from barecuda._occupancy import FUNC_ATTRIBUTES      # re-exported (tests, stubs)

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()

# The one GIL switch for every launch path (Kernel.launch, plans, plan lists). Always on
# in a free-threaded build: with no GIL, a close() on another thread can run between the
# packer's checks and cuLaunchKernel, so every launch takes the use counts of the
# GIL-released branch (docs/architecture.md, "Free-threaded CPython: what is protected").
cdef bint _release_gil = BC_LAUNCH_RELEASES_GIL or BC_FREE_THREADED

# Set by _capture while a barecuda capture runs (else NULL: one pointer compare per launch):
# called as hook(stream handle, kernel or plan, its Kernel, its arguments) by every launch
# path, so that the captured graph holds what its kernel nodes use (see _capture.pyx).
cdef capture_hook_t _capture_hook = NULL


cdef void set_capture_hook(capture_hook_t hook) noexcept:
    global _capture_hook
    _capture_hook = hook

_TOKEN = object()

KIND_NAMES = _signature_mod.KIND_NAMES


def set_launch_releases_gil(flag):
    """Choose whether launches release the GIL around ``cuLaunchKernel``.

    The default (False) keeps the GIL: the launch call is short, and releasing and
    re-taking the GIL costs more than it saves unless several threads launch at
    once. Returns the previous setting. Meant for the benchmark and for programs
    that launch from many threads. On a free-threaded interpreter (3.13t/3.14t) it
    stays on: every launch then holds its buffers and stream over the call.
    """
    global _release_gil
    old = bool(_release_gil)
    _release_gil = bool(flag) or BC_FREE_THREADED     # free-threaded: stays on (see above)
    return old


def launch_releases_gil():
    """Whether launches currently release the GIL (see :func:`set_launch_releases_gil`)."""
    return bool(_release_gil)


# ----------------------------------------------------------------- construction
cdef Kernel make_kernel(object module, CUfunction func, CUcontext ctx, Device device, str name,
                        object ptx_params, object signature):
    cdef Kernel k = Kernel.__new__(Kernel, _TOKEN)
    cdef Py_ssize_t i, n
    cdef uint32_t pos = 0
    k.func = func
    k.ctx = ctx
    k.module = module
    k.device = device
    k.name = name
    set_current(ctx)
    drv = occ.param_info(func)
    entries = layout_entries(name, ptx_params, signature, drv)
    if entries is None:
        k.nparams = -1
        k._types = None
    else:
        n = len(entries)
        k.params = <bc_param *>PyMem_Malloc(max(n, 1) * sizeof(bc_param))
        if k.params == NULL:
            raise MemoryError()
        k.nparams = n
        for i in range(n):
            t, kind, size, align = entries[i]
            if drv is not None:
                pos = <uint32_t>drv[i][0]
            else:
                pos = bc_align_up(pos, <uint32_t>align)
            k.params[i].offset = pos
            k.params[i].size = <uint32_t>size
            k.params[i].align = <uint32_t>align
            k.params[i].kind = <int32_t>kind
            pos += <uint32_t>size
        k.argbytes = 0
        for i in range(n):
            if k.params[i].offset + k.params[i].size > k.argbytes:
                k.argbytes = k.params[i].offset + k.params[i].size
        k._types = tuple(e[0] for e in entries)
    occ.kernel_limits(func, device.handle, k.max_grid, k.max_block, &k.max_threads, &k.max_dyn_smem)
    return k


cdef size_t _kernels_closed = 0     # how many times a kernel was invalidated (kernels_closed())


cdef void invalidate_kernel(Kernel k) noexcept:
    k.func = NULL
    bc_count_add(&_kernels_closed, 1)       # modules may close on several threads at once


cdef const size_t *kernels_closed() noexcept:
    return &_kernels_closed


# ------------------------------------------------------------------ errors
cdef int _launch_failed(Kernel k, CUresult rc, str call, const bc_launch_rec *r) except -1:
    raise make_error(rc, call, f"while launching kernel {sig_text(k)} with {_rec_geometry(r)}")


# ------------------------------------------------------------------ packing (fast path)
cdef inline int _pack_one(Kernel k, Py_ssize_t i, object arg, char *slot, CUstream hs,
                          bc_stream_memo *memo) except -1:
    """Pack argument i into slot. Exact-type checks, most frequent first. memo: the
    launch's memo of the tensor libraries' current streams (NULL outside a launch)."""
    cdef const bc_param *p = &k.params[i]
    cdef int kind = p.kind
    cdef int ovf = 0
    cdef long long x
    cdef CUdeviceptr addr
    # A borrowed type pointer: no reference count traffic per argument.
    cdef PyTypeObject *t = Py_TYPE(arg)
    if t is <PyTypeObject *>DeviceBuffer:
        if bc_kind_is_pointer(kind) and (<DeviceBuffer>arg).ptr != 0:
            note_use(<DeviceBuffer>arg, hs)
            bc_store_int(slot, 8, (<DeviceBuffer>arg).ptr)
            return 0
        return pack_slow(k, p, i, arg, slot, hs)      # closed (address 0) or not a pointer slot
    if t is &PyLong_Type:
        if int_ok(kind):
            x = _bc_as_ll(arg, &ovf)
            if ovf == 0 and int_in_range(kind, x):
                bc_store_int(slot, p.size, <unsigned long long>x)
                return 0
        return pack_int(k, p, i, arg, slot)
    if t is &PyFloat_Type:
        if float_ok(kind):
            store_float(kind, slot, PyFloat_AS_DOUBLE(arg))
            return 0
        return raise_type(k, p, i, arg)
    if t is &PyBool_Type:
        if bc_kind_flags[kind] & BC_F_BOOL:
            bc_store_int(slot, p.size, 1 if arg is True else 0)
            return 0
        return raise_type(k, p, i, arg)
    if bc_kind_is_pointer(kind):
        # torch/CuPy tensors (issue 12); anything else (0), or a tensor on another
        # device (-2: pointer_of words the error with the kernel and the argument), goes
        # to the slow path
        if tensor_pointer(arg, k.device, hs, memo, &addr) == 1:
            bc_store_int(slot, 8, addr)
            return 0
    return pack_slow(k, p, i, arg, slot, hs)


cdef inline int _pack_args(Kernel k, PyObject **argv, char *buf, void **ptrs, CUstream hs) except -1:
    """Pack k.nparams arguments, argv[0..nparams) (borrowed: the caller holds them)."""
    cdef Py_ssize_t i
    cdef char *slot
    cdef bc_stream_memo memo        # one read of torch's/CuPy's current stream per launch
    memo.source = NULL
    for i in range(k.nparams):
        slot = buf + k.params[i].offset
        ptrs[i] = slot
        _pack_one(k, i, <object>argv[i], slot, hs, &memo)
    return 0


cdef inline PyObject **_items(tuple t) noexcept:
    return &(<PyTupleObject *>t).ob_item[0]


cdef int pack_arg(Kernel k, Py_ssize_t i, object value, char *dst, CUstream s, list keep) except -1:
    if k.func == NULL:
        raise_closed(k)
    if not 0 <= i < k.nparams:
        raise IndexError(f"kernel {sig_text(k)} has {max(k.nparams, 0)} parameters; no index {i}")
    # The packed bytes hold values and addresses only: nothing needs to outlive the
    # call here, so `keep` stays as given (the caller keeps its argument objects, and
    # pins DeviceBuffers: _buffer.hold/pin).
    return _pack_one(k, i, value, dst + k.params[i].offset, s, NULL)


# --------------------------------------------------------- grid / block / smem
cdef inline bint _dim_fast(object obj, unsigned int *out, const unsigned int *lim) noexcept:
    """An exact int, or a tuple of 1-3 exact ints, each in [1, lim[j]]: out = the three
    dimensions (missing ones 1). Nothing raised, nothing allocated; anything else
    (lists, numpy ints, out of range) is left to parse_dims and check_limits."""
    cdef long long v
    cdef int ovf = 0
    cdef Py_ssize_t n, j
    cdef object item
    if type(obj) is int:
        v = _bc_as_ll(obj, &ovf)
        if ovf == 0 and 0 < v <= lim[0]:
            out[0] = <unsigned int>v
            out[1] = 1
            out[2] = 1
            return True
        return False
    if type(obj) is not tuple:
        return False
    n = PyTuple_GET_SIZE(obj)
    if n < 1 or n > 3:
        return False
    out[1] = 1
    out[2] = 1
    for j in range(n):
        item = <object>PyTuple_GET_ITEM(<PyObject *>obj, j)
        if type(item) is not int:
            return False
        v = _bc_as_ll(item, &ovf)
        if ovf != 0 or not 0 < v <= lim[j]:
            return False
        out[j] = <unsigned int>v
    return True


cdef inline int _launch_dims(Kernel k, object grid, object block, object smem,
                             unsigned int *g, unsigned int *b, unsigned int *s) except -1:
    # The fast path takes ints and tuples of ints within the device's per-dimension limits
    # (H200, 2026-11-27: a (x, y) grid through parse_dims + check_limits cost ~750 ns more
    # on the driver double and 1.3-1.4x raw C on the GPU; the kernels_issue rows of matmul
    # and attention showed it); the block's thread count and the shared memory are checked
    # here, the rest of a bad geometry raises from check_limits with its message.
    cdef long long v
    cdef int ovf = 0
    if (_dim_fast(grid, g, k.max_grid) and _dim_fast(block, b, k.max_block)
            and <unsigned long long>b[0] * b[1] * b[2] <= k.max_threads and type(smem) is int):
        v = _bc_as_ll(smem, &ovf)
        if ovf == 0 and 0 <= v <= k.max_dyn_smem:
            s[0] = <unsigned int>v
            return 0
    parse_dims(grid, g, "grid")
    parse_dims(block, b, "block")
    return check_limits(k.name, k.max_grid, k.max_block, k.max_threads, k.max_dyn_smem, g, b, smem, s)


cdef int check_dims(Kernel k, object grid, object block, unsigned int smem,
                    unsigned int out_grid[3], unsigned int out_block[3]) except -1:
    cdef unsigned int s = 0
    return _launch_dims(k, grid, block, smem, out_grid, out_block, &s)


# ------------------------------------------------------------------ Kernel
@cython.final
cdef class Kernel:
    """A kernel (``CUfunction``) of a loaded :class:`Module`, ready to launch.

    Obtained from :meth:`Module.get_kernel`. It knows its parameters (offsets and
    sizes from ``cuFuncGetParamInfo``; types from the PTX ``.entry`` or from the
    ``signature`` given to ``get_kernel``) and packs arguments by them, in C. A
    Kernel keeps its Module alive.
    """

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("Kernel objects come from Module.get_kernel()")
        self.func = NULL
        self.params = NULL
        self.nparams = -1
        self.argbytes = 0

    def __dealloc__(self):
        PyMem_Free(self.params)
        self.params = NULL

    def __repr__(self):
        return f"<barecuda.Kernel {sig_text(self)}>"

    @property
    def handle_int(self):
        """The ``CUfunction`` as an int (0 once the module is closed)."""
        return <size_t>self.func

    handle = _renamed("Kernel.handle", "handle_int")   # the old spelling, for one release

    @property
    def num_params(self):
        """Number of parameters, or None when the layout is unknown."""
        return None if self.nparams < 0 else self.nparams

    @property
    def signature(self):
        """The parameter types as a tuple of names (``'ptr'``, ``'u32'``, ``'b8[16]'``...)."""
        return self._types

    @property
    def param_bytes(self):
        """Size in bytes of the packed parameter block."""
        return self.argbytes

    def param_info(self):
        """``[(offset, size, type), ...]``, one tuple per parameter."""
        if self.nparams < 0:
            return None
        return [(self.params[i].offset, self.params[i].size, self._types[i]) for i in range(self.nparams)]

    @property
    def max_threads_per_block(self):
        """Largest block this kernel can be launched with (device and kernel limits)."""
        return self.max_threads

    @property
    def max_dynamic_shared_memory(self):
        """Current limit on ``shared_mem`` for launches of this kernel, in bytes."""
        return self.max_dyn_smem

    cdef int _live(self) except -1:
        if self.func == NULL:
            raise_closed(self)
        set_current(self.ctx)
        return 0

    def attribute(self, name):
        """Value of one ``CUfunction_attribute``, by name (``"num_regs"``) or number."""
        self._live()
        return occ.get_attribute(self.func, name)

    def attributes(self):
        """Every function attribute the driver reports, as a dict."""
        self._live()
        return occ.all_attributes(self.func)

    def set_attribute(self, name, int value):
        """Set a function attribute (``cuFuncSetAttribute``), e.g.
        ``"non_portable_cluster_size_allowed"`` or ``"preferred_shared_memory_carveout"``."""
        self._live()
        occ.set_attribute(self.func, name, value, &self.max_dyn_smem)

    def set_max_dynamic_shared_memory(self, int nbytes):
        """Allow launches with up to ``nbytes`` of dynamic shared memory (above the
        default 48 KiB needs this; the ceiling is the device's opt-in maximum)."""
        self.set_attribute("max_dynamic_shared_size_bytes", nbytes)

    def max_active_blocks_per_sm(self, int block_size, size_t shared_mem=0):
        """Occupancy: how many blocks of ``block_size`` threads fit on one SM."""
        self._live()
        return occ.max_active_blocks(self.func, block_size, shared_mem)

    def suggested_block_size(self, shared_mem=0, int block_size_limit=0):
        """``(min_grid_size, block_size)`` that maximizes occupancy (``cuOccupancyMaxPotentialBlockSize``).

        Parameters
        ----------
        shared_mem : int or callable
            Dynamic shared memory in bytes, or a function ``f(block_size) -> bytes``
            when it depends on the block size (the driver calls it for each block
            size it tries; an exception it raises is re-raised here).
        block_size_limit : int
            Largest block size to consider (0: the kernel's limit).
        """
        self._live()
        return occ.suggested_block_size(self.func, shared_mem, block_size_limit)

    def max_active_clusters(self, LaunchConfig config not None):
        """How many clusters of ``config.cluster`` (with its block and shared memory)
        can be co-resident on the device (``cuOccupancyMaxActiveClusters``; the
        driver version it needs is in the message when it is missing)."""
        self._live()
        return occ.max_active_clusters(self.func, config)

    def launch(self, grid, block, *args, stream=None, shared_mem=0):
        """Launch the kernel.

        Parameters
        ----------
        grid, block : int or tuple of 1-3 ints
            Grid size in blocks and block size in threads.
        *args
            One argument per kernel parameter, packed by the parameter's type:
            pointers take a ``DeviceBuffer``, an int address or an object with
            ``__cuda_array_interface__`` / ``__dlpack__``; integer parameters take
            ints (range-checked), bools, numpy/ctypes integer scalars; float
            parameters take floats, ints, numpy/ctypes scalars (float16 is
            converted in C, round to nearest even); struct parameters take a
            bytes-like object of exactly the struct's size.
        stream : Stream, optional
            Default: the legacy default stream.
        shared_mem : int
            Dynamic shared memory in bytes.

        The call is taken by a C entry that reads the arguments in place (no tuple
        per launch); calls it does not take come here.

        Raises
        ------
        TypeError
            Wrong number or type of arguments.
        OverflowError
            An integer out of its parameter's range.
        ValueError
            Zero, negative or too-large grid/block, too much shared memory.
        """
        return _launch(self, grid, block, _items(args), PyTuple_GET_SIZE(args), stream, shared_mem, args)

    def launch_config(self, LaunchConfig config not None, *args):
        """Launch with a :class:`LaunchConfig` (clusters, cooperative launch, priority,
        programmatic serialization) through ``cuLaunchKernelEx``.

        The configuration is validated against this kernel and device before the
        driver is called (cluster support and divisibility, cluster size, cooperative
        co-residency); the result is cached in the config for this kernel.
        """
        cdef bc_launch_rec r
        cdef char sbuf[BC_SMALL_ARGBYTES]
        cdef void *sptrs[BC_SMALL_NPARAMS]
        if self.func == NULL:
            raise_closed(self)
        if PyTuple_GET_SIZE(args) != self.nparams:
            raise_count(self, self.nparams, PyTuple_GET_SIZE(args))
        _config_rec(self, config, &r)
        if _capture_hook != NULL:
            _capture_hook(<size_t>r.stream, self, self, args)
        if self.argbytes > BC_SMALL_ARGBYTES or self.nparams > BC_SMALL_NPARAMS:
            _launch_heap(self, _items(args), &r, True)
            return
        _pack_args(self, _items(args), sbuf, sptrs, r.stream)
        r.params = sptrs
        if _release_gil:
            _issue_held(self, &r, _items(args), PyTuple_GET_SIZE(args), config.stream)
        else:
            _issue(self, &r)

    def bind(self, grid, block, *args, stream=None, shared_mem=0):
        """Pack the arguments once and return a :class:`LaunchPlan`; ``plan()``
        launches with no packing. Same checks as :meth:`launch`."""
        cdef LaunchPlan plan = new_plan(self, args)
        _launch_dims(self, grid, block, shared_mem, plan.rec.grid, plan.rec.block, &plan.rec.smem)
        plan._set_stream(stream)
        plan._pack_all()
        return plan

    def bind_config(self, LaunchConfig config not None, *args):
        """Like :meth:`bind`, with a :class:`LaunchConfig` (validated once, here)."""
        cdef LaunchPlan plan = new_plan(self, args)
        _config_rec(self, config, &plan.rec)
        plan.rec.params = plan.ptrs if self.nparams > 0 else NULL
        plan.config = config
        plan._stream = config.stream
        plan._pack_all()
        return plan



cdef tuple _args_tuple(PyObject **argv, Py_ssize_t n):
    """The tuple of argv[0..n) (borrowed) for the capture hook: built in place (a list
    comprehension first would build and drop a list per captured launch)."""
    cdef tuple t = PyTuple_New(n)
    cdef Py_ssize_t i
    for i in range(n):
        Py_INCREF(<object>argv[i])
        PyTuple_SET_ITEM(t, i, <object>argv[i])
    return t

cdef object _launch(Kernel k, object grid, object block, PyObject **argv, Py_ssize_t nargs, object stream,
                     object shared_mem, object args):
    """Kernel.launch: argv[0..nargs) the kernel's arguments (borrowed), args their tuple
    or None (made only when a capture hook needs it)."""
    cdef bc_launch_rec r
    cdef char sbuf[BC_SMALL_ARGBYTES]
    cdef void *sptrs[BC_SMALL_NPARAMS]
    cdef Py_ssize_t i
    if k.func == NULL:
        raise_closed(k)
    if nargs != k.nparams:
        raise_count(k, k.nparams, nargs)
    _launch_dims(k, grid, block, shared_mem, r.grid, r.block, &r.smem)
    stream_handle(stream, &r.stream)
    if _capture_hook != NULL:
        if args is None:
            args = _args_tuple(argv, nargs)
        _capture_hook(<size_t>r.stream, k, k, args)
    if k.argbytes > BC_SMALL_ARGBYTES or k.nparams > BC_SMALL_NPARAMS:
        _launch_heap(k, argv, &r, False, nargs, stream)
        return None
    _pack_args(k, argv, sbuf, sptrs, r.stream)
    r.params = sptrs
    _issue_now(k, &r, argv, nargs, stream)
    return None


cdef object _S_STREAM = "stream"
cdef object _S_SHARED_MEM = "shared_mem"


cdef object _kernel_launch(object self, PyObject **argv, Py_ssize_t nargs, PyObject *kwnames):
    """Kernel.launch's entry (METH_FASTCALL | METH_KEYWORDS): the arguments are read
    where the caller left them, with no tuple and no dict made per launch."""
    cdef Py_ssize_t nkw = 0 if kwnames == NULL else PyTuple_GET_SIZE_RAW(kwnames)
    cdef Py_ssize_t j
    cdef PyObject *name
    stream = None
    smem = 0
    for j in range(nkw):
        name = PyTuple_GET_ITEM(kwnames, j)
        if name == <PyObject *>_S_STREAM:
            stream = <object>argv[nargs + j]
        elif name == <PyObject *>_S_SHARED_MEM:
            smem = <object>argv[nargs + j]
        else:
            break
    else:
        if nargs >= 2:
            return _launch(<Kernel>self, <object>argv[0], <object>argv[1], argv + 2, nargs - 2, stream, smem,
                           None)
    # anything else (a keyword spelled differently or not interned, grid/block by
    # keyword, too few arguments): Python's own argument parsing, then the same launch
    args = tuple([<object>argv[j] for j in range(nargs)])
    kw = {<object>PyTuple_GET_ITEM(kwnames, j): <object>argv[nargs + j] for j in range(nkw)}
    return _launch_py(self, *args, **kw)


cdef PyMethodDef _launch_def
cdef bytes _LAUNCH_DOC = None
cdef object _launch_py = None       # the Cython method Kernel.launch (the fallback of _kernel_launch)


cdef int _install_launch() except -1:
    """Kernel.launch as a METH_FASTCALL | METH_KEYWORDS method descriptor of C function
    _kernel_launch (a Cython `def` with *args builds a tuple per call; see
    docs/architecture.md)."""
    global _LAUNCH_DOC, _launch_py
    _launch_py = Kernel.__dict__["launch"]
    doc = _launch_py.__doc__ or ""                     # None under python -OO
    doc = doc[doc.find("\n\n") + 2:] if doc.startswith("Kernel.launch(") else doc   # after embedsignature's line
    _LAUNCH_DOC = ("launch($self, grid, block, *args, stream=None, shared_mem=0)\n--\n\n" + doc).encode()
    _launch_def.ml_name = b"launch"
    _launch_def.ml_meth = <void *>_kernel_launch
    _launch_def.ml_flags = METH_FASTCALL | METH_KEYWORDS
    _launch_def.ml_doc = _LAUNCH_DOC
    d = PyDescr_NewMethod(<PyTypeObject *>Kernel, &_launch_def)
    (<dict>(<object>(<_TypeWithDict *>Kernel).tp_dict))["launch"] = d
    PyType_Modified(<PyTypeObject *>Kernel)
    return 0


_install_launch()


cdef int _launch_heap(Kernel k, PyObject **args, bc_launch_rec *r, bint config, Py_ssize_t nargs=0,
                      object stream=None) except -1:
    """Launch path for parameter blocks too big for the stack buffer (config: r is a
    LaunchConfig's, issued with its launch attributes)."""
    cdef char *buf = <char *>PyMem_Malloc(max(k.argbytes, 1))
    cdef void **ptrs = <void **>PyMem_Malloc(max(k.nparams, 1) * sizeof(void *))
    try:
        if buf == NULL or ptrs == NULL:
            raise MemoryError()
        _pack_args(k, args, buf, ptrs, r.stream)
        r.params = ptrs
        if config:
            _issue(k, r)
        else:
            _issue_now(k, r, args, nargs, stream)
    finally:
        PyMem_Free(buf)
        PyMem_Free(ptrs)
    return 0


cdef str _rec_geometry(const bc_launch_rec *r):
    return geometry_text(r.grid, r.block, r.smem)


cdef inline int _issue(Kernel k, bc_launch_rec *r) except -1:
    return issue(D, k, r, _release_gil)


cdef inline int _issue_now(Kernel k, bc_launch_rec *r, PyObject **argv, Py_ssize_t nargs, object stream) except -1:
    """Kernel.launch's issue: only grid, block, smem, stream and params of r are set
    (no launch attributes; the kernel was checked alive at the start of the call,
    with the GIL held). One cuLaunchKernel, behind the one GIL switch. argv[0..nargs)
    and stream are read only when the GIL is released (_issue_now_released)."""
    cdef CUresult rc
    cdef CUfunction f = k.func
    set_current(k.ctx)
    if _release_gil:
        return _issue_now_released(k, r, argv, nargs, stream)
    rc = D.cuLaunchKernel(f, r.grid[0], r.grid[1], r.grid[2], r.block[0], r.block[1], r.block[2],
                          r.smem, r.stream, r.params, NULL)
    if rc != 0:
        _launch_failed(k, rc, "cuLaunchKernel", r)
    return 0


# ---- use counts of a launch that releases the GIL (docs/architecture.md, "Close versus
# in-flight use"). With the GIL held (the default) no close() can run between the packer's
# checks and cuLaunchKernel, so the default path holds nothing; these run only in the
# GIL-released branch: each DeviceBuffer argument's owner and the barecuda Stream are held
# over the call, so a close() on another thread defers its free / destroy until the launch
# is queued (after which stream order protects the memory).
cdef int _hold_args(PyObject **argv, Py_ssize_t n) except -1:
    """Enter the use count of each DeviceBuffer argument's owner; then, when one of them
    was closed, leave them all again and raise ValueError."""
    cdef Py_ssize_t i
    for i in range(n):
        if Py_TYPE(<object>argv[i]) is <PyTypeObject *>DeviceBuffer:
            bc_use_enter(&owner_of(<DeviceBuffer>argv[i])._uses)
    for i in range(n):
        if Py_TYPE(<object>argv[i]) is <PyTypeObject *>DeviceBuffer and (<DeviceBuffer>argv[i])._kind == KIND_CLOSED:
            _release_args(argv, n)
            raise ValueError(f"argument {i}: operation on a closed DeviceBuffer (use after close())")
    return 0


cdef void _release_args(PyObject **argv, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i
    for i in range(n):
        if Py_TYPE(<object>argv[i]) is <PyTypeObject *>DeviceBuffer:
            use_end(owner_of(<DeviceBuffer>argv[i]))


cdef int _issue_now_released(Kernel k, bc_launch_rec *r, PyObject **argv, Py_ssize_t nargs,
                             object stream) except -1:
    cdef CUresult rc
    cdef CUfunction f = k.func
    cdef Stream so = None
    _hold_args(argv, nargs)
    try:
        so = stream_use(stream)
        with nogil:
            rc = D.cuLaunchKernel(f, r.grid[0], r.grid[1], r.grid[2], r.block[0], r.block[1], r.block[2],
                                  r.smem, r.stream, r.params, NULL)
    finally:
        stream_done(so)
        _release_args(argv, nargs)
    if rc != 0:
        _launch_failed(k, rc, "cuLaunchKernel", r)
    return 0


cdef int _issue_held(Kernel k, bc_launch_rec *r, PyObject **argv, Py_ssize_t nargs, object stream) except -1:
    """_issue with the arguments' owners and the stream held (GIL-released launches)."""
    cdef Stream so = None
    _hold_args(argv, nargs)
    try:
        so = stream_use(stream)
        _issue(k, r)
    finally:
        stream_done(so)
        _release_args(argv, nargs)
    return 0


cdef int _config_rec(Kernel k, LaunchConfig c, bc_launch_rec *r) except -1:
    """Fill r (all but params) from a config, validated for k once: the geometry against
    the kernel's limits here, the rest by _launch_config.validate_config."""
    if c._validated != k.func:
        check_limits(k.name, k.max_grid, k.max_block, k.max_threads, k.max_dyn_smem, c.grid_, c.block_,
                     c.smem, &c.smem)
        validate_config(c, k.func, k.device, k.name)
    return config_rec(c, &k.func, k.ctx, r)


# ---- for the plans (_plan.pyx): the pieces of the launch path a plan shares
cdef capture_hook_t *capture_hook_slot() noexcept:
    return &_capture_hook


cdef bint *releases_gil_slot() noexcept:
    return &_release_gil


cdef int pack_slot(Kernel k, Py_ssize_t i, object value, char *slot, CUstream hs) except -1:
    return _pack_one(k, i, value, slot, hs, NULL)


cdef int issue_failed(Kernel k, CUresult rc, const bc_launch_rec *r) except -1:
    if rc == -1:
        raise_closed(k)
    if rc == -2:
        raise_stream_closed(-1)
    _launch_failed(k, rc, "cuLaunchKernelEx" if r.nattrs else "cuLaunchKernel", r)
