"""The driver loader.

Owns: opening libcuda (nvcuda.dll on Windows) at run time, resolving every entry
point through cuGetProcAddress_v2 at the CUDA version our ABI declares, the one
driver table, the process state (fork and shutdown flags) and the per-thread
cache of the current context. Loading is lazy, happens once, and is serialized by
a lock with a re-check after taking it.
"""

__all__ = ["is_available", "driver_version", "driver_path"]
import atexit
import os
import threading
import warnings

from libc.string cimport strcmp

from barecuda._abi cimport bc_driver_t, bc_symbol_info, CUcontext, CUresult, device_attribute_codes, function_attribute_codes
from barecuda._errors cimport bc_state_t, check, register_state, bc_driver_usable, warn_destroy_failed
from barecuda._errors import DriverNotFoundError, DriverVersionError, ForkedProcessError, make_error, CudaWarning
from barecuda import _libfind

cdef extern from "barecuda/bc_runtime.h" nogil:
    bc_driver_t bc_driver_table
    bc_state_t bc_state
    const bc_symbol_info bc_symbol_table[]
    size_t BC_SYMBOL_COUNT
    int BC_LOAD_OK, BC_LOAD_NOT_FOUND, BC_LOAD_NO_PROC_ADDRESS, BC_LOAD_MISSING_SYMBOL, BC_LOAD_INIT_FAILED
    int BC_MIN_DRIVER_VERSION
    int bc_load_from(const char *path, char *err, size_t errlen, const char **missing, CUresult *cu_rc)
    CUresult bc_set_current(CUcontext ctx)
    CUresult BC_RC_FORKED
    void bc_forget_current()
    CUcontext bc_bound_context()
    int bc_chosen_device()
    void bc_choose_device(int ordinal)

_lock = threading.Lock()
# The oldest driver barecuda loads, as the driver reports versions (12000 = CUDA 12.0).
MIN_DRIVER_VERSION = BC_MIN_DRIVER_VERSION
_failure = None   # the last load failure, kept so is_available() stays cheap

DEFAULT_CANDIDATES = tuple(_libfind.DRIVER.patterns)   # the system loader picks the driver

register_state(&bc_state)


cdef bc_driver_t *driver_table() noexcept nogil:
    return &bc_driver_table


cdef bc_state_t *runtime_state() noexcept nogil:
    return &bc_state


cdef int set_current(CUcontext ctx) except -1 nogil:
    cdef CUresult rc = bc_set_current(ctx)
    if rc != 0:
        if rc == BC_RC_FORKED:                # a forked child: ForkedProcessError naming spawn
            with gil:
                return _ensure_driver_slow()
        return check(rc, b"cuCtxSetCurrent")
    return 0


cdef void forget_current() noexcept nogil:
    bc_forget_current()


cdef CUcontext bound_context() noexcept nogil:
    return bc_bound_context()


cdef int chosen_device() noexcept nogil:
    return bc_chosen_device()


cdef void choose_device(int ordinal) noexcept nogil:
    bc_choose_device(ordinal)


def _on_exit():
    # From here on destructors leak instead of calling into a driver that may be
    # tearing down; the OS reclaims everything at process exit.
    bc_state.finalizing = 1

atexit.register(_on_exit)


def candidates():
    """The library names or paths the loader tries, in order (``_libfind.DRIVER``)."""
    return tuple(_libfind.candidates(_libfind.DRIVER))


cdef int _ensure_driver_slow() except -1:
    global _failure
    if bc_state.forked:
        raise ForkedProcessError(
            "barecuda is being used in a child process forked after CUDA was initialized in "
            "the parent; CUDA does not survive fork(). Start worker processes with the "
            "'spawn' method: multiprocessing.get_context('spawn') or "
            "multiprocessing.set_start_method('spawn').")
    cdef char err[512]
    cdef const char *missing = NULL
    cdef CUresult cu_rc = 0
    cdef int rc
    cdef bytes bpath
    cdef const char *cpath
    with _lock:
        if bc_state.loaded:        # another thread won the race
            return 0
        tried = []
        for path in candidates():
            bpath = os.fsencode(path)
            cpath = bpath
            err[0] = 0
            missing = NULL
            with nogil:
                rc = bc_load_from(cpath, err, sizeof(err), &missing, &cu_rc)
            if rc == BC_LOAD_OK:
                _failure = None
                return 0
            if rc == BC_LOAD_NOT_FOUND:
                tried.append(f"{path}: {err.decode(errors='replace')}")
            elif rc == BC_LOAD_NO_PROC_ADDRESS:
                tried.append(f"{path}: opened, but it exports no cuGetProcAddress_v2 "
                             "(not an NVIDIA driver, or a driver older than CUDA "
                             f"{version_text(BC_MIN_DRIVER_VERSION)})")
            elif rc == BC_LOAD_MISSING_SYMBOL:
                tried.append(f"{path}: opened, but the required entry point "
                             f"{missing.decode()} is missing (driver too old?)")
            elif rc == BC_LOAD_INIT_FAILED:
                # The library is a driver but cannot start (no device, driver/kernel
                # module mismatch...): that is the error to report, not "not found".
                _failure = make_error(cu_rc, "cuInit", f"(driver library: {path})")
                raise _failure
        _failure = DriverNotFoundError(_message(tried), tried)
        raise _failure


