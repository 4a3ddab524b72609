"""Kernels and the launch path.

Owns: ``Kernel`` (a CUfunction with its parameter layout, limits and attributes),
argument packing (C, driven by a per-kernel table of parameter descriptors computed
once), ``LaunchConfig`` (``cuLaunchKernelEx`` attributes: clusters, cooperative
launch, priority, programmatic serialization), ``LaunchPlan`` (arguments packed
once, launched many times), ``PlanList`` and ``launch_all`` (many plans issued from
one C loop).

The hot path (``Kernel.launch``, ``LaunchPlan.__call__``, ``PlanList.__call__``) does
no heap allocation and no driver call besides the launch itself: arguments are
packed into a buffer on the C stack (heap only for parameter blocks over
``BC_SMALL_ARGBYTES``), type dispatch is by exact type against cached types, and
the context binding is a per-thread compare. Whether the GIL is released around
the launch is one switch, ``set_launch_releases_gil`` (default: kept, see
bc_pack.h for the measurement behind it).
"""
cimport cython
from libc.stdint cimport uint32_t, uint16_t, int32_t, uint64_t, int64_t, UINT64_MAX
from libc.string cimport memcpy, memset
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.tuple cimport PyTuple_GET_SIZE
from cpython.pycapsule cimport PyCapsule_IsValid, PyCapsule_GetPointer

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current
from barecuda._device cimport Device, device_of
from barecuda._stream cimport Stream, stream_handle
from barecuda._memory cimport DeviceBuffer, note_use
from barecuda._errors import make_error, DriverVersionError

cdef extern from "Python.h":
    # No exception is possible for an exact int, so no error check is generated.
    long long _bc_as_ll "PyLong_AsLongLongAndOverflow"(object o, int *overflow)

cdef extern from "barecuda/bc_pack.h" nogil:
    const long long bc_kind_min[]
    const unsigned long long bc_kind_max[]
    const int bc_kind_class[]
    int bc_kind_is_pointer(int kind)
    int bc_kind_is_float(int kind)
    void bc_store_int(char *slot, uint32_t size, unsigned long long v)
    void bc_store_f16(char *slot, double d)
    void bc_store_f32(char *slot, double d)
    void bc_store_f64(char *slot, double d)
    uint16_t bc_double_to_half(double d)
    uint32_t bc_align_up(uint32_t v, uint32_t a)

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()

# The one GIL switch for every launch path (Kernel.launch, plans, plan lists).
cdef bint _release_gil = BC_LAUNCH_RELEASES_GIL

_TOKEN = object()

# Kind names, indexed by BC_K_*; sizes likewise (-1: given per parameter).
KIND_NAMES = ("ptr", "u64", "s64", "f64", "u32", "s32", "f32", "u16", "s16", "f16",
              "u8", "s8", "bool", "b8", "b16", "b32", "b64", "bytes")
cdef int _KIND_SIZE[18]
_KIND_SIZE[:] = [8, 8, 8, 8, 4, 4, 4, 2, 2, 2, 1, 1, 1, 1, 2, 4, 8, -1]

# Names accepted in a user signature. Integer names carry their width in bits
# (as in PTX and Rust: "i8" is int8), not numpy's byte codes.
_SIG_NAMES = {
    "ptr": BC_K_PTR, "pointer": BC_K_PTR, "void*": BC_K_PTR, "p": BC_K_PTR,
    "u64": BC_K_U64, "uint64": BC_K_U64, "size_t": BC_K_U64, "unsigned long long": BC_K_U64,
    "s64": BC_K_S64, "i64": BC_K_S64, "int64": BC_K_S64, "long long": BC_K_S64,
    "f64": BC_K_F64, "float64": BC_K_F64, "double": BC_K_F64,
    "u32": BC_K_U32, "uint32": BC_K_U32, "unsigned int": BC_K_U32, "uint": BC_K_U32,
    "s32": BC_K_S32, "i32": BC_K_S32, "int32": BC_K_S32, "int": BC_K_S32,
    "f32": BC_K_F32, "float32": BC_K_F32, "float": BC_K_F32,
    "u16": BC_K_U16, "uint16": BC_K_U16, "unsigned short": BC_K_U16,
    "s16": BC_K_S16, "i16": BC_K_S16, "int16": BC_K_S16, "short": BC_K_S16,
    "f16": BC_K_F16, "float16": BC_K_F16, "half": BC_K_F16,
    "u8": BC_K_U8, "uint8": BC_K_U8, "unsigned char": BC_K_U8,
    "s8": BC_K_S8, "i8": BC_K_S8, "int8": BC_K_S8, "signed char": BC_K_S8,
    "bool": BC_K_BOOL, "bool_": BC_K_BOOL,
    "b8": BC_K_B8, "b16": BC_K_B16, "b32": BC_K_B32, "b64": BC_K_B64,
}
# PTX parameter types (what _module's parser reports) -> kind.
_PTX_KINDS = {
    "ptr": BC_K_PTR, "u64": BC_K_U64, "s64": BC_K_S64, "f64": BC_K_F64, "b64": BC_K_B64,
    "u32": BC_K_U32, "s32": BC_K_S32, "f32": BC_K_F32, "b32": BC_K_B32,
    "u16": BC_K_U16, "s16": BC_K_S16, "f16": BC_K_F16, "b16": BC_K_B16, "bf16": BC_K_B16,
    "u8": BC_K_U8, "s8": BC_K_S8, "b8": BC_K_B8, "pred": BC_K_BOOL,
    "f16x2": BC_K_B32, "bf16x2": BC_K_B32,
}
_CTYPES_CODES = {"b": "s8", "B": "u8", "h": "s16", "H": "u16", "?": "bool"}

# Every CUfunction_attribute by lower-case name without the prefix.
FUNC_ATTRIBUTES = {
    "max_threads_per_block": 0,
    "shared_size_bytes": 1,
    "const_size_bytes": 2,
    "local_size_bytes": 3,
    "num_regs": 4,
    "ptx_version": 5,
    "binary_version": 6,
    "cache_mode_ca": 7,
    "max_dynamic_shared_size_bytes": 8,
    "preferred_shared_memory_carveout": 9,
    "cluster_size_must_be_set": 10,
    "required_cluster_width": 11,
    "required_cluster_height": 12,
    "required_cluster_depth": 13,
    "non_portable_cluster_size_allowed": 14,
    "cluster_scheduling_policy_preference": 15,
}


def set_launch_releases_gil(flag):
    """Choose whether launches release the GIL around ``cuLaunchKernel``.

    The default (False) keeps the GIL: the launch call is short, and releasing and
    re-taking the GIL costs more than it saves unless several threads launch at
    once. Returns the previous setting. Meant for the benchmark and for programs
    that launch from many threads.
    """
    global _release_gil
    old = bool(_release_gil)
    _release_gil = bool(flag)
    return old


def launch_releases_gil():
    """Whether launches currently release the GIL (see :func:`set_launch_releases_gil`)."""
    return bool(_release_gil)


