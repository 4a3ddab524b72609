"""Launch plans (see _plan.pyx)."""
from barecuda._pack cimport bc_launch_rec
from barecuda._launch cimport Kernel


cdef class LaunchPlan:
    cdef bc_launch_rec rec
    cdef readonly Kernel kernel
    """The Kernel the plan launches."""
    cdef char *buf
    cdef void **ptrs
    cdef list _args
    cdef list _pinned                # per parameter: the DeviceBuffer pinned (pin()) for the plan, or None
    cdef object _stream
    cdef readonly object config
    """The LaunchConfig the plan was bound with (``Kernel.bind_config``), or None."""

    cdef int _pack_all(self) except -1
    cdef int _pin(self, Py_ssize_t i, object value) except -1
    cdef int _repack(self, Py_ssize_t i, object value) except -1
    cdef int _set_stream(self, object stream) except -1


# A plan of k for args (checked: module alive, argument count), nothing packed yet:
# Kernel.bind/bind_config fill its geometry and stream, then _pack_all().
cdef LaunchPlan new_plan(Kernel k, tuple args)
