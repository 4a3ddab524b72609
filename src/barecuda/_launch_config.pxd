"""LaunchConfig, launch dimensions and the stream argument of launches."""
from barecuda._abi cimport CUstream, CUfunction, CUlaunchAttribute
from barecuda._stream cimport Stream


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

# The stream argument of every launch path (Kernel.launch, bind, LaunchConfig, plans):
# Stream (refused when closed), None (the legacy default stream), an object with
# __cuda_stream__, or an int handle. Anything else raises TypeError, before any driver call.
cdef int launch_stream_slow(object obj, CUstream *out) except -1

cdef inline int launch_stream(object obj, CUstream *out) except -1:
    if obj is None:
        out[0] = NULL
        return 0
    if type(obj) is Stream and (<Stream>obj).handle != NULL:
        out[0] = (<Stream>obj).handle
        return 0
    return launch_stream_slow(obj, out)
