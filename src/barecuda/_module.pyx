"""Modules: loading PTX, cubin and fatbin images, JIT options and logs, kernels and globals.

Owns: ``Module`` (a ``CUmodule`` in a device's primary context), JIT options and
logs, kernel lookup by name (C++ kernels by their plain name too), ``Global`` (a
``__device__`` variable of a module). Kernels themselves live in _launch
(``Kernel``), which this module builds them with; the PTX ``.entry`` parser and
parameter kinds live in _signature (``parse_ptx_signatures`` is re-exported here).
"""

__all__ = ["Module", "Global"]
cimport cython
import os
import warnings
import weakref

from libc.string cimport memset, strlen
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable, CUDA_ERROR_NOT_FOUND
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current, require, destroy_handle, \
    destroy_fn, symbol_version_text
from barecuda._device cimport Device, device_of
from barecuda._launch cimport Kernel, make_kernel, invalidate_kernel
from barecuda._errors import CudaWarning, make_error, _renamed, _enter_self, _exit_close
from barecuda._launch import Kernel
from barecuda._signature import parse_ptx_signatures, mangled_matches, kernel_key

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()

cdef enum:
    LOG_BYTES = 16384
_TOKEN = object()

# ------------------------------------------------------------------ JIT options
_JIT_OPTIONS = {
    "max_registers": CU_JIT_MAX_REGISTERS,
    "threads_per_block": CU_JIT_THREADS_PER_BLOCK,
    "opt_level": CU_JIT_OPTIMIZATION_LEVEL,
    "optimization_level": CU_JIT_OPTIMIZATION_LEVEL,
    "target": CU_JIT_TARGET,
    "fallback_strategy": CU_JIT_FALLBACK_STRATEGY,
    "generate_debug_info": CU_JIT_GENERATE_DEBUG_INFO,
    "log_verbose": CU_JIT_LOG_VERBOSE,
    "generate_line_info": CU_JIT_GENERATE_LINE_INFO,
    "cache_mode": CU_JIT_CACHE_MODE,
}
_BOOL_OPTIONS = {"generate_debug_info", "log_verbose", "generate_line_info"}


def _jit_value(str key, value):
    import operator
    if key in _BOOL_OPTIONS:
        return 1 if value else 0
    if key == "target":
        if isinstance(value, str):
            v = value.lower()
            for prefix in ("sm_", "compute_", "sm", "compute"):
                if v.startswith(prefix):
                    v = v[len(prefix):]
                    break
            v = v.rstrip("a")        # sm_90a: the JIT target enum has no 'a' variants
            if not v.isdigit():
                raise ValueError(f"JIT option target={value!r}: expected e.g. 90 or 'sm_90'")
            return int(v)
        if isinstance(value, tuple) and len(value) == 2:
            return int(value[0]) * 10 + int(value[1])
        return operator.index(value)    # CU_TARGET_COMPUTE_90 == 90
    v = operator.index(value)
    if key in ("opt_level", "optimization_level") and not 0 <= v <= 4:
        raise ValueError(f"JIT option {key}={v}: must be 0 to 4")
    if key in ("max_registers", "threads_per_block") and v <= 0:
        raise ValueError(f"JIT option {key}={v}: must be positive")
    return v


def _jit_pairs(options):
    if options is None:
        return []
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict of JIT options, got {type(options).__name__}")
    pairs = []
    for key, value in options.items():
        k = str(key).lower()
        if k not in _JIT_OPTIONS:
            raise ValueError(f"unknown JIT option {key!r}; known: {', '.join(sorted(_JIT_OPTIONS))}")
        pairs.append((_JIT_OPTIONS[k], _jit_value(k, value)))
    return pairs


def _sniff(bytes data):
    """'cubin', 'fatbin' or 'ptx' from an image's first bytes."""
    if data[:4] == b"\x7fELF":
        return "cubin"
    if data[:4] == b"\x50\xed\x55\xba":       # fatbin magic 0xBA55ED50, little-endian
        return "fatbin"
    return "ptx"


