"""Devices and primary contexts.

Owns: device enumeration and attributes, the primary context of each device
(retained once per process on first use, released never -- it lives as long as
the process, like the CUDA runtime's), and making it current on the calling
thread. The per-thread binding is cached in _loader, so after the first use on a
thread no driver call is made to bind it again. ``with Device(n):`` makes device n
the thread's current device for the block and restores the previous one after it.

In a child forked after the driver was loaded, every Device method raises
``ForkedProcessError`` (naming ``spawn``) before any driver call.
"""

__all__ = ["Device", "device_count"]
import threading
cimport cython

from libc.string cimport memset
from cpython.ref cimport PyObject
from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, \
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
from barecuda._loader cimport (driver_table, runtime_state, ensure_driver, set_current, forget_current,
                               bound_context, chosen_device, choose_device)
from barecuda._lazy cimport lazy_module

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()
cdef PyObject *_host_node_mod = NULL   # barecuda.graph._host_node, once a stored host-node error is raised

cdef CUcontext _primary[MAX_DEVICES]       # MAX_DEVICES: _device.pxd
# ordinal -> identity properties of Device (fixed per process; see _identity)
cdef dict _IDENTITY = {}
memset(_primary, 0, sizeof(_primary))
_retain_lock = threading.Lock()
# Per thread: the stack of (chosen device, current context) saved by Device.__enter__.
_scopes = threading.local()

