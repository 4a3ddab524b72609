"""LaunchConfig, launch dimensions and the stream argument of launches."""
from barecuda._abi cimport CUstream, CUfunction, CUcontext, CUlaunchAttribute
from barecuda._device cimport Device
from barecuda._pack cimport bc_launch_rec


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

# The checks of config c that need the kernel (`func`, named `name` in messages) and its
# device: cuLaunchKernelEx present, cluster support, divisibility and size, cooperative
# co-residency. The caller checks the geometry against the kernel's limits first
# (_launch._check_limits). Marks c validated for func. No launch is asked of the driver.
cdef int validate_config(LaunchConfig c, CUfunction func, Device device, str name) except -1
# Fill launch record r (all but params) from c for the kernel whose CUfunction field is
# *pfunc (the record follows it: NULL once its module is closed) in context ctx.
cdef int config_rec(LaunchConfig c, const CUfunction *pfunc, CUcontext ctx, bc_launch_rec *r) except -1