def _message(tried):
    return _libfind.describe(_libfind.DRIVER, tried)


def load():
    """Load the driver now (normally done on first use). Raises DriverNotFoundError."""
    ensure_driver(&bc_state)


def is_available():
    """True when a driver loads and reports at least one device. Never raises."""
    if _failure is not None:
        return False
    try:
        ensure_driver(&bc_state)
    except Exception:
        return False
    cdef int n = 0
    if bc_driver_table.cuDeviceGetCount(&n) != 0:
        return False
    return n > 0


def driver_version():
    """The driver's CUDA version as a tuple, e.g. ``(13, 0)``."""
    ensure_driver(&bc_state)
    v = bc_state.driver_version
    return (v // 1000, (v % 1000) // 10)


def driver_path():
    """The library path the driver was loaded from."""
    ensure_driver(&bc_state)
    return os.fsdecode(bytes(bc_state.path))


def symbols():
    """``{name: (version_requested, required, resolved)}`` for every driver entry point."""
    ensure_driver(&bc_state)
    cdef size_t i
    cdef void *fn
    out = {}
    for i in range(BC_SYMBOL_COUNT):
        fn = (<void **>((<char *>&bc_driver_table) + bc_symbol_table[i].offset))[0]
        out[bc_symbol_table[i].name.decode()] = (
            bc_symbol_table[i].version, bool(bc_symbol_table[i].required), fn != NULL)
    return out


cdef int symbol_version(const char *name) noexcept nogil:
    cdef size_t i
    for i in range(BC_SYMBOL_COUNT):
        if strcmp(bc_symbol_table[i].name, name) == 0:
            return bc_symbol_table[i].version
    return 0


def version_text(int v):
    """``"12.4"`` for a driver version as the driver reports it (12040)."""
    return f"{v // 1000}.{(v % 1000) // 10}"


cdef str symbol_version_text(const char *name):
    """``"CUDA 12.4"``: the driver version BC_DRIVER_SYMBOLS requests ``name`` at."""
    cdef int v = symbol_version(name)
    return f"CUDA {version_text(v)}" if v > 0 else "a newer driver"


cdef int _require_failed(const char *name, const char *feature) except -1 with gil:
    cdef int need = symbol_version(name)
    sym = name.decode()
    what = f"{feature.decode()} needs {sym}, which" if feature != NULL else sym
    need_text = f"a CUDA {version_text(need)} driver or newer" if need > 0 else "a newer driver"
    if bc_state.loaded and bc_state.driver_version > 0:
        have = f"the loaded driver is CUDA {version_text(bc_state.driver_version)}"
        if need > 0 and bc_state.driver_version >= need:
            # New enough, yet the entry point is missing: the platform or device lacks it.
            raise DriverVersionError(f"{what} needs {need_text}; {have} but does not provide it "
                                     "(not supported on this platform or device).")
    else:
        have = "the loaded driver does not provide it"
    raise DriverVersionError(f"{what} needs {need_text}; {have}. Upgrade the NVIDIA driver.")


def require_symbol(name, feature=None):
    """Raise DriverVersionError unless the optional entry point ``name`` was resolved.

    The message names the driver version ``name`` needs, taken from the ABI table
    (``BC_DRIVER_SYMBOLS``), and the version of the loaded driver. ``feature``
    (optional) names what the user asked for. Raises KeyError for a name that is not
    in the table.
    """
    table = symbols()
    if name not in table:
        raise KeyError(f"{name!r} is not a barecuda driver entry point")
    if table[name][2]:
        return
    bname = name.encode()
    bfeature = feature.encode() if feature is not None else None
    _require_failed(bname, <const char *>bfeature if bfeature is not None else NULL)


def _state():
    """Internal: the process flags, for tests and the doctor."""
    return {"loaded": bool(bc_state.loaded), "forked": bool(bc_state.forked),
            "finalizing": bool(bc_state.finalizing), "pid": bc_state.pid}


def _attribute_tables():
    """Internal, for tests: the device and function attribute name tables of the ABI header."""
    return device_attribute_codes(), function_attribute_codes()


cdef void destroy_handle(CUcontext ctx, destroy_fn destroy, void *h, const char *call, str where) noexcept:
    """See _loader.pxd (docs/errors.md: destructors never raise)."""
    cdef CUresult rc
    if h == NULL or not bc_driver_usable(&bc_state):
        return                                      # shutdown or forked child: leak
    try:
        if ctx != NULL:
            set_current(ctx)
        rc = destroy(h)
        if rc != 0:
            warn_destroy_failed(rc, call, where)
    except BaseException as e:
        try:
            warnings.warn(f"{where}: {e!r}", CudaWarning)
        except BaseException:
            pass
