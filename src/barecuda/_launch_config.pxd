"""LaunchConfig, launch dimensions and the stream argument of launches."""
from barecuda._abi cimport CUstream, CUfunction, CUcontext, CUlaunchAttribute
from barecuda._device cimport Device
from barecuda._pack cimport bc_launch_rec


cdef class LaunchConfig:
    cdef unsigned int grid_[3]
    cdef unsigned int block_[3]
    cdef unsigned int smem
    cdef readonly object stream
    """The Stream the launch goes to, or None (the default stream)."""
    cdef unsigned int cluster_[3]
    cdef bint has_cluster
    cdef readonly bint cooperative
    """Whether the launch is cooperative (all blocks co-resident; grid-wide sync allowed)."""
    cdef readonly object priority
    """The launch priority (overrides the stream's), or None."""
    cdef readonly bint programmatic_serialization
    """Whether the kernel may start before the previous one on its stream finishes (programmatic dependent launch)."""
    cdef CUlaunchAttribute attrs[4]
    cdef unsigned int nattrs
    cdef CUfunction _validated      # kernel this config was last validated for


# grid/block/cluster as an int or a tuple of 1-3 ints, each in [1, 2**32-1], into out[3].
cdef int parse_dims(object obj, unsigned int out[3], str what) except -1

# The checks of config c that need the kernel (`func`, named `name` in messages) and its
# device: cuLaunchKernelEx present, cluster support, divisibility and size, cooperative
# co-residency. The caller checks the geometry against the kernel's limits first
# (check_limits). Marks c validated for func. No launch is asked of the driver.
cdef int validate_config(LaunchConfig c, CUfunction func, Device device, str name) except -1
# Fill launch record r (all but params) from c for the kernel whose CUfunction field is
# *pfunc (the record follows it: NULL once its module is closed) in context ctx.
cdef int config_rec(LaunchConfig c, const CUfunction *pfunc, CUcontext ctx, bc_launch_rec *r) except -1
# A launch's geometry as text for messages: "grid=(x, y, z), block=(x, y, z), shared_mem=n".
cdef str geometry_text(const unsigned int *g, const unsigned int *b, object smem)
# The one check of geometry g, b and shared memory smem (any int-like) against kernel
# `name`'s limits (device grid/block dimensions, threads per block, dynamic shared
# memory); smem_out: smem as unsigned. ValueError/TypeError with a 'Fix:' hint. Off
# _launch's fast path (taken only when the geometry is not plain ints within limits).
cdef int check_limits(str name, const unsigned int *max_grid, const unsigned int *max_block,
                      unsigned int max_threads, unsigned int max_dyn_smem, const unsigned int *g,
                      const unsigned int *b, object smem, unsigned int *smem_out) except -1