# Every CUdevice_attribute by its lower-case name without the prefix.
ATTRIBUTES = {
    "max_threads_per_block": 1,
    "max_block_dim_x": 2,
    "max_block_dim_y": 3,
    "max_block_dim_z": 4,
    "max_grid_dim_x": 5,
    "max_grid_dim_y": 6,
    "max_grid_dim_z": 7,
    "max_shared_memory_per_block": 8,
    "total_constant_memory": 9,
    "warp_size": 10,
    "max_pitch": 11,
    "max_registers_per_block": 12,
    "clock_rate": 13,
    "texture_alignment": 14,
    "gpu_overlap": 15,
    "multiprocessor_count": 16,
    "kernel_exec_timeout": 17,
    "integrated": 18,
    "can_map_host_memory": 19,
    "compute_mode": 20,
    "maximum_texture1d_width": 21,
    "maximum_texture2d_width": 22,
    "maximum_texture2d_height": 23,
    "maximum_texture3d_width": 24,
    "maximum_texture3d_height": 25,
    "maximum_texture3d_depth": 26,
    "maximum_texture2d_layered_width": 27,
    "maximum_texture2d_layered_height": 28,
    "maximum_texture2d_layered_layers": 29,
    "surface_alignment": 30,
    "concurrent_kernels": 31,
    "ecc_enabled": 32,
    "pci_bus_id": 33,
    "pci_device_id": 34,
    "tcc_driver": 35,
    "memory_clock_rate": 36,
    "global_memory_bus_width": 37,
    "l2_cache_size": 38,
    "max_threads_per_multiprocessor": 39,
    "async_engine_count": 40,
    "unified_addressing": 41,
    "maximum_texture1d_layered_width": 42,
    "maximum_texture1d_layered_layers": 43,
    "can_tex2d_gather": 44,
    "maximum_texture2d_gather_width": 45,
    "maximum_texture2d_gather_height": 46,
    "maximum_texture3d_width_alternate": 47,
    "maximum_texture3d_height_alternate": 48,
    "maximum_texture3d_depth_alternate": 49,
    "pci_domain_id": 50,
    "texture_pitch_alignment": 51,
    "maximum_texturecubemap_width": 52,
    "maximum_texturecubemap_layered_width": 53,
    "maximum_texturecubemap_layered_layers": 54,
    "maximum_surface1d_width": 55,
    "maximum_surface2d_width": 56,
    "maximum_surface2d_height": 57,
    "maximum_surface3d_width": 58,
    "maximum_surface3d_height": 59,
    "maximum_surface3d_depth": 60,
    "maximum_surface1d_layered_width": 61,
    "maximum_surface1d_layered_layers": 62,
    "maximum_surface2d_layered_width": 63,
    "maximum_surface2d_layered_height": 64,
    "maximum_surface2d_layered_layers": 65,
    "maximum_surfacecubemap_width": 66,
    "maximum_surfacecubemap_layered_width": 67,
    "maximum_surfacecubemap_layered_layers": 68,
    "maximum_texture1d_linear_width": 69,
    "maximum_texture2d_linear_width": 70,
    "maximum_texture2d_linear_height": 71,
    "maximum_texture2d_linear_pitch": 72,
    "maximum_texture2d_mipmapped_width": 73,
    "maximum_texture2d_mipmapped_height": 74,
    "compute_capability_major": 75,
    "compute_capability_minor": 76,
    "maximum_texture1d_mipmapped_width": 77,
    "stream_priorities_supported": 78,
    "global_l1_cache_supported": 79,
    "local_l1_cache_supported": 80,
    "max_shared_memory_per_multiprocessor": 81,
    "max_registers_per_multiprocessor": 82,
    "managed_memory": 83,
    "multi_gpu_board": 84,
    "multi_gpu_board_group_id": 85,
    "host_native_atomic_supported": 86,
    "single_to_double_precision_perf_ratio": 87,
    "pageable_memory_access": 88,
    "concurrent_managed_access": 89,
    "compute_preemption_supported": 90,
    "can_use_host_pointer_for_registered_mem": 91,
    "can_use_stream_mem_ops_v1": 92,
    "can_use_64_bit_stream_mem_ops_v1": 93,
    "can_use_stream_wait_value_nor_v1": 94,
    "cooperative_launch": 95,
    "cooperative_multi_device_launch": 96,
    "max_shared_memory_per_block_optin": 97,
    "can_flush_remote_writes": 98,
    "host_register_supported": 99,
    "pageable_memory_access_uses_host_page_tables": 100,
    "direct_managed_mem_access_from_host": 101,
    "virtual_memory_management_supported": 102,
    "handle_type_posix_file_descriptor_supported": 103,
    "handle_type_win32_handle_supported": 104,
    "handle_type_win32_kmt_handle_supported": 105,
    "max_blocks_per_multiprocessor": 106,
    "generic_compression_supported": 107,
    "max_persisting_l2_cache_size": 108,
    "max_access_policy_window_size": 109,
    "gpu_direct_rdma_with_cuda_vmm_supported": 110,
    "reserved_shared_memory_per_block": 111,
    "sparse_cuda_array_supported": 112,
    "read_only_host_register_supported": 113,
    "timeline_semaphore_interop_supported": 114,
    "memory_pools_supported": 115,
    "gpu_direct_rdma_supported": 116,
    "gpu_direct_rdma_flush_writes_options": 117,
    "gpu_direct_rdma_writes_ordering": 118,
    "mempool_supported_handle_types": 119,
    "cluster_launch": 120,
    "deferred_mapping_cuda_array_supported": 121,
    "can_use_64_bit_stream_mem_ops": 122,
    "can_use_stream_wait_value_nor": 123,
    "dma_buf_supported": 124,
    "ipc_event_supported": 125,
    "mem_sync_domain_count": 126,
    "tensor_map_access_supported": 127,
    "handle_type_fabric_supported": 128,
    "unified_function_pointers": 129,
    "numa_config": 130,
    "numa_id": 131,
    "multicast_supported": 132,
    "mps_enabled": 133,
    "host_numa_id": 134,
    "d3d12_cig_supported": 135,
    "mem_decompress_algorithm_mask": 136,
    "mem_decompress_maximum_length": 137,
    "vulkan_cig_supported": 138,
    "gpu_pci_device_id": 139,
    "gpu_pci_subsystem_id": 140,
    "host_numa_virtual_memory_management_supported": 141,
    "host_numa_memory_pools_supported": 142,
    "host_numa_multinode_ipc_supported": 143,
    "host_memory_pools_supported": 144,
    "host_virtual_memory_management_supported": 145,
    "host_alloc_dma_buf_supported": 146,
    "only_partial_host_native_atomic_supported": 147,
}


