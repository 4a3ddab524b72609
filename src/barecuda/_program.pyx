"""Kernels from CUDA C++ source: NVRTC programs, the compile cache, linking, library kernels.

Owns: opening NVRTC and nvJitLink at run time (found by ``_libfind``; declared in
``include/barecuda/nvrtc_abi.h``), ``Program`` (CUDA C++ -> PTX, cubin or LTO-IR),
``ObjectCode`` (the compiled image with its PTX signatures and lowered C++ names),
the choice of output for a driver older than NVRTC (``select_target``), the
persistent on-disk compile cache with in-process memoization (``cache_info``,
``clear_cache``), ``Linker`` / ``link`` (nvJitLink, or the driver's ``cuLink*``),
and ``Library`` (``cuLibraryLoadData``: context-independent kernels).
Modules loaded from compiled code are ordinary ``_module.Module`` objects; their
kernels are ``_launch.Kernel`` objects built with the PTX parameter types.
"""
cimport cython
import hashlib
import os
import struct
import sys
import threading
import time
import warnings
import weakref

from libc.string cimport memset, strlen
from cpython.mem cimport PyMem_Malloc, PyMem_Free

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current
from barecuda._device cimport Device, device_of
from barecuda._module cimport Module
from barecuda._launch cimport Kernel, make_kernel, invalidate_kernel
from barecuda._errors import BarecudaError, DriverVersionError, CudaWarning, make_error
from barecuda import _libfind

try:                                   # where the PTX parser lives moves between releases
    from barecuda._signature import parse_ptx_signatures
except ImportError:
    from barecuda._module import parse_ptx_signatures

cdef extern from "barecuda/nvrtc_abi.h" nogil:
    ctypedef int nvrtcResult
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
        nvJitLinkResult (*nvJitLinkGetLinkedPtxSize)(nvJitLinkHandle, size_t *) noexcept nogil
        nvJitLinkResult (*nvJitLinkGetLinkedPtx)(nvJitLinkHandle, char *) noexcept nogil
        nvJitLinkResult (*nvJitLinkGetErrorLogSize)(nvJitLinkHandle, size_t *) noexcept nogil
        nvJitLinkResult (*nvJitLinkGetErrorLog)(nvJitLinkHandle, char *) noexcept nogil
        nvJitLinkResult (*nvJitLinkGetInfoLogSize)(nvJitLinkHandle, size_t *) noexcept nogil
        nvJitLinkResult (*nvJitLinkGetInfoLog)(nvJitLinkHandle, char *) noexcept nogil
        nvJitLinkResult (*nvJitLinkVersion)(unsigned int *, unsigned int *) noexcept nogil
    int NVJITLINK_INPUT_CUBIN, NVJITLINK_INPUT_PTX, NVJITLINK_INPUT_LTOIR, NVJITLINK_INPUT_FATBIN
    int NVJITLINK_INPUT_OBJECT, NVJITLINK_INPUT_LIBRARY

    cdef struct CUlinkState_st
    ctypedef CUlinkState_st *CUlinkState
    ctypedef int CUjitInputType
    ctypedef int CUlibraryOption
    int CU_JIT_INPUT_CUBIN, CU_JIT_INPUT_PTX, CU_JIT_INPUT_FATBINARY, CU_JIT_INPUT_OBJECT, CU_JIT_INPUT_LIBRARY
    ctypedef struct bc_linkdrv_t:
        CUresult (*cuLinkCreate)(unsigned int, CUjit_option *, void **, CUlinkState *) noexcept nogil
        CUresult (*cuLinkAddData)(CUlinkState, CUjitInputType, void *, size_t, const char *,
                                  unsigned int, CUjit_option *, void **) noexcept nogil
        CUresult (*cuLinkComplete)(CUlinkState, void **, size_t *) noexcept nogil
        CUresult (*cuLinkDestroy)(CUlinkState) noexcept nogil
        CUresult (*cuLibraryLoadData)(CUlibrary *, const void *, CUjit_option *, void **, unsigned int,
                                      CUlibraryOption *, void **, unsigned int) noexcept nogil
        CUresult (*cuLibraryUnload)(CUlibrary) noexcept nogil
        CUresult (*cuLibraryGetKernel)(CUkernel *, CUlibrary, const char *) noexcept nogil
        CUresult (*cuKernelGetFunction)(CUfunction *, CUkernel) noexcept nogil

    ctypedef struct bc_tool_symbol:
        const char *name
        int required
        size_t offset
    const bc_tool_symbol bc_nvrtc_symbols[]
    const bc_tool_symbol bc_nvjitlink_symbols[]
    size_t BC_NVRTC_SYMBOL_COUNT
    size_t BC_NVJITLINK_SYMBOL_COUNT
    void *bc_tool_dlopen(const char *path, char *err, size_t errlen)
    void bc_tool_dlclose(void *h)
    const char *bc_tool_resolve(void *h, const bc_tool_symbol *syms, size_t n, void *table)
    void bc_link_resolve(void *driver_handle, bc_linkdrv_t *table)

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()
_TOKEN = object()


# ------------------------------------------------------------------ exceptions
class CompilerNotFoundError(BarecudaError, OSError):
    """NVRTC (or nvJitLink) could not be loaded.

    ``tried`` lists the candidates and why each failed; the message names the pip
    package that provides the library.
    """

    def __init__(self, message, tried=()):
        super().__init__(message)
        self.tried = tuple(tried)

    def __reduce__(self):
        return (type(self), (str(self), self.tried))


class CompileError(BarecudaError, RuntimeError):
    """NVRTC rejected a program (or an option).

    Attributes
    ----------
    log : str
        NVRTC's program log (the compiler's diagnostics).
    code : int
        The ``nvrtcResult``.
    """

    def __init__(self, message, log="", code=0):
        super().__init__(message)
        self.log = log
        self.code = code

    def __reduce__(self):
        return (type(self), (str(self), self.log, self.code))


class LinkError(BarecudaError, RuntimeError):
    """nvJitLink or the driver's linker failed; ``log`` holds the linker's error log."""

    def __init__(self, message, log="", code=0):
        super().__init__(message)
        self.log = log
        self.code = code

    def __reduce__(self):
        return (type(self), (str(self), self.log, self.code))


# ------------------------------------------------------------------ opening the libraries
cdef bc_nvrtc_t NV
cdef void *_nv_handle = NULL
cdef bc_nvjitlink_t JL
cdef void *_jl_handle = NULL
cdef bc_linkdrv_t LK
cdef bint _lk_resolved = False
_lib_lock = threading.Lock()
_nv_info = {}          # path, version, archs
_jl_info = {}