# ----------------------------------------------------------------- signatures
cdef object _func_attr_code(object name):
    if isinstance(name, str):
        key = name.lower()
        if key.startswith("cu_func_attribute_"):
            key = key[len("cu_func_attribute_"):]
        try:
            return FUNC_ATTRIBUTES[key]
        except KeyError:
            raise ValueError(f"unknown function attribute {name!r}; known: {', '.join(FUNC_ATTRIBUTES)}") from None
    return int(name)


cdef tuple _sig_entry(object s, Py_ssize_t j):
    """(type name, kind, size, align) for one element of a user signature."""
    cdef int kind
    if isinstance(s, int) and not isinstance(s, bool):
        if s <= 0:
            raise ValueError(f"signature[{j}]: a struct size must be positive, got {s}")
        return (f"b8[{s}]", BC_K_BYTES, s, 1)
    if isinstance(s, tuple) and len(s) in (2, 3) and s[0] == "bytes":
        size = int(s[1])
        align = int(s[2]) if len(s) == 3 else 1
        if size <= 0 or align <= 0 or align & (align - 1):
            raise ValueError(f"signature[{j}]: bad struct spec {s!r}: want ('bytes', size[, power-of-two align])")
        return (f"b8[{size}]", BC_K_BYTES, size, align)
    if isinstance(s, str):
        key = s.strip().lower()
        if key in _SIG_NAMES:
            kind = _SIG_NAMES[key]
            return (KIND_NAMES[kind], kind, _KIND_SIZE[kind], _KIND_SIZE[kind])
        if key.endswith("]") and "[" in key:
            base, _, num = key[:len(key) - 1].partition("[")
            if base.strip() in ("b8", "bytes", "u8") and num.strip().isdigit() and int(num) > 0:
                return (f"b8[{int(num)}]", BC_K_BYTES, int(num), 1)
        raise ValueError(f"signature[{j}]: unknown parameter type {s!r}; use one of "
                         f"{', '.join(sorted(set(KIND_NAMES) - {'bytes'}))}, 'b8[N]' or ('bytes', N, align)")
    # numpy dtypes and scalar types, ctypes types
    mod = getattr(type(s), "__module__", "") or ""
    if mod.startswith("numpy") or (isinstance(s, type) and getattr(s, "__module__", "").startswith("numpy")):
        import numpy
        dt = numpy.dtype(s)
        if dt.names is not None or dt.kind == "V":
            return (f"b8[{dt.itemsize}]", BC_K_BYTES, dt.itemsize, dt.alignment)
        return _sig_entry(dt.name, j)
    if isinstance(s, type) and getattr(s, "__module__", "") == "ctypes" or hasattr(s, "_fields_") or hasattr(s, "_type_"):
        import ctypes
        size = ctypes.sizeof(s)
        code = getattr(s, "_type_", None)
        if isinstance(code, str) and len(code) == 1:
            if code in "fdg":
                return _sig_entry({4: "f32", 8: "f64"}.get(size, f"b8[{size}]"), j)
            if code in "P":
                return _sig_entry("ptr", j)
            if code in _CTYPES_CODES:
                return _sig_entry(_CTYPES_CODES[code], j)
            if code in "iIlLqQ":
                return _sig_entry(("u" if code.isupper() else "s") + str(size * 8), j)
        return (f"b8[{size}]", BC_K_BYTES, size, ctypes.alignment(s))
    raise ValueError(f"signature[{j}]: cannot understand parameter type {s!r}")


cdef tuple _size_entry(size_t size):
    if size == 1:
        return ("b8", BC_K_B8, 1, 1)
    if size == 2:
        return ("b16", BC_K_B16, 2, 2)
    if size == 4:
        return ("b32", BC_K_B32, 4, 4)
    if size == 8:
        return ("b64", BC_K_B64, 8, 8)
    return (f"b8[{size}]", BC_K_BYTES, size, 1)


cdef tuple _ptx_entry(object t, size_t size, size_t align):
    cdef int kind
    if t in _PTX_KINDS:
        kind = _PTX_KINDS[t]
        if _KIND_SIZE[kind] == <int>size:
            return (t, kind, size, align)
    return (t if "[" in t else f"b8[{size}]", BC_K_BYTES, size, align)


cdef Kernel make_kernel(object module, CUfunction func, CUcontext ctx, Device device, str name,
                        object ptx_params, object signature):
    cdef Kernel k = Kernel.__new__(Kernel, _TOKEN)
    cdef size_t off = 0, sz = 0
    cdef size_t idx = 0
    cdef CUresult rc
    cdef int value = 0
    cdef Py_ssize_t i, n
    cdef uint32_t pos = 0
    k.func = func
    k.ctx = ctx
    k.module = module
    k.device = device
    k.name = name
    set_current(ctx)
    drv = None
    if D.cuFuncGetParamInfo != NULL:
        drv = []
        while True:
            rc = D.cuFuncGetParamInfo(func, idx, &off, &sz)
            if rc != 0:
                break
            drv.append((off, sz))
            idx += 1
        if rc != 1 and not drv:          # not "past the last one": the driver cannot tell
            drv = None
    if signature is not None:
        if isinstance(signature, (str, bytes)):
            signature = [x for x in str(signature).replace(",", " ").split()]
        entries = [_sig_entry(s, j) for j, s in enumerate(signature)]
        if drv is not None:
            if len(drv) != len(entries):
                raise ValueError(f"kernel {name!r}: the signature has {len(entries)} parameters but the "
                                 f"driver reports {len(drv)}")
            for j, (e, d) in enumerate(zip(entries, drv)):
                if e[2] != d[1]:
                    raise ValueError(f"kernel {name!r}: signature[{j}] is {e[0]} ({e[2]} bytes) but the "
                                     f"driver reports a {d[1]}-byte parameter")
    elif ptx_params is not None:
        entries = [_ptx_entry(t, s, a) for (t, s, a) in ptx_params]
        if drv is not None and (len(drv) != len(entries) or
                                any(e[2] != d[1] for e, d in zip(entries, drv))):
            entries = [_size_entry(d[1]) for d in drv]     # the driver knows best
    elif drv is not None:
        entries = [_size_entry(d[1]) for d in drv]
    else:
        entries = None
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
    # Limits, cached once.
    cdef int da[7]
    for i in range(7):
        check(D.cuDeviceGetAttribute(&da[i], <CUdevice_attribute>(1 + i), device.handle), b"cuDeviceGetAttribute")
    k.max_block[0] = da[1]; k.max_block[1] = da[2]; k.max_block[2] = da[3]
    k.max_grid[0] = da[4]; k.max_grid[1] = da[5]; k.max_grid[2] = da[6]
    check(D.cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func), b"cuFuncGetAttribute")
    k.max_threads = <unsigned int>min(value, da[0])
    check(D.cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, func), b"cuFuncGetAttribute")
    k.max_dyn_smem = <unsigned int>value
    return k


cdef void invalidate_kernel(Kernel k) noexcept:
    k.func = NULL


