"""Kernel signature knowledge.

Owns: the parameter kinds as Python sees them (read from the one table in
include/barecuda/bc_kinds.h that the C packer reads too), the PTX ``.entry``
signature parser (linear time, run once per module load, never on the launch
path), user signatures (``get_kernel(..., signature=)``), the layout of a
kernel's parameter block from those and the driver's ``cuFuncGetParamInfo``, and
the lookup of C++ kernels by their plain name among Itanium-mangled entries.
"""
import re

# Kind names, indexed by BC_K_*; sizes likewise (-1: given per parameter).
KIND_NAMES = tuple(bc_kind_name[i].decode() for i in range(BC_K_COUNT))
KIND_SIZES = tuple(bc_kind_size[i] for i in range(BC_K_COUNT))
KIND_RANGES = tuple((bc_kind_min[i], bc_kind_max[i]) for i in range(BC_K_COUNT))

# PTX parameter type spelling -> kind.
PTX_KINDS = {bc_ptx_type_name[i].decode(): bc_ptx_type_kind[i] for i in range(BC_PTX_TYPE_COUNT)}

# Names accepted in a user signature. Integer names carry their width in bits
# (as in PTX and Rust: "i8" is int8), not numpy's byte codes. These kinds are
# strict: "u32" takes [0, 2**32-1], "s32" [-2**31, 2**31-1].
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
_CTYPES_CODES = {"b": "s8", "B": "u8", "h": "s16", "H": "u16", "?": "bool"}


# ------------------------------------------------------------------ PTX parsing
_PTX_SIZES = {t: bc_kind_size[k] for t, k in PTX_KINDS.items()}
_COMMENT_START = re.compile(r"//|/\*")
_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)\s*")
_TOKEN_RE = re.compile(r"\.[A-Za-z_][\w]*|\[\s*\d*\s*\]|\d+|[A-Za-z_$%][\w$]*")


cdef str _strip_comments(str text):
    """Comments replaced by a space, in one left-to-right pass (linear time).
    An unterminated ``/*`` comments out the rest of the text, as in C."""
    cdef Py_ssize_t pos = 0, end, n = len(text)
    parts = []
    while pos < n:
        m = _COMMENT_START.search(text, pos)
        if m is None:
            parts.append(text[pos:])
            break
        parts.append(text[pos:m.start()])
        parts.append(" ")
        if m.group() == "//":
            end = text.find("\n", m.end())
            pos = n if end < 0 else end          # keep the newline
        else:
            end = text.find("*/", m.end())
            pos = n if end < 0 else end + 2
    return "".join(parts)


# The largest .align a parameter may declare: the parameter space holds 32764 bytes, so
# no layout needs more (and the packer keeps alignments in 32 bits).
cdef object _MAX_PARAM_ALIGN = 32768


def _parse_param(str decl, str kernel):
    toks = _TOKEN_RE.findall(decl)
    if not toks or toks[0] != ".param":
        raise ValueError(f"PTX .entry {kernel}: cannot parse parameter {decl.strip()[:80]!r}")
    param_align = None
    t = None
    ptr = False
    count = None
    j = 1
    while j < len(toks):
        tok = toks[j]
        if tok == ".align":
            if j + 1 < len(toks) and toks[j + 1].isdigit():
                if t is None:                  # after the type, .align belongs to .ptr
                    param_align = int(toks[j + 1])
                    if param_align <= 0 or param_align & (param_align - 1) or param_align > _MAX_PARAM_ALIGN:
                        raise ValueError(
                            f"PTX .entry {kernel}: parameter {decl.strip()[:80]!r} has .align {param_align}: "
                            f"a parameter's alignment must be a power of two no larger than {_MAX_PARAM_ALIGN} "
                            "(the size of the kernel parameter space)")
                j += 2
                continue
        elif tok.startswith("."):
            name = tok[1:]
            if name in _PTX_SIZES and t is None:
                t = name
            elif name == "ptr":
                ptr = True
        elif tok.startswith("["):
            inner = tok[1:len(tok) - 1].strip()
            count = int(inner) if inner else 0
        j += 1
    if t is None:
        raise ValueError(f"PTX .entry {kernel}: parameter {decl.strip()[:80]!r} has no type")
    esize = _PTX_SIZES[t]
    if count is not None:
        size = esize * count
        return (f"{t}[{count}]", size, param_align or esize)
    if ptr and esize == 8:
        return ("ptr", 8, param_align or 8)
    return (t, esize, param_align or esize)