cdef int _open_tool(spec, void *table, const bc_tool_symbol *syms, size_t nsyms, void **out, dict info) except -1:
    cdef char err[512]
    cdef void *h
    cdef const char *missing
    cdef bytes bpath
    cdef const char *cpath
    tried = []
    for path in _libfind.candidates(spec):
        bpath = os.fsencode(path)
        cpath = bpath
        err[0] = 0
        with nogil:
            h = bc_tool_dlopen(cpath, err, sizeof(err))
        if h == NULL:
            if os.path.isabs(path) or os.environ.get(spec.env):
                tried.append(f"{path}: {err.decode(errors='replace')}")
            else:
                tried.append(f"{path}: not found by the system loader")
            continue
        missing = bc_tool_resolve(h, syms, nsyms, table)
        if missing != NULL:
            tried.append(f"{path}: opened, but it has no {missing.decode()}")
            bc_tool_dlclose(h)
            continue
        out[0] = h
        info["path"] = path
        return 0
    raise CompilerNotFoundError(_libfind.describe(spec, tried), tried)


cdef int _ensure_nvrtc() except -1:
    global _nv_handle
    cdef int major = 0, minor = 0, n = 0
    cdef int archs[64]
    if _nv_handle != NULL:
        return 0
    with _lib_lock:
        if _nv_handle != NULL:
            return 0
        info = {}
        _open_tool(_libfind.NVRTC, &NV, bc_nvrtc_symbols, BC_NVRTC_SYMBOL_COUNT, &_nv_handle, info)
        NV.nvrtcVersion(&major, &minor)
        info["version"] = (major, minor)
        supported = ()
        if NV.nvrtcGetNumSupportedArchs != NULL and NV.nvrtcGetSupportedArchs != NULL:
            if NV.nvrtcGetNumSupportedArchs(&n) == 0 and 0 < n <= 64 and NV.nvrtcGetSupportedArchs(archs) == 0:
                supported = tuple([archs[i] for i in range(n)])
        info["archs"] = supported
        _nv_info.clear()
        _nv_info.update(info)
    return 0


cdef int _ensure_nvjitlink() except -1:
    global _jl_handle
    cdef unsigned int major = 0, minor = 0
    if _jl_handle != NULL:
        return 0
    with _lib_lock:
        if _jl_handle != NULL:
            return 0
        info = {}
        _open_tool(_libfind.NVJITLINK, &JL, bc_nvjitlink_symbols, BC_NVJITLINK_SYMBOL_COUNT, &_jl_handle, info)
        if JL.nvJitLinkVersion != NULL and JL.nvJitLinkVersion(&major, &minor) == 0:
            info["version"] = (major, minor)
        else:
            info["version"] = None
        _jl_info.clear()
        _jl_info.update(info)
    return 0


cdef int _ensure_linkdrv() except -1:
    """The driver's cuLink*/cuLibrary* entry points (resolved once, NULL when the driver lacks them)."""
    global _lk_resolved
    ensure_driver(ST)
    if not _lk_resolved:
        with _lib_lock:
            if not _lk_resolved:
                bc_link_resolve(ST.handle, &LK)
                _lk_resolved = True
    return 0


cdef int _require(void *fn, str name, str feature, int version) except -1:
    if fn != NULL:
        return 0
    v = ST.driver_version
    raise DriverVersionError(
        f"{feature} needs {name}, which needs a CUDA {version // 1000}.{(version % 1000) // 10} driver "
        f"or newer; the loaded driver is CUDA {v // 1000}.{(v % 1000) // 10}. Upgrade the NVIDIA driver.")


def nvrtc_version():
    """NVRTC's version as ``(major, minor)``; loads NVRTC on first use.

    Raises
    ------
    CompilerNotFoundError
        NVRTC is not installed (``pip install nvidia-cuda-nvrtc``).
    """
    _ensure_nvrtc()
    return _nv_info["version"]


def nvrtc_path():
    """The NVRTC library barecuda opened."""
    _ensure_nvrtc()
    return _nv_info["path"]


def nvrtc_archs():
    """The ``sm_XX`` numbers NVRTC can compile for (e.g. ``(75, 80, ..., 120)``)."""
    _ensure_nvrtc()
    return _nv_info["archs"]


def nvjitlink_version():
    """nvJitLink's version as ``(major, minor)`` (None when it does not say); loads it on first use."""
    _ensure_nvjitlink()
    return _jl_info["version"]


def nvrtc_available():
    """True when NVRTC can be loaded. Never raises."""
    try:
        _ensure_nvrtc()
    except Exception:
        return False
    return True


def nvjitlink_available():
    """True when nvJitLink can be loaded. Never raises."""
    try:
        _ensure_nvjitlink()
    except Exception:
        return False
    return True


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
    if isinstance(cuda_version, int):
        cuda_version = (cuda_version // 1000, (cuda_version % 1000) // 10)
    major, minor = int(cuda_version[0]), int(cuda_version[1])
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


def _as_version(v):
    if v is None:
        return None
    if isinstance(v, int):
        return (v // 1000, (v % 1000) // 10)
    return (int(v[0]), int(v[1]))


def _as_cc(arch):
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
    nv = _as_version(nvrtc_version)
    drv = _as_version(driver_version)
    n, suffix = _as_cc(cc)
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
            f"(`pip install \"nvidia-cuda-nvrtc=={drv[0]}.{drv[1]}.*\"`, or point BARECUDA_NVRTC at one), "
            "or upgrade the NVIDIA driver.")
    if not supported or n in supported:
        return ("cubin", f"sm_{n}{suffix}")
    if ptx_isa_for(nv) <= ptx_isa_for(drv):
        return ("ptx", f"compute_{ptx_cc}{suffix}")
    raise DriverVersionError(
        f"NVRTC {nv[0]}.{nv[1]} does not support sm_{n}, and its PTX (ISA {ptx_isa_for(nv)[0]}."
        f"{ptx_isa_for(nv)[1]}) is newer than the CUDA {drv[0]}.{drv[1]} driver accepts. Use an NVRTC "
        "that knows the device, or upgrade the driver.")


cdef int _check_ptx_loadable(object ptx) except -1:
    """Refuse PTX whose ISA is newer than the loaded driver JIT-compiles."""
    v = ptx_version_of(ptx)
    if v is None:
        return 0
    drv = _as_version(ST.driver_version)
    limit = ptx_isa_for(drv)
    if v > limit:
        raise DriverVersionError(
            f"this PTX is ISA {v[0]}.{v[1]}, newer than the CUDA {drv[0]}.{drv[1]} driver accepts "
            f"({limit[0]}.{limit[1]}); it was made by a newer compiler. Compile with target='cubin' "
            "(a newer NVRTC's cubins load on an older driver of the same major version), or "
            "upgrade the NVIDIA driver.")
    return 0


# ------------------------------------------------------------------ the cache
_FORMAT = b"BCNVRTC2"
_HEADER = struct.Struct("<8sQ32s")      # magic, payload length, sha256(payload)
_memo = {}                              # in-process: key -> ObjectCode
_memo_lock = threading.Lock()
_stats = {"memory_hits": 0, "disk_hits": 0, "misses": 0, "corrupt": 0, "writes": 0, "evictions": 0}
_DEFAULT_MAX_BYTES = 1 << 30


def cache_dir():
    """The folder of the persistent compile cache, or None when it is turned off.

    ``BARECUDA_CACHE_DIR`` if set (empty: off); else ``BARECUDA_CACHE=0`` turns it off;
    else ``%LOCALAPPDATA%\\barecuda\\cache`` on Windows, ``$XDG_CACHE_HOME/barecuda`` or
    ``~/.cache/barecuda`` elsewhere. Compiled programs live in its ``nvrtc`` folder.
    """
    env = os.environ
    if "BARECUDA_CACHE_DIR" in env:
        d = env["BARECUDA_CACHE_DIR"]
        return os.path.join(d, "nvrtc") if d else None
    if env.get("BARECUDA_CACHE", "1").strip().lower() in ("0", "off", "no", "false"):
        return None
    if sys.platform == "win32":
        base = env.get("LOCALAPPDATA") or os.path.join(os.path.expanduser("~"), "AppData", "Local")
        return os.path.join(base, "barecuda", "cache", "nvrtc")
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "barecuda", "nvrtc")


