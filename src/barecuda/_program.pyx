"""Kernels from CUDA C++ source: programs, compiled code, linking, library kernels.

Owns the user API of the feature: ``Program`` (CUDA C++ -> PTX, cubin or LTO-IR,
through the compile cache), ``ObjectCode`` (the compiled image with its PTX
signatures and lowered C++ names), ``link`` (nvJitLink, or the driver's ``cuLink*``),
and ``Library`` (``cuLibraryLoadData``: context-independent kernels).
NVRTC and nvJitLink themselves (loading, versions, errors, one raw run, the
version-skew rules) are in ``_nvrtc.pyx``; the memo and on-disk cache in
``_compile_cache.py``. Modules loaded from compiled code are ordinary
``_module.Module`` objects; their kernels are ``_launch.Kernel`` objects built with
the PTX parameter types.
"""

__all__ = [
    "Program", "ObjectCode", "Library", "link", "compile_module", "cache_info", "clear_cache", "cache_dir",
    "CompileError", "LinkError", "CompilerNotFoundError", "nvrtc_version", "nvrtc_path", "nvjitlink_version"
]
cimport cython
import hashlib
import os
import sys
import warnings
import weakref

from libc.string cimport strlen
from cpython.mem cimport PyMem_Malloc, PyMem_Free

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable, CUDA_SUCCESS, CUDA_ERROR_NOT_FOUND, warn_destroy_failed
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, require
from barecuda._device cimport Device, device_of
from barecuda._module cimport Module
from barecuda._launch cimport Kernel, make_kernel, invalidate_kernel
from barecuda._errors import DriverVersionError, CudaWarning, make_error, _renamed, _enter_self, _exit_close
from barecuda._signature import parse_ptx_signatures, mangled_matches, kernel_key
from barecuda import _compile_cache, _compile_deps, _libfind
from barecuda._compile_cache import cache_dir, cache_info, clear_cache
from barecuda._nvrtc import (
    CompilerNotFoundError, CompileError, LinkError, nvrtc_version, nvrtc_path, nvrtc_archs,
    nvjitlink_version, nvrtc_available, nvjitlink_available, ptx_isa_for, ptx_version_of,
    select_target, as_cc, as_version, nvrtc_compile, nvjitlink_link,
)

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()
_TOKEN = object()