def parse_ptx_signatures(ptx):
    """Parse every ``.entry`` of a PTX text, in time linear in its length.

    Parameters
    ----------
    ptx : str or bytes

    Returns
    -------
    dict
        ``{kernel name: [(type, size, align), ...]}`` in the order of the text.
        ``type`` is the PTX type without the dot (``'u32'``, ``'f32'``...), ``'ptr'``
        for a ``.u64``/``.b64`` with a ``.ptr`` qualifier, and ``'b8[N]'`` (or
        ``'u32[N]'``...) for array (struct) parameters. ``align`` is the ``.align``
        of the parameter, or its natural alignment.

    Raises
    ------
    ValueError
        A parameter list without its closing ``)``, or a parameter without a type.
    """
    cdef Py_ssize_t pos = 0, close
    if isinstance(ptx, (bytes, bytearray, memoryview)):
        ptx = bytes(ptx).decode("utf-8", errors="replace")
    text = _strip_comments(ptx.split("\0", 1)[0])
    out = {}
    while True:
        m = _ENTRY_RE.search(text, pos)
        if m is None:
            break
        name = m.group(1)
        pos = m.end()
        params = []
        if text.startswith("(", pos):
            close = text.find(")", pos)
            if close < 0:
                raise ValueError(f"PTX .entry {name}: the parameter list has no closing ')'")
            plist = text[pos + 1:close]
            pos = close + 1
            if plist.strip():
                for decl in plist.split(","):
                    params.append(_parse_param(decl, name))
        out[name] = params
    return out


# ------------------------------------------------------------------ C++ names
def mangled_matches(str name, names):
    """The entries of ``names`` that are the Itanium-mangled form of a plain (not
    namespaced, not templated) C++ function called ``name``: ``_Z<len><name>...``."""
    prefix = f"_Z{len(name)}{name}"
    return [n for n in names if n.startswith(prefix) and len(n) > len(prefix)]


def kernel_key(str name, signature, where=None):
    """The key a module or library caches kernel ``name`` under: ``(name, where,
    signature as a tuple)``; None when the signature is not hashable (then no caching)."""
    try:
        key = (name, where, tuple(signature) if signature is not None and not isinstance(signature, str)
               else signature)
        hash(key)
    except TypeError:
        return None
    return key


# ------------------------------------------------------------------ signatures
cdef tuple _kind_entry(int kind):
    return (KIND_NAMES[kind], kind, bc_kind_size[kind], bc_kind_align[kind])


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
        if size <= 0 or align <= 0 or align & (align - 1) or align > _MAX_PARAM_ALIGN:
            raise ValueError(f"signature[{j}]: bad struct spec {s!r}: want ('bytes', size[, power-of-two align <= {_MAX_PARAM_ALIGN}])")
        return (f"b8[{size}]", BC_K_BYTES, size, align)
    if isinstance(s, str):
        key = s.strip().lower()
        if key in _SIG_NAMES:
            return _kind_entry(_SIG_NAMES[key])
        if key.endswith("]") and "[" in key:
            base, _, num = key[:len(key) - 1].partition("[")
            if base.strip() in ("b8", "bytes", "u8") and num.strip().isdigit() and int(num) > 0:
                return (f"b8[{int(num)}]", BC_K_BYTES, int(num), 1)
        names = sorted({KIND_NAMES[k] for k in _SIG_NAMES.values()})
        raise ValueError(f"signature[{j}]: unknown parameter type {s!r}; use one of "
                         f"{', '.join(names)}, 'b8[N]' or ('bytes', N, align)")
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
    """A slot the driver reported by size alone: integers of that width (either
    sign), pointers for 8 bytes; shown as b8/b16/b32/b64."""
    if size == 1:
        return ("b8", BC_K_W8, 1, 1)
    if size == 2:
        return ("b16", BC_K_W16, 2, 2)
    if size == 4:
        return ("b32", BC_K_W32, 4, 4)
    if size == 8:
        return ("b64", BC_K_W64, 8, 8)
    return (f"b8[{size}]", BC_K_BYTES, size, 1)


cdef tuple _ptx_entry(object t, size_t size, size_t align):
    cdef int kind
    if t == "ptr":
        return (t, BC_K_PTR, size, align)
    if t in PTX_KINDS:
        kind = PTX_KINDS[t]
        if bc_kind_size[kind] == <int>size:
            return (t, kind, size, align)
    return (t if "[" in t else f"b8[{size}]", BC_K_BYTES, size, align)


def signature_entries(signature):
    """``[(type name, kind, size, align), ...]`` for a user signature (a sequence,
    or a string of names separated by commas or spaces)."""
    if isinstance(signature, (str, bytes)):
        signature = [x for x in (signature.decode() if isinstance(signature, bytes) else signature)
                     .replace(",", " ").split()]
    return [_sig_entry(s, j) for j, s in enumerate(signature)]


cdef object layout_entries(str name, object ptx_params, object signature, object drv):
    if signature is not None:
        entries = signature_entries(signature)
        if drv is not None:
            if len(drv) != len(entries):
                raise ValueError(f"kernel {name!r}: the signature has {len(entries)} parameters but the "
                                 f"driver reports {len(drv)}")
            for j, (e, d) in enumerate(zip(entries, drv)):
                if e[2] != d[1]:
                    raise ValueError(f"kernel {name!r}: signature[{j}] is {e[0]} ({e[2]} bytes) but the "
                                     f"driver reports a {d[1]}-byte parameter")
        return entries
    if ptx_params is not None:
        entries = [_ptx_entry(t, s, a) for (t, s, a) in ptx_params]
        if drv is not None and (len(drv) != len(entries) or
                                any(e[2] != d[1] for e, d in zip(entries, drv))):
            entries = [_size_entry(d[1]) for d in drv]     # the driver knows best
        return entries
    if drv is not None:
        return [_size_entry(d[1]) for d in drv]
    return None