def _max_bytes():
    v = os.environ.get("BARECUDA_CACHE_MAX_BYTES")
    if v:
        try:
            return max(0, int(v))
        except ValueError:
            raise ValueError(f"BARECUDA_CACHE_MAX_BYTES={v!r}: expected a number of bytes") from None
    return _DEFAULT_MAX_BYTES


def _entries_of(d):
    out = []
    try:
        with os.scandir(d) as it:
            for e in it:
                if e.name.endswith(".bin") and e.is_file():
                    try:
                        st = e.stat()
                    except OSError:
                        continue
                    out.append((st.st_mtime, st.st_size, e.path))
    except FileNotFoundError:
        pass
    return out


def cache_info():
    """State of the compile cache.

    Returns
    -------
    dict
        ``directory`` (None when off), ``entries``, ``bytes``, ``max_bytes``,
        ``memory_entries`` (in-process memo), and this process's counters
        ``memory_hits``, ``disk_hits``, ``misses``, ``corrupt``, ``writes``, ``evictions``.
    """
    d = cache_dir()
    ents = _entries_of(d) if d else []
    info = {"directory": d, "entries": len(ents), "bytes": sum(e[1] for e in ents),
            "max_bytes": _max_bytes(), "memory_entries": len(_memo)}
    info.update(_stats)
    return info


def clear_cache(memory=True, disk=True):
    """Empty the compile cache: the in-process memo and/or the on-disk entries.

    Returns
    -------
    int
        Number of disk entries removed.
    """
    n = 0
    if memory:
        with _memo_lock:
            _memo.clear()
    if disk:
        d = cache_dir()
        if d:
            for _, _, path in _entries_of(d):
                try:
                    os.unlink(path)
                    n += 1
                except OSError:
                    pass
    return n


def _pack_entry(ObjectCode oc):
    import json
    meta = {"kind": oc.kind, "arch": oc.arch, "log": oc.log, "names": oc._names,
            "nvrtc": list(oc.nvrtc_version) if oc.nvrtc_version else None,
            "code": len(oc.code), "ptx": len(oc._ptx) if oc._ptx is not None else -1}
    mb = json.dumps(meta, sort_keys=True).encode()
    payload = struct.pack("<I", len(mb)) + mb + oc.code + (oc._ptx or b"")
    return _HEADER.pack(_FORMAT, len(payload), hashlib.sha256(payload).digest()) + payload


def _unpack_entry(bytes data):
    """An ObjectCode from an entry's bytes, or None when anything is off."""
    import json
    if len(data) < _HEADER.size:
        return None
    magic, n, digest = _HEADER.unpack_from(data)
    payload = data[_HEADER.size:]
    if magic != _FORMAT or n != len(payload) or hashlib.sha256(payload).digest() != digest:
        return None
    try:
        (mlen,) = struct.unpack_from("<I", payload)
        meta = json.loads(payload[4:4 + mlen].decode())
        pos = 4 + mlen
        code = payload[pos:pos + meta["code"]]
        pos += meta["code"]
        ptx = payload[pos:pos + meta["ptx"]] if meta["ptx"] >= 0 else None
        if len(code) != meta["code"] or (ptx is not None and len(ptx) != meta["ptx"]):
            return None
        return ObjectCode._make(code, meta["kind"], meta["arch"], ptx, meta["log"], meta["names"],
                                tuple(meta["nvrtc"]) if meta["nvrtc"] else None)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def _disk_get(str d, str digest):
    path = os.path.join(d, digest + ".bin")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    oc = _unpack_entry(data)
    if oc is None:
        _stats["corrupt"] += 1
        try:
            os.unlink(path)          # replaced by the fresh compile that follows
        except OSError:
            pass
        return None
    try:
        os.utime(path)               # LRU: a hit makes the entry young again
    except OSError:
        pass
    return oc


def _disk_put(str d, str digest, ObjectCode oc):
    import tempfile
    try:
        os.makedirs(d, exist_ok=True)
        data = _pack_entry(oc)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, os.path.join(d, digest + ".bin"))    # atomic: readers see all or nothing
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        _stats["writes"] += 1
        _evict(d, _max_bytes())
    except OSError as exc:
        warnings.warn(f"barecuda compile cache: cannot write to {d}: {exc}", CudaWarning, stacklevel=3)


def _evict(str d, size_t limit):
    ents = _entries_of(d)
    total = sum(e[1] for e in ents)
    if total <= limit:
        return
    ents.sort()                       # oldest use first
    for mtime, size, path in ents:
        if total <= limit:
            break
        try:
            os.unlink(path)
            total -= size
            _stats["evictions"] += 1
        except OSError:
            pass
    # temporary files of writers that died long ago
    now = time.time()
    try:
        for e in os.scandir(d):
            if e.name.startswith(".tmp-") and now - e.stat().st_mtime > 3600:
                os.unlink(e.path)
    except OSError:
        pass


