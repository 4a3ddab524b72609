"""The kernel registry: (source, entry, specialization) -> a loaded ``barecuda.Kernel``.

Owns: where kernel sources live (``csrc/``), the NVRTC options every kernel is built
with, the specialization digest, the table of every kernel the package builds (each
family module declares its own ``KERNELS``; nothing is registered by hand), and the
lookup order of :func:`get`:

1. the in-process memo (a dict lookup);
2. prebuilt code shipped in the package (``prebuilt/``: trusted package files written
   at wheel-build time by ``_prebuild``): a cubin for the device's architecture (or an
   older one of the same major version), else PTX of the oldest supported ISA;
3. the persistent compile cache (``barecuda.cache_dir()``), keyed by the digest of the
   sources and the architecture only, so a hit never loads NVRTC;
4. NVRTC (``Program``), whose result goes into the cache.

A family module (``_norms.py``...) declares ``KERNELS = [(source, (entry, ...), defines), ...]``;
:func:`table` collects them by walking the package, so prebuild, warmup, ``list`` and
the CI compile test see every family without bookkeeping.
"""
import hashlib
import json
import os
import threading
from typing import Any, Dict

from barecuda._errors import CudaError, DriverVersionError
from barecuda._nvrtc import CompilerNotFoundError
from barecuda import _libfind

__all__ = ["get", "table", "digest", "compile_code", "arch_specific", "CSRC", "PREBUILT", "OPTIONS", "NVRTC_HINT"]

_HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(_HERE, "csrc")
PREBUILT = os.path.join(_HERE, "prebuilt")
# Every kernel is built with these (besides -arch and the specialization's -D).
OPTIONS = ("-std=c++17",)
_TAG = b"barecuda-kernels-1"
NVRTC_HINT = "install NVRTC with: " + _libfind.install_advice(_libfind.NVRTC)   # both CUDA majors
# family modules that hold no KERNELS table
_NOT_FAMILIES = frozenset({"_registry", "_args", "_prebuild"})

_lock = threading.RLock()              # guards _locks and _reset; a compile holds only its own key's lock
_locks: Dict[Any, Any] = {}            # (source, defines, ordinal) -> RLock: one build of a module at a time
_kernels: Dict[Any, Any] = {}          # (source, name, defines, ordinal) -> Kernel
_modules: Dict[Any, Any] = {}          # (source, defines, ordinal) -> Module
_digests: Dict[Any, str] = {}          # (source, defines) -> hex digest
_manifest = None       # prebuilt/manifest.json, read once
_origin: Dict[Any, str] = {}           # (source, defines, ordinal) -> 'prebuilt-cubin' | 'prebuilt-ptx' | 'cache' | 'nvrtc'


def get(source, name, defines=(), device=None):
    """The kernel ``name`` of ``csrc/source`` built with ``defines``, on ``device``.

    Parameters
    ----------
    source : str
        A file name in ``kernels/csrc/`` (``"norms.cu"``).
    name : str
        The ``extern "C"`` entry point (``"rmsnorm_bf16"``).
    defines : tuple of (str, int or str) pairs
        The specialization, passed to NVRTC as ``-DNAME=VALUE`` (hashable: a tuple).
    device : Device or int, optional
        Default: the current device.

    Raises
    ------
    CompilerNotFoundError
        The package ships no code for this device/specialization, the cache has none,
        and NVRTC is not installed (the message names the NVRTC packages and extras).
    CompileError
        The source does not compile.
    """
    if device is None:
        from barecuda._device import Device
        device = Device()
    ordinal = int(device)
    key = (source, name, defines, ordinal)
    k = _kernels.get(key)
    if k is not None:
        return k
    with _module_lock(source, defines, ordinal):
        k = _kernels.get(key)
        if k is None:
            mod = _module(source, defines, device, ordinal)
            try:
                k = mod.get_kernel(name)
            except CudaError as exc:
                raise ValueError(f"kernels: {source} built with {defines!r} has no entry {name!r} ({exc})") from None
            _kernels[key] = k
        return k


def _module_lock(source, defines, ordinal):
    """The lock of one module: threads loading different specializations compile them at
    the same time (NVRTC runs without the GIL), two asking for the same one compile it once."""
    ck = (source, defines, ordinal)
    lk = _locks.get(ck)
    if lk is None:
        with _lock:
            lk = _locks.setdefault(ck, threading.RLock())
    return lk