# ------------------------------------------------------------------ errors
cdef int _raise_closed(Kernel k) except -1:
    raise ValueError(f"kernel {k.name!r} belongs to a module that was closed; load the module again")


cdef str _sig_text(Kernel k):
    if k._types is None:
        return f"{k.name}(?)"
    return f"{k.name}({', '.join(k._types)})"


cdef int _raise_count(Kernel k, Py_ssize_t got) except -1:
    if k.nparams < 0:
        raise TypeError(f"kernel {k.name!r}: its parameter layout is unknown (no PTX to read it from, and "
                        "the driver is older than 12.4 so cuFuncGetParamInfo is missing); pass "
                        "signature=(...) to Module.get_kernel")
    raise TypeError(f"kernel {_sig_text(k)} takes {k.nparams} argument{'s' if k.nparams != 1 else ''}, "
                    f"got {got}")


cdef str _expected(Kernel k, Py_ssize_t i):
    cdef const bc_param *p = &k.params[i]
    cdef int kind = p.kind
    if kind == BC_K_BYTES:
        return f"a bytes-like object of exactly {p.size} bytes (struct parameter)"
    if bc_kind_is_pointer(kind):
        extra = " or a float" if kind == BC_K_B64 else ""
        return ("a pointer: DeviceBuffer, int address, or an object with __cuda_array_interface__ "
                f"or __dlpack__{extra}")
    if bc_kind_is_float(kind):
        return "a float (or int, numpy/ctypes scalar)"
    if kind in (BC_K_B16, BC_K_B32):
        return "an int or a float"
    return "an int (or bool, numpy/ctypes integer scalar)"


cdef int _raise_type(Kernel k, Py_ssize_t i, object arg) except -1:
    raise TypeError(f"kernel {_sig_text(k)}: argument {i} ({k._types[i]}) expects {_expected(k, i)}, "
                    f"got {type(arg).__name__}")


cdef int _raise_range(Kernel k, Py_ssize_t i, object value) except -1:
    cdef int kind = k.params[i].kind
    raise OverflowError(f"kernel {_sig_text(k)}: argument {i} ({k._types[i]}) must be in "
                        f"[{bc_kind_min[kind]}, {bc_kind_max[kind]}], got {value}")


cdef int _launch_failed(Kernel k, CUresult rc, str call) except -1:
    raise make_error(rc, call, f"while launching kernel {_sig_text(k)}")


# ------------------------------------------------------------------ packing
cdef inline bint _float_ok(int kind) noexcept nogil:
    return kind == BC_K_F32 or kind == BC_K_F64 or kind == BC_K_F16 or \
        kind == BC_K_B16 or kind == BC_K_B32 or kind == BC_K_B64


cdef inline void _store_float(int kind, char *slot, double d) noexcept nogil:
    if kind == BC_K_F32 or kind == BC_K_B32:
        bc_store_f32(slot, d)
    elif kind == BC_K_F64 or kind == BC_K_B64:
        bc_store_f64(slot, d)
    else:
        bc_store_f16(slot, d)


cdef int _pack_int(Kernel k, Py_ssize_t i, object v, char *slot) except -1:
    """v: an int (or subclass). Range-checked store, or float conversion for float kinds."""
    cdef const bc_param *p = &k.params[i]
    cdef int kind = p.kind
    cdef int ovf = 0
    cdef long long x
    cdef unsigned long long ux
    if bc_kind_class[kind] == 2:
        try:
            _store_float(kind, slot, float(v))
        except OverflowError:
            raise OverflowError(f"kernel {_sig_text(k)}: argument {i} ({k._types[i]}): int {v} is too "
                                "large to convert to a float") from None
        return 0
    if bc_kind_class[kind] != 1:
        return _raise_type(k, i, v)
    x = _bc_as_ll(v, &ovf)
    if ovf == 0:
        if x >= bc_kind_min[kind] and (x < 0 or <unsigned long long>x <= bc_kind_max[kind]):
            bc_store_int(slot, p.size, <unsigned long long>x)
            return 0
    elif ovf > 0 and bc_kind_max[kind] == UINT64_MAX:
        if v < 18446744073709551616:
            ux = v
            bc_store_int(slot, p.size, ux)
            return 0
    return _raise_range(k, i, v)


cdef int _pack_bytes(Kernel k, Py_ssize_t i, object arg, char *slot) except -1:
    cdef const bc_param *p = &k.params[i]
    cdef Py_buffer view
    if type(arg) is bytes and len(<bytes>arg) == p.size:
        memcpy(slot, <char *>(<bytes>arg), p.size)
        return 0
    if getattr(type(arg), "__module__", None) == "numpy" and hasattr(arg, "tobytes") and not hasattr(arg, "shape"):
        arg = arg.tobytes()
    try:
        PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        return _raise_type(k, i, arg)
    try:
        if <size_t>view.len != p.size:
            raise TypeError(f"kernel {_sig_text(k)}: argument {i} ({k._types[i]}) expects exactly "
                            f"{p.size} bytes, got a {type(arg).__name__} of {view.len} bytes")
        memcpy(slot, view.buf, p.size)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef extern from *:
    """
    typedef struct { void *data; int32_t device_type; int32_t device_id; int32_t ndim;
                     uint8_t code, bits; uint16_t lanes; int64_t *shape; int64_t *strides;
                     uint64_t byte_offset; } bc_dltensor_view;
    /* DLManagedTensor starts with the DLTensor; DLManagedTensorVersioned has
       version (8), manager_ctx, deleter, flags before it. */
    static bc_dltensor_view *bc_dl_legacy(void *p) { return (bc_dltensor_view *)p; }
    static bc_dltensor_view *bc_dl_versioned(void *p) { return (bc_dltensor_view *)((char *)p + 32); }
    """
    ctypedef struct bc_dltensor_view:
        void *data
        int32_t device_type
        int32_t device_id
        uint64_t byte_offset
    bc_dltensor_view *bc_dl_legacy(void *p)
    bc_dltensor_view *bc_dl_versioned(void *p)


cdef int _pointer_of(object arg, unsigned long long *out) except -1:
    """1 and the device address when arg is pointer-like (CAI, DLPack), else 0."""
    cdef bc_dltensor_view *t = NULL
    cai = getattr(arg, "__cuda_array_interface__", None)
    if cai is not None:
        ptr = cai["data"][0]
        out[0] = 0 if ptr is None else <unsigned long long>ptr
        return 1
    dl = getattr(arg, "__dlpack__", None)
    if dl is not None:
        cap = dl()
        if PyCapsule_IsValid(cap, "dltensor"):
            t = bc_dl_legacy(PyCapsule_GetPointer(cap, "dltensor"))
        elif PyCapsule_IsValid(cap, "dltensor_versioned"):
            t = bc_dl_versioned(PyCapsule_GetPointer(cap, "dltensor_versioned"))
        else:
            raise TypeError(f"{type(arg).__name__}.__dlpack__() did not return a DLPack capsule")
        if t.device_type not in (2, 3, 13):     # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
            raise TypeError(f"{type(arg).__name__} lives on DLPack device type {t.device_type}, "
                            "not on a CUDA device")
        out[0] = <unsigned long long>t.data + t.byte_offset
        # The capsule is not consumed: its destructor releases the producer's
        # reference; arg itself keeps the memory alive.
        return 1
    return 0