# ------------------------------------------------------------------ compiled code
@cython.final
cdef class ObjectCode:
    """A compiled image: PTX, cubin or LTO-IR, with what is needed to use it.

    Made by :meth:`Program.compile` and :func:`link`; also from your own bytes with
    :meth:`from_ptx`, :meth:`from_cubin`, :meth:`from_ltoir`, :meth:`from_fatbin`.

    Attributes
    ----------
    code : bytes
        The image.
    kind : str
        ``'ptx'``, ``'cubin'``, ``'ltoir'`` or ``'fatbin'``.
    arch : str
        The ``-arch`` it was made for (``'sm_90'``, ``'compute_90'``), or ``''``.
    log : str
        The compiler's (or linker's) log; warnings land here.
    nvrtc_version : tuple or None
    """

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("ObjectCode comes from Program.compile(), link() or ObjectCode.from_*()")
        self._names = {}
        self._modules = {}
        self.log = ""
        self.arch = ""

    @staticmethod
    def _make(bytes code, str kind, str arch, object ptx, str log, dict names, object nvrtc_version):
        cdef ObjectCode oc = ObjectCode.__new__(ObjectCode, _TOKEN)
        oc.code = code
        oc.kind = kind
        oc.arch = arch or ""
        oc._ptx = ptx if ptx else None
        oc.log = log or ""
        oc._names = dict(names or {})
        oc.nvrtc_version = nvrtc_version
        return oc

    @staticmethod
    def from_ptx(ptx, *, names=None):
        """Wrap PTX text (``names``: optional ``{name expression: lowered name}``)."""
        data = ptx.encode() if isinstance(ptx, str) else bytes(ptx)
        data = data.split(b"\0", 1)[0]
        return ObjectCode._make(data, "ptx", "", data, "", names or {}, None)

    @staticmethod
    def from_cubin(cubin, *, ptx=None, names=None):
        """Wrap a cubin; ``ptx`` (the same program's PTX) gives kernels their exact parameter types."""
        p = ptx.encode() if isinstance(ptx, str) else (bytes(ptx) if ptx is not None else None)
        return ObjectCode._make(bytes(cubin), "cubin", "", p, "", names or {}, None)

    @staticmethod
    def from_ltoir(ltoir, *, ptx=None, names=None):
        """Wrap LTO-IR (input to :func:`link`)."""
        p = ptx.encode() if isinstance(ptx, str) else (bytes(ptx) if ptx is not None else None)
        return ObjectCode._make(bytes(ltoir), "ltoir", "", p, "", names or {}, None)

    @staticmethod
    def from_fatbin(fatbin):
        """Wrap a fatbin."""
        return ObjectCode._make(bytes(fatbin), "fatbin", "", None, "", {}, None)

    @property
    def ptx(self):
        """The PTX text of this program (str), when known: the image itself for PTX,
        the PTX NVRTC produced alongside a cubin or LTO-IR."""
        if self._ptx is None:
            return None
        return self._ptx.decode("utf-8", errors="replace")

    @property
    def lowered_names(self):
        """``{name expression: lowered (mangled) name}`` for the program's name expressions."""
        return dict(self._names)

    def lowered_name(self, str name):
        """The lowered name of ``name`` if it is a name expression of the program, else ``name``."""
        return self._names.get(name, name)

    def signatures(self):
        """``{kernel: [(type, size, align), ...]}`` from the program's PTX, or None when unknown."""
        if self._sigs is None and self._ptx is not None:
            self._sigs = parse_ptx_signatures(self._ptx)
        return self._sigs

    def load(self, *, device=None, options=None):
        """Load into a :class:`Module` on ``device`` (default: the current device).

        PTX is checked against the driver first: PTX newer than the driver accepts
        raises :class:`DriverVersionError` instead of reaching the driver. Kernels of
        a cubin keep the parameter types of the program's PTX.

        Parameters
        ----------
        device : Device or int, optional
        options : dict, optional
            JIT options, as for :meth:`Module.from_ptx`.
        """
        ensure_driver(ST)
        if self.kind == "ptx":
            _check_ptx_loadable(self.code)
            return Module.from_ptx(self.code, device=device, options=options)
        if self.kind == "ltoir":
            raise ValueError("LTO-IR cannot be loaded directly: link it first (barecuda.link([...]))")
        m = Module.from_cubin(self.code, device=device, options=options) if self.kind == "cubin" \
            else Module.from_fatbin(self.code, device=device, options=options)
        sigs = self.signatures()
        if sigs is not None:
            (<Module>m)._entries = dict(sigs)
        return m

    def get_kernel(self, str name, *, device=None, signature=None):
        """Kernel ``name`` on ``device``, loading the code there once (per device).

        ``name`` may be a name expression given to :meth:`Program.compile`
        (``'scale<float>'``), a lowered name, or a kernel's plain name.
        """
        cdef Device dev = device_of(device)
        m = self._modules.get(dev.ordinal)
        if m is None or m.closed:
            m = self.load(device=dev)
            self._modules[dev.ordinal] = m
        return m.get_kernel(self._names.get(name, name), signature)

    def __len__(self):
        return len(self.code)

    def __repr__(self):
        return f"<barecuda.ObjectCode {self.kind} {self.arch or '?'} ({len(self.code)} bytes)>"


# ------------------------------------------------------------------ programs
cdef bytes _b(object s, str what):
    if isinstance(s, bytes):
        b = s
    elif isinstance(s, str):
        b = s.encode("utf-8")
    else:
        raise TypeError(f"{what} must be str or bytes, got {type(s).__name__}")
    if b"\0" in b:
        raise ValueError(f"{what} contains a NUL byte")
    return b


cdef str _nvrtc_err(nvrtcResult rc):
    cdef const char *s = NV.nvrtcGetErrorString(rc) if NV.nvrtcGetErrorString != NULL else NULL
    return s.decode(errors="replace") if s != NULL else f"NVRTC error {rc}"


cdef str _program_log(nvrtcProgram p):
    cdef size_t n = 0
    if NV.nvrtcGetProgramLogSize(p, &n) != 0 or n <= 1:
        return ""
    buf = bytearray(n)
    if NV.nvrtcGetProgramLog(p, buf) != 0:
        return ""
    return bytes(buf).split(b"\0", 1)[0].decode("utf-8", errors="replace")


cdef bytes _get_output(nvrtcProgram p, int which):
    """which: 0 PTX, 1 cubin, 2 LTO-IR. None when empty or not available."""
    cdef size_t n = 0
    cdef nvrtcResult rc
    if which == 0:
        rc = NV.nvrtcGetPTXSize(p, &n)
    elif which == 1:
        if NV.nvrtcGetCUBINSize == NULL:
            return None
        rc = NV.nvrtcGetCUBINSize(p, &n)
    else:
        if NV.nvrtcGetLTOIRSize == NULL:
            return None
        rc = NV.nvrtcGetLTOIRSize(p, &n)
    if rc != 0 or n <= 1:
        return None
    buf = bytearray(n)
    if which == 0:
        rc = NV.nvrtcGetPTX(p, buf)
    elif which == 1:
        rc = NV.nvrtcGetCUBIN(p, buf)
    else:
        rc = NV.nvrtcGetLTOIR(p, buf)
    if rc != 0:
        return None
    if which == 0:
        return bytes(buf).split(b"\0", 1)[0]
    return bytes(buf)