cdef Module _load(bytes image, str kind, object device, object options, object entries):
    cdef Device dev = device_of(device)
    cdef Module m = Module.__new__(Module, _TOKEN)
    cdef CUjit_option opts[24]
    cdef void *vals[24]
    cdef unsigned int n = 0
    cdef char *info = NULL
    cdef char *err = NULL
    cdef CUmodule h = NULL
    cdef CUresult rc
    cdef const char *img = image
    cdef size_t v
    pairs = _jit_pairs(options)
    if len(pairs) > 20:
        raise ValueError("too many JIT options")
    dev.activate()
    info = <char *>PyMem_Malloc(LOG_BYTES)
    err = <char *>PyMem_Malloc(LOG_BYTES)
    try:
        if info == NULL or err == NULL:
            raise MemoryError()
        memset(info, 0, LOG_BYTES)
        memset(err, 0, LOG_BYTES)
        opts[0] = CU_JIT_INFO_LOG_BUFFER; vals[0] = info
        opts[1] = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES; vals[1] = <void *><size_t>LOG_BYTES
        opts[2] = CU_JIT_ERROR_LOG_BUFFER; vals[2] = err
        opts[3] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES; vals[3] = <void *><size_t>LOG_BYTES
        n = 4
        for opt, value in pairs:
            v = <size_t>value
            opts[n] = <CUjit_option><int>opt
            vals[n] = <void *>v
            n += 1
        with nogil:
            rc = D.cuModuleLoadDataEx(&h, img, n, opts, vals)
        info_log = info[:strlen(info)].decode("utf-8", errors="replace")
        error_log = err[:strlen(err)].decode("utf-8", errors="replace")
    finally:
        PyMem_Free(info)
        PyMem_Free(err)
    if rc != 0:
        log = error_log.strip() or info_log.strip()
        detail = f"({kind} image)"
        if log:
            detail += f"\nJIT error log:\n{log}"
        raise make_error(rc, "cuModuleLoadDataEx", detail)
    m.handle = h
    m.ctx = dev.ctx
    m.device = dev
    m.kind = kind
    m.info_log = info_log
    m.error_log = error_log
    m._entries = entries
    return m