cdef int _pack_scalar_obj(Kernel k, Py_ssize_t i, object arg, char *slot, str category, size_t size,
                          object raw) except -1:
    """numpy / ctypes scalars: raw bytes when the width matches, else by value."""
    cdef const bc_param *p = &k.params[i]
    cdef int kind = p.kind
    cdef bytes b
    if category == "i":
        if bc_kind_class[kind] == 1 and size == p.size:
            b = raw()
            memcpy(slot, <char *>b, p.size)
            return 0
        return _pack_int(k, i, int(arg), slot)
    if category == "f":
        if not _float_ok(kind):
            return _raise_type(k, i, arg)
        if size == p.size:
            b = raw()
            memcpy(slot, <char *>b, p.size)
            return 0
        _store_float(kind, slot, float(arg))
        return 0
    return _raise_type(k, i, arg)


cdef int _pack_slow(Kernel k, Py_ssize_t i, object arg, char *slot) except -1:
    """Everything the fast path in _pack_one does not handle."""
    cdef const bc_param *p = &k.params[i]
    cdef int kind = p.kind
    cdef int cls = bc_kind_class[kind]
    cdef unsigned long long addr = 0
    if kind == BC_K_BYTES:
        return _pack_bytes(k, i, arg, slot)
    if isinstance(arg, DeviceBuffer):
        if bc_kind_is_pointer(kind):
            bc_store_int(slot, 8, (<DeviceBuffer>arg).ptr)
            return 0
        return _raise_type(k, i, arg)
    if isinstance(arg, bool):
        if cls == 1:
            bc_store_int(slot, p.size, 1 if arg else 0)
            return 0
        return _raise_type(k, i, arg)
    if isinstance(arg, int):
        return _pack_int(k, i, int(arg), slot)
    if isinstance(arg, float):
        if _float_ok(kind):
            _store_float(kind, slot, float(arg))
            return 0
        return _raise_type(k, i, arg)
    mod = getattr(type(arg), "__module__", None)
    if mod == "numpy" and hasattr(arg, "dtype") and getattr(arg, "ndim", 1) == 0:
        dt = arg.dtype
        cat = "i" if dt.kind in "iub" else ("f" if dt.kind == "f" else "")
        return _pack_scalar_obj(k, i, arg, slot, cat, dt.itemsize, arg.tobytes)
    if mod == "ctypes":
        import ctypes
        if isinstance(arg, ctypes._SimpleCData):
            code = type(arg)._type_
            cat = "f" if code in "fdg" else ("i" if code in "bBhHiIlLqQ?P" else "")
            raw = lambda: bytes(memoryview(arg).cast("B"))
            if code == "P":
                if not bc_kind_is_pointer(kind) and kind != BC_K_S64:
                    return _raise_type(k, i, arg)
                return _pack_int(k, i, arg.value or 0, slot)
            if cat == "i" and arg.value is not None:
                if bc_kind_class[kind] == 1 and ctypes.sizeof(arg) == p.size:
                    return _pack_scalar_obj(k, i, arg, slot, cat, ctypes.sizeof(arg), raw)
                return _pack_int(k, i, int(arg.value), slot)
            if cat == "f":
                return _pack_scalar_obj(k, i, arg.value, slot, cat, ctypes.sizeof(arg), raw)
        return _raise_type(k, i, arg)
    if bc_kind_is_pointer(kind):
        try:
            found = _pointer_of(arg, &addr)
        except (TypeError, KeyError, IndexError) as exc:
            raise TypeError(f"kernel {_sig_text(k)}: argument {i} ({k._types[i]}): {exc}") from None
        if found:
            bc_store_int(slot, 8, addr)
            return 0
    if cls == 1 and hasattr(type(arg), "__index__"):
        import operator
        return _pack_int(k, i, operator.index(arg), slot)
    return _raise_type(k, i, arg)


cdef inline int _pack_one(Kernel k, Py_ssize_t i, object arg, char *slot, CUstream hs) except -1:
    """Pack argument i into slot. Exact-type checks, most frequent first."""
    cdef const bc_param *p = &k.params[i]
    cdef int kind = p.kind
    cdef int ovf = 0
    cdef long long x
    cdef type t = type(arg)
    if t is DeviceBuffer:
        if bc_kind_is_pointer(kind):
            note_use(<DeviceBuffer>arg, hs)
            bc_store_int(slot, 8, (<DeviceBuffer>arg).ptr)
            return 0
        return _raise_type(k, i, arg)
    if t is int:
        if bc_kind_class[kind] == 1:
            x = _bc_as_ll(arg, &ovf)
            if ovf == 0 and x >= bc_kind_min[kind] and (x < 0 or <unsigned long long>x <= bc_kind_max[kind]):
                bc_store_int(slot, p.size, <unsigned long long>x)
                return 0
        return _pack_int(k, i, arg, slot)
    if t is float:
        if _float_ok(kind):
            _store_float(kind, slot, PyFloat_AS_DOUBLE(arg))
            return 0
        return _raise_type(k, i, arg)
    if t is bool:
        if bc_kind_class[kind] == 1:
            bc_store_int(slot, p.size, 1 if arg is True else 0)
            return 0
        return _raise_type(k, i, arg)
    return _pack_slow(k, i, arg, slot)


cdef inline int _pack_args(Kernel k, tuple args, char *buf, void **ptrs, CUstream hs) except -1:
    cdef Py_ssize_t i
    cdef char *slot
    for i in range(k.nparams):
        slot = buf + k.params[i].offset
        ptrs[i] = slot
        _pack_one(k, i, args[i], slot, hs)
    return 0


# --------------------------------------------------------- grid / block / smem
cdef int _dims_slow(Kernel k, object obj, unsigned int *out, const unsigned int *lim, str what) except -1:
    import operator
    if isinstance(obj, (tuple, list)):
        vals = list(obj)
    else:
        vals = [obj]
    if not 1 <= len(vals) <= 3:
        raise ValueError(f"{what} must be an int or a tuple of 1 to 3 ints, got {obj!r}")
    ints = []
    for j, v in enumerate(vals):
        try:
            ints.append(operator.index(v))
        except TypeError:
            raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {obj!r}") from None
    while len(ints) < 3:
        ints.append(1)
    for j in range(3):
        if ints[j] <= 0:
            raise ValueError(f"{what} {tuple(ints)}: every dimension must be >= 1")
        if ints[j] > lim[j]:
            raise ValueError(f"{what} {tuple(ints)}: dimension {'xyz'[j]}={ints[j]} exceeds the device "
                             f"limit ({lim[0]}, {lim[1]}, {lim[2]}) (kernel {k.name!r})")
    out[0] = ints[0]
    out[1] = ints[1]
    out[2] = ints[2]
    return 0