def _nvrtc_compile(bytes src, bytes name, list headers, list options, list names, str kind):
    """Run NVRTC once. Returns (code, ptx, log, lowered names)."""
    cdef nvrtcProgram p = NULL
    cdef nvrtcResult rc
    cdef int nh = len(headers), no = len(options), i
    cdef const char **hsrc = NULL
    cdef const char **hname = NULL
    cdef const char **opts = NULL
    cdef const char *lowered = NULL
    cdef const char *csrc = src
    cdef const char *cname = name
    keep = []
    hsrc = <const char **>PyMem_Malloc(sizeof(char *) * (nh + 1))
    hname = <const char **>PyMem_Malloc(sizeof(char *) * (nh + 1))
    opts = <const char **>PyMem_Malloc(sizeof(char *) * (no + 1))
    try:
        if hsrc == NULL or hname == NULL or opts == NULL:
            raise MemoryError()
        for i in range(nh):
            keep.append(headers[i][0]); keep.append(headers[i][1])
            hname[i] = <const char *>(<bytes>headers[i][0])
            hsrc[i] = <const char *>(<bytes>headers[i][1])
        for i in range(no):
            opts[i] = <const char *>(<bytes>options[i])
        rc = NV.nvrtcCreateProgram(&p, csrc, cname, nh, hsrc, hname)
        if rc != 0:
            raise CompileError(f"nvrtcCreateProgram failed: {_nvrtc_err(rc)}", "", rc)
        try:
            for n in names:
                rc = NV.nvrtcAddNameExpression(p, <bytes>n)
                if rc != 0:
                    raise CompileError(f"nvrtcAddNameExpression({n.decode()!r}) failed: {_nvrtc_err(rc)}", "", rc)
            with nogil:
                rc = NV.nvrtcCompileProgram(p, no, opts)
            log = _program_log(p)
            if rc != 0:
                pname = name.decode(errors="replace")
                msg = f"NVRTC could not compile {pname}: {_nvrtc_err(rc)}"
                if log.strip():
                    msg += "\n" + log.strip()
                if rc == 5:      # NVRTC_ERROR_INVALID_OPTION
                    msg += "\noptions: " + " ".join(o.decode() for o in options)
                raise CompileError(msg, log, rc)
            lowered_names = {}
            for n in names:
                rc = NV.nvrtcGetLoweredName(p, <bytes>n, &lowered)
                if rc != 0 or lowered == NULL:
                    raise CompileError(f"no lowered name for the name expression {n.decode()!r}: "
                                       f"{_nvrtc_err(rc)}", log, rc)
                lowered_names[n.decode()] = lowered.decode()
            ptx = _get_output(p, 0)
            if kind == "ptx":
                code = ptx
            elif kind == "cubin":
                code = _get_output(p, 1)
            else:
                code = _get_output(p, 2)
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


def _device_target(device):
    """(driver version, compute capability int) of `device` (loads the driver)."""
    ensure_driver(ST)
    cdef Device dev = device_of(device)
    cc = dev.compute_capability
    return ST.driver_version, cc[0] * 10 + cc[1]


