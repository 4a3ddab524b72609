"""Function attributes and occupancy queries of a kernel (``CUfunction``).

Owns: the function-attribute name table (``FUNC_ATTRIBUTES``, from the ABI header's
``BC_FUNCTION_ATTRIBUTES``), reading and setting attributes, and the occupancy
calculator calls (blocks per SM, suggested block size with a per-block-size shared
memory callable, co-resident clusters). ``Kernel``'s methods of the same names
(_launch.pyx) check the kernel is alive, bind its context and call these. None of
this is on the launch path.
"""
import operator
import threading
from libc.string cimport memset

from barecuda._abi cimport *
from barecuda._errors cimport check, CUDA_ERROR_INVALID_VALUE
from barecuda._loader cimport driver_table, require
from barecuda._launch_config cimport LaunchConfig

cdef bc_driver_t *D = driver_table()

# Every CUfunction_attribute by lower-case name without the prefix, from the ABI
# header's table (include/barecuda/cuda_abi.h, BC_FUNCTION_ATTRIBUTES).
FUNC_ATTRIBUTES = function_attribute_codes()


cdef int func_attr_code(object name) except? -1:
    if isinstance(name, str):
        key = name.lower()
        if key.startswith("cu_func_attribute_"):
            key = key[len("cu_func_attribute_"):]
        try:
            return FUNC_ATTRIBUTES[key]
        except KeyError:
            raise ValueError(f"unknown function attribute {name!r}; known: {', '.join(FUNC_ATTRIBUTES)}") from None
    return operator.index(name)


cdef int get_attribute(CUfunction f, object name) except? -1:
    cdef int value = 0
    cdef int code = func_attr_code(name)
    check(D.cuFuncGetAttribute(&value, <CUfunction_attribute>code, f), b"cuFuncGetAttribute")
    return value


cdef dict all_attributes(CUfunction f):
    cdef int value = 0
    cdef CUresult rc
    out = {}
    for key, code in FUNC_ATTRIBUTES.items():
        rc = D.cuFuncGetAttribute(&value, <CUfunction_attribute><int>code, f)
        if rc == 0:
            out[key] = value
    return out


cdef int set_attribute(CUfunction f, object name, int value, unsigned int *max_dyn_smem) except -1:
    cdef int code = func_attr_code(name)
    cdef int v = 0
    check(D.cuFuncSetAttribute(f, <CUfunction_attribute>code, value), b"cuFuncSetAttribute")
    if code == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        check(D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f),
              b"cuFuncGetAttribute")
        max_dyn_smem[0] = <unsigned int>v
    return 0


cdef int max_active_blocks(CUfunction f, int block_size, size_t shared_mem) except? -1:
    cdef int n = 0
    check(D.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, block_size, shared_mem),
          b"cuOccupancyMaxActiveBlocksPerMultiprocessor")
    return n


_occ_state = threading.local()       # the shared_mem callable of the running query, per thread


cdef size_t _block_to_smem(int block_size) noexcept with gil:
    """cuOccupancyMaxPotentialBlockSize's callback: the user's function of the block
    size; its first exception is stored and re-raised by suggested_block_size."""
    if getattr(_occ_state, "exc", None) is not None:
        return 0
    try:
        v = operator.index(_occ_state.fn(block_size))
        if v < 0:
            raise ValueError(f"the shared_mem callable returned {v} bytes for block size {block_size}")
        return <size_t>v
    except BaseException as exc:
        _occ_state.exc = exc
        return 0


cdef tuple suggested_block_size(CUfunction f, object shared_mem, int block_size_limit):
    cdef int min_grid = 0, block = 0
    cdef CUresult rc
    cdef size_t fixed = 0
    if callable(shared_mem):
        if getattr(_occ_state, "fn", None) is not None:
            raise RuntimeError("suggested_block_size: a shared_mem callable may not call "
                               "suggested_block_size itself")
        _occ_state.fn = shared_mem
        _occ_state.exc = None
        try:
            rc = D.cuOccupancyMaxPotentialBlockSize(&min_grid, &block, f, _block_to_smem, 0, block_size_limit)
            exc = _occ_state.exc
        finally:
            _occ_state.fn = None
            _occ_state.exc = None
        if exc is not None:
            raise exc
    else:
        fixed = shared_mem
        rc = D.cuOccupancyMaxPotentialBlockSize(&min_grid, &block, f, NULL, fixed, block_size_limit)
    check(rc, b"cuOccupancyMaxPotentialBlockSize")
    return (min_grid, block)


cdef int max_active_clusters(CUfunction f, LaunchConfig config) except? -1:
    cdef CUlaunchConfig cfg
    cdef int n = 0
    require(<const void *>D.cuOccupancyMaxActiveClusters, b"cuOccupancyMaxActiveClusters",
            b"Kernel.max_active_clusters")
    if not config.has_cluster:
        raise ValueError("max_active_clusters needs a LaunchConfig with cluster=(...)")
    memset(&cfg, 0, sizeof(cfg))
    cfg.gridDimX = config.grid_[0]; cfg.gridDimY = config.grid_[1]; cfg.gridDimZ = config.grid_[2]
    cfg.blockDimX = config.block_[0]; cfg.blockDimY = config.block_[1]; cfg.blockDimZ = config.block_[2]
    cfg.sharedMemBytes = config.smem
    cfg.attrs = config.attrs
    cfg.numAttrs = config.nattrs
    check(D.cuOccupancyMaxActiveClusters(&n, f, &cfg), b"cuOccupancyMaxActiveClusters")
    return n


# ------------------------------------------------------- what a kernel is built with
cdef object param_info(CUfunction f):
    """See _occupancy.pxd."""
    cdef size_t off = 0, sz = 0
    cdef size_t idx = 0
    cdef CUresult rc = 0
    if D.cuFuncGetParamInfo == NULL:
        return None
    drv = []
    while True:
        rc = D.cuFuncGetParamInfo(f, idx, &off, &sz)
        if rc != 0:
            break
        drv.append((off, sz))
        idx += 1
    if rc != CUDA_ERROR_INVALID_VALUE and not drv:   # not "past the last one": the driver cannot tell
        return None
    return drv


cdef int kernel_limits(CUfunction f, CUdevice dev, unsigned int max_grid[3], unsigned int max_block[3],
                       unsigned int *max_threads, unsigned int *max_dyn_smem) except -1:
    """See _occupancy.pxd."""
    cdef int value = 0
    cdef int i
    cdef int da[7]
    cdef CUdevice_attribute which[7]
    which[:] = [CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
                CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
                CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z]
    for i in range(7):
        check(D.cuDeviceGetAttribute(&da[i], which[i], dev), b"cuDeviceGetAttribute")
    max_block[0] = da[1]; max_block[1] = da[2]; max_block[2] = da[3]
    max_grid[0] = da[4]; max_grid[1] = da[5]; max_grid[2] = da[6]
    check(D.cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f), b"cuFuncGetAttribute")
    max_threads[0] = <unsigned int>min(value, da[0])
    check(D.cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f), b"cuFuncGetAttribute")
    max_dyn_smem[0] = <unsigned int>value
    return 0