@cython.final
cdef class Module:
    """A loaded module (``CUmodule``): kernels and globals from PTX, cubin or fatbin.

    Create with :meth:`from_ptx`, :meth:`from_cubin`, :meth:`from_fatbin` or
    :meth:`load`. The module lives in the primary context of ``device``; it is
    unloaded by :meth:`close` or when the last reference (including every Kernel
    and Global from it) goes away.

    Attributes
    ----------
    info_log, error_log : str
        The JIT logs of the load (``log_verbose=True`` fills the info log).
    kind : str
        ``'ptx'``, ``'cubin'`` or ``'fatbin'``.
    """

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("use Module.from_ptx(), from_cubin(), from_fatbin() or load()")
        self.handle = NULL
        self.ctx = NULL
        self._kernels = weakref.WeakValueDictionary()
        self._all_kernels = weakref.WeakSet()
        self.info_log = ""
        self.error_log = ""

    def __dealloc__(self):
        destroy_handle(self.ctx, <destroy_fn>D.cuModuleUnload, self.handle, b"cuModuleUnload", "Module.__dealloc__")
        self.handle = NULL

    @staticmethod
    def from_ptx(ptx, *, device=None, options=None):
        """Load (JIT-compile) PTX.

        Parameters
        ----------
        ptx : str or bytes
            PTX text.
        device : Device or int, optional
            Default: the current device.
        options : dict, optional
            JIT options: ``opt_level`` (0-4), ``max_registers``, ``target`` (e.g. 90 or
            ``'sm_90'``), ``threads_per_block``, ``generate_line_info``,
            ``generate_debug_info``, ``log_verbose``, ``fallback_strategy``, ``cache_mode``.

        Raises
        ------
        CudaInvalidPtxError
            The PTX does not compile; the message carries the JIT error log.
        """
        if isinstance(ptx, str):
            data = ptx.encode("utf-8")
        else:
            data = bytes(ptx)
        if b"\0" in data:
            data = data.split(b"\0", 1)[0]
        ensure_driver(ST)
        entries = parse_ptx_signatures(data.decode("utf-8", errors="replace"))
        return _load(data, "ptx", device, options, entries)

    @staticmethod
    def from_cubin(cubin, *, device=None, options=None):
        """Load a cubin (ELF) image. Kernel parameter types are then known by size
        only (``cuFuncGetParamInfo``); pass ``signature=`` to :meth:`get_kernel` for
        type-exact packing."""
        ensure_driver(ST)
        return _load(bytes(cubin), "cubin", device, options, None)

    @staticmethod
    def from_fatbin(fatbin, *, device=None, options=None):
        """Load a fatbin image (the driver picks the cubin for the device, or JITs its PTX)."""
        ensure_driver(ST)
        return _load(bytes(fatbin), "fatbin", device, options, None)

    @staticmethod
    def load(path, *, device=None, options=None):
        """Load a module file, recognized by content: cubin (ELF), fatbin (magic
        ``0xBA55ED50``) or PTX text."""
        with open(os.fspath(path), "rb") as f:
            data = f.read()
        kind = _sniff(data)
        if kind == "ptx":
            return Module.from_ptx(data, device=device, options=options)
        if kind == "cubin":
            return Module.from_cubin(data, device=device, options=options)
        return Module.from_fatbin(data, device=device, options=options)

    cdef int _live(self) except -1:
        if self.handle == NULL:
            raise ValueError("the module is closed")
        set_current(self.ctx)
        return 0

    @property
    def handle_int(self):
        """The ``CUmodule`` as an int (0 once closed)."""
        return <size_t>self.handle

    @property
    def kernel_names(self):
        """Names of the ``.entry`` functions (PTX modules), or None when unknown (cubin, fatbin)."""
        if self._entries is None:
            return None
        return tuple(self._entries)

    def ptx_signature(self, name):
        """The parameters of kernel ``name`` as parsed from the PTX: ``[(type, size, align), ...]``."""
        if self._entries is None:
            return None
        return list(self._entries[name])

    def get_kernel(self, name, signature=None):
        """The kernel ``name`` (cached per name and signature).

        Parameters
        ----------
        name : str
            The ``.entry`` name (mangled for C++ kernels unless declared ``extern "C"``).
        signature : sequence, optional
            Parameter types, overriding what the PTX says; needed for exact packing of
            cubin/fatbin kernels. Each item: ``'ptr'``, ``'u8'`` ... ``'u64'``,
            ``'i8'``/``'s8'`` ... ``'i64'``, ``'f16'``, ``'f32'``, ``'f64'``, ``'bool'``,
            numpy-style names (``'float32'``, ``'uint16'``), ``'b8[N]'`` or an int N or
            ``('bytes', N, align)`` for an N-byte struct, numpy dtypes, ctypes types.

        Raises
        ------
        CudaNotFoundError
            No kernel of that name; the message lists the kernels the PTX declares.
        """
        cdef CUfunction f = NULL
        cdef CUresult rc
        ensure_driver(ST)                     # forked child: refused even when cached
        if not isinstance(name, str):
            raise TypeError(f"kernel name must be a str, got {type(name).__name__}")
        key = kernel_key(name, signature)
        if key is not None:
            k = self._kernels.get(key)
            if k is not None:
                return k
        self._live()
        entry = name
        rc = D.cuModuleGetFunction(&f, self.handle, name.encode())
        if rc == CUDA_ERROR_NOT_FOUND:
            names = self._entry_names()
            found = mangled_matches(name, names or ())
            if len(found) > 1:
                raise ValueError(f"kernel name {name!r} is ambiguous: the module has {len(found)} C++ "
                                 f"overloads of it: {', '.join(found)}; pass the mangled name of one")
            if len(found) == 1:
                entry = found[0]
                rc = D.cuModuleGetFunction(&f, self.handle, entry.encode())
        if rc == CUDA_ERROR_NOT_FOUND:
            if names is not None:
                known = ", ".join(names) or "none"
                detail = f"no kernel named {name!r} in this module; its kernels: {known}"
            else:
                detail = (f"no kernel named {name!r} in this {self.kind} module (a C++ kernel is found by "
                          "its plain name only where the driver can list a module's kernels, "
                          f"{symbol_version_text(b'cuModuleEnumerateFunctions')} or newer; "
                          "otherwise pass the mangled name)")
            raise make_error(rc, "cuModuleGetFunction", detail)
        check(rc, b"cuModuleGetFunction")
        name = entry
        ptx_params = self._entries.get(name) if self._entries is not None else None
        k = make_kernel(self, f, self.ctx, self.device, name, ptx_params, signature)
        if key is not None:
            self._kernels[key] = k
        self._all_kernels.add(k)
        return k

    def _entry_names(self):
        """The module's kernel names: the PTX .entry names, or for cubins and fatbins
        what the driver lists (cuModuleEnumerateFunctions); None when unknown."""
        cdef unsigned int n = 0, i
        cdef const char *cname = NULL
        cdef CUfunction *funcs = NULL
        if self._entries is not None:
            return list(self._entries)
        if D.cuModuleGetFunctionCount == NULL or D.cuModuleEnumerateFunctions == NULL or D.cuFuncGetName == NULL:
            return None
        check(D.cuModuleGetFunctionCount(&n, self.handle), b"cuModuleGetFunctionCount")
        funcs = <CUfunction *>PyMem_Malloc(max(n, 1) * sizeof(CUfunction))
        if funcs == NULL:
            raise MemoryError()
        try:
            check(D.cuModuleEnumerateFunctions(funcs, n, self.handle), b"cuModuleEnumerateFunctions")
            out = []
            for i in range(n):
                check(D.cuFuncGetName(&cname, funcs[i]), b"cuFuncGetName")
                out.append(cname.decode("utf-8", errors="replace"))
        finally:
            PyMem_Free(funcs)
        return out

    def kernels(self):
        """Names of every kernel of the module: the PTX ``.entry`` names, or for a
        cubin/fatbin what the driver lists (needs ``cuModuleEnumerateFunctions``; the
        error names the driver version)."""
        self._live()
        names = self._entry_names()
        if names is None:
            require(<const void *>D.cuModuleEnumerateFunctions, b"cuModuleEnumerateFunctions",
                    b"Module.kernels() of a cubin or fatbin")
        return tuple(names)

    def get_global(self, name):
        """A ``__device__`` / ``.global`` variable of the module as a :class:`Global`
        (``.ptr``, ``.nbytes``, ``read()``, ``write()``)."""
        cdef CUdeviceptr p = 0
        cdef size_t n = 0
        cdef CUresult rc
        if not isinstance(name, str):
            raise TypeError(f"global name must be a str, got {type(name).__name__}")
        self._live()
        bname = name.encode()
        rc = D.cuModuleGetGlobal(&p, &n, self.handle, bname)
        if rc == CUDA_ERROR_NOT_FOUND:
            raise make_error(rc, "cuModuleGetGlobal", f"no global named {name!r} in this module")
        check(rc, b"cuModuleGetGlobal")
        cdef Global g = Global.__new__(Global, _TOKEN)
        g.module = self
        g.name = name
        g.dptr = p
        g.size = n
        return g

    def close(self):
        """Unload the module now. Kernels and plans from it then refuse to launch. Idempotent."""
        cdef CUresult rc
        if self.handle == NULL:
            return
        if ST.forked:
            ensure_driver(ST)          # ForkedProcessError: a forked child leaks it (destructor)
        for k in list(self._all_kernels):
            invalidate_kernel(<Kernel>k)
        self._kernels.clear()
        if bc_driver_usable(ST):
            set_current(self.ctx)
            rc = D.cuModuleUnload(self.handle)
            self.handle = NULL
            check(rc, b"cuModuleUnload")
        self.handle = NULL

    @property
    def is_closed(self):
        """True once :meth:`close` unloaded the module."""
        return self.handle == NULL

    closed = _renamed("Module.closed", "is_closed")   # the old spelling, for one release

    __enter__ = _enter_self      # `with x:` closes x at the end of the block
    __exit__ = _exit_close

    def __repr__(self):
        names = self.kernel_names
        what = f" kernels={list(names)}" if names is not None else ""
        state = " closed" if self.handle == NULL else ""
        return f"<barecuda.Module {self.kind}{what} on device {self.device.ordinal}{state}>"