@cython.final
cdef class Program:
    """A CUDA C++ program, compiled with NVRTC.

    Parameters
    ----------
    source : str or bytes
        CUDA C++ source.
    name : str, optional
        The program's file name in diagnostics (``'program.cu'``).
    headers : dict, optional
        In-memory headers ``{include name: source}``, found by ``#include "name"``.
    include_paths : sequence of str, optional
        ``-I`` folders.
    defines : dict or sequence, optional
        ``{'N': 4, 'USE_X': None}`` or ``['N=4', 'USE_X']`` -> ``-D``.
    std : str, optional
        ``'c++17'``, ``'c++20'``...
    debug : bool
        ``-G`` (device debug information, no optimization).
    lineinfo : bool
        ``-lineinfo`` (source lines for profilers).
    fast_math : bool
        ``--use_fast_math``.
    rdc : bool
        Relocatable device code (``-rdc=true``): for programs linked with others.
    opt_level : int, optional
        ptxas optimization level 0-3 (``-Xptxas=-O<n>``; NVRTC has no ``-O``).
    options : sequence of str, optional
        Further NVRTC options, passed through as written.

    Notes
    -----
    The architecture is chosen by :meth:`compile` (``arch=``, default: the device's).
    Compiles are cached: in-process (a repeated compile is a dictionary lookup) and
    on disk (see :func:`cache_dir`), keyed by everything that changes the output.
    """

    def __init__(self, source, *, name="program.cu", headers=None, include_paths=(), defines=None,
                 std=None, debug=False, lineinfo=False, fast_math=False, rdc=False, opt_level=None,
                 options=()):
        self._src = _b(source, "source")
        self.name = str(name)
        hs = []
        if headers:
            if not isinstance(headers, dict):
                raise TypeError("headers must be a dict {include name: source}")
            for k, v in headers.items():
                hs.append((_b(k, "header name"), _b(v, f"header {k!r}")))
        hs.sort()
        self._headers = hs
        opts = []
        if std:
            s = str(std)
            opts.append(f"-std={s}")
        if debug:
            opts.append("-G")
        if lineinfo:
            opts.append("-lineinfo")
        if fast_math:
            opts.append("--use_fast_math")
        if rdc:
            opts.append("-rdc=true")
        if opt_level is not None:
            ol = int(opt_level)
            if not 0 <= ol <= 3:
                raise ValueError(f"opt_level={opt_level}: must be 0 to 3")
            opts.append(f"-Xptxas=-O{ol}")
        if defines:
            items = defines.items() if isinstance(defines, dict) else [(d, None) for d in defines]
            for k, v in items:
                k = str(k)
                if not k or k.startswith("-"):
                    raise ValueError(f"bad define {k!r}")
                opts.append(f"-D{k}" if v is None else f"-D{k}={v}")
        if isinstance(include_paths, (str, bytes, os.PathLike)):
            include_paths = (include_paths,)
        for p in include_paths:
            opts.append(f"-I{os.fspath(p) if not isinstance(p, bytes) else os.fsdecode(p)}")
        if isinstance(options, str):
            options = (options,)
        for o in options:
            o = str(o)
            if o.startswith("-arch") or o.startswith("--gpu-architecture"):
                raise ValueError(f"option {o!r}: give the architecture with compile(arch=...)")
            opts.append(o)
        for o in opts:
            if "\0" in o:
                raise ValueError(f"option {o!r} contains a NUL byte")
        self._options = tuple(opts)
        self._key = (self._src, self.name, tuple(self._headers), self._options)
        self._last = {}

    @property
    def options(self):
        """The NVRTC options (without ``-arch``, which :meth:`compile` adds)."""
        return list(self._options)

    @property
    def source(self):
        return self._src.decode("utf-8", errors="replace")

    def compile(self, target="auto", *, name_expressions=(), arch=None, device=None, cache=True):
        """Compile, or return the cached result.

        Parameters
        ----------
        target : {'auto', 'ptx', 'cubin', 'ltoir'}
            ``'auto'``: what the device's driver can load best (see :func:`select_target`):
            a cubin for its architecture, or PTX; never PTX newer than the driver.
        name_expressions : sequence of str
            C++ names to instantiate and resolve, e.g. ``'scale<float>'``,
            ``'ns::kernel<4, double>'``; ``ObjectCode.get_kernel`` accepts them.
        arch : str, int or tuple, optional
            ``'sm_90'``, ``90``, ``(9, 0)``. Default: the device's compute capability.
            With ``arch`` and a target other than ``'auto'`` no driver is needed.
        device : Device or int, optional
            The device to compile for (default: the current device).
        cache : bool
            Use the compile cache (in-process and on disk).

        Raises
        ------
        CompileError
            The program does not compile; the message and ``.log`` carry NVRTC's log.
        CompilerNotFoundError
            NVRTC is not installed.
        """
        names = tuple(name_expressions) if not isinstance(name_expressions, str) else (name_expressions,)
        # the device matters when the architecture or the driver decides the output
        ordinal = (<Device>device_of(device)).ordinal if (arch is None or target == "auto") else None
        mkey = (target, arch, ordinal, names)
        if cache:
            try:
                hit = self._last.get(mkey)
            except TypeError:          # unhashable device/arch: no memo
                hit = None
            if hit is not None:
                _stats["memory_hits"] += 1
                return hit
        oc = self._compile(target, names, arch, device, cache)
        if cache:
            try:
                self._last[mkey] = oc
            except TypeError:
                pass
        return oc

    def _compile(self, str target, tuple names, arch, device, bint cache):
        _ensure_nvrtc()
        nv = _nv_info["version"]
        if arch is None or target == "auto":
            drv, cc = _device_target(device)
            if arch is not None:
                cc = arch
        else:
            drv, cc = None, arch
        kind, arch_opt = select_target(target, nv, drv, cc, _nv_info["archs"])
        opts = [f"-arch={arch_opt}"]
        if kind == "ltoir":
            opts.append("-dlto")
            if "-rdc=true" not in self._options:
                opts.append("-rdc=true")
        opts.extend(self._options)
        key = (self._key, tuple(opts), names, kind, nv)
        if cache:
            oc = _memo.get(key)
            if oc is not None:
                _stats["memory_hits"] += 1
                return oc
            d = cache_dir()
            digest = None
            if d:
                h = hashlib.sha256()
                for part in (b"barecuda-nvrtc-2", repr(nv).encode(), kind.encode(), self.name.encode(),
                             "\0".join(opts).encode(), "\0".join(names).encode(), self._src):
                    h.update(struct.pack("<Q", len(part)))
                    h.update(part)
                for hn, hsrc in self._headers:
                    h.update(struct.pack("<QQ", len(hn), len(hsrc)))
                    h.update(hn)
                    h.update(hsrc)
                digest = h.hexdigest()
                oc = _disk_get(d, digest)
                if oc is not None:
                    _stats["disk_hits"] += 1
                    with _memo_lock:
                        _memo[key] = oc
                    return oc
            _stats["misses"] += 1
        bopts = [o.encode() for o in opts]
        bnames = [n.encode() for n in names]
        for n in bnames:
            if b"\0" in n:
                raise ValueError("a name expression contains a NUL byte")
        code, ptx, log, lowered = _nvrtc_compile(self._src, self.name.encode(), self._headers, bopts, bnames, kind)
        if kind == "ltoir" and ptx is None:
            # -dlto leaves no PTX; compile the PTX once more so kernels know their parameter types
            popts = [o for o in bopts if o != b"-dlto"]
            popts[0] = b"-arch=compute_" + arch_opt.split("_", 1)[1].rstrip("af").encode()
            _, ptx, _, _ = _nvrtc_compile(self._src, self.name.encode(), self._headers, popts, bnames, "ptx")
        oc = ObjectCode._make(code, kind, arch_opt, ptx, log, lowered, nv)
        if cache:
            with _memo_lock:
                _memo[key] = oc
            if digest is not None:
                _disk_put(d, digest, oc)
        return oc

    def __repr__(self):
        return f"<barecuda.Program {self.name!r} ({len(self._src)} bytes)>"


def compile_module(source, *, device=None, name_expressions=(), **kwargs):
    """Compile ``source`` for ``device`` and return its loaded :class:`Module` and :class:`ObjectCode`.

    Shorthand for ``Program(source, **kwargs).compile(device=device, ...)`` then ``.load()``.
    """
    oc = Program(source, **kwargs).compile(name_expressions=name_expressions, device=device)
    return oc.load(device=device), oc


# ------------------------------------------------------------------ linking
_JL_KIND = {"cubin": 1, "ptx": 2, "ltoir": 3, "fatbin": 4, "object": 5, "library": 6}


def _as_code(x):
    if isinstance(x, ObjectCode):
        return x
    if isinstance(x, Program):
        raise TypeError("link() takes compiled code: use program.compile('ltoir') (or 'cubin', 'ptx')")
    if isinstance(x, (str, os.PathLike)) and os.path.exists(os.fspath(x)):
        path = os.fspath(x)
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".a") or path.endswith(".lib"):
            return ObjectCode._make(data, "library", "", None, "", {}, None)
        if data[:4] == b"\x7fELF":
            return ObjectCode._make(data, "cubin", "", None, "", {}, None)
        if data[:4] == b"\x50\xed\x55\xba":
            return ObjectCode._make(data, "fatbin", "", None, "", {}, None)
        if path.endswith(".ltoir"):
            return ObjectCode._make(data, "ltoir", "", None, "", {}, None)
        return ObjectCode.from_ptx(data)
    raise TypeError(f"cannot link {type(x).__name__}: pass ObjectCode objects or file paths")


