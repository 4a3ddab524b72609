"""LaunchConfig, launch dimensions and the stream argument of launches."""
from barecuda._abi cimport CUstream, CUfunction, CUlaunchAttribute


cdef class LaunchConfig:
    cdef unsigned int grid_[3]
    cdef unsigned int block_[3]
    cdef unsigned int smem
    cdef readonly object stream
    cdef unsigned int cluster_[3]
    cdef bint has_cluster
    cdef readonly bint cooperative
    cdef readonly object priority
    cdef readonly bint programmatic_serialization
    cdef CUlaunchAttribute attrs[4]
    cdef unsigned int nattrs
    cdef CUfunction _validated      # kernel this config was last validated for


# grid/block/cluster as an int or a tuple of 1-3 ints, each in [1, 2**32-1], into out[3].
cdef int parse_dims(object obj, unsigned int out[3], str what) except -1
