"""Argument packing off the launch fast path.

Owns: packing of every argument type the fast path in _launch (``_pack_one``:
exact ints, floats, bools and DeviceBuffers) hands over -- int subclasses and
``__index__`` objects, numpy and ctypes scalars, bytes-like structs, pointer-like
objects -- and the type and range errors of packing. The parameter kinds and their
ranges are the one table in include/barecuda/bc_kinds.h.
"""
from libc.stdint cimport uint32_t, uint16_t, int32_t, uint64_t, int64_t, UINT64_MAX
from libc.string cimport memcpy
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.pycapsule cimport PyCapsule_IsValid, PyCapsule_GetPointer

from barecuda._abi cimport CUstream, CUdeviceptr
from barecuda._buffer cimport DeviceBuffer
from barecuda._interop cimport pointer_of
from barecuda._loader cimport symbol_version_text


cdef str sig_text(object k):
    types = k.signature
    return f"{k.name}(?)" if types is None else f"{k.name}({', '.join(types)})"


# ------------------------------------------------------------ the launch paths' errors
cdef int raise_stream_closed(Py_ssize_t index) except -1:
    where = "the plan's" if index < 0 else f"plan {index}: its"
    raise ValueError(f"{where} stream is closed (a barecuda.Stream cannot be used after close()); "
                     "move the plan to a live stream first (plan.stream = s)")


cdef int raise_closed(object k) except -1:
    raise ValueError(f"kernel {k.name!r} belongs to a module that was closed; load the module again")


cdef int raise_count(object k, Py_ssize_t nparams, Py_ssize_t got) except -1:
    if nparams < 0:
        raise TypeError(f"kernel {k.name!r}: its parameter layout is unknown (no PTX to read it from, and "
                        "the driver lacks cuFuncGetParamInfo, which needs "
                        f"{symbol_version_text(b'cuFuncGetParamInfo')}); pass "
                        "signature=(...) to Module.get_kernel")
    raise TypeError(f"kernel {sig_text(k)} takes {nparams} argument{'s' if nparams != 1 else ''}, "
                    f"got {got}")


cdef str _expected(const bc_param *p):
    cdef int kind = p.kind
    cdef int fl = bc_kind_flags[kind]
    if kind == BC_K_BYTES:
        return f"a bytes-like object of exactly {p.size} bytes (struct parameter)"
    if fl & BC_F_EXACT:
        what = ("a pointer (DeviceBuffer, int address, __cuda_array_interface__, __dlpack__), "
                if fl & BC_F_PTR else "")
        return (f"{what}an int, or a numpy/ctypes scalar of exactly {p.size} bytes (the slot's type is "
                "unknown: pass signature=(...) to Module.get_kernel to pack floats or bools)")
    if fl & BC_F_PTR:
        extra = " or a float" if fl & BC_F_FLOAT else ""
        return ("a pointer: DeviceBuffer, int address, or an object with __cuda_array_interface__ "
                f"or __dlpack__{extra}")
    if fl & BC_F_FCONV:
        return "a float (or int, numpy/ctypes scalar)"
    if fl & BC_F_FLOAT:
        return "an int or a float"
    return "an int (or bool, numpy/ctypes integer scalar)"


cdef int raise_type(object k, const bc_param *p, Py_ssize_t i, object arg) except -1:
    raise TypeError(f"kernel {sig_text(k)}: argument {i} ({k.signature[i]}) expects {_expected(p)}, "
                    f"got {type(arg).__name__}")


cdef int _raise_range(object k, const bc_param *p, Py_ssize_t i, object value) except -1:
    cdef int kind = p.kind
    raise OverflowError(f"kernel {sig_text(k)}: argument {i} ({k.signature[i]}) must be in "
                        f"[{bc_kind_min[kind]}, {bc_kind_max[kind]}], got {value}")


cdef int pack_int(object k, const bc_param *p, Py_ssize_t i, object v, char *slot) except -1:
    """v: an int (or subclass). Range-checked store, or float conversion for float kinds."""
    cdef int kind = p.kind
    cdef int ovf = 0
    cdef long long x
    cdef unsigned long long ux
    if bc_kind_flags[kind] & BC_F_FCONV:
        try:
            store_float(kind, slot, float(v))
        except OverflowError:
            raise OverflowError(f"kernel {sig_text(k)}: argument {i} ({k.signature[i]}): int {v} is too "
                                "large to convert to a float") from None
        return 0
    if not int_ok(kind):
        return raise_type(k, p, i, v)
    x = _bc_as_ll(v, &ovf)
    if ovf == 0:
        if int_in_range(kind, x):
            bc_store_int(slot, p.size, <unsigned long long>x)
            return 0
    elif ovf > 0 and bc_kind_max[kind] == UINT64_MAX:
        if v < 18446744073709551616:
            ux = v
            bc_store_int(slot, p.size, ux)
            return 0
    return _raise_range(k, p, i, v)