@cython.final
cdef class Global:
    """A global variable of a module: device address and size, with host copies.

    Exposes ``__cuda_array_interface__`` (bytes) so it can be passed as a pointer
    argument or viewed by other libraries. Keeps its Module alive.
    """

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("Global objects come from Module.get_global()")

    @property
    def ptr(self):
        """Device address (int)."""
        return self.dptr

    @property
    def nbytes(self):
        """The global's size in bytes."""
        return self.size

    def __int__(self):
        return self.dptr

    def __len__(self):
        return self.size

    def __repr__(self):
        return f"<barecuda.Global {self.name!r} 0x{self.dptr:x} ({self.size} bytes)>"

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.size,), "typestr": "|u1", "data": (self.dptr, False), "version": 3,
                "strides": None}

    def read(self):
        """Copy the variable to the host (synchronous) and return it as bytes."""
        cdef bytearray out = bytearray(self.size)
        cdef char *dst = out
        cdef CUresult rc
        cdef CUdeviceptr src = self.dptr
        cdef size_t n = self.size
        self.module._live()
        with nogil:
            rc = D.cuMemcpyDtoH(dst, src, n)
        check(rc, b"cuMemcpyDtoH")
        return bytes(out)

    def write(self, data, size_t offset=0):
        """Copy a bytes-like object into the variable at ``offset`` (synchronous)."""
        cdef Py_buffer view
        cdef CUresult rc
        self.module._live()
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            if offset > self.size or <size_t>view.len > self.size - offset:   # no wrap-around
                raise ValueError(f"{view.len} bytes at offset {offset} do not fit in global {self.name!r} "
                                 f"of {self.size} bytes")
            with nogil:
                rc = D.cuMemcpyHtoD(self.dptr + offset, view.buf, view.len)
            check(rc, b"cuMemcpyHtoD")
        finally:
            PyBuffer_Release(&view)