def device_count():
    """Number of CUDA devices visible to this process."""
    ensure_driver(ST)
    cdef int n = 0
    check(D.cuDeviceGetCount(&n), b"cuDeviceGetCount")
    return n


cdef CUcontext activate_device(int ordinal) except NULL:
    cdef CUcontext ctx = _primary[ordinal] if 0 <= ordinal < MAX_DEVICES else NULL
    cdef CUdevice dev
    if ctx == NULL:
        ensure_driver(ST)
        if not 0 <= ordinal < MAX_DEVICES:
            raise ValueError(f"device ordinal {ordinal} out of range")
        with _retain_lock:
            ctx = _primary[ordinal]
            if ctx == NULL:
                check(D.cuDeviceGet(&dev, ordinal), b"cuDeviceGet")
                with nogil:
                    check(D.cuDevicePrimaryCtxRetain(&ctx, dev), b"cuDevicePrimaryCtxRetain")
                _primary[ordinal] = ctx
    set_current(ctx)
    return ctx


cdef int _current_ordinal() except -2:
    """The default device of this thread, or -1 for "none chosen" (then 0).

    Like the CUDA runtime's current device: the device chosen on this thread with
    ``Device.set_current()``; otherwise, when another library (PyTorch, CuPy) made a
    context current on this thread, that context's device. A context barecuda made
    current only to run an operation on some device does not change the default.
    """
    cdef CUcontext ctx = NULL
    cdef CUdevice dev
    cdef int o = chosen_device()
    if o >= 0:
        return o
    ensure_driver(ST)
    check(D.cuCtxGetCurrent(&ctx), b"cuCtxGetCurrent")
    if ctx == NULL or ctx == bound_context():
        return -1
    check(D.cuCtxGetDevice(&dev), b"cuCtxGetDevice")
    return <int>dev


cdef Device device_of(object device):
    if device is None:
        return Device()
    if type(device) is Device:
        return <Device>device
    return Device(device)


cdef dict _identity(Device d):
    """name, uuid, pci_bus_id, compute_capability, total_memory of d, asked once."""
    cdef char buf[256]
    cdef CUuuid u
    cdef size_t total = 0
    ensure_driver(ST)
    info = _IDENTITY.get(d.ordinal)
    if info is not None:
        return info
    check(D.cuDeviceGetName(buf, sizeof(buf), d.handle), b"cuDeviceGetName")
    name = buf.decode(errors="replace")
    check(D.cuDeviceGetUuid(&u, d.handle), b"cuDeviceGetUuid")
    h = bytes((<unsigned char *>u.bytes)[:16]).hex()
    check(D.cuDeviceGetPCIBusId(buf, 64, d.handle), b"cuDeviceGetPCIBusId")
    pci = buf.decode()
    check(D.cuDeviceTotalMem(&total, d.handle), b"cuDeviceTotalMem")
    info = {"name": name, "uuid": f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}",
            "pci_bus_id": pci, "total_memory": total,
            "compute_capability": (d.attribute("compute_capability_major"),
                                   d.attribute("compute_capability_minor"))}
    _IDENTITY[d.ordinal] = info
    return info


