"""CUDA graphs: host nodes (the trampoline, the stored exceptions)."""

cdef class _HostCall:
    cdef object fn                  # the Python callable
    cdef str where                  # "node #i", for the note on its exceptions

# The CUfunction-like host function of every host node; userData is a _HostCall.
cdef void host_trampoline(void *user) noexcept nogil
# The count of stored host-node exceptions is ST.host_errors (bc_state.h): GraphExec.launch
# and every synchronize read it there, so the modules below the wing never call up here.
