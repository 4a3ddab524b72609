"""The exception tree and the CUresult -> exception mapping.

Owns: CudaError and its subclasses, the code -> class table, the warning class used
by destructors, and the cold function that turns a failed driver call into an
exception. The names and descriptions of every CUresult come from our own table
(include/barecuda/cuda_errors.h), so they are available without a driver; the
``CUresult`` IntEnum is built from that table at import, and C-level code cimports
the same names from _errors.pxd.
"""

__all__ = [
    "BarecudaError", "CudaError", "CudaWarning", "LibraryNotFoundError", "DriverNotFoundError",
    "DriverVersionError", "ForkedProcessError", "CudaOutOfMemoryError", "CudaInvalidValueError",
    "CudaNotReadyError", "CudaNotFoundError", "CudaNotSupportedError", "CudaInvalidHandleError",
    "CudaInvalidContextError", "CudaInvalidImageError", "CudaInvalidPtxError", "CudaNoDeviceError",
    "CudaInvalidDeviceError", "CudaNotInitializedError", "CudaLaunchError", "CudaStickyError",
    "CudaStreamCaptureError", "error_info", "error_class"
]
import enum
import warnings

from barecuda._abi cimport CUresult, bc_error_info, bc_error_lookup, bc_error_table, BC_ERROR_TABLE_LEN

cdef bc_state_t *_state = NULL


cdef int register_state(bc_state_t *st) except -1:
    global _state
    _state = st
    return 0


class CudaWarning(RuntimeWarning):
    """Something went wrong where raising was not possible (a destructor, a callback)."""


class BarecudaError(Exception):
    """Base of every exception barecuda raises on its own account."""


class LibraryNotFoundError(BarecudaError, OSError):
    """A library opened at run time could not be loaded; ``tried`` lists the names or
    paths attempted and why each failed. The one base of every not-found error:
    ``DriverNotFoundError``, ``CompilerNotFoundError`` (NVRTC, nvJitLink) and
    ``barecuda.nccl.NcclNotFoundError``."""

    def __init__(self, message, tried=()):
        super().__init__(message)
        self.tried = tuple(tried)

    def __reduce__(self):
        return (type(self), (str(self), self.tried))


_LibraryNotFoundError = LibraryNotFoundError     # the old private spelling, kept for one release


class DriverNotFoundError(LibraryNotFoundError):
    """No usable CUDA driver library could be loaded.

    ``tried`` lists the library names or paths that were attempted and why each failed.
    """


class DriverVersionError(BarecudaError, RuntimeError):
    """A feature needs a newer driver than the one loaded."""


class ForkedProcessError(BarecudaError, RuntimeError):
    """barecuda was used in a child forked after the driver had been initialized."""


class CudaError(BarecudaError, RuntimeError):
    """A driver call returned an error.

    Attributes
    ----------
    code : int
        The ``CUresult`` value.
    name : str
        Its name as the driver spells it (``CUDA_ERROR_...``).
    description : str
        What it means.
    call : str
        The driver entry point (or barecuda operation) that failed.
    hint : str or None
        What to try.
    sticky : bool
        True when the error left the context unusable: the process must restart.
    """

    def __init__(self, code, call="", detail=None):
        info = error_info(code)
        self.code = int(code)
        self.name = info[0]
        self.description = info[1]
        self.hint = info[2]
        self.sticky = info[3]
        self.call = call
        self.detail = detail
        msg = f"{call} failed: {self.name} ({self.code}): {self.description}"
        if detail:
            msg += f"\n{detail}"
        if self.sticky:
            msg += ("\nThis error is sticky: the CUDA context is unusable and every later call "
                    "will fail; the process must be restarted.")
        if self.hint:
            msg += f"\nHint: {self.hint}"
        super().__init__(msg)

    def __reduce__(self):
        return (_rebuild_cuda_error, (self.code, self.call, self.detail))