# ------------------------------------------------------------------ the driver's limits
cdef int _check_ptx_loadable(object ptx) except -1:
    """Refuse PTX whose ISA is newer than the loaded driver JIT-compiles."""
    v = ptx_version_of(ptx)
    if v is None:
        return 0
    drv = as_version(ST.driver_version)
    limit = ptx_isa_for(drv)
    if v > limit:
        raise DriverVersionError(
            f"this PTX is ISA {v[0]}.{v[1]}, newer than the CUDA {drv[0]}.{drv[1]} driver accepts "
            f"({limit[0]}.{limit[1]}); it was made by a newer compiler. Compile with target='cubin' "
            "(a newer NVRTC's cubins load on an older driver of the same major version), or "
            "upgrade the NVIDIA driver.")
    return 0


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
        if m is None or m.is_closed:
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
    on disk (see :func:`cache_dir`), keyed by everything that changes the output,
    headers read from disk and the NVRTC library included (docs/nvrtc.md).
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
        # the headers it may read from disk (None: none; then the key needs nothing more)
        self._deps = _compile_deps.prepare(self._src, self.name, self._headers, self._options)

    @property
    def options(self):
        """The NVRTC options (without ``-arch``, which :meth:`compile` adds)."""
        return list(self._options)

    @property
    def source(self):
        """The CUDA C++ source text."""
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
        if not cache:
            return self._compile(target, names, arch, device, False, (), False)
        deps = ()
        disk = True
        if self._deps is not None:
            # headers read from disk are part of the key: an edited one is a new compile.
            # Some not known (a computed #include): no disk cache, which outlives the process
            deps, why = self._deps.resolve()
            if why is not None:
                _compile_cache.note_skip(f"{self.name}: {why}")
                disk = False
        mkey = (target, arch, ordinal, names, deps)
        try:
            hit = self._last.get(mkey)
        except TypeError:              # unhashable device/arch: no memo
            hit = None
        if hit is not None:
            _compile_cache.note_memory_hit()
            return hit
        oc = self._compile(target, names, arch, device, True, deps, disk)
        if deps and self._deps.resolve()[0] != deps:
            return oc                  # a header changed while NVRTC read it: remember nothing
        try:
            self._last[mkey] = oc
        except TypeError:
            pass
        return oc

    def _compile(self, str target, tuple names, arch, device, bint cache, tuple deps, bint disk):
        nv = nvrtc_version()
        if arch is None or target == "auto":
            drv, cc = _device_target(device)
            if arch is not None:
                cc = arch
        else:
            drv, cc = None, arch
        kind, arch_opt = select_target(target, nv, drv, cc, nvrtc_archs())
        opts = [f"-arch={arch_opt}"]
        if kind == "ltoir":
            opts.append("-dlto")
            if "-rdc=true" not in self._options:
                opts.append("-rdc=true")
        opts.extend(self._options)
        key = (self._key, tuple(opts), names, kind, nv, deps)
        if cache:
            oc = _compile_cache.memo_get(key)
            if oc is not None:
                return oc
            d = (cache_dir() or None) if disk else None
            digest = blob = None
            if d is not None:
                # the full key: every input, the headers read from disk (path, SHA-256),
                # and the NVRTC library's identity (nvrtcVersion gives only major.minor)
                blob = _compile_cache.key_blob(
                    (b"barecuda-nvrtc-3", repr(nv).encode(), _compile_cache.library_identity(nvrtc_path()),
                     kind.encode(), self.name.encode(), "\0".join(opts).encode(),
                     "\0".join(names).encode(), self._src,
                     b"".join(os.fsencode(p) + b"\0" + h for p, h in deps)), self._headers)
                digest = hashlib.sha256(blob).hexdigest()
            oc = _compile_cache.disk_get(key, d, digest, ObjectCode._make, blob)
            if oc is not None:
                return oc
        bopts = [o.encode() for o in opts]
        bnames = [n.encode() for n in names]
        for n in bnames:
            if b"\0" in n:
                raise ValueError("a name expression contains a NUL byte")
        code, ptx, log, lowered = nvrtc_compile(self._src, self.name.encode(), self._headers, bopts, bnames, kind)
        if kind == "ltoir" and ptx is None:
            # -dlto leaves no PTX; compile the PTX once more so kernels know their parameter types
            popts = [o for o in bopts if o != b"-dlto"]
            popts[0] = b"-arch=compute_" + arch_opt.split("_", 1)[1].rstrip("af").encode()
            _, ptx, _, _ = nvrtc_compile(self._src, self.name.encode(), self._headers, popts, bnames, "ptx")
        oc = ObjectCode._make(code, kind, arch_opt, ptx, log, lowered, nv)
        if cache and deps and self._deps.resolve()[0] != deps:
            cache = False              # a header changed while NVRTC read it: the output matches no key
        if cache:
            _compile_cache.store(key, d, digest, oc, (code, kind, arch_opt, ptx, log, lowered, nv), blob)
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


_CU_KIND = {"cubin": CU_JIT_INPUT_CUBIN, "ptx": CU_JIT_INPUT_PTX, "fatbin": CU_JIT_INPUT_FATBINARY,
            "object": CU_JIT_INPUT_OBJECT, "library": CU_JIT_INPUT_LIBRARY}


