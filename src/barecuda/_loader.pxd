"""Access to the one driver table and the process state (both live in _loader).

Modules keep the two pointers in module globals at import:
    cdef bc_driver_t *D = driver_table()
    cdef bc_state_t *ST = runtime_state()
The pointers never change; the table's contents are valid once ensure_driver()
has succeeded, which every object constructor does before it exists.
"""
from barecuda._abi cimport bc_driver_t, CUcontext, CUresult
from barecuda._errors cimport bc_state_t

cdef bc_driver_t *driver_table() noexcept nogil
cdef bc_state_t *runtime_state() noexcept nogil
cdef int _ensure_driver_slow() except -1
cdef int set_current(CUcontext ctx) except -1 nogil
cdef void forget_current() noexcept nogil
cdef CUcontext bound_context() noexcept nogil      # what barecuda made current on this thread
cdef int chosen_device() noexcept nogil            # Device.set_current() on this thread, or -1
cdef void choose_device(int ordinal) noexcept nogil
cdef int symbol_version(const char *name) noexcept nogil   # the version BC_DRIVER_SYMBOLS asks for, or 0
cdef int _require_failed(const char *name, const char *feature) except -1 with gil
# "CUDA 12.4": the version BC_DRIVER_SYMBOLS requests `name` at, for messages that
# explain a fallback (a missing entry point that is not an error: see require()).
cdef str symbol_version_text(const char *name)
# Destroy h with destroy (ctx made current first, unless NULL) for a destructor or a
# deferred destroy: never raises. A failure, or an exception, becomes a CudaWarning
# naming `where`; once the driver is unusable (shutdown, forked child) h leaks.
ctypedef CUresult (*destroy_fn)(void *h) noexcept nogil
cdef void destroy_handle(CUcontext ctx, destroy_fn destroy, void *h, const char *call, str where) noexcept

cdef inline int ensure_driver(bc_state_t *st) except -1:
    """Load the driver on first use; raise if it cannot be used in this process."""
    if st.loaded and not st.forked:
        return 0
    return _ensure_driver_slow()


cdef inline int require(const void *fnptr, const char *name, const char *feature=NULL) except -1 nogil:
    """Return 0 when the optional entry point `name` was resolved (fnptr != NULL).

    Otherwise raise DriverVersionError saying which driver version `name` needs (the
    version BC_DRIVER_SYMBOLS in include/barecuda/cuda_abi.h requests it at) and which
    driver is loaded. `feature` (may be NULL) names what the user asked for. Every
    "needs driver X" message comes from here, so the versions are never typed by hand.
    """
    if fnptr != NULL:
        return 0
    return _require_failed(name, feature)
