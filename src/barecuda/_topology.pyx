"""Several GPUs in one process: the device list, the topology report (peer access,
performance rank and atomics from ``cuDeviceGetP2PAttribute``, PCI and NUMA identity),
placement across devices (``DevicePool``) and the raw peer-copy loop the benchmark
compares with.

Owns: ``devices()``, ``topology()``, ``topology_report()``, ``DevicePool`` and
``peer_copy_loop``. Peer copies themselves are ``DeviceBuffer.copy_from`` /
``copy_to`` between buffers of two devices (``cuMemcpyPeerAsync``, in _memory).
Each device's default memory pool is its default allocator
(``barecuda.get_allocator(device)``; ``barecuda.DriverMemoryPool(device, default=True)``
wraps the driver's own default pool). On a machine with one GPU everything here works
and describes that one device.
"""

__all__ = ["devices", "topology", "topology_report", "p2p_attributes", "DevicePool"]
import itertools
import threading

from barecuda._abi cimport (
    bc_driver_t, CUresult, CUdevice, CUdeviceptr, CUstream, CUdevice_P2PAttribute,
    CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED,
    CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED,
)
from barecuda._errors cimport check, bc_state_t, CUDA_SUCCESS
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current, require
from barecuda._device cimport Device, device_of
from barecuda._buffer cimport DeviceBuffer
from barecuda._stream cimport stream_handle

from barecuda._device import device_count
from barecuda._allocators import get_allocator

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()

_P2P_ATTRS = (
    ("access", CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED),
    ("performance_rank", CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK),
    ("native_atomics", CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED),
    ("array_access", CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED),
)


def devices():
    """Every visible device, as a list of :class:`~barecuda.Device` (ordinal order)."""
    ensure_driver(ST)
    return [device_of(i) for i in range(device_count())]


def p2p_attributes(src, dst):
    """``cuDeviceGetP2PAttribute`` for the pair (``src`` accessing ``dst``): a dict with
    ``access`` (bool), ``performance_rank`` (int: lower is faster), ``native_atomics``
    (bool) and ``array_access`` (bool). For ``src == dst`` every field describes local
    access (True, rank 0)."""
    cdef Device a = device_of(src)
    cdef Device b = device_of(dst)
    cdef int v = 0
    ensure_driver(ST)
    if a.ordinal == b.ordinal:
        return {"access": True, "performance_rank": 0, "native_atomics": True, "array_access": True}
    require(<const void *>D.cuDeviceGetP2PAttribute, b"cuDeviceGetP2PAttribute", b"the topology report")
    out = {}
    for name, code in _P2P_ATTRS:
        check(D.cuDeviceGetP2PAttribute(&v, <CUdevice_P2PAttribute>code, a.handle, b.handle),
              b"cuDeviceGetP2PAttribute")
        out[name] = v if name == "performance_rank" else bool(v)
    return out


cdef object _numa_node(Device d):
    """The GPU's NUMA node: the driver's attribute where it has one, else sysfs, else None."""
    try:
        v = d.attribute("numa_id")
        if v >= 0:
            return v
    except Exception:
        pass
    try:
        with open(f"/sys/bus/pci/devices/{d.pci_bus_id.lower()}/numa_node") as f:
            v = int(f.read().strip())
        return v if v >= 0 else None
    except (OSError, ValueError):
        return None


def topology():
    """The machine's GPU topology as a plain dict (JSON-serialisable).

    Returns
    -------
    dict
        ``devices``: one dict per device (``ordinal``, ``name``, ``uuid``,
        ``pci_bus_id``, ``numa_node``, ``total_memory``, ``free_memory``);
        ``p2p``: ``p2p[i][j]`` is :func:`p2p_attributes` ``(i, j)``;
        ``access_matrix``: ``access_matrix[i][j]`` is 1 where device i can read and
        write device j's memory directly.
    """
    devs = devices()
    out_devs = []
    for d in devs:
        free, total = d.mem_info()
        out_devs.append({
            "ordinal": d.ordinal, "name": d.name, "uuid": d.uuid, "pci_bus_id": d.pci_bus_id,
            "numa_node": _numa_node(<Device>d), "total_memory": total, "free_memory": free,
        })
    p2p = [[p2p_attributes(a, b) for b in devs] for a in devs]
    return {
        "devices": out_devs,
        "p2p": p2p,
        "access_matrix": [[1 if p2p[i][j]["access"] else 0 for j in range(len(devs))] for i in range(len(devs))],
    }