cdef inline int _dims(Kernel k, object obj, unsigned int *out, const unsigned int *lim, str what) except -1:
    cdef long long v
    cdef int ovf = 0
    if type(obj) is int:
        v = _bc_as_ll(obj, &ovf)
        if ovf == 0 and 0 < v <= lim[0]:
            out[0] = <unsigned int>v
            out[1] = 1
            out[2] = 1
            return 0
    return _dims_slow(k, obj, out, lim, what)


cdef int _smem_slow(Kernel k, object smem, unsigned int *out) except -1:
    import operator
    try:
        v = operator.index(smem)
    except TypeError:
        raise TypeError(f"shared_mem must be an int (bytes), got {type(smem).__name__}") from None
    if v < 0:
        raise ValueError(f"shared_mem must be >= 0, got {v}")
    if v > k.max_dyn_smem:
        raise ValueError(
            f"shared_mem={v} bytes exceeds kernel {k.name!r}'s limit of {k.max_dyn_smem} bytes of dynamic "
            f"shared memory; raise the limit with kernel.set_max_dynamic_shared_memory({v}) (up to the "
            "device's max_shared_memory_per_block_optin minus the kernel's static shared memory)")
    out[0] = <unsigned int>v
    return 0


cdef inline int _launch_dims(Kernel k, object grid, object block, object smem,
                             unsigned int *g, unsigned int *b, unsigned int *s) except -1:
    cdef long long v
    cdef int ovf = 0
    _dims(k, grid, g, k.max_grid, "grid")
    _dims(k, block, b, k.max_block, "block")
    if <unsigned long long>b[0] * b[1] * b[2] > k.max_threads:
        raise ValueError(f"block ({b[0]}, {b[1]}, {b[2]}) has {b[0] * b[1] * b[2]} threads; kernel "
                         f"{k.name!r} allows at most {k.max_threads} threads per block")
    if type(smem) is int:
        v = _bc_as_ll(smem, &ovf)
        if ovf == 0 and 0 <= v <= k.max_dyn_smem:
            s[0] = <unsigned int>v
            return 0
    return _smem_slow(k, smem, s)


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
        return f"<barecuda.Kernel {_sig_text(self)}>"

    @property
    def handle(self):
        """The ``CUfunction`` as an int (0 once the module is closed)."""
        return <size_t>self.func

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
            _raise_closed(self)
        set_current(self.ctx)
        return 0

    def attribute(self, name):
        """Value of one ``CUfunction_attribute``, by name (``"num_regs"``) or number."""
        cdef int value = 0
        cdef int code = _func_attr_code(name)
        self._live()
        check(D.cuFuncGetAttribute(&value, <CUfunction_attribute>code, self.func), b"cuFuncGetAttribute")
        return value

    def attributes(self):
        """Every function attribute the driver reports, as a dict."""
        cdef int value = 0
        cdef CUresult rc
        self._live()
        out = {}
        for key, code in FUNC_ATTRIBUTES.items():
            rc = D.cuFuncGetAttribute(&value, <CUfunction_attribute><int>code, self.func)
            if rc == 0:
                out[key] = value
        return out

    def set_attribute(self, name, int value):
        """Set a function attribute (``cuFuncSetAttribute``), e.g.
        ``"non_portable_cluster_size_allowed"`` or ``"preferred_shared_memory_carveout"``."""
        cdef int code = _func_attr_code(name)
        cdef int v = 0
        self._live()
        check(D.cuFuncSetAttribute(self.func, <CUfunction_attribute>code, value), b"cuFuncSetAttribute")
        if code == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
            check(D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.func),
                  b"cuFuncGetAttribute")
            self.max_dyn_smem = <unsigned int>v

    def set_max_dynamic_shared_memory(self, int nbytes):
        """Allow launches with up to ``nbytes`` of dynamic shared memory (above the
        default 48 KiB needs this; the ceiling is the device's opt-in maximum)."""
        self.set_attribute("max_dynamic_shared_size_bytes", nbytes)

    def max_active_blocks_per_sm(self, int block_size, size_t shared_mem=0):
        """Occupancy: how many blocks of ``block_size`` threads fit on one SM."""
        cdef int n = 0
        self._live()
        check(D.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, self.func, block_size, shared_mem),
              b"cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return n

    def suggested_block_size(self, size_t shared_mem=0, int block_size_limit=0):
        """``(min_grid_size, block_size)`` that maximizes occupancy (``cuOccupancyMaxPotentialBlockSize``)."""
        cdef int min_grid = 0, block = 0
        self._live()
        check(D.cuOccupancyMaxPotentialBlockSize(&min_grid, &block, self.func, NULL, shared_mem,
                                                 block_size_limit), b"cuOccupancyMaxPotentialBlockSize")
        return (min_grid, block)

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

        Raises
        ------
        TypeError
            Wrong number or type of arguments.
        OverflowError
            An integer out of its parameter's range.
        ValueError
            Zero, negative or too-large grid/block, too much shared memory.
        """
        cdef unsigned int g[3]
        cdef unsigned int b[3]
        cdef unsigned int smem = 0
        cdef CUstream hs = NULL
        cdef char sbuf[BC_SMALL_ARGBYTES]
        cdef void *sptrs[BC_SMALL_NPARAMS]
        cdef CUresult rc
        cdef CUfunction f = self.func
        if f == NULL:
            _raise_closed(self)
        if PyTuple_GET_SIZE(args) != self.nparams:
            _raise_count(self, PyTuple_GET_SIZE(args))
        _launch_dims(self, grid, block, shared_mem, g, b, &smem)
        stream_handle(stream, &hs)
        if self.argbytes > BC_SMALL_ARGBYTES or self.nparams > BC_SMALL_NPARAMS:
            return _launch_heap(self, args, g, b, smem, hs)
        _pack_args(self, args, sbuf, sptrs, hs)
        set_current(self.ctx)
        if _release_gil:
            with nogil:
                rc = D.cuLaunchKernel(f, g[0], g[1], g[2], b[0], b[1], b[2], smem, hs, sptrs, NULL)
        else:
            rc = D.cuLaunchKernel(f, g[0], g[1], g[2], b[0], b[1], b[2], smem, hs, sptrs, NULL)
        if rc != 0:
            _launch_failed(self, rc, "cuLaunchKernel")

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
        cdef char *buf = sbuf
        cdef void **ptrs = sptrs
        cdef CUresult rc
        if self.func == NULL:
            _raise_closed(self)
        if PyTuple_GET_SIZE(args) != self.nparams:
            _raise_count(self, PyTuple_GET_SIZE(args))
        _config_rec(self, config, &r)
        big = self.argbytes > BC_SMALL_ARGBYTES or self.nparams > BC_SMALL_NPARAMS
        if big:
            buf = <char *>PyMem_Malloc(self.argbytes)
            ptrs = <void **>PyMem_Malloc(self.nparams * sizeof(void *))
            if buf == NULL or ptrs == NULL:
                PyMem_Free(buf)
                PyMem_Free(ptrs)
                raise MemoryError()
        try:
            _pack_args(self, args, buf, ptrs, r.stream)
            r.params = ptrs
            _issue(self, &r)
        finally:
            if big:
                PyMem_Free(buf)
                PyMem_Free(ptrs)

    def bind(self, grid, block, *args, stream=None, shared_mem=0):
        """Pack the arguments once and return a :class:`LaunchPlan`; ``plan()``
        launches with no packing. Same checks as :meth:`launch`."""
        cdef LaunchPlan plan = _new_plan(self, args)
        _launch_dims(self, grid, block, shared_mem, plan.rec.grid, plan.rec.block, &plan.rec.smem)
        plan._set_stream(stream)
        plan._pack_all()
        return plan

    def bind_config(self, LaunchConfig config not None, *args):
        """Like :meth:`bind`, with a :class:`LaunchConfig` (validated once, here)."""
        cdef LaunchPlan plan = _new_plan(self, args)
        _config_rec(self, config, &plan.rec)
        plan.rec.params = plan.ptrs if self.nparams > 0 else NULL
        plan.config = config
        plan._stream = config.stream
        plan._pack_all()
        return plan


cdef int _launch_heap(Kernel k, tuple args, unsigned int *g, unsigned int *b, unsigned int smem,
                      CUstream hs) except -1:
    """Launch path for parameter blocks too big for the stack buffer."""
    cdef char *buf = <char *>PyMem_Malloc(max(k.argbytes, 1))
    cdef void **ptrs = <void **>PyMem_Malloc(max(k.nparams, 1) * sizeof(void *))
    cdef CUresult rc
    try:
        if buf == NULL or ptrs == NULL:
            raise MemoryError()
        _pack_args(k, args, buf, ptrs, hs)
        set_current(k.ctx)
        if _release_gil:
            with nogil:
                rc = D.cuLaunchKernel(k.func, g[0], g[1], g[2], b[0], b[1], b[2], smem, hs, ptrs, NULL)
        else:
            rc = D.cuLaunchKernel(k.func, g[0], g[1], g[2], b[0], b[1], b[2], smem, hs, ptrs, NULL)
        if rc != 0:
            _launch_failed(k, rc, "cuLaunchKernel")
    finally:
        PyMem_Free(buf)
        PyMem_Free(ptrs)
    return 0


cdef inline int _issue(Kernel k, bc_launch_rec *r) except -1:
    cdef CUresult rc
    if r.pfunc[0] == NULL:
        _raise_closed(k)
    set_current(r.ctx)
    if _release_gil:
        with nogil:
            rc = bc_issue(D, r)
    else:
        rc = bc_issue(D, r)
    if rc != 0:
        _launch_failed(k, rc, "cuLaunchKernelEx" if r.nattrs else "cuLaunchKernel")
    return 0


# ------------------------------------------------------------- LaunchConfig
cdef int _dims_plain(object obj, unsigned int *out, str what) except -1:
    import operator
    vals = list(obj) if isinstance(obj, (tuple, list)) else [obj]
    if not 1 <= len(vals) <= 3:
        raise ValueError(f"{what} must be an int or a tuple of 1 to 3 ints, got {obj!r}")
    try:
        vals = [operator.index(v) for v in vals]
    except TypeError:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {obj!r}") from None
    vals += [1] * (3 - len(vals))
    for v in vals:
        if not 1 <= v <= 0xFFFFFFFF:
            raise ValueError(f"{what} {tuple(vals)}: every dimension must be in [1, 2**32-1]")
    out[0] = vals[0]
    out[1] = vals[1]
    out[2] = vals[2]
    return 0


@cython.final
cdef class LaunchConfig:
    """Everything ``cuLaunchKernelEx`` can be told about one launch.

    Parameters
    ----------
    grid, block : int or tuple of 1-3 ints
    shared_mem : int
        Dynamic shared memory in bytes.
    stream : Stream, optional
    cluster : int or tuple of 1-3 ints, optional
        Thread block cluster dimensions (compute capability 9.0+). Each grid
        dimension must be a multiple of the cluster's; at most 8 blocks per cluster
        (16 when the kernel sets ``non_portable_cluster_size_allowed``).
    cooperative : bool
        Cooperative launch: all blocks are co-resident, so grid-wide
        synchronization is allowed. The grid may hold at most
        ``max_active_blocks_per_sm(block, shared_mem) * multiprocessor_count`` blocks.
    priority : int, optional
        Launch priority (overrides the stream's).
    programmatic_serialization : bool
        Allow programmatic dependent launch: this kernel may start before the
        previous one on the stream finishes (the kernels coordinate with
        ``griddepcontrol``).

    Use with ``kernel.launch_config(config, *args)`` or ``kernel.bind_config(config, *args)``.
    """
    cdef unsigned int grid_[3]
    cdef unsigned int block_[3]
    cdef unsigned int smem
    cdef readonly object stream
    cdef unsigned int cluster_[3]
    cdef bint has_cluster
    cdef readonly bint cooperative
    cdef readonly object priority
    cdef readonly bint programmatic_serialization
    cdef CUlaunchAttribute attrs[4]
    cdef unsigned int nattrs
    cdef CUfunction _validated      # kernel this config was last validated for

    def __init__(self, grid, block, shared_mem=0, stream=None, cluster=None, cooperative=False,
                 priority=None, programmatic_serialization=False):
        import operator
        cdef CUstream hs = NULL
        _dims_plain(grid, self.grid_, "grid")
        _dims_plain(block, self.block_, "block")
        smem = operator.index(shared_mem)
        if not 0 <= smem <= 0xFFFFFFFF:
            raise ValueError(f"shared_mem must be >= 0, got {smem}")
        self.smem = smem
        stream_handle(stream, &hs)       # validates the stream argument early
        self.stream = stream
        memset(self.attrs, 0, sizeof(self.attrs))
        self.nattrs = 0
        self._validated = NULL
        if cluster is not None:
            _dims_plain(cluster, self.cluster_, "cluster")
            self.has_cluster = True
            self.attrs[self.nattrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            self.attrs[self.nattrs].value.clusterDim.x = self.cluster_[0]
            self.attrs[self.nattrs].value.clusterDim.y = self.cluster_[1]
            self.attrs[self.nattrs].value.clusterDim.z = self.cluster_[2]
            self.nattrs += 1
        self.cooperative = bool(cooperative)
        if self.cooperative:
            self.attrs[self.nattrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            self.attrs[self.nattrs].value.cooperative = 1
            self.nattrs += 1
        self.priority = None if priority is None else operator.index(priority)
        if self.priority is not None:
            self.attrs[self.nattrs].id = CU_LAUNCH_ATTRIBUTE_PRIORITY
            self.attrs[self.nattrs].value.priority = <int>self.priority
            self.nattrs += 1
        self.programmatic_serialization = bool(programmatic_serialization)
        if self.programmatic_serialization:
            self.attrs[self.nattrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            self.attrs[self.nattrs].value.programmaticStreamSerializationAllowed = 1
            self.nattrs += 1

    @property
    def grid(self):
        return (self.grid_[0], self.grid_[1], self.grid_[2])

    @property
    def block(self):
        return (self.block_[0], self.block_[1], self.block_[2])

    @property
    def shared_mem(self):
        return self.smem

    @property
    def cluster(self):
        """Cluster dimensions, or None."""
        return (self.cluster_[0], self.cluster_[1], self.cluster_[2]) if self.has_cluster else None

    def __repr__(self):
        parts = [f"grid={self.grid}", f"block={self.block}"]
        if self.smem:
            parts.append(f"shared_mem={self.smem}")
        if self.has_cluster:
            parts.append(f"cluster={self.cluster}")
        if self.cooperative:
            parts.append("cooperative=True")
        if self.priority is not None:
            parts.append(f"priority={self.priority}")
        if self.programmatic_serialization:
            parts.append("programmatic_serialization=True")
        return f"LaunchConfig({', '.join(parts)})"


cdef int _dev_attr(Kernel k, int code) except? -1:
    cdef int v = 0
    check(D.cuDeviceGetAttribute(&v, <CUdevice_attribute>code, k.device.handle), b"cuDeviceGetAttribute")
    return v


cdef int _validate_config(Kernel k, LaunchConfig c) except -1:
    """Checks that need the kernel and device; the driver is not asked to launch."""
    cdef unsigned int j
    cdef int nb = 0, v = 0
    g = c.grid
    b = c.block
    for j in range(3):
        if c.grid_[j] > k.max_grid[j]:
            raise ValueError(f"grid {g}: dimension {'xyz'[j]} exceeds the device limit "
                             f"({k.max_grid[0]}, {k.max_grid[1]}, {k.max_grid[2]})")
        if c.block_[j] > k.max_block[j]:
            raise ValueError(f"block {b}: dimension {'xyz'[j]} exceeds the device limit "
                             f"({k.max_block[0]}, {k.max_block[1]}, {k.max_block[2]})")
    threads = c.block_[0] * c.block_[1] * c.block_[2]
    if threads > k.max_threads:
        raise ValueError(f"block {b} has {threads} threads; kernel {k.name!r} allows at most "
                         f"{k.max_threads} threads per block")
    if c.smem > k.max_dyn_smem:
        _smem_slow(k, c.smem, &c.smem)
    if c.nattrs and D.cuLaunchKernelEx == NULL:
        raise DriverVersionError("LaunchConfig with cluster/cooperative/priority/programmatic attributes "
                                 "needs cuLaunchKernelEx (driver for CUDA 11.8 or newer)")
    if c.has_cluster:
        major = _dev_attr(k, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        minor = _dev_attr(k, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        if major < 9 or not _dev_attr(k, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH):
            raise ValueError(f"device {k.device.ordinal} (compute capability {major}.{minor}) does not "
                             "support thread block clusters (needs 9.0 or newer)")
        cl = c.cluster
        for j in range(3):
            if c.grid_[j] % c.cluster_[j]:
                raise ValueError(f"grid {g} is not divisible by cluster {cl} (dimension {'xyz'[j]})")
        size = c.cluster_[0] * c.cluster_[1] * c.cluster_[2]
        check(D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, k.func),
              b"cuFuncGetAttribute")
        if size > 16 or (size > 8 and not v):
            hint = ("" if size > 16 else "; allow up to 16 with "
                    "kernel.set_attribute('non_portable_cluster_size_allowed', 1)")
            raise ValueError(f"cluster {cl} has {size} blocks; the maximum is "
                             f"{16 if v else 8}{hint}")
    if c.cooperative:
        if not _dev_attr(k, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH):
            raise ValueError(f"device {k.device.ordinal} does not support cooperative launches")
        check(D.cuOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k.func, <int>threads, c.smem),
              b"cuOccupancyMaxActiveBlocksPerMultiprocessor")
        sms = _dev_attr(k, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        blocks = c.grid_[0] * c.grid_[1] * c.grid_[2]
        if blocks > nb * sms:
            raise ValueError(f"cooperative launch of {blocks} blocks exceeds co-residency for kernel "
                             f"{k.name!r}: at most {nb} blocks of {threads} threads per SM x {sms} SMs = "
                             f"{nb * sms} blocks")
    c._validated = k.func
    return 0


cdef int _config_rec(Kernel k, LaunchConfig c, bc_launch_rec *r) except -1:
    """Fill r (all but params) from a config, validating it for k once."""
    if c._validated != k.func:
        _validate_config(k, c)
    r.pfunc = &k.func
    r.ctx = k.ctx
    memcpy(r.grid, c.grid_, sizeof(r.grid))
    memcpy(r.block, c.block_, sizeof(r.block))
    r.smem = c.smem
    stream_handle(c.stream, &r.stream)
    r.params = NULL
    r.nattrs = c.nattrs
    memcpy(r.attrs, c.attrs, sizeof(r.attrs))
    return 0


# ------------------------------------------------------------------ plans
cdef LaunchPlan _new_plan(Kernel k, tuple args):
    if k.func == NULL:
        _raise_closed(k)
    if PyTuple_GET_SIZE(args) != k.nparams:
        _raise_count(k, PyTuple_GET_SIZE(args))
    cdef LaunchPlan plan = LaunchPlan.__new__(LaunchPlan, _TOKEN)
    plan.kernel = k
    plan._args = list(args)
    plan.buf = <char *>PyMem_Malloc(max(k.argbytes, 1))
    plan.ptrs = <void **>PyMem_Malloc(max(k.nparams, 1) * sizeof(void *))
    if plan.buf == NULL or plan.ptrs == NULL:
        raise MemoryError()
    memset(plan.buf, 0, max(k.argbytes, 1))
    memset(&plan.rec, 0, sizeof(plan.rec))
    plan.rec.pfunc = &k.func
    plan.rec.ctx = k.ctx
    plan.rec.params = plan.ptrs if k.nparams > 0 else NULL
    return plan


@cython.final
cdef class LaunchPlan:
    """A launch with its arguments packed once (from :meth:`Kernel.bind`).

    ``plan()`` issues ``cuLaunchKernel`` with the stored parameter block and does
    nothing else. The plan keeps every argument object and its stream alive.
    ``set_arg(i, value)`` repacks one parameter with the same checks as
    ``Kernel.launch``; ``plan.stream = s`` moves it to another stream.
    """
    cdef bc_launch_rec rec
    cdef readonly Kernel kernel
    cdef char *buf
    cdef void **ptrs
    cdef list _args
    cdef object _stream
    cdef readonly object config

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("LaunchPlan objects come from Kernel.bind()")
        self.buf = NULL
        self.ptrs = NULL

    def __dealloc__(self):
        PyMem_Free(self.buf)
        PyMem_Free(self.ptrs)
        self.buf = NULL
        self.ptrs = NULL

    cdef int _pack_all(self) except -1:
        cdef Py_ssize_t i
        for i in range(self.kernel.nparams):
            self.ptrs[i] = self.buf + self.kernel.params[i].offset
            _pack_one(self.kernel, i, self._args[i], self.buf + self.kernel.params[i].offset, self.rec.stream)
        return 0

    cdef int _set_stream(self, object stream) except -1:
        cdef CUstream hs = NULL
        stream_handle(stream, &hs)
        self.rec.stream = hs
        self._stream = stream
        for a in self._args:
            if type(a) is DeviceBuffer:
                note_use(<DeviceBuffer>a, hs)
        return 0

    def __call__(self):
        """Launch. No packing, no validation beyond the kernel being alive."""
        _issue(self.kernel, &self.rec)

    def launch(self):
        """Same as calling the plan."""
        _issue(self.kernel, &self.rec)

    def set_arg(self, Py_ssize_t index, value):
        """Repack parameter ``index`` with ``value`` (same checks as ``Kernel.launch``)."""
        cdef Kernel k = self.kernel
        cdef Py_ssize_t i = index
        if i < 0:
            i += k.nparams
        if not 0 <= i < k.nparams:
            raise IndexError(f"kernel {_sig_text(k)} has {k.nparams} parameters; no index {index}")
        _pack_one(k, i, value, self.buf + k.params[i].offset, self.rec.stream)
        self._args[i] = value

    @property
    def args(self):
        """The argument objects the plan holds (and keeps alive)."""
        return tuple(self._args)

    @property
    def stream(self):
        return self._stream

    @stream.setter
    def stream(self, value):
        self._set_stream(value)

    @property
    def grid(self):
        return (self.rec.grid[0], self.rec.grid[1], self.rec.grid[2])

    @property
    def block(self):
        return (self.rec.block[0], self.rec.block[1], self.rec.block[2])

    @property
    def shared_mem(self):
        return self.rec.smem

    def __repr__(self):
        return f"<barecuda.LaunchPlan {_sig_text(self.kernel)} grid={self.grid} block={self.block}>"


cdef Py_ssize_t _issue_many(bc_launch_rec **recs, Py_ssize_t n, CUresult *rc) except -2 nogil:
    """Issue n records in order. Returns -1, or the index of the first that failed
    (*rc its CUresult, or -1 when its kernel's module was closed)."""
    cdef Py_ssize_t i
    cdef bc_launch_rec *r
    for i in range(n):
        r = recs[i]
        if r.pfunc[0] == NULL:
            rc[0] = -1
            return i
        set_current(r.ctx)
        rc[0] = bc_issue(D, r)
        if rc[0] != 0:
            return i
    return -1


cdef int _batch_failed(object plan, Py_ssize_t index, CUresult rc) except -1:
    cdef Kernel k = (<LaunchPlan>plan).kernel
    if rc == -1:
        raise ValueError(f"plan {index}: kernel {k.name!r} belongs to a module that was closed")
    raise make_error(rc, "cuLaunchKernelEx" if (<LaunchPlan>plan).rec.nattrs else "cuLaunchKernel",
                     f"plan {index} of the batch (kernel {_sig_text(k)}); the plans before it were launched")


@cython.final
cdef class PlanList:
    """A reusable batch of :class:`LaunchPlan` objects issued from one C loop.

    ``plan_list()`` launches every plan in order with no Python work per launch.
    Later ``set_arg``/``stream`` changes of the plans are seen (the list points at
    the plans' own launch records).
    """
    cdef bc_launch_rec **recs
    cdef Py_ssize_t n
    cdef tuple _plans

    def __cinit__(self, plans):
        self.recs = NULL
        self._plans = tuple(plans)
        self.n = len(self._plans)
        for j, p in enumerate(self._plans):
            if type(p) is not LaunchPlan:
                raise TypeError(f"PlanList item {j} is a {type(p).__name__}, not a LaunchPlan")
        self.recs = <bc_launch_rec **>PyMem_Malloc(max(self.n, 1) * sizeof(bc_launch_rec *))
        if self.recs == NULL:
            raise MemoryError()
        for j in range(self.n):
            self.recs[j] = &(<LaunchPlan>self._plans[j]).rec

    def __dealloc__(self):
        PyMem_Free(self.recs)
        self.recs = NULL

    def __call__(self):
        """Launch every plan, in order."""
        cdef CUresult rc = 0
        cdef Py_ssize_t bad
        if _release_gil:
            with nogil:
                bad = _issue_many(self.recs, self.n, &rc)
        else:
            bad = _issue_many(self.recs, self.n, &rc)
        if bad >= 0:
            _batch_failed(self._plans[bad], bad, rc)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self._plans[i]

    def __iter__(self):
        return iter(self._plans)

    def __repr__(self):
        return f"<barecuda.PlanList of {self.n} plans>"


def launch_all(plans):
    """Launch a list or tuple of :class:`LaunchPlan` objects, in order, from one C loop.

    Every item is checked to be a LaunchPlan before anything is launched. For a
    batch issued repeatedly, :class:`PlanList` avoids even that check.
    """
    cdef Py_ssize_t i, n
    cdef CUresult rc
    cdef LaunchPlan p
    if type(plans) is not list and type(plans) is not tuple:
        plans = list(plans)
    n = len(plans)
    for i in range(n):
        if type(plans[i]) is not LaunchPlan:
            raise TypeError(f"launch_all: item {i} is a {type(plans[i]).__name__}, not a LaunchPlan")
    for i in range(n):
        p = <LaunchPlan>plans[i]
        if p.rec.pfunc[0] == NULL:
            _batch_failed(p, i, -1)
        set_current(p.rec.ctx)
        if _release_gil:
            with nogil:
                rc = bc_issue(D, &p.rec)
        else:
            rc = bc_issue(D, &p.rec)
        if rc != 0:
            _batch_failed(p, i, rc)


# ------------------------------------------- CUDA graphs (INTERFACES.md, graph)
cdef int pack_arg(Kernel k, Py_ssize_t i, object value, char *dst, CUstream s, list keep) except -1:
    """Pack `value` into parameter slot i of k at `dst` (k's parameter block), with
    launch's checks. Nothing packed here needs to outlive the call, so `keep` stays as given."""
    if k.func == NULL:
        _raise_closed(k)
    if not 0 <= i < k.nparams:
        raise IndexError(f"kernel {_sig_text(k)} has {k.nparams} parameters; index {i} is out of range")
    return _pack_one(k, i, value, dst + k.params[i].offset, s)


cdef int check_dims(Kernel k, object grid, object block, unsigned int smem, unsigned int out_grid[3],
                    unsigned int out_block[3]) except -1:
    """Grid, block and dynamic shared memory checked against k and its device, as a launch checks them."""
    cdef unsigned int s = 0
    _launch_dims(k, grid, block, smem, out_grid, out_block, &s)
    return 0