def origin(source, defines=(), device=None):
    """Where the loaded code of ``source``/``defines`` came from (None when not loaded)."""
    if device is None:
        from barecuda._device import Device
        device = Device()
    return _origin.get((source, defines, int(device)))


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _headers():
    """(name, bytes) of every header in csrc/, sorted (NVRTC resolves them by -I)."""
    out = []
    for fn in sorted(os.listdir(CSRC)):
        if fn.endswith((".cuh", ".h")):
            out.append((fn.encode(), _read(os.path.join(CSRC, fn))))
    return out


def _define_opts(defines):
    opts = []
    for k, v in defines:
        k = str(k)
        if not k or not (k[0].isalpha() or k[0] == "_") or not all(c.isalnum() or c == "_" for c in k):
            raise ValueError(f"kernels: bad define name {k!r}")
        opts.append(f"-D{k}={v}")
    return opts


def digest(source, defines=()):
    """The SHA-256 (hex) naming one specialization: its source, every csrc header, the
    options and defines. Prebuilt files and cache entries are named by it, so an edited
    source never loads stale code."""
    key = (source, defines)
    d = _digests.get(key)
    if d is None:
        h = hashlib.sha256()
        parts = [_TAG, source.encode(), _read(os.path.join(CSRC, source)),
                 "\0".join(OPTIONS).encode(), "\0".join(_define_opts(defines)).encode()]
        for hn, hs in _headers():
            parts += [hn, hs]
        for p in parts:
            h.update(len(p).to_bytes(8, "little"))
            h.update(p)
        d = _digests[key] = h.hexdigest()
    return d


def arch_specific(defines):
    """The architecture (e.g. 90) whose arch-specific target (``sm_90a``) a specialization is
    built for, named by its ``("BC_SM_A", 90)`` define; None for the rest. On a device of
    that architecture NVRTC builds it for ``sm_90a``; anywhere else for the device as usual
    (such a source compiles to stubs there, and its family never launches them)."""
    for k, v in defines:
        if k == "BC_SM_A":
            return int(v)
    return None


def compile_code(source, defines=(), *, target, arch, cache=False):
    """Compile one specialization with NVRTC: ``ObjectCode`` for ``target`` ('cubin' or
    'ptx') and ``arch`` ('sm_90', 'compute_80', 90); ``cache`` uses Program's cache."""
    from barecuda._program import Program
    src = _read(os.path.join(CSRC, source))
    prog = Program(src, name=source, include_paths=[CSRC], options=list(OPTIONS) + _define_opts(defines))
    return prog.compile(target, arch=arch, cache=cache)


# ------------------------------------------------------------------ the lookup order
def _module(source, defines, device, ordinal):
    ck = (source, defines, ordinal)
    m = _modules.get(ck)
    if m is not None:
        return m
    from barecuda._device import Device
    dev = device if isinstance(device, Device) else Device(ordinal)
    cc = dev.compute_capability
    cc = cc() if callable(cc) else cc
    dg = digest(source, defines)
    for how, make in (("prebuilt", _from_prebuilt), ("cache", _from_cache), ("nvrtc", _from_nvrtc)):
        for kind, oc in make(source, defines, dg, cc):
            try:
                m = oc.load(device=dev)
            except (CudaError, DriverVersionError):
                continue                          # e.g. a cubin from a newer CUDA major: try the next
            _modules[ck] = m
            _origin[ck] = f"{how}-{kind}" if how == "prebuilt" else how
            return m
    raise RuntimeError(
        f"kernels: no loadable code for {source} {defines!r} on sm_{cc[0]}{cc[1]}")


def _prebuilt_manifest():
    global _manifest
    if _manifest is None:
        try:
            _manifest = json.loads(_read(os.path.join(PREBUILT, "manifest.json")))
        except (OSError, ValueError):
            _manifest = {}
    return _manifest


