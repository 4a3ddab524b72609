"""NVRTC and nvJitLink: opening them, their versions, their errors, one run of each.

Owns: loading NVRTC and nvJitLink at run time (found by ``_libfind``, opened with the
shim in ``include/barecuda/bc_dl.h``, ABIs declared in ``include/barecuda/nvrtc_abi.h``),
their versions and architectures (``nvrtc_version``, ``nvrtc_archs``, ...), the
exceptions of the kernels-from-source feature (``CompilerNotFoundError``,
``CompileError``, ``LinkError``), the version-skew rules between NVRTC, its PTX ISA and
the driver (``select_target``, ``ptx_isa_for``, ``ptx_version_of``), and one raw run of
each tool on bytes: ``nvrtc_compile`` and ``nvjitlink_link``.

Everything above the bytes -- ``Program``, ``ObjectCode``, the compile cache, ``link``
with its driver fallback, ``Library`` -- lives in ``_program.pyx`` and
``_compile_cache.py``.
"""
import threading

from cpython.mem cimport PyMem_Malloc, PyMem_Free

from barecuda._errors import BarecudaError, DriverVersionError, LibraryNotFoundError
from barecuda import _libfind
from barecuda._abi cimport bc_symbol_info
from barecuda._libopen cimport open_table

cdef extern from "barecuda/nvrtc_abi.h" nogil:
    ctypedef int nvrtcResult
    int NVRTC_SUCCESS, NVRTC_ERROR_INVALID_OPTION
    cdef struct _nvrtcProgram
    ctypedef _nvrtcProgram *nvrtcProgram
    ctypedef struct bc_nvrtc_t:
        const char *(*nvrtcGetErrorString)(nvrtcResult) noexcept nogil
        nvrtcResult (*nvrtcVersion)(int *, int *) noexcept nogil
        nvrtcResult (*nvrtcGetNumSupportedArchs)(int *) noexcept nogil
        nvrtcResult (*nvrtcGetSupportedArchs)(int *) noexcept nogil
        nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram *, const char *, const char *, int,
                                          const char *const *, const char *const *) noexcept nogil
        nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram *) noexcept nogil
        nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char *const *) noexcept nogil
        nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, size_t *) noexcept nogil
        nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char *) noexcept nogil
        nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t *) noexcept nogil
        nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char *) noexcept nogil
        nvrtcResult (*nvrtcGetLTOIRSize)(nvrtcProgram, size_t *) noexcept nogil
        nvrtcResult (*nvrtcGetLTOIR)(nvrtcProgram, char *) noexcept nogil
        nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t *) noexcept nogil
        nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char *) noexcept nogil
        nvrtcResult (*nvrtcAddNameExpression)(nvrtcProgram, const char *) noexcept nogil
        nvrtcResult (*nvrtcGetLoweredName)(nvrtcProgram, const char *, const char **) noexcept nogil

    ctypedef int nvJitLinkResult
    cdef struct nvJitLink
    ctypedef nvJitLink *nvJitLinkHandle
    ctypedef int nvJitLinkInputType
    ctypedef struct bc_nvjitlink_t:
        nvJitLinkResult (*nvJitLinkCreate)(nvJitLinkHandle *, unsigned int, const char **) noexcept nogil
        nvJitLinkResult (*nvJitLinkDestroy)(nvJitLinkHandle *) noexcept nogil
        nvJitLinkResult (*nvJitLinkAddData)(nvJitLinkHandle, nvJitLinkInputType, const void *, size_t, const char *) noexcept nogil
        nvJitLinkResult (*nvJitLinkComplete)(nvJitLinkHandle) noexcept nogil
        nvJitLinkResult (*nvJitLinkGetLinkedCubinSize)(nvJitLinkHandle, size_t *) noexcept nogil
        nvJitLinkResult (*nvJitLinkGetLinkedCubin)(nvJitLinkHandle, void *) noexcept nogil
        nvJitLinkResult (*nvJitLinkGetErrorLogSize)(nvJitLinkHandle, size_t *) noexcept nogil
        nvJitLinkResult (*nvJitLinkGetErrorLog)(nvJitLinkHandle, char *) noexcept nogil
        nvJitLinkResult (*nvJitLinkGetInfoLogSize)(nvJitLinkHandle, size_t *) noexcept nogil
        nvJitLinkResult (*nvJitLinkGetInfoLog)(nvJitLinkHandle, char *) noexcept nogil
        nvJitLinkResult (*nvJitLinkVersion)(unsigned int *, unsigned int *) noexcept nogil
    int NVJITLINK_SUCCESS
    int NVJITLINK_INPUT_CUBIN, NVJITLINK_INPUT_PTX, NVJITLINK_INPUT_LTOIR, NVJITLINK_INPUT_FATBIN
    int NVJITLINK_INPUT_OBJECT, NVJITLINK_INPUT_LIBRARY

    const bc_symbol_info bc_nvrtc_symbols[]
    const bc_symbol_info bc_nvjitlink_symbols[]
    size_t BC_NVRTC_SYMBOL_COUNT
    size_t BC_NVJITLINK_SYMBOL_COUNT