def find_cudadevrt():
    """Path of the device runtime library (``libcudadevrt.a`` / ``cudadevrt.lib``), or None."""
    names = ("cudadevrt.lib",) if sys.platform == "win32" else ("libcudadevrt.a",)
    dirs = []
    for site in _libfind.site_dirs():
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib", "nvidia/cu13/lib/x64"):
            dirs.append(os.path.join(site, *sub.split("/")))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs += [os.path.join(os.environ[var], "lib64"), os.path.join(os.environ[var], "lib", "x64"),
                     os.path.join(os.environ[var], "lib")]
    dirs += ["/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib/x86_64-linux-gnu"]
    for d in dirs:
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p):
                return p
    return None


_DEVRT_CALLS = ("cudaLaunchDevice", "cudaGetParameterBuffer", "cudaDeviceSynchronize", "cudaCGGetIntrinsicHandle")


def _needs_devrt(codes):
    for oc in codes:
        p = (<ObjectCode>oc)._ptx
        if p is not None and any(c.encode() in p for c in _DEVRT_CALLS):
            return True
    return False


cdef str _jl_log(nvJitLinkHandle h, bint error):
    cdef size_t n = 0
    cdef nvJitLinkResult rc
    rc = JL.nvJitLinkGetErrorLogSize(h, &n) if error else JL.nvJitLinkGetInfoLogSize(h, &n)
    if rc != 0 or n <= 1:
        return ""
    buf = bytearray(n)
    rc = JL.nvJitLinkGetErrorLog(h, buf) if error else JL.nvJitLinkGetInfoLog(h, buf)
    if rc != 0:
        return ""
    return bytes(buf).split(b"\0", 1)[0].decode("utf-8", errors="replace")


def _link_nvjitlink(list codes, str arch, list options):
    cdef nvJitLinkHandle h = NULL
    cdef nvJitLinkResult rc
    cdef const char **opts = NULL
    cdef size_t n = 0
    cdef int i, no
    bopts = [f"-arch={arch}".encode()]
    if any((<ObjectCode>c).kind == "ltoir" for c in codes):
        bopts.append(b"-lto")
    bopts += [o.encode() for o in options]
    no = len(bopts)
    opts = <const char **>PyMem_Malloc(sizeof(char *) * no)
    if opts == NULL:
        raise MemoryError()
    try:
        for i in range(no):
            opts[i] = <const char *>(<bytes>bopts[i])
        rc = JL.nvJitLinkCreate(&h, no, opts)
        if rc != 0:
            raise LinkError(f"nvJitLinkCreate failed ({rc}) with options {[o.decode() for o in bopts]}", "", rc)
        try:
            for i, c in enumerate(codes):
                oc = <ObjectCode>c
                kind = _JL_KIND.get(oc.kind)
                if kind is None:
                    raise LinkError(f"cannot link {oc.kind} input")
                nm = f"input{i}.{oc.kind}".encode()
                rc = JL.nvJitLinkAddData(h, kind, <const char *>oc.code, len(oc.code), nm)
                if rc != 0:
                    log = _jl_log(h, True)
                    raise LinkError(f"nvJitLinkAddData({oc.kind} input {i}) failed ({rc})"
                                    + (f"\n{log}" if log else ""), log, rc)
            with nogil:
                rc = JL.nvJitLinkComplete(h)
            if rc != 0:
                log = _jl_log(h, True)
                raise LinkError(f"nvJitLink could not link ({rc})" + (f"\n{log}" if log else ""), log, rc)
            info = _jl_log(h, False)
            if JL.nvJitLinkGetLinkedCubinSize(h, &n) != 0 or n == 0:
                raise LinkError("nvJitLink produced no cubin", _jl_log(h, True), 0)
            buf = bytearray(n)
            if JL.nvJitLinkGetLinkedCubin(h, <void *><char *>buf) != 0:
                raise LinkError("nvJitLinkGetLinkedCubin failed", _jl_log(h, True), 0)
            return bytes(buf), info
        finally:
            JL.nvJitLinkDestroy(&h)
    finally:
        PyMem_Free(opts)


_CU_KIND = {"cubin": 0, "ptx": 1, "fatbin": 2, "object": 3, "library": 4}


def _link_driver(list codes, device):
    cdef CUlinkState st = NULL
    cdef CUresult rc
    cdef void *out = NULL
    cdef size_t n = 0
    cdef CUjit_option jopts[4]
    cdef void *jvals[4]
    cdef char *err = NULL
    cdef Device dev = device_of(device)
    _ensure_linkdrv()
    _require(<void *>LK.cuLinkCreate, "cuLinkCreate", "linking with the driver", 6050)
    dev.activate()
    err = <char *>PyMem_Malloc(16384)
    if err == NULL:
        raise MemoryError()
    err[0] = 0
    jopts[0] = CU_JIT_ERROR_LOG_BUFFER; jvals[0] = err
    jopts[1] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES; jvals[1] = <void *><size_t>16384
    try:
        rc = LK.cuLinkCreate(2, jopts, jvals, &st)
        check(rc, b"cuLinkCreate")
        try:
            for i, c in enumerate(codes):
                oc = <ObjectCode>c
                if oc.kind == "ltoir":
                    raise LinkError("LTO-IR inputs need nvJitLink (`pip install nvidia-nvjitlink`); "
                                    "the driver's linker takes PTX, cubin, fatbin and libraries")
                if oc.kind == "ptx":
                    _check_ptx_loadable(oc.code)
                    data = oc.code + b"\0"
                else:
                    data = oc.code
                nm = f"input{i}.{oc.kind}".encode()
                rc = LK.cuLinkAddData(st, _CU_KIND[oc.kind], <void *><const char *>data, len(data), nm, 0, NULL, NULL)
                if rc != 0:
                    log = err[:strlen(err)].decode(errors="replace")
                    raise make_error(rc, "cuLinkAddData", f"({oc.kind} input {i})" + (f"\n{log}" if log else ""))
            with nogil:
                rc = LK.cuLinkComplete(st, &out, &n)
            if rc != 0:
                log = err[:strlen(err)].decode(errors="replace")
                raise make_error(rc, "cuLinkComplete", log or None)
            return (<char *>out)[:n]          # copied before cuLinkDestroy frees it
        finally:
            LK.cuLinkDestroy(st)
    finally:
        PyMem_Free(err)