@cython.final
cdef class Device:
    """A CUDA device.

    Parameters
    ----------
    ordinal : int, optional
        Device index. By default the thread's default device: the one chosen with
        :meth:`set_current`, else the device of a context another library (PyTorch,
        CuPy) made current on this thread, else 0.

    Device objects are cheap; every Device for one ordinal shares the primary
    context, which is retained on first use and made current on each calling thread.
    """

    def __cinit__(self, ordinal=None):
        cdef int n = 0
        cdef int o
        ensure_driver(ST)
        if ordinal is None:
            o = _current_ordinal()
            if o < 0:
                o = 0
        else:
            if not isinstance(ordinal, int):
                raise TypeError(f"device ordinal must be an int, not {type(ordinal).__name__}")
            o = ordinal
        check(D.cuDeviceGetCount(&n), b"cuDeviceGetCount")
        if not 0 <= o < n:
            raise ValueError(f"device ordinal {o} is out of range: {n} device(s) visible"
                             " (check CUDA_VISIBLE_DEVICES)")
        self.ordinal = o
        check(D.cuDeviceGet(&self.handle, o), b"cuDeviceGet")
        self.ctx = NULL

    cdef int activate(self) except -1:
        self.ctx = activate_device(self.ordinal)
        return 0

    def set_current(self):
        """Make this device the default of the calling thread (``Device()``, and every
        call that takes ``device=None``) and its primary context current."""
        ensure_driver(ST)
        self.activate()
        choose_device(self.ordinal)

    def __repr__(self):
        info = _IDENTITY.get(self.ordinal)      # never a driver call (also fine after fork)
        if info is None:
            return f"<barecuda.Device {self.ordinal}>"
        return f"<barecuda.Device {self.ordinal}: {info['name']}>"

    def __eq__(self, other):
        return type(other) is Device and (<Device>other).ordinal == self.ordinal

    def __hash__(self):
        return hash(("barecuda.Device", self.ordinal))

    def __index__(self):
        return self.ordinal

    def __reduce__(self):
        return (Device, (self.ordinal,))

    # The identity properties never change for a device ordinal: the driver is asked
    # once per process (_identity) and they are dict lookups afterwards (STYLE:
    # properties are for cheap values).
    @property
    def name(self):
        """Marketing name, e.g. ``'NVIDIA H200'`` (asked once, then cached)."""
        return _identity(self)["name"]

    @property
    def uuid(self):
        """The device UUID as a string ``GPU-xxxxxxxx-xxxx-...`` (asked once, then cached)."""
        return _identity(self)["uuid"]

    @property
    def pci_bus_id(self):
        """PCI bus id, e.g. ``'0000:19:00.0'`` (asked once, then cached)."""
        return _identity(self)["pci_bus_id"]

    @property
    def compute_capability(self):
        """``(major, minor)`` (asked once, then cached)."""
        return _identity(self)["compute_capability"]

    @property
    def total_memory(self):
        """Total device memory in bytes (asked once, then cached)."""
        return _identity(self)["total_memory"]

    def attribute(self, name):
        """Value of a device attribute.

        Parameters
        ----------
        name : str or int
            A ``CUdevice_attribute`` by name, with or without the
            ``CU_DEVICE_ATTRIBUTE_`` prefix and in any case
            (``"multiprocessor_count"``), or its numeric value.
        """
        ensure_driver(ST)
        cdef int value = 0
        cdef int code
        if isinstance(name, str):
            key = name.lower()
            if key.startswith("cu_device_attribute_"):
                key = key[len("cu_device_attribute_"):]
            try:
                code = ATTRIBUTES[key]
            except KeyError:
                raise ValueError(f"unknown device attribute {name!r}; see barecuda.Device.attribute_names()") from None
        else:
            code = name
        check(D.cuDeviceGetAttribute(&value, <CUdevice_attribute>code, self.handle), b"cuDeviceGetAttribute")
        return value

    @staticmethod
    def attribute_names():
        """Every attribute name :meth:`attribute` accepts."""
        return sorted(ATTRIBUTES)

    def attributes(self):
        """All attributes this driver reports, as a dict (unsupported ones omitted)."""
        ensure_driver(ST)
        cdef int value
        cdef CUresult rc
        out = {}
        for key, code in ATTRIBUTES.items():
            rc = D.cuDeviceGetAttribute(&value, <CUdevice_attribute>code, self.handle)
            if rc == 0:
                out[key] = value
        return out

    def mem_info(self):
        """``(free, total)`` device memory in bytes."""
        ensure_driver(ST)
        cdef size_t free = 0, total = 0
        self.activate()
        with nogil:
            check(D.cuMemGetInfo(&free, &total), b"cuMemGetInfo")
        return (free, total)

    def synchronize(self):
        """Wait for all work queued on this device (releases the GIL while waiting), then
        raise an exception a CUDA graph host node stored, if any."""
        ensure_driver(ST)
        self.activate()
        with nogil:
            check(D.cuCtxSynchronize(), b"cuCtxSynchronize")
        if ST.host_errors:          # an exception a CUDA graph host node stored (docs/graphs.md)
            lazy_module(&_host_node_mod, "barecuda.graph._host_node").check_host_errors()

    def can_access_peer(self, peer):
        """Whether this device can access memory of ``peer`` directly."""
        ensure_driver(ST)
        cdef int ok = 0
        cdef Device p = device_of(peer)
        check(D.cuDeviceCanAccessPeer(&ok, self.handle, p.handle), b"cuDeviceCanAccessPeer")
        return bool(ok)

    def enable_peer_access(self, peer):
        """Let work in this device's context access ``peer``'s memory (idempotent)."""
        ensure_driver(ST)
        cdef Device p = device_of(peer)
        cdef CUcontext pctx = activate_device(p.ordinal)
        self.activate()
        cdef CUresult rc = D.cuCtxEnablePeerAccess(pctx, 0)
        if rc != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:      # fine: idempotent
            check(rc, b"cuCtxEnablePeerAccess")

    def disable_peer_access(self, peer):
        """Stop this device's context accessing ``peer``'s memory (idempotent: access
        that is not enabled is fine). The inverse of :meth:`enable_peer_access`."""
        ensure_driver(ST)
        cdef Device p = device_of(peer)
        cdef CUcontext pctx = activate_device(p.ordinal)
        self.activate()
        cdef CUresult rc = D.cuCtxDisablePeerAccess(pctx)
        if rc != CUDA_ERROR_PEER_ACCESS_NOT_ENABLED:          # fine: idempotent
            check(rc, b"cuCtxDisablePeerAccess")

    def stream_priority_range(self):
        """``(least, greatest)`` stream priorities; greater priority is the lower number."""
        ensure_driver(ST)
        cdef int least = 0, greatest = 0
        self.activate()
        check(D.cuCtxGetStreamPriorityRange(&least, &greatest), b"cuCtxGetStreamPriorityRange")
        return (least, greatest)

    def context_handle(self):
        """The primary context handle as an int (retains the context on first use and
        makes it current on this thread)."""
        ensure_driver(ST)
        self.activate()
        return <size_t>self.ctx

    def __enter__(self):
        """``with Device(n):`` -- device n is the thread's current device (as after
        :meth:`set_current`) until the block ends; then the previous choice and the
        previously current context come back. Scopes nest, per thread."""
        cdef CUcontext prev = NULL
        ensure_driver(ST)
        check(D.cuCtxGetCurrent(&prev), b"cuCtxGetCurrent")
        stack = getattr(_scopes, "stack", None)
        if stack is None:
            stack = _scopes.stack = []
        self.activate()
        stack.append((chosen_device(), <size_t>prev))
        choose_device(self.ordinal)
        return self

    def __exit__(self, *exc):
        cdef size_t prev
        stack = getattr(_scopes, "stack", None)
        if not stack:
            raise RuntimeError("Device.__exit__ without a matching __enter__ on this thread")
        chosen, prev = stack.pop()
        choose_device(chosen)
        if not bc_driver_usable(ST):
            return
        if prev != 0:
            set_current(<CUcontext>prev)
        elif chosen >= 0:
            activate_device(chosen)




# -- memory (mem): the one cache of Device objects, used by the memory modules so that
# every buffer of a device shares one Device (no cuDeviceGetCount per allocation).
cdef list _device_objs = [None] * MAX_DEVICES


cdef Device device_at(int ordinal):
    d = _device_objs[ordinal] if 0 <= ordinal < MAX_DEVICES else None
    if d is None:
        d = Device(ordinal)
        _device_objs[ordinal] = d
    return <Device>d


cdef Device current_device():
    cdef int o = _current_ordinal()
    return device_at(0 if o < 0 else o)