# ------------------------------------------------------------------ exceptions
class CompilerNotFoundError(LibraryNotFoundError):
    """NVRTC (or nvJitLink) could not be loaded.

    ``tried`` lists the candidates and why each failed; the message names the pip
    package that provides the library.
    """


class _ToolError(BarecudaError, RuntimeError):
    """A compiler or linker failure: the message, the tool's log and its result code."""

    def __init__(self, message, log="", code=0):
        super().__init__(message)
        self.log = log
        self.code = code

    def __reduce__(self):
        return (type(self), (str(self), self.log, self.code))


class CompileError(_ToolError):
    """NVRTC rejected a program (or an option).

    Attributes
    ----------
    log : str
        NVRTC's program log (the compiler's diagnostics).
    code : int
        The ``nvrtcResult``.
    """


class LinkError(_ToolError):
    """nvJitLink or the driver's linker failed; ``log`` holds the linker's error log."""


# ------------------------------------------------------------------ opening the libraries
cdef bc_nvrtc_t NV
cdef bc_nvjitlink_t JL
cdef void *_handles[2]              # [_NVRTC], [_NVJITLINK]: set last, once the info is complete
cdef enum:
    _NVRTC = 0
    _NVJITLINK = 1
_infos = ({}, {})                   # NVRTC: path, version, archs; nvJitLink: path, version
_lib_lock = threading.Lock()


cdef int _open_once(int which) except -1:
    cdef int major = 0, minor = 0, n = 0
    cdef unsigned int jmajor = 0, jminor = 0
    cdef int archs[64]
    cdef void *h = NULL
    with _lib_lock:
        if _handles[which] != NULL:
            return 0
        info = {}
        if which == _NVRTC:
            info["path"] = open_table(_libfind.NVRTC, bc_nvrtc_symbols, BC_NVRTC_SYMBOL_COUNT, &NV, None, None,
                                      CompilerNotFoundError, &h)
            NV.nvrtcVersion(&major, &minor)
            info["version"] = (major, minor)
            info["archs"] = ()
            if NV.nvrtcGetNumSupportedArchs != NULL and NV.nvrtcGetSupportedArchs != NULL:
                if (NV.nvrtcGetNumSupportedArchs(&n) == NVRTC_SUCCESS and 0 < n <= 64
                        and NV.nvrtcGetSupportedArchs(archs) == NVRTC_SUCCESS):
                    info["archs"] = tuple([archs[i] for i in range(n)])
        else:
            info["path"] = open_table(_libfind.NVJITLINK, bc_nvjitlink_symbols, BC_NVJITLINK_SYMBOL_COUNT, &JL,
                                      None, None, CompilerNotFoundError, &h)
            info["version"] = None
            if JL.nvJitLinkVersion != NULL and JL.nvJitLinkVersion(&jmajor, &jminor) == NVJITLINK_SUCCESS:
                info["version"] = (jmajor, jminor)
        _infos[which].update(info)
        _handles[which] = h
    return 0


cdef dict _info(int which):
    """The library's facts, opening it on first use (then: one pointer test)."""
    if _handles[which] == NULL:
        _open_once(which)
    return _infos[which]


cdef bint _can_open(int which):
    try:
        _info(which)
    except Exception:
        return False
    return True