def link(inputs, *, arch=None, device=None, options=(), devrt=None, use_nvjitlink=None):
    """Link several programs' code into one cubin.

    Parameters
    ----------
    inputs : sequence of ObjectCode or paths
        LTO-IR, cubins, PTX, fatbins, ``.a`` device libraries (compile programs
        with ``rdc=True`` and ``target='ltoir'`` for link-time optimization).
    arch : str, optional
        ``'sm_90'``; default: the device's.
    options : sequence of str
        Extra nvJitLink options (``'-O3'``, ``'-lineinfo'``...).
    devrt : bool, optional
        Add the device runtime library (``libcudadevrt``). Default: when a program
        calls it (dynamic parallelism) and it is installed.
    use_nvjitlink : bool, optional
        Default: nvJitLink when installed, else the driver's ``cuLink*`` (which
        cannot take LTO-IR).

    Returns
    -------
    ObjectCode
        A cubin; its kernels keep the inputs' PTX signatures and lowered names.
    """
    codes = [_as_code(x) for x in inputs]
    if not codes:
        raise ValueError("link() needs at least one input")
    if devrt is None:
        devrt = _needs_devrt(codes)
    if devrt:
        p = find_cudadevrt()
        if p is not None:
            codes.append(_as_code(p))
        elif devrt is True and _needs_devrt(codes):
            warnings.warn("this program uses the device runtime, but libcudadevrt.a was not found "
                          "(install nvidia-cuda-runtime or set CUDA_HOME)", CudaWarning, stacklevel=2)
    if arch is None:
        _, cc = _device_target(device)
        arch_s = f"sm_{cc}"
    else:
        n, suffix = _as_cc(arch)
        arch_s = f"sm_{n}{suffix}"
    if use_nvjitlink is None:
        use_nvjitlink = nvjitlink_available()
    if use_nvjitlink:
        _ensure_nvjitlink()
        cubin, log = _link_nvjitlink(codes, arch_s, [str(o) for o in options])
    else:
        cubin = _link_driver(codes, device)
        log = ""
    names = {}
    ptx_parts = []
    for c in codes:
        names.update((<ObjectCode>c)._names)
        if (<ObjectCode>c)._ptx is not None:
            ptx_parts.append((<ObjectCode>c)._ptx)
    return ObjectCode._make(cubin, "cubin", arch_s, b"\n".join(ptx_parts) if ptx_parts else None, log, names, None)


# ------------------------------------------------------------------ library API
@cython.final
cdef class Library:
    """Code loaded with ``cuLibraryLoadData``: context-independent kernels.

    One load serves every device: :meth:`get_kernel` gives a kernel on any device
    (``cuLibraryGetKernel`` then ``cuKernelGetFunction`` in that device's context).
    Needs a CUDA 12.0 driver.
    """

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("use Library.load(code)")
        self.handle = NULL
        self._kernels = weakref.WeakValueDictionary()
        self._all_kernels = weakref.WeakSet()

    @staticmethod
    def load(code):
        """Load an :class:`ObjectCode` (PTX, cubin or fatbin) or raw image bytes.

        Raises
        ------
        DriverVersionError
            The driver has no library API (older than CUDA 12.0).
        """
        cdef Library lib = Library.__new__(Library, _TOKEN)
        cdef CUlibrary h = NULL
        cdef CUresult rc
        cdef ObjectCode oc
        if isinstance(code, ObjectCode):
            oc = code
        elif isinstance(code, (bytes, bytearray, memoryview)):
            data = bytes(code)
            oc = ObjectCode._make(data, "cubin", "", None, "", {}, None) if data[:4] == b"\x7fELF" \
                else ObjectCode.from_ptx(data)
        else:
            raise TypeError(f"Library.load takes ObjectCode or bytes, got {type(code).__name__}")
        if oc.kind == "ltoir":
            raise ValueError("LTO-IR cannot be loaded directly: link it first (barecuda.link([...]))")
        _ensure_linkdrv()
        _require(<void *>LK.cuLibraryLoadData, "cuLibraryLoadData", "Library", 12000)
        _require(<void *>LK.cuKernelGetFunction, "cuKernelGetFunction", "Library", 12000)
        data = oc.code
        if oc.kind == "ptx":
            _check_ptx_loadable(data)
            data = data + b"\0"
        cdef const char *img = data
        with nogil:
            rc = LK.cuLibraryLoadData(&h, img, NULL, NULL, 0, NULL, NULL, 0)
        check(rc, b"cuLibraryLoadData")
        lib.handle = h
        lib.code = oc
        return lib

    def get_kernel(self, str name, *, device=None, signature=None):
        """Kernel ``name`` (a name expression, lowered name or plain entry name) on ``device``."""
        cdef CUkernel kern = NULL
        cdef CUfunction f = NULL
        cdef CUresult rc
        cdef Device dev = device_of(device)
        if self.handle == NULL:
            raise ValueError("the library is closed")
        try:
            skey = tuple(signature) if signature is not None and not isinstance(signature, str) else signature
            key = (name, dev.ordinal, skey)
            hash(key)
        except TypeError:
            key = None
        if key is not None:
            k = self._kernels.get(key)
            if k is not None:
                return k
        lowered = self.code._names.get(name, name)
        sigs = self.code.signatures() or {}
        if lowered not in sigs and sigs:
            prefix = f"_Z{len(lowered)}{lowered}"
            matches = [n for n in sigs if n.startswith(prefix) and len(n) > len(prefix)]
            if len(matches) == 1:
                lowered = matches[0]
            elif len(matches) > 1:
                raise ValueError(f"{name!r} is overloaded in this library: {', '.join(matches)}; "
                                 "use a name expression or the mangled name")
        dev.activate()
        rc = LK.cuLibraryGetKernel(&kern, self.handle, lowered.encode())
        if rc == 500:
            known = ", ".join(sigs) if sigs else "unknown"
            raise make_error(rc, "cuLibraryGetKernel", f"no kernel named {name!r}; kernels: {known}")
        check(rc, b"cuLibraryGetKernel")
        rc = LK.cuKernelGetFunction(&f, kern)
        check(rc, b"cuKernelGetFunction")
        k = make_kernel(self, f, dev.ctx, dev, lowered, sigs.get(lowered), signature)
        if key is not None:
            self._kernels[key] = k
        self._all_kernels.add(k)
        return k

    def close(self):
        """Unload now; kernels from it then refuse to launch. Idempotent."""
        cdef CUresult rc
        if self.handle == NULL:
            return
        for k in list(self._all_kernels):
            invalidate_kernel(<Kernel>k)
        self._kernels.clear()
        if bc_driver_usable(ST):
            rc = LK.cuLibraryUnload(self.handle)
            self.handle = NULL
            check(rc, b"cuLibraryUnload")
        self.handle = NULL

    @property
    def closed(self):
        return self.handle == NULL

    def __dealloc__(self):
        cdef CUresult rc
        if self.handle != NULL and bc_driver_usable(ST) and LK.cuLibraryUnload != NULL:
            rc = LK.cuLibraryUnload(self.handle)
            if rc != 0:
                try:
                    warnings.warn(f"cuLibraryUnload in Library.__dealloc__ failed: {rc}", CudaWarning)
                except Exception:
                    pass
        self.handle = NULL

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<barecuda.Library {self.code.kind}{' closed' if self.handle == NULL else ''}>"