def _link_driver(list codes, device):
    cdef CUlinkState st = NULL
    cdef CUresult rc
    cdef void *out = NULL
    cdef size_t n = 0
    cdef CUjit_option jopts[4]
    cdef void *jvals[4]
    cdef char *err = NULL
    cdef Device dev = device_of(device)
    ensure_driver(ST)
    require(<void *>D.cuLinkCreate, b"cuLinkCreate", b"linking with the driver")
    dev.activate()
    err = <char *>PyMem_Malloc(16384)
    if err == NULL:
        raise MemoryError()
    err[0] = 0
    jopts[0] = CU_JIT_ERROR_LOG_BUFFER; jvals[0] = err
    jopts[1] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES; jvals[1] = <void *><size_t>16384
    try:
        rc = D.cuLinkCreate(2, jopts, jvals, &st)
        check(rc, b"cuLinkCreate")
        try:
            for i, c in enumerate(codes):
                oc = <ObjectCode>c
                if oc.kind == "ltoir":
                    raise LinkError("LTO-IR inputs need nvJitLink (install it: "
                                    f"{_libfind.install_advice(_libfind.NVJITLINK, _libfind.driver_cuda_major())}); "
                                    "the driver's linker takes PTX, cubin, fatbin and libraries")
                if oc.kind == "ptx":
                    _check_ptx_loadable(oc.code)
                    data = oc.code + b"\0"
                else:
                    data = oc.code
                nm = f"input{i}.{oc.kind}".encode()
                rc = D.cuLinkAddData(st, _CU_KIND[oc.kind], <void *><const char *>data, len(data), nm, 0, NULL, NULL)
                if rc != CUDA_SUCCESS:
                    log = err[:strlen(err)].decode(errors="replace")
                    raise make_error(rc, "cuLinkAddData", f"({oc.kind} input {i})" + (f"\n{log}" if log else ""))
            with nogil:
                rc = D.cuLinkComplete(st, &out, &n)
            if rc != CUDA_SUCCESS:
                log = err[:strlen(err)].decode(errors="replace")
                raise make_error(rc, "cuLinkComplete", log or None)
            return (<char *>out)[:n]          # copied before cuLinkDestroy frees it
        finally:
            D.cuLinkDestroy(st)
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
        n, suffix = as_cc(arch)
        arch_s = f"sm_{n}{suffix}"
    if use_nvjitlink is None:
        use_nvjitlink = nvjitlink_available()
    if use_nvjitlink:
        cubin, log = nvjitlink_link([((<ObjectCode>c).kind, (<ObjectCode>c).code) for c in codes], arch_s,
                                    [str(o) for o in options])
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
        ensure_driver(ST)
        require(<void *>D.cuLibraryLoadData, b"cuLibraryLoadData", b"Library")
        require(<void *>D.cuKernelGetFunction, b"cuKernelGetFunction", b"Library")
        data = oc.code
        if oc.kind == "ptx":
            _check_ptx_loadable(data)
            data = data + b"\0"
        cdef const char *img = data
        with nogil:
            rc = D.cuLibraryLoadData(&h, img, NULL, NULL, 0, NULL, NULL, 0)
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
        key = kernel_key(name, signature, dev.ordinal)
        if key is not None:
            k = self._kernels.get(key)
            if k is not None:
                return k
        lowered = self.code._names.get(name, name)
        sigs = self.code.signatures() or {}
        if lowered not in sigs and sigs:
            matches = mangled_matches(lowered, sigs)
            if len(matches) == 1:
                lowered = matches[0]
            elif len(matches) > 1:
                raise ValueError(f"{name!r} is overloaded in this library: {', '.join(matches)}; "
                                 "use a name expression or the mangled name")
        dev.activate()
        rc = D.cuLibraryGetKernel(&kern, self.handle, lowered.encode())
        if rc == CUDA_ERROR_NOT_FOUND:
            known = ", ".join(sigs) if sigs else "unknown"
            raise make_error(rc, "cuLibraryGetKernel", f"no kernel named {name!r}; kernels: {known}")
        check(rc, b"cuLibraryGetKernel")
        rc = D.cuKernelGetFunction(&f, kern)
        check(rc, b"cuKernelGetFunction")
        k = make_kernel(self, f, dev.ctx, dev, lowered, sigs.get(lowered), signature)
        if key is not None:
            self._kernels[key] = k
        self._all_kernels.add(k)
        return k

    def close(self):
        """Unload now; kernels from it then refuse to launch. Idempotent."""
        if self.handle == NULL:
            return
        cdef CUlibrary h = self.handle
        self.handle = NULL
        for k in list(self._all_kernels):
            invalidate_kernel(<Kernel>k)
        self._kernels.clear()
        if bc_driver_usable(ST):
            check(D.cuLibraryUnload(h), b"cuLibraryUnload")

    @property
    def is_closed(self):
        """True once :meth:`close` unloaded the library."""
        return self.handle == NULL

    closed = _renamed("Library.closed", "is_closed")   # the old spelling, for one release

    def __dealloc__(self):
        cdef CUresult rc
        if self.handle != NULL and bc_driver_usable(ST) and D.cuLibraryUnload != NULL:
            rc = D.cuLibraryUnload(self.handle)
            if rc != CUDA_SUCCESS:
                try:
                    warn_destroy_failed(rc, b"cuLibraryUnload", "Library.__dealloc__")
                except Exception:
                    pass
        self.handle = NULL

    __enter__ = _enter_self      # `with x:` closes x at the end of the block
    __exit__ = _exit_close

    def __repr__(self):
        return f"<barecuda.Library {self.code.kind}{' closed' if self.handle == NULL else ''}>"
