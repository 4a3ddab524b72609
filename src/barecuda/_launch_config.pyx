"""Launch configurations.

Owns: ``LaunchConfig`` (what ``cuLaunchKernelEx`` can be told about one launch:
clusters, cooperative launch, priority, programmatic serialization), the parsing
of grid/block/cluster dimensions. Validating a config against a kernel
and a device lives with the kernel, in _launch.
"""
cimport cython
from libc.string cimport memset

from barecuda._abi cimport *
from barecuda._stream cimport stream_handle


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
        return (self.grid_[0], self.grid_[1], self.grid_[2])

    @property
    def block(self):
        return (self.block_[0], self.block_[1], self.block_[2])

    @property
    def shared_mem(self):
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