cdef int _pack_bytes(object k, const bc_param *p, Py_ssize_t i, object arg, char *slot) except -1:
    cdef Py_buffer view
    if type(arg) is bytes and len(<bytes>arg) == p.size:
        memcpy(slot, <char *>(<bytes>arg), p.size)
        return 0
    if getattr(type(arg), "__module__", None) == "numpy" and hasattr(arg, "tobytes") and not hasattr(arg, "shape"):
        arg = arg.tobytes()
    try:
        PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        return raise_type(k, p, i, arg)
    try:
        if <size_t>view.len != p.size:
            raise TypeError(f"kernel {sig_text(k)}: argument {i} ({k.signature[i]}) expects exactly "
                            f"{p.size} bytes, got a {type(arg).__name__} of {view.len} bytes")
        memcpy(slot, view.buf, p.size)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef int _pack_scalar_obj(object k, const bc_param *p, Py_ssize_t i, object arg, char *slot, str category, size_t size,
                          object raw) except -1:
    """numpy / ctypes scalars: raw bytes when the width matches, else by value."""
    cdef int kind = p.kind
    cdef bytes b
    if bc_kind_flags[kind] & BC_F_EXACT and size != p.size:
        return raise_type(k, p, i, arg)         # width-only slot: the width must match
    if category == "i":
        if int_ok(kind) and size == p.size and kind != BC_K_BOOL:
            b = raw()
            memcpy(slot, <char *>b, p.size)
            return 0
        return pack_int(k, p, i, int(arg), slot)     # range-checked (a .pred takes only 0 and 1)
    if category == "f":
        if size == p.size and (float_ok(kind) or bc_kind_flags[kind] & BC_F_EXACT):
            b = raw()
            memcpy(slot, <char *>b, p.size)
            return 0
        if not float_ok(kind):
            return raise_type(k, p, i, arg)
        store_float(kind, slot, float(arg))
        return 0
    return raise_type(k, p, i, arg)


cdef int _pack_pointer(object k, const bc_param *p, Py_ssize_t i, object arg, char *slot, CUstream hs) except -1:
    """A pointer slot: the one foreign-array resolver (docs/interop.md), which honours
    the producer's stream."""
    cdef CUdeviceptr addr = 0
    try:
        pointer_of(arg, k.device, hs, &addr)
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        if bc_kind_flags[p.kind] & BC_F_INT and isinstance(exc, TypeError) and hasattr(type(arg), "__index__"):
            import operator
            try:
                addr = operator.index(arg)
            except TypeError:
                pass
            else:
                return pack_int(k, p, i, addr, slot)
        raise type(exc)(f"kernel {sig_text(k)}: argument {i} ({k.signature[i]}): {exc}") from None
    bc_store_int(slot, 8, addr)
    return 0


cdef int pack_slow(object k, const bc_param *p, Py_ssize_t i, object arg, char *slot, CUstream hs) except -1:
    """Everything the fast path in _pack_one does not handle."""
    cdef int kind = p.kind
    cdef int fl = bc_kind_flags[kind]
    if kind == BC_K_BYTES:
        return _pack_bytes(k, p, i, arg, slot)
    if isinstance(arg, DeviceBuffer):
        if (<DeviceBuffer>arg).ptr == 0 and getattr(arg, "is_closed", False):
            raise ValueError(f"kernel {sig_text(k)}: argument {i} is a closed DeviceBuffer; a kernel "
                             "must not get a freed address")
        if bc_kind_is_pointer(kind):
            bc_store_int(slot, 8, (<DeviceBuffer>arg).ptr)
            return 0
        return raise_type(k, p, i, arg)
    if isinstance(arg, bool):
        if fl & BC_F_BOOL:
            bc_store_int(slot, p.size, 1 if arg else 0)
            return 0
        return raise_type(k, p, i, arg)
    if isinstance(arg, int):
        return pack_int(k, p, i, int(arg), slot)
    if isinstance(arg, float):
        if float_ok(kind):
            store_float(kind, slot, float(arg))
            return 0
        return raise_type(k, p, i, arg)
    mod = getattr(type(arg), "__module__", None)
    if mod == "numpy" and hasattr(arg, "dtype") and getattr(arg, "ndim", 1) == 0:
        dt = arg.dtype
        cat = "i" if dt.kind in "iub" else ("f" if dt.kind == "f" else "")
        return _pack_scalar_obj(k, p, i, arg, slot, cat, dt.itemsize, arg.tobytes)
    if mod == "ctypes":
        import ctypes
        if isinstance(arg, ctypes._SimpleCData):
            code = type(arg)._type_
            cat = "f" if code in "fdg" else ("i" if code in "bBhHiIlLqQ?P" else "")
            raw = lambda: bytes(memoryview(arg).cast("B"))
            if code == "P":
                if not bc_kind_is_pointer(kind) and kind != BC_K_S64:
                    return raise_type(k, p, i, arg)
                return pack_int(k, p, i, arg.value or 0, slot)
            if cat == "i" and arg.value is not None:
                return _pack_scalar_obj(k, p, i, arg.value, slot, cat, ctypes.sizeof(arg), raw)
            if cat == "f":
                return _pack_scalar_obj(k, p, i, arg.value, slot, cat, ctypes.sizeof(arg), raw)
        return raise_type(k, p, i, arg)
    if bc_kind_is_pointer(kind):
        return _pack_pointer(k, p, i, arg, slot, hs)
    if fl & BC_F_INT and hasattr(type(arg), "__index__"):
        import operator
        return pack_int(k, p, i, operator.index(arg), slot)
    return raise_type(k, p, i, arg)