def nvrtc_version():
    """NVRTC's version as ``(major, minor)``; loads NVRTC on first use.

    Raises
    ------
    CompilerNotFoundError
        NVRTC is not installed (the message says which package provides it for the
        driver found).
    """
    return _info(_NVRTC)["version"]


def nvrtc_path():
    """The NVRTC library barecuda opened."""
    return _info(_NVRTC)["path"]


def nvrtc_archs():
    """The ``sm_XX`` numbers NVRTC can compile for (e.g. ``(75, 80, ..., 120)``)."""
    return _info(_NVRTC)["archs"]


def nvjitlink_path():
    """The nvJitLink library barecuda opened (loads it on first use)."""
    return _info(_NVJITLINK)["path"]


def nvjitlink_version():
    """nvJitLink's version as ``(major, minor)`` (None when it does not say); loads it on first use."""
    return _info(_NVJITLINK)["version"]


def nvrtc_available():
    """True when NVRTC can be loaded. Never raises."""
    return _can_open(_NVRTC)


def nvjitlink_available():
    """True when nvJitLink can be loaded. Never raises."""
    return _can_open(_NVJITLINK)


# ------------------------------------------------------------------ versions and targets
# Newest PTX ISA each CUDA release's driver JIT-compiles (from the PTX ISA release notes).
_PTX_ISA = {
    (12, 0): (8, 0), (12, 1): (8, 1), (12, 2): (8, 2), (12, 3): (8, 3), (12, 4): (8, 4),
    (12, 5): (8, 5), (12, 6): (8, 5), (12, 8): (8, 7), (12, 9): (8, 8), (13, 0): (9, 0),
}


def ptx_isa_for(cuda_version):
    """The newest PTX ISA version ``(major, minor)`` that CUDA ``cuda_version`` produces/accepts.

    Parameters
    ----------
    cuda_version : tuple or int
        ``(13, 0)`` or ``13000``.
    """
    major, minor = as_version(cuda_version)
    if (major, minor) in _PTX_ISA:
        return _PTX_ISA[(major, minor)]
    if major == 12:
        # 12.7 was never released; anything later than the table stays with its predecessors
        best = max((k for k in _PTX_ISA if k[0] == 12 and k <= (major, minor)), default=(12, 0))
        return _PTX_ISA[best]
    if major >= 13:
        return (major - 4, minor)       # CUDA 13.x -> PTX ISA 9.x
    return (7, minor)


def ptx_version_of(ptx):
    """The ``.version`` of a PTX text as ``(major, minor)``, or None."""
    if isinstance(ptx, (bytes, bytearray, memoryview)):
        ptx = bytes(ptx[:4096]).decode("ascii", errors="replace")
    for line in ptx[:4096].splitlines():
        s = line.strip()
        if s.startswith(".version"):
            parts = s.split()
            if len(parts) >= 2 and "." in parts[1]:
                a, _, b = parts[1].partition(".")
                if a.isdigit() and b.isdigit():
                    return (int(a), int(b))
    return None