def topology_report(topo=None):
    """:func:`topology` as text for people (for ``python -m barecuda doctor``)."""
    t = topology() if topo is None else topo
    lines = []
    n = len(t["devices"])
    lines.append(f"{n} device{'s' if n != 1 else ''}")
    for d in t["devices"]:
        numa = "?" if d["numa_node"] is None else d["numa_node"]
        lines.append(f"  [{d['ordinal']}] {d['name']}  {d['uuid']}  PCI {d['pci_bus_id']}  NUMA {numa}  "
                     f"{d['free_memory'] / 2**30:.1f} / {d['total_memory'] / 2**30:.1f} GiB free")
    if n > 1:
        lines.append("peer access (row reads column): A = access, a = + native atomics, "
                     "digit = performance rank, - = none")
        lines.append("       " + " ".join(f"{j:>5}" for j in range(n)))
        for i in range(n):
            cells = []
            for j in range(n):
                p = t["p2p"][i][j]
                if i == j:
                    cells.append("    X")
                elif not p["access"]:
                    cells.append("    -")
                else:
                    cells.append(f"{'a' if p['native_atomics'] else 'A'}{p['performance_rank']:>4}")
            lines.append(f"  [{i:>2}] " + " ".join(cells))
    return "\n".join(lines)


cdef class DevicePool:
    """Devices to spread work over: ranked by free memory, handed out round robin.

    Parameters
    ----------
    devices : iterable of Device or int, optional
        Default: every visible device (on a one-GPU machine, that one).

    Examples
    --------
    >>> pool = bc.DevicePool()
    >>> bufs = [pool.alloc(1 << 20) for _ in range(4)]   # round robin over the GPUs
    """
    cdef list _devices
    cdef object _cycle
    cdef object _lock

    def __cinit__(self, devices=None):
        ensure_driver(ST)
        if devices is None:
            devs = globals()["devices"]()
        else:
            devs = [device_of(d) for d in devices]
        if not devs:
            raise ValueError("a DevicePool needs at least one device")
        seen = set()
        for d in devs:
            if d.ordinal in seen:
                raise ValueError(f"device {d.ordinal} listed twice")
            seen.add(d.ordinal)
        self._devices = list(devs)
        self._cycle = itertools.cycle(self._devices)
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._devices)

    def __iter__(self):
        return iter(list(self._devices))

    @property
    def devices(self):
        """The devices, in the order given."""
        return list(self._devices)

    def ranked(self):
        """The devices sorted by free memory, most free first (asks the driver now)."""
        return [d for _, _, d in sorted(((-d.mem_info()[0], d.ordinal, d) for d in self._devices),
                                        key=lambda t: (t[0], t[1]))]

    def best(self):
        """The device with the most free memory right now."""
        return self.ranked()[0]

    def next(self):
        """The next device in round-robin order (thread-safe)."""
        with self._lock:
            return next(self._cycle)

    def allocator(self, device):
        """``device``'s default allocator (its default memory pool)."""
        return get_allocator(device)

    def alloc(self, nbytes, *, stream=None):
        """A DeviceBuffer of ``nbytes`` on the next device in round-robin order."""
        d = self.next()
        return get_allocator(d).alloc(nbytes, stream=stream)

    def __repr__(self):
        return f"<barecuda.DevicePool devices={[d.ordinal for d in self._devices]}>"


def peer_copy_loop(DeviceBuffer dst not None, DeviceBuffer src not None, size_t nbytes, int iters, stream=None):
    """Queue ``iters`` copies of ``nbytes`` from ``src`` to ``dst`` with
    ``cuMemcpyPeerAsync`` in a C loop (no per-copy Python): the raw-C reference of the
    peer-copy benchmark row. Returns at once; synchronize ``stream`` to wait."""
    cdef CUstream s = NULL
    cdef CUresult rc = 0
    cdef int i
    dst._check_open()
    src._check_open()
    if nbytes > dst.nbytes or nbytes > src.nbytes:
        raise ValueError(f"{nbytes} bytes does not fit both buffers ({dst.nbytes} / {src.nbytes})")
    if iters < 0:
        raise ValueError("iters must be >= 0")
    stream_handle(stream, &s)
    set_current(dst.ctx)
    with nogil:
        for i in range(iters):
            rc = D.cuMemcpyPeerAsync(dst.ptr, dst.ctx, src.ptr, src.ctx, nbytes, s)
            if rc != CUDA_SUCCESS:
                break
    check(rc, b"cuMemcpyPeerAsync")