def _rebuild_cuda_error(code, call, detail):
    return error_class(code)(code, call, detail)


class CudaOutOfMemoryError(CudaError, MemoryError):
    """The device (or pinned host memory) is exhausted."""


class CudaInvalidValueError(CudaError, ValueError):
    """The driver rejected an argument value."""


class CudaNotReadyError(CudaError):
    """Asynchronous work is still running (only raised where readiness was required)."""


class CudaNotFoundError(CudaError, LookupError):
    """A named symbol (kernel, global) does not exist in the module."""


class CudaNotSupportedError(CudaError, NotImplementedError):
    """The operation is not supported on this device or system."""


class CudaInvalidHandleError(CudaError):
    """A handle (stream, event, module, function) was invalid or already destroyed."""


class CudaInvalidContextError(CudaError):
    """No valid context was current, or the context was destroyed."""


class CudaInvalidImageError(CudaError):
    """A module image (PTX, cubin, fatbin) was malformed, or has no code for this GPU."""


class CudaInvalidPtxError(CudaInvalidImageError):
    """PTX failed to compile; the message carries the JIT error log."""


class CudaNoDeviceError(CudaError):
    """No CUDA device is visible."""


class CudaInvalidDeviceError(CudaError, ValueError):
    """The device ordinal does not exist."""


class CudaNotInitializedError(CudaError):
    """The driver is not initialized or has been deinitialized."""


class CudaLaunchError(CudaError):
    """A kernel launch was rejected (resources, configuration, cluster size...)."""


class CudaStickyError(CudaError):
    """A kernel fault left the context unusable (illegal address, assert, ...): restart the process."""


class CudaStreamCaptureError(CudaError):
    """The operation conflicts with stream capture."""


# code -> class; everything else maps to CudaError, or CudaStickyError when sticky.
_CLASS_BY_CODE = {
    CUDA_ERROR_INVALID_VALUE: CudaInvalidValueError,
    CUDA_ERROR_OUT_OF_MEMORY: CudaOutOfMemoryError,
    CUDA_ERROR_NOT_INITIALIZED: CudaNotInitializedError,
    CUDA_ERROR_DEINITIALIZED: CudaNotInitializedError,
    CUDA_ERROR_NO_DEVICE: CudaNoDeviceError,
    CUDA_ERROR_INVALID_DEVICE: CudaInvalidDeviceError,
    CUDA_ERROR_INVALID_IMAGE: CudaInvalidImageError,
    CUDA_ERROR_INVALID_CONTEXT: CudaInvalidContextError,
    CUDA_ERROR_NO_BINARY_FOR_GPU: CudaInvalidImageError,
    CUDA_ERROR_INVALID_PTX: CudaInvalidPtxError,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION: CudaInvalidPtxError,
    CUDA_ERROR_INVALID_HANDLE: CudaInvalidHandleError,
    CUDA_ERROR_NOT_FOUND: CudaNotFoundError,
    CUDA_ERROR_NOT_READY: CudaNotReadyError,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: CudaLaunchError,
    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: CudaLaunchError,
    CUDA_ERROR_NOT_SUPPORTED: CudaNotSupportedError,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: CudaStreamCaptureError,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: CudaStreamCaptureError,
    CUDA_ERROR_STREAM_CAPTURE_MERGE: CudaStreamCaptureError,
    CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: CudaStreamCaptureError,
    CUDA_ERROR_STREAM_CAPTURE_UNJOINED: CudaStreamCaptureError,
    CUDA_ERROR_STREAM_CAPTURE_ISOLATION: CudaStreamCaptureError,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: CudaStreamCaptureError,
    CUDA_ERROR_CAPTURED_EVENT: CudaStreamCaptureError,
    CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: CudaStreamCaptureError,
    CUDA_ERROR_INVALID_CLUSTER_SIZE: CudaLaunchError,
}