def _from_prebuilt(source, defines, dg, cc):
    """Shipped cubin for the device (same major, newest minor <= device's), then shipped PTX."""
    ent = _prebuilt_manifest().get("entries", {}).get(dg)
    if not ent:
        return
    from barecuda._program import ObjectCode
    ptx_path = os.path.join(PREBUILT, dg + ".ptx")
    ptx = _read(ptx_path) if os.path.exists(ptx_path) else None
    major, minor = cc
    nv = _prebuilt_manifest().get("nvrtc") or [0, 0]
    try:
        from barecuda._loader import driver_version
        drv = driver_version()
    except Exception:                   # noqa: BLE001 - no driver info: let the load decide
        drv = None
    if drv is not None and tuple(drv)[0] < nv[0]:
        archs = []                      # cubins from a newer CUDA major than the driver: PTX only
    else:
        archs = sorted((a for a in ent.get("cubins", ()) if a // 10 == major and a % 10 <= minor), reverse=True)
        if arch_specific(defines) is not None:      # an sm_90a cubin runs on 9.0 alone
            archs = [a for a in archs if a == major * 10 + minor]
    for a in archs:
        path = os.path.join(PREBUILT, f"{dg}.sm_{a}.cubin")
        if os.path.exists(path):
            yield "cubin", ObjectCode.from_cubin(_read(path), ptx=ptx)
            break
    if ptx is not None:
        yield "ptx", ObjectCode.from_ptx(ptx)


def _cache_digest(dg, cc):
    return hashlib.sha256(_TAG + b"\0" + dg.encode() + b"\0" + f"{cc[0]}{cc[1]}".encode()).hexdigest()


def _make(code, kind, arch, ptx, log, names, nv):
    from barecuda._program import ObjectCode
    return ObjectCode.from_cubin(code, ptx=ptx) if kind == "cubin" else ObjectCode.from_ptx(code)


def _from_cache(source, defines, dg, cc):
    from barecuda import _compile_cache
    d = _compile_cache.cache_dir()
    if d is None:
        return
    oc = _compile_cache.disk_get(("kernels", dg, cc), d, _cache_digest(dg, cc), _make)
    if oc is not None:
        yield oc.kind, oc


def _from_nvrtc(source, defines, dg, cc):
    from barecuda import _compile_cache
    from barecuda._nvrtc import nvrtc_available
    from barecuda._program import Program
    if not nvrtc_available():
        raise CompilerNotFoundError(
            f"kernels: {source} {defines!r} needs compiling for sm_{cc[0]}{cc[1]} (the package ships no "
            f"code for it and the compile cache has none), and NVRTC is not installed; {NVRTC_HINT}")
    src = _read(os.path.join(CSRC, source))
    prog = Program(src, name=source, include_paths=[CSRC], options=list(OPTIONS) + _define_opts(defines))
    d = _compile_cache.cache_dir()
    sfx = "a" if arch_specific(defines) == cc[0] * 10 + cc[1] else ""
    oc = prog.compile("auto", arch=f"sm_{cc[0]}{cc[1]}{sfx}" if sfx else cc, cache=False)
    _store(dg, cc, d, oc)
    yield oc.kind, oc
    if oc.kind == "cubin":
        # the driver refused the cubin (a driver double, an odd build): PTX for the architecture
        oc = prog.compile("ptx", arch=f"compute_{cc[0]}{cc[1]}{sfx}", cache=False)
        _store(dg, cc, d, oc)
        yield oc.kind, oc


def _store(dg, cc, d, oc):
    from barecuda import _compile_cache
    ptx = oc.ptx
    if isinstance(ptx, str):
        ptx = ptx.encode()
    _compile_cache.store(("kernels", dg, cc), d, _cache_digest(dg, cc) if d else None, oc,
                         (oc.code, oc.kind, oc.arch, ptx, oc.log, {}, None))


def _reset(prebuilt=None):
    """Forget every loaded kernel and the manifest; ``prebuilt`` sets the prebuilt
    folder (tests; None keeps the package's)."""
    global PREBUILT, _manifest
    with _lock:
        _kernels.clear()
        _modules.clear()
        _origin.clear()
        _digests.clear()
        _manifest = None
        if prebuilt is not None:
            PREBUILT = prebuilt
    # the ops' recorded launches name kernels of the old registry: drop them now, not when
    # those kernels happen to be collected (a sanitizer or a debugger holding frames keeps
    # them alive, and a hit would then launch a kernel the registry no longer gives out)
    from barecuda.kernels import _opcall
    _opcall.clear()


# ------------------------------------------------------------------ the table
def table():
    """Every specialization the package builds: a sorted list of
    ``(source, entries, defines)``, collected from each family module's ``KERNELS``."""
    import importlib
    import pkgutil
    import barecuda.kernels as pkg
    seen = {}
    for mi in pkgutil.iter_modules(pkg.__path__):
        if not mi.name.startswith("_") or mi.name.startswith("__") or mi.name in _NOT_FAMILIES:
            continue
        mod = importlib.import_module(f"barecuda.kernels.{mi.name}")
        for source, names, defines in getattr(mod, "KERNELS", ()):
            key = (source, tuple(defines))
            seen.setdefault(key, set()).update(names)
    return sorted((s, tuple(sorted(n)), d) for (s, d), n in seen.items())