def as_version(v):
    """``13050`` or ``(13, 5)`` -> ``(13, 5)``; None stays None."""
    if v is None:
        return None
    if isinstance(v, int):
        return (v // 1000, (v % 1000) // 10)
    return (int(v[0]), int(v[1]))


def as_cc(arch):
    """(major, minor) or 'sm_90' / 'compute_90a' / 90 -> int like 90, plus a suffix ('', 'a', 'f')."""
    if isinstance(arch, tuple):
        return int(arch[0]) * 10 + int(arch[1]), ""
    if isinstance(arch, int):
        return arch, ""
    s = str(arch).lower()
    for prefix in ("sm_", "compute_", "lto_", "sm", "compute"):
        if s.startswith(prefix):
            s = s[len(prefix):]
            break
    suffix = ""
    if s and s[len(s) - 1] in "af":        # (no negative indexing: wraparound is off)
        suffix = s[len(s) - 1]
        s = s[:len(s) - 1]
    if not s.isdigit():
        raise ValueError(f"arch={arch!r}: expected e.g. 'sm_90', 'compute_90', 90 or (9, 0)")
    return int(s), suffix


def select_target(str want, nvrtc_version, driver_version, cc, supported_archs=()):
    """Choose what to compile to, given the tool versions and the device.

    A driver cannot JIT PTX newer than itself, but loads a cubin made by a newer
    NVRTC of the same major version (minor-version compatibility). So:

    * ``'auto'``: a cubin for the device's architecture when NVRTC supports it and
      its major version is not newer than the driver's; otherwise PTX, when the
      driver accepts NVRTC's PTX ISA; otherwise an error.
    * ``'cubin'``, ``'ltoir'``: as asked (checked against NVRTC's architectures).
    * ``'ptx'``: as asked; loading it checks the ISA against the driver.

    Parameters
    ----------
    want : {'auto', 'ptx', 'cubin', 'ltoir'}
    nvrtc_version, driver_version : tuple or int
        ``(13, 5)`` / ``13050``; ``driver_version`` None means no driver is known
        (offline compile: PTX for ``'auto'``).
    cc : int, tuple or str
        The target architecture (``90``, ``(9, 0)``, ``'sm_90'``).
    supported_archs : sequence of int
        NVRTC's architectures (``nvrtc_archs()``); empty means unknown.

    Returns
    -------
    (kind, arch) : (str, str)
        ``kind`` in ``'ptx'``, ``'cubin'``, ``'ltoir'``; ``arch`` the ``-arch`` value
        (``'sm_90'`` or ``'compute_90'``).
    """
    nv = as_version(nvrtc_version)
    drv = as_version(driver_version)
    n, suffix = as_cc(cc)
    supported = tuple(supported_archs or ())
    if want not in ("auto", "ptx", "cubin", "ltoir"):
        raise ValueError(f"target={want!r}: expected 'auto', 'ptx', 'cubin' or 'ltoir'")
    if want in ("cubin", "ltoir"):
        if supported and n not in supported:
            raise CompileError(f"NVRTC {nv[0]}.{nv[1]} cannot compile for sm_{n}; it supports "
                               f"{', '.join(f'sm_{a}' for a in supported)}")
        return (want, f"sm_{n}{suffix}")
    # PTX for the newest architecture NVRTC knows that the device can run
    ptx_cc = n
    if supported and n not in supported:
        older = [a for a in supported if a <= n]
        if not older:
            raise CompileError(f"NVRTC {nv[0]}.{nv[1]} cannot compile for sm_{n} or any older "
                               f"architecture (it supports {', '.join(f'sm_{a}' for a in supported)})")
        ptx_cc = max(older)
        suffix = ""
    if want == "ptx" or drv is None:
        return ("ptx", f"compute_{ptx_cc}{suffix}")
    # auto, with a driver
    if nv[0] > drv[0]:
        raise DriverVersionError(
            f"NVRTC {nv[0]}.{nv[1]} is newer than the driver (CUDA {drv[0]}.{drv[1]}): the driver can load "
            f"neither its PTX nor its cubins. Install an NVRTC of CUDA {drv[0]} "
            f"({_libfind.install_advice(_libfind.NVRTC, drv[0])}, or point BARECUDA_NVRTC at one), "
            "or upgrade the NVIDIA driver.")
    if not supported or n in supported:
        return ("cubin", f"sm_{n}{suffix}")
    if ptx_isa_for(nv) <= ptx_isa_for(drv):
        return ("ptx", f"compute_{ptx_cc}{suffix}")
    raise DriverVersionError(
        f"NVRTC {nv[0]}.{nv[1]} does not support sm_{n}, and its PTX (ISA {ptx_isa_for(nv)[0]}."
        f"{ptx_isa_for(nv)[1]}) is newer than the CUDA {drv[0]}.{drv[1]} driver accepts. Use an NVRTC "
        "that knows the device, or upgrade the driver.")


# ------------------------------------------------------------------ one run of each tool
# NVRTC and nvJitLink hand out every result (PTX, cubin, LTO-IR, logs) through a pair
# "GetXSize(h, &n)" then "GetX(h, buf)". Both handles are opaque pointers and both
# result types are int, so one helper serves every pair through these two shapes.
ctypedef int (*_size_fn)(void *, size_t *) noexcept nogil
ctypedef int (*_fill_fn)(void *, char *) noexcept nogil


cdef bytes _fetch(void *h, _size_fn size, _fill_fn fill, bint text):
    """One size-then-fill result: the bytes (up to the first NUL when ``text``), or
    None when the tool lacks the pair (an older library), fails, or has nothing."""
    cdef size_t n = 0
    if size == NULL or fill == NULL or size(h, &n) != 0 or n <= 1:
        return None
    buf = bytearray(n)
    if fill(h, buf) != 0:
        return None
    return bytes(buf).split(b"\0", 1)[0] if text else bytes(buf)


cdef str _text(bytes b):
    return b.decode("utf-8", errors="replace") if b is not None else ""


cdef str _nvrtc_err(nvrtcResult rc):
    cdef const char *s = NV.nvrtcGetErrorString(rc) if NV.nvrtcGetErrorString != NULL else NULL
    return s.decode(errors="replace") if s != NULL else f"NVRTC error {rc}"


cdef const char **_c_strings(list items) except NULL:
    """A C array of the bytes in ``items`` (PyMem_Free it; the bytes must outlive it)."""
    cdef Py_ssize_t i
    cdef const char **out = <const char **>PyMem_Malloc(sizeof(char *) * (len(items) + 1))
    if out == NULL:
        raise MemoryError()
    for i in range(len(items)):
        out[i] = <const char *>(<bytes>items[i])
    return out


def nvrtc_compile(bytes src, bytes name, list headers, list options, list names, str kind):
    """Run NVRTC once on ``src``.

    Parameters
    ----------
    headers : list of (bytes, bytes)
        ``(include name, source)`` pairs.
    options, names : list of bytes
        NVRTC options (``-arch`` included) and name expressions.
    kind : {'ptx', 'cubin', 'ltoir'}
        The output wanted.

    Returns
    -------
    (code, ptx, log, lowered names) : (bytes, bytes or None, str, dict)
    """
    cdef nvrtcProgram p = NULL
    cdef nvrtcResult rc
    cdef int nh = len(headers), no = len(options)
    cdef const char **hsrc = NULL
    cdef const char **hname = NULL
    cdef const char **opts = NULL
    cdef const char *lowered = NULL
    cdef const char *csrc = src
    cdef const char *cname = name
    _info(_NVRTC)
    hnames = [h[0] for h in headers]
    hsrcs = [h[1] for h in headers]
    try:
        hname = _c_strings(hnames)
        hsrc = _c_strings(hsrcs)
        opts = _c_strings(options)
        rc = NV.nvrtcCreateProgram(&p, csrc, cname, nh, hsrc, hname)
        if rc != NVRTC_SUCCESS:
            raise CompileError(f"nvrtcCreateProgram failed: {_nvrtc_err(rc)}", "", rc)
        try:
            for n in names:
                rc = NV.nvrtcAddNameExpression(p, <bytes>n)
                if rc != NVRTC_SUCCESS:
                    raise CompileError(f"nvrtcAddNameExpression({n.decode()!r}) failed: {_nvrtc_err(rc)}", "", rc)
            with nogil:
                rc = NV.nvrtcCompileProgram(p, no, opts)
            log = _text(_fetch(p, <_size_fn>NV.nvrtcGetProgramLogSize, <_fill_fn>NV.nvrtcGetProgramLog, True))
            if rc != NVRTC_SUCCESS:
                msg = f"NVRTC could not compile {name.decode(errors='replace')}: {_nvrtc_err(rc)}"
                if log.strip():
                    msg += "\n" + log.strip()
                if rc == NVRTC_ERROR_INVALID_OPTION:
                    msg += "\noptions: " + " ".join(o.decode() for o in options)
                raise CompileError(msg, log, rc)
            lowered_names = {}
            for n in names:
                rc = NV.nvrtcGetLoweredName(p, <bytes>n, &lowered)
                if rc != NVRTC_SUCCESS or lowered == NULL:
                    raise CompileError(f"no lowered name for the name expression {n.decode()!r}: "
                                       f"{_nvrtc_err(rc)}", log, rc)
                lowered_names[n.decode()] = lowered.decode()
            ptx = _fetch(p, <_size_fn>NV.nvrtcGetPTXSize, <_fill_fn>NV.nvrtcGetPTX, True)
            if kind == "ptx":
                code = ptx
            elif kind == "cubin":
                code = _fetch(p, <_size_fn>NV.nvrtcGetCUBINSize, <_fill_fn>NV.nvrtcGetCUBIN, False)
            else:
                code = _fetch(p, <_size_fn>NV.nvrtcGetLTOIRSize, <_fill_fn>NV.nvrtcGetLTOIR, False)
            if code is None:
                raise CompileError(f"NVRTC produced no {kind} output (options: "
                                   f"{' '.join(o.decode() for o in options)})", log, 0)
            return code, ptx, log, lowered_names
        finally:
            NV.nvrtcDestroyProgram(&p)
    finally:
        PyMem_Free(hsrc)
        PyMem_Free(hname)
        PyMem_Free(opts)


_JL_KIND = {"cubin": NVJITLINK_INPUT_CUBIN, "ptx": NVJITLINK_INPUT_PTX, "ltoir": NVJITLINK_INPUT_LTOIR,
            "fatbin": NVJITLINK_INPUT_FATBIN, "object": NVJITLINK_INPUT_OBJECT,
            "library": NVJITLINK_INPUT_LIBRARY}


cdef str _jl_log(nvJitLinkHandle h, bint error):
    if error:
        return _text(_fetch(h, <_size_fn>JL.nvJitLinkGetErrorLogSize, <_fill_fn>JL.nvJitLinkGetErrorLog, True))
    return _text(_fetch(h, <_size_fn>JL.nvJitLinkGetInfoLogSize, <_fill_fn>JL.nvJitLinkGetInfoLog, True))


cdef str _with_log(str msg, str log):
    return msg + (f"\n{log}" if log else "")


def nvjitlink_link(list inputs, str arch, list options):
    """Link ``inputs`` (a list of ``(kind, bytes)``; kind ``'ltoir'``, ``'cubin'``,
    ``'ptx'``, ``'fatbin'``, ``'object'`` or ``'library'``) into a cubin for ``arch``.

    Returns
    -------
    (cubin, info log) : (bytes, str)
    """
    cdef nvJitLinkHandle h = NULL
    cdef nvJitLinkResult rc
    cdef const char **opts = NULL
    cdef int i
    _info(_NVJITLINK)
    bopts = [f"-arch={arch}".encode()]
    if any(kind == "ltoir" for kind, _ in inputs):
        bopts.append(b"-lto")
    bopts += [o.encode() for o in options]
    opts = _c_strings(bopts)
    try:
        rc = JL.nvJitLinkCreate(&h, len(bopts), opts)
        if rc != NVJITLINK_SUCCESS:
            raise LinkError(f"nvJitLinkCreate failed ({rc}) with options {[o.decode() for o in bopts]}", "", rc)
        try:
            for i, (kind, data) in enumerate(inputs):
                jkind = _JL_KIND.get(kind)
                if jkind is None:
                    raise LinkError(f"cannot link {kind} input")
                nm = f"input{i}.{kind}".encode()
                rc = JL.nvJitLinkAddData(h, jkind, <const char *>(<bytes>data), len(data), nm)
                if rc != NVJITLINK_SUCCESS:
                    log = _jl_log(h, True)
                    raise LinkError(_with_log(f"nvJitLinkAddData({kind} input {i}) failed ({rc})", log), log, rc)
            with nogil:
                rc = JL.nvJitLinkComplete(h)
            if rc != NVJITLINK_SUCCESS:
                log = _jl_log(h, True)
                raise LinkError(_with_log(f"nvJitLink could not link ({rc})", log), log, rc)
            cubin = _fetch(h, <_size_fn>JL.nvJitLinkGetLinkedCubinSize, <_fill_fn>JL.nvJitLinkGetLinkedCubin, False)
            if cubin is None:
                raise LinkError("nvJitLink produced no cubin", _jl_log(h, True), 0)
            return cubin, _jl_log(h, False)
        finally:
            JL.nvJitLinkDestroy(&h)
    finally:
        PyMem_Free(opts)