def _build_curesult_enum():
    cdef const bc_error_info *t = bc_error_table()
    cdef int i
    cls = enum.IntEnum("CUresult", [(t[i].name.decode(), t[i].code) for i in range(BC_ERROR_TABLE_LEN)],
                       module=__name__)
    cls.__doc__ = _CURESULT_DOC
    return cls


# (assigned through globals(): in this module the name CUresult is the C type)
_CURESULT_DOC = """Every CUresult value by the driver's name (``CUresult.CUDA_ERROR_NOT_READY == 600``).

Built from include/barecuda/cuda_errors.h, the same table the C code and the test
double use; C-level code cimports the names from ``barecuda._errors``.
"""
globals()["CUresult"] = _build_curesult_enum()


def error_info(code):
    """Return ``(name, description, hint, sticky)`` for a CUresult value.

    Works without a driver. Unknown codes get a generic description.
    """
    cdef const bc_error_info *e = bc_error_lookup(<int>code)
    if e == NULL:
        return (f"CUDA_ERROR_UNRECOGNIZED_{int(code)}",
                "a result code this version of barecuda does not know (a newer driver?)",
                "upgrade barecuda", False)
    hint = e.hint.decode() if e.hint != NULL else None
    return (e.name.decode(), e.description.decode(), hint, bool(e.sticky))


def error_class(code):
    """The exception class raised for a CUresult value."""
    cls = _CLASS_BY_CODE.get(int(code))
    if cls is not None:
        return cls
    cdef const bc_error_info *e = bc_error_lookup(<int>code)
    if e != NULL and e.sticky:
        return CudaStickyError
    return CudaError


def all_error_codes():
    """Every CUresult value in barecuda's table, ascending."""
    cdef const bc_error_info *t = bc_error_table()
    return [t[i].code for i in range(BC_ERROR_TABLE_LEN)]


def make_error(code, call="", detail=None):
    """Build (not raise) the exception for ``code`` failing in ``call``."""
    return error_class(code)(code, call, detail)


cdef int warn_destroy_failed(CUresult rc, const char *call, str where) except -1:
    """See _errors.pxd."""
    name = call.decode()
    warnings.warn(f"{name} in {where}: {make_error(rc, name)}", CudaWarning)
    return 0


class _renamed(property):
    """The old spelling of a renamed property, kept for one release: a class attribute
    ``old = _renamed("Class.old", "new")``, a property whose read warns (``warn_renamed``)
    and returns ``obj.new``. One implementation for every renamed property."""

    def __init__(self, where, new):
        def old_spelling(obj):
            warn_renamed(where, f"{where.rsplit('.', 1)[0]}.{new}")
            return getattr(obj, new)
        super().__init__(old_spelling, None, None, f"Deprecated spelling of :attr:`{new}` (goes in the next release).")


def _enter_self(self):
    """``with obj:`` binds obj itself. With _exit_close, the context-manager pair of every
    object that a ``with`` block closes: ``__enter__ = _enter_self``, ``__exit__ = _exit_close``
    in its class body."""
    return self


def _exit_close(self, *exc):
    """The end of a ``with obj:`` block closes obj, however the block ended."""
    self.close()


cdef int warn_renamed(str old, str new) except -1:
    """See _errors.pxd."""
    # stacklevel 1: a Cython function adds no Python frame, so the caller's line is the top one
    warnings.warn(f"{old} is deprecated and goes in the next release; use {new} (one spelling per fact)",
                  DeprecationWarning, stacklevel=1)
    return 0


cdef int raise_cuda_error(CUresult rc, const char *call) except -1 with gil:
    if _state != NULL and _state.forked:
        raise ForkedProcessError(
            f"{call.decode()} was called in a process forked after CUDA was initialized; "
            "CUDA does not survive fork(). Start workers with the 'spawn' method "
            "(multiprocessing.set_start_method('spawn') or get_context('spawn')).")
    raise make_error(rc, call.decode())
