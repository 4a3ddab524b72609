"""Launch configurations.

Owns: ``LaunchConfig`` (what ``cuLaunchKernelEx`` can be told about one launch:
clusters, cooperative launch, priority, programmatic serialization), the parsing
of grid/block/cluster dimensions, the validation of a config against a kernel and its
device (``validate_config``; first the geometry against the kernel's limits by
``check_limits``, which _launch calls too when a launch's geometry is not plain ints
within limits) and the launch record a config gives (``config_rec``).
"""

__all__ = ["LaunchConfig"]
cimport cython
from libc.string cimport memset, memcpy

from barecuda._abi cimport *
from barecuda._errors cimport check
from barecuda._loader cimport driver_table, require
from barecuda._device cimport Device
from barecuda._stream cimport Stream, stream_handle
from barecuda._pack cimport bc_launch_rec

cdef bc_driver_t *D = driver_table()


cdef int parse_dims(object obj, unsigned int out[3], str what) except -1:
    import operator
    vals = list(obj) if isinstance(obj, (tuple, list)) else [obj]
    if not 1 <= len(vals) <= 3:
        raise ValueError(f"{what} must be an int or a tuple of 1 to 3 ints, got {obj!r}")
    try:
        vals = [operator.index(v) for v in vals]
    except TypeError:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {obj!r}") from None
    vals += [1] * (3 - len(vals))
    for v in vals:
        if v < 1:
            raise ValueError(f"{what} {tuple(vals)}: every dimension must be >= 1")
        if v > 0xFFFFFFFF:
            raise ValueError(f"{what} {tuple(vals)}: dimension {v} exceeds 2**32-1, the largest the driver "
                             "takes")
    out[0] = vals[0]
    out[1] = vals[1]
    out[2] = vals[2]
    return 0


