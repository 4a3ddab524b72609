"""Function attributes and occupancy queries (see _occupancy.pyx). The caller has
checked the function is alive and bound its context."""
from barecuda._abi cimport CUfunction, CUdevice
from barecuda._launch_config cimport LaunchConfig

# A CUfunction_attribute code from a name ("num_regs", "CU_FUNC_ATTRIBUTE_NUM_REGS") or int.
cdef int func_attr_code(object name) except? -1
cdef int get_attribute(CUfunction f, object name) except? -1
cdef dict all_attributes(CUfunction f)
# Sets the attribute; when it is the dynamic shared memory limit, *max_dyn_smem gets the new value.
cdef int set_attribute(CUfunction f, object name, int value, unsigned int *max_dyn_smem) except -1
cdef int max_active_blocks(CUfunction f, int block_size, size_t shared_mem) except? -1
# (min_grid_size, block_size); shared_mem: bytes, or a callable of the block size.
cdef tuple suggested_block_size(CUfunction f, object shared_mem, int block_size_limit)
cdef int max_active_clusters(CUfunction f, LaunchConfig config) except? -1
# What Kernel construction (_launch.make_kernel) asks the driver, once per kernel:
# [(offset, size), ...] of f's parameters by cuFuncGetParamInfo, or None when the
# driver lacks it or cannot tell; and the launch limits (device grid and block
# dimensions, threads per block as min(device, kernel), dynamic shared memory).
cdef object param_info(CUfunction f)
cdef int kernel_limits(CUfunction f, CUdevice dev, unsigned int max_grid[3], unsigned int max_block[3],
                       unsigned int *max_threads, unsigned int *max_dyn_smem) except -1
