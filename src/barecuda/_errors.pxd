"""C-level error checking shared by every barecuda module."""
from barecuda._abi cimport CUresult

cdef extern from "barecuda/bc_state.h" nogil:
    ctypedef struct bc_state_t:
        int loaded
        int forked
        int finalizing
        int driver_version
        int pid
        void *handle
        char path[1024]
    int bc_driver_usable(const bc_state_t *st)

cdef int raise_cuda_error(CUresult rc, const char *call) except -1 with gil
cdef int register_state(bc_state_t *st) except -1

cdef inline int check(CUresult rc, const char *call) except -1 nogil:
    """Return 0 when rc is CUDA_SUCCESS, otherwise raise the matching CudaError."""
    if rc == 0:
        return 0
    return raise_cuda_error(rc, call)