@cython.final
cdef class LaunchConfig:
    """Everything ``cuLaunchKernelEx`` can be told about one launch.

    Parameters
    ----------
    grid, block : int or tuple of 1-3 ints
    shared_mem : int
        Dynamic shared memory in bytes.
    stream : Stream, optional
    cluster : int or tuple of 1-3 ints, optional
        Thread block cluster dimensions (compute capability 9.0+). Each grid
        dimension must be a multiple of the cluster's; at most 8 blocks per cluster
        (16 when the kernel sets ``non_portable_cluster_size_allowed``).
    cooperative : bool
        Cooperative launch: all blocks are co-resident, so grid-wide
        synchronization is allowed. The grid may hold at most
        ``max_active_blocks_per_sm(block, shared_mem) * multiprocessor_count`` blocks.
    priority : int, optional
        Launch priority (overrides the stream's).
    programmatic_serialization : bool
        Allow programmatic dependent launch: this kernel may start before the
        previous one on the stream finishes (the kernels coordinate with
        ``griddepcontrol``).

    Use with ``kernel.launch_config(config, *args)`` or ``kernel.bind_config(config, *args)``.
    """
    def __init__(self, grid, block, shared_mem=0, stream=None, cluster=None, cooperative=False,
                 priority=None, programmatic_serialization=False):
        import operator
        cdef CUstream hs = NULL
        parse_dims(grid, self.grid_, "grid")
        parse_dims(block, self.block_, "block")
        smem = operator.index(shared_mem)
        if not 0 <= smem <= 0xFFFFFFFF:
            raise ValueError(f"shared_mem must be >= 0, got {smem}")
        self.smem = smem
        stream_handle(stream, &hs)       # validates the stream argument early
        self.stream = stream
        memset(self.attrs, 0, sizeof(self.attrs))
        self.nattrs = 0
        self._validated = NULL
        if cluster is not None:
            parse_dims(cluster, self.cluster_, "cluster")
            self.has_cluster = True
            self.attrs[self.nattrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            self.attrs[self.nattrs].value.clusterDim.x = self.cluster_[0]
            self.attrs[self.nattrs].value.clusterDim.y = self.cluster_[1]
            self.attrs[self.nattrs].value.clusterDim.z = self.cluster_[2]
            self.nattrs += 1
        self.cooperative = bool(cooperative)
        if self.cooperative:
            self.attrs[self.nattrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            self.attrs[self.nattrs].value.cooperative = 1
            self.nattrs += 1
        self.priority = None if priority is None else operator.index(priority)
        if self.priority is not None:
            self.attrs[self.nattrs].id = CU_LAUNCH_ATTRIBUTE_PRIORITY
            self.attrs[self.nattrs].value.priority = <int>self.priority
            self.nattrs += 1
        self.programmatic_serialization = bool(programmatic_serialization)
        if self.programmatic_serialization:
            self.attrs[self.nattrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            self.attrs[self.nattrs].value.programmaticStreamSerializationAllowed = 1
            self.nattrs += 1

    @property
    def grid(self):
        """The grid dimensions as ``(x, y, z)``."""
        return (self.grid_[0], self.grid_[1], self.grid_[2])

    @property
    def block(self):
        """The block dimensions as ``(x, y, z)``."""
        return (self.block_[0], self.block_[1], self.block_[2])

    @property
    def shared_mem(self):
        """The dynamic shared memory per block, in bytes."""
        return self.smem

    @property
    def cluster(self):
        """Cluster dimensions, or None."""
        return (self.cluster_[0], self.cluster_[1], self.cluster_[2]) if self.has_cluster else None

    def __repr__(self):
        parts = [f"grid={self.grid}", f"block={self.block}"]
        if self.smem:
            parts.append(f"shared_mem={self.smem}")
        if self.has_cluster:
            parts.append(f"cluster={self.cluster}")
        if self.cooperative:
            parts.append("cooperative=True")
        if self.priority is not None:
            parts.append(f"priority={self.priority}")
        if self.programmatic_serialization:
            parts.append("programmatic_serialization=True")
        return f"LaunchConfig({', '.join(parts)})"


# --------------------------------------------------------- validation against a kernel
cdef int _dev_attr(Device device, int code) except? -1:
    cdef int v = 0
    check(D.cuDeviceGetAttribute(&v, <CUdevice_attribute>code, device.handle), b"cuDeviceGetAttribute")
    return v


cdef int validate_config(LaunchConfig c, CUfunction func, Device device, str name) except -1:
    """See _launch_config.pxd."""
    cdef unsigned int j
    cdef int nb = 0, v = 0
    g = c.grid
    threads = int(c.block_[0]) * c.block_[1] * c.block_[2]
    if c.nattrs:
        require(<const void *>D.cuLaunchKernelEx, b"cuLaunchKernelEx",
                b"LaunchConfig with cluster/cooperative/priority/programmatic attributes")
    if c.has_cluster:
        major = _dev_attr(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        minor = _dev_attr(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        if major < 9 or not _dev_attr(device, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH):
            raise ValueError(f"device {device.ordinal} (compute capability {major}.{minor}) does not "
                             "support thread block clusters (needs 9.0 or newer)")
        cl = c.cluster
        for j in range(3):
            if c.grid_[j] % c.cluster_[j]:
                raise ValueError(f"grid {g} is not divisible by cluster {cl} (dimension {'xyz'[j]})")
        size = int(c.cluster_[0]) * c.cluster_[1] * c.cluster_[2]      # Python ints: no wrap
        check(D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, func),
              b"cuFuncGetAttribute")
        if size > 16 or (size > 8 and not v):
            hint = ("" if size > 16 else "; allow up to 16 with "
                    "kernel.set_attribute('non_portable_cluster_size_allowed', 1)")
            raise ValueError(f"cluster {cl} has {size} blocks; the maximum is "
                             f"{16 if v else 8}{hint}")
    if c.cooperative:
        if not _dev_attr(device, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH):
            raise ValueError(f"device {device.ordinal} does not support cooperative launches")
        check(D.cuOccupancyMaxActiveBlocksPerMultiprocessor(&nb, func, <int>threads, c.smem),
              b"cuOccupancyMaxActiveBlocksPerMultiprocessor")
        sms = _dev_attr(device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        blocks = int(c.grid_[0]) * c.grid_[1] * c.grid_[2]             # Python ints: no wrap
        if blocks > nb * sms:
            raise ValueError(f"cooperative launch of {blocks} blocks exceeds co-residency for kernel "
                             f"{name!r}: at most {nb} blocks of {threads} threads per SM x {sms} SMs = "
                             f"{nb * sms} blocks")
    c._validated = func
    return 0


cdef int config_rec(LaunchConfig c, const CUfunction *pfunc, CUcontext ctx, bc_launch_rec *r) except -1:
    """See _launch_config.pxd."""
    r.pfunc = pfunc
    r.ctx = ctx
    memcpy(r.grid, c.grid_, sizeof(r.grid))
    memcpy(r.block, c.block_, sizeof(r.block))
    r.smem = c.smem
    stream_handle(c.stream, &r.stream)
    r.stream_closed = <int *>&(<Stream>c.stream).closed if type(c.stream) is Stream else NULL
    r.params = NULL
    r.nattrs = c.nattrs
    memcpy(r.attrs, c.attrs, sizeof(r.attrs))
    return 0


# --------------------------------------------------------- geometry against a kernel
cdef str geometry_text(const unsigned int *g, const unsigned int *b, object smem):
    return f"grid=({g[0]}, {g[1]}, {g[2]}), block=({b[0]}, {b[1]}, {b[2]}), shared_mem={smem}"


cdef int check_limits(str name, const unsigned int *max_grid, const unsigned int *max_block,
                      unsigned int max_threads, unsigned int max_dyn_smem, const unsigned int *g,
                      const unsigned int *b, object smem, unsigned int *smem_out) except -1:
    """The one check of a launch's geometry against the device and the kernel (all
    products in 64 bits after the per-dimension limits, so nothing wraps)."""
    cdef int j
    cdef unsigned long long threads
    import operator
    for j in range(3):
        if g[j] > max_grid[j]:
            raise ValueError(f"kernel {name!r} ({geometry_text(g, b, smem)}): grid dimension {'xyz'[j]}={g[j]} "
                             f"exceeds the device limit ({max_grid[0]}, {max_grid[1]}, {max_grid[2]}). "
                             "Fix: use fewer blocks in that dimension (loop inside the kernel, or move "
                             "blocks to x).")
        if b[j] > max_block[j]:
            raise ValueError(f"kernel {name!r} ({geometry_text(g, b, smem)}): block dimension {'xyz'[j]}={b[j]} "
                             f"exceeds the device limit ({max_block[0]}, {max_block[1]}, "
                             f"{max_block[2]}). Fix: use a smaller block.")
    threads = <unsigned long long>b[0] * b[1] * b[2]          # each <= 1024 here: no overflow
    if threads > max_threads:
        raise ValueError(f"kernel {name!r} ({geometry_text(g, b, smem)}): the block has {threads} threads; "
                         f"this kernel allows at most {max_threads} per block. Fix: use a block of at "
                         f"most {max_threads} threads (see kernel.suggested_block_size()).")
    try:
        v = operator.index(smem)
    except TypeError:
        raise TypeError(f"shared_mem must be an int (bytes), got {type(smem).__name__}") from None
    if v < 0:
        raise ValueError(f"kernel {name!r} ({geometry_text(g, b, smem)}): shared_mem must be >= 0")
    if v > max_dyn_smem:
        raise ValueError(
            f"kernel {name!r} ({geometry_text(g, b, smem)}): shared_mem={v} bytes exceeds this kernel's limit "
            f"of {max_dyn_smem} bytes of dynamic shared memory. Fix: raise the limit with "
            f"kernel.set_max_dynamic_shared_memory({v}) (up to the device's "
            "max_shared_memory_per_block_optin minus the kernel's static shared memory)")
    smem_out[0] = <unsigned int>v
    return 0
