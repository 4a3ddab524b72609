"""Access to the one driver table and the process state (both live in _loader).

Modules keep the two pointers in module globals at import:
    cdef bc_driver_t *D = driver_table()
    cdef bc_state_t *ST = runtime_state()
The pointers never change; the table's contents are valid once ensure_driver()
has succeeded, which every object constructor does before it exists.
"""
from barecuda._abi cimport bc_driver_t, CUcontext
from barecuda._errors cimport bc_state_t

cdef bc_driver_t *driver_table() noexcept nogil
cdef bc_state_t *runtime_state() noexcept nogil
cdef int _ensure_driver_slow() except -1
cdef int set_current(CUcontext ctx) except -1 nogil
cdef void forget_current() noexcept nogil
cdef CUcontext bound_context() noexcept nogil      # what barecuda made current on this thread
cdef int chosen_device() noexcept nogil            # Device.set_current() on this thread, or -1
cdef void choose_device(int ordinal) noexcept nogil

cdef inline int ensure_driver(bc_state_t *st) except -1:
    """Load the driver on first use; raise if it cannot be used in this process."""
    if st.loaded and not st.forked:
        return 0
    return _ensure_driver_slow()
