"""The dtype table: names, itemsizes, typestrs and DLPack codes of the element types
device memory can hold. Plain names work without numpy; anything else is asked of
numpy, imported on first need (import barecuda never imports it)."""
from cpython.ref cimport PyObject
from barecuda._lazy cimport lazy_module

# ------------------------------------------------------------------------ dtypes
# name -> (itemsize, typestr, DLPack code). Plain names work without numpy.
_DTYPES = {
    "bool": (1, "|b1", 6),
    "int8": (1, "|i1", 0), "uint8": (1, "|u1", 1),
    "int16": (2, "<i2", 0), "uint16": (2, "<u2", 1),
    "int32": (4, "<i4", 0), "uint32": (4, "<u4", 1),
    "int64": (8, "<i8", 0), "uint64": (8, "<u8", 1),
    "float16": (2, "<f2", 2), "float32": (4, "<f4", 2), "float64": (8, "<f8", 2),
    "bfloat16": (2, None, 4),
    "complex64": (8, "<c8", 5), "complex128": (16, "<c16", 5),
    # DLPack 1.1 (codes 7-17; names as ml_dtypes and PyTorch spell them). No numpy typestr.
    "float8_e3m4": (1, None, 7), "float8_e4m3": (1, None, 8), "float8_e4m3b11fnuz": (1, None, 9),
    "float8_e4m3fn": (1, None, 10), "float8_e4m3fnuz": (1, None, 11), "float8_e5m2": (1, None, 12),
    "float8_e5m2fnuz": (1, None, 13), "float8_e8m0fnu": (1, None, 14),
    # 6-bit floats held one per byte (DLPack: bits 6, the "padded" flag of a versioned tensor)
    "float6_e2m3fn": (1, None, 15), "float6_e3m2fn": (1, None, 16),
    # 4-bit floats held two per byte (DLPack: bits 4, lanes 2; PyTorch's float4_e2m1fn_x2)
    "float4_e2m1fn_x2": (1, None, 17),
}
# DLPack (bits, lanes) where they are not (itemsize * 8, 1).
_DL_LAYOUT = {"float6_e2m3fn": (6, 1), "float6_e3m2fn": (6, 1), "float4_e2m1fn_x2": (4, 2)}
_ALIASES = {
    "b1": "bool", "?": "bool", "bool_": "bool",
    "i1": "int8", "u1": "uint8", "i2": "int16", "u2": "uint16", "i4": "int32", "u4": "uint32",
    "i8": "int64", "u8": "uint64", "f2": "float16", "f4": "float32", "f8": "float64",
    "c8": "complex64", "c16": "complex128",
    "b": "int8", "B": "uint8", "h": "int16", "H": "uint16", "i": "int32", "I": "uint32",
    "q": "int64", "Q": "uint64", "e": "float16", "f": "float32", "d": "float64",
    "F": "complex64", "D": "complex128", "Zf": "complex64", "Zd": "complex128",
    "l": "int64" if sizeof(long) == 8 else "int32", "L": "uint64" if sizeof(long) == 8 else "uint32",
    "n": "int64" if sizeof(Py_ssize_t) == 8 else "int32", "N": "uint64" if sizeof(size_t) == 8 else "uint32",
    "half": "float16", "single": "float32", "double": "float64", "float": "float64", "int": "int64",
    "byte": "int8", "ubyte": "uint8", "short": "int16", "ushort": "uint16",
    "intc": "int32", "uintc": "uint32", "longlong": "int64", "ulonglong": "uint64",
    "cfloat": "complex128", "complex": "complex128", "csingle": "complex64", "cdouble": "complex128",
}
_DL_TO_NAME = {(v[2],) + _DL_LAYOUT.get(k, (v[0] * 8, 1)): k for k, v in _DTYPES.items()}
cdef PyObject *_numpy = NULL


cdef object np_module():
    """numpy, imported on first need (import barecuda never imports it)."""
    return lazy_module(&_numpy, "numpy")


cdef object _np_or_none():
    try:
        return np_module()
    except ImportError:
        return None


cdef tuple resolve_dtype(object dtype):
    """(key, itemsize): key is a canonical name from _DTYPES, or a numpy typestr."""
    cdef object key
    if type(dtype) is str:
        key = dtype
        if key in _DTYPES:
            return key, _DTYPES[key][0]
        s = key
        if len(s) > 1 and s[0] in "<=|@":
            s = s[1:]
        name = _ALIASES.get(s)
        if name is None and s in _DTYPES:
            name = s
        if name is not None:
            return name, _DTYPES[name][0]
    elif dtype is float:
        return "float64", 8
    elif dtype is int:
        return "int64", 8
    elif dtype is bool:
        return "bool", 1
    elif dtype is complex:
        return "complex128", 16
    elif dtype is None:
        return "uint8", 1
    # numpy dtypes, scalar types, ml_dtypes..., or an unknown string: ask numpy.
    np = _np_or_none()
    if np is None:
        raise TypeError(f"unknown dtype {dtype!r} (numpy is not installed to interpret it); "
                        f"use one of {sorted(_DTYPES)}")
    try:
        d = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"unknown dtype {dtype!r}: {e}") from None
    if d.byteorder in "=<|" and d.name in _DTYPES and d.fields is None:
        return d.name, d.itemsize
    if d.byteorder == ">" or d.hasobject:
        raise TypeError(f"dtype {d} cannot live in device memory (big-endian or Python objects)")
    return d.str, d.itemsize


cdef object typestr_of(object key):
    if key in _DTYPES:
        ts = _DTYPES[key][1]
        if ts is None:
            raise TypeError(f"dtype {key} has no __array_interface__ typestr")
        return ts
    return key


cdef object public_dtype(object key):
    np = _np_or_none()
    if np is None:
        return key
    try:
        return np.dtype(key)
    except TypeError:
        return key


cdef tuple normalize_shape(object shape):
    if isinstance(shape, int):
        shape = (shape,)
    else:
        try:
            shape = tuple(shape)
        except TypeError:
            raise TypeError(f"shape must be an int or a tuple of ints, not {type(shape).__name__}") from None
    for n in shape:
        if not isinstance(n, int) and not hasattr(n, "__index__"):
            raise TypeError(f"shape must contain ints, got {shape!r}")
        if n < 0:
            raise ValueError(f"negative dimension in shape {shape!r}")
    return tuple(int(n) for n in shape)


cdef size_t nbytes_of(tuple shape, size_t itemsize) except? 0:
    cdef object total = itemsize
    for n in shape:
        total *= n
    if total > <object>(<size_t>-1 >> 1):
        raise OverflowError(f"shape {shape!r} is too large")
    return total



cdef object dtype_info(object key):
    return _DTYPES.get(key)


cdef object dtype_from_dlpack(int code, int bits, int lanes):
    return _DL_TO_NAME.get((code, bits, lanes))


cdef tuple dlpack_dtype(object key):
    """(code, bits, lanes) of a dtype in DLPack, or None when it has none."""
    info = _DTYPES.get(key)
    if info is None:
        return None
    return (info[2],) + _DL_LAYOUT.get(key, (info[0] * 8, 1))


def _dlpack_table():
    """Internal, for tests: {name: (code, bits, lanes)} of every dtype DLPack can carry."""
    return {k: dlpack_dtype(k) for k in _DTYPES}
