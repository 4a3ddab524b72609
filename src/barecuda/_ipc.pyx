"""Sharing device memory and events between processes (CUDA IPC).

Owns: the memory and event handles (``MemHandle``, ``EventHandle``), exporting and
opening them, the two allocators whose memory can be shared (``IpcAllocator``:
``cuMemAlloc``; ``IpcMemoryPool``: a driver pool created with POSIX file descriptor
handles), and the error classes for handles that cannot be opened.

Two kinds of memory can be shared, and the handle records which:

* ``"ipc"`` -- memory from ``cuMemAlloc`` (``IpcAllocator``, or any allocator that
  calls ``cuMemAlloc``): ``cuIpcGetMemHandle`` / ``cuIpcOpenMemHandle``. The handle is
  64 opaque bytes plus the offset of the buffer inside its allocation.
* ``"pool"`` -- memory from a driver memory pool created with
  ``CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`` (``IpcMemoryPool``):
  ``cuMemPoolExportPointer`` plus the pool exported as a file descriptor. The
  descriptor travels through multiprocessing's resource sharer (SCM_RIGHTS over a Unix
  socket of the exporting process) between processes of one multiprocessing family,
  else the importer takes it with ``pidfd_getfd(2)`` (Linux >= 5.6; needs ptrace
  permission over the exporter). A device's DEFAULT pool -- what
  ``cuMemAllocAsync``, and therefore barecuda's default allocator, uses -- is created
  by the driver without any handle type and can never be shared: exporting such a
  buffer raises ``IpcError`` saying so.

Handles are plain picklable objects (``multiprocessing`` with ``spawn``, a socket,
a file). Each records the exporting machine (host name and boot id), process id and
GPU (UUID): opening on another machine, after the exporter died, or in the exporting
process itself raises a clear error before the driver is asked. The exporting side
keeps the buffer (and its pool) alive for as long as the handle object lives there.

The importer gets a zero-copy ``DeviceBuffer`` on the local device with the same
UUID (CUDA_VISIBLE_DEVICES may number devices differently in each process). Dropping
or closing it unmaps (``cuIpcCloseMemHandle``; ``cuMemFree`` for pool memory). A
handle may be open once per process at a time: opening it again while the first
view lives raises ``IpcAlreadyOpenError`` (the driver refuses a second mapping).
"""
import os
import socket
import threading
import weakref

from libc.string cimport memcpy, memset
from barecuda._abi cimport (
    bc_driver_t, CUresult, CUdeviceptr, CUstream, CUevent, CUmemoryPool, CUipcMemHandle, CUipcEventHandle,
    CUmemPoolPtrExportData, CUmemPoolProps, CUmemAccessDesc, CUpointer_attribute,
    CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CU_MEM_LOCATION_TYPE_DEVICE,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
)
from barecuda._errors cimport (
    check, bc_state_t, bc_driver_usable, CUDA_SUCCESS, CUDA_ERROR_ALREADY_MAPPED, CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_MAP_FAILED,
)
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current, require
from barecuda._device cimport Device, device_of
from barecuda._buffer cimport Allocator, DeviceBuffer, KIND_SYNC, KIND_CLOSED, hold
from barecuda._driver_pool cimport free_async, free_sync, pool_alloc
from barecuda._stream cimport Event

from barecuda._errors import BarecudaError, CudaError, CudaWarning, error_info, _renamed
from barecuda._device import device_count

def _rc_name(rc):
    """A CUresult for a message: the driver's name and the number."""
    return f"{error_info(rc)[0]} ({int(rc)})"


cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()

cdef extern from *:
    """
    #define BC_CU_EVENT_IPC_FLAGS (0x4 | 0x2)  /* CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING */
    """
    unsigned int BC_CU_EVENT_IPC_FLAGS


# ------------------------------------------------------------------ errors
class IpcError(BarecudaError, RuntimeError):
    """A memory or event handle cannot be exported or opened."""


class IpcStaleHandleError(IpcError):
    """The exported memory or event is gone (freed, or its process exited)."""


class IpcForeignHostError(IpcError):
    """The handle was made on another machine (or before a reboot)."""


class IpcAlreadyOpenError(IpcError):
    """The handle is already open in this process."""


# ------------------------------------------------------------ identity
cdef str _BOOT_ID = None


def _boot_id():
    """This machine's boot id (``/proc/sys/kernel/random/boot_id``), '' where there is none."""
    global _BOOT_ID
    if _BOOT_ID is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                _BOOT_ID = f.read().strip()
        except OSError:
            _BOOT_ID = ""
    return _BOOT_ID


cdef tuple _machine():
    return (socket.gethostname(), _boot_id())


cdef bint _pid_alive(int pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


cdef object _check_origin(object h, str what):
    """Raise before any driver call when handle h cannot be opened here."""
    host, boot = _machine()
    if h.hostname != host or h.boot_id != boot:
        raise IpcForeignHostError(
            f"this {what} handle was made on host {h.hostname!r} (boot id {h.boot_id or '?'}), but this is "
            f"{host!r} (boot id {boot or '?'}): CUDA IPC handles only work between processes of one machine "
            "and one boot. Use NCCL (barecuda.nccl) to move data between machines.")
    if type(h.pid) is not int or h.pid <= 0:
        # os.kill(0 or -n, 0) signals a process group and "succeeds": such a pid would
        # pass both checks below (own process, exporter alive) without meaning anything.
        raise IpcError(f"malformed {what} handle: its exporter pid is {h.pid!r}; a handle from "
                       "export_buffer/export_event carries the exporter's pid, a positive int")
    if h.pid == os.getpid():
        raise IpcError(
            f"this {what} handle was exported by this very process (pid {h.pid}); the driver cannot open "
            "a process's own IPC handle. Use the original object instead.")
    if not _pid_alive(h.pid):
        raise IpcStaleHandleError(
            f"the process that exported this {what} handle (pid {h.pid}) has exited; its memory is gone.")


cdef Device _local_device(str uuid, object device):
    """The local Device with this UUID (or the one asked for)."""
    cdef int i, n
    if device is not None:
        return device_of(device)
    n = device_count()
    for i in range(n):
        d = device_of(i)
        if d.uuid == uuid:
            return <Device>d
    raise IpcError(f"the exporting GPU ({uuid}) is not visible in this process "
                   f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}); "
                   "pass device= to open it through another GPU with peer access.")


# ------------------------------------------------------------- allocators
cdef class IpcAllocator(Allocator):
    """Allocates with ``cuMemAlloc`` so that each buffer can be exported with
    :func:`export_buffer` (legacy ``cuIpcGetMemHandle`` handles: no file descriptors
    to pass, works under any launcher).

    Parameters
    ----------
    device : Device or int, optional

    Examples
    --------
    >>> buf = bc.ipc.IpcAllocator(0).alloc(1 << 20)
    >>> handle = bc.ipc.export_buffer(buf)      # picklable
    """

    def __cinit__(self, device=None):
        cdef Device dev = device_of(device)
        dev.activate()
        self.device = dev
        self.ctx = dev.ctx

    cdef int allocate(self, DeviceBuffer b, size_t size, CUstream s) except -1:
        cdef CUdeviceptr p = 0
        cdef CUresult rc
        b.ptr = 0
        b.nbytes = size
        b._kind = KIND_SYNC
        if size == 0:
            return 0
        set_current(self.ctx)
        with nogil:
            rc = D.cuMemAlloc(&p, size)
        check(rc, b"cuMemAlloc")
        b.ptr = p
        return 0

    cdef int deallocate(self, DeviceBuffer b) except -1:
        return free_sync(b)

    def __repr__(self):
        return f"<barecuda.IpcAllocator device={self.device.ordinal}>"


cdef class IpcMemoryPool(Allocator):
    """A driver memory pool created with ``CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR``,
    so that its buffers can be exported with :func:`export_buffer` (stream-ordered
    ``cuMemAllocFromPoolAsync`` / ``cuMemFreeAsync``).

    A device's default pool cannot be shared; use this pool (or :class:`IpcAllocator`)
    for memory other processes should see.

    Parameters
    ----------
    device : Device or int, optional
    """
    cdef CUmemoryPool pool
    cdef object __weakref__

    def __cinit__(self, device=None):
        cdef CUmemPoolProps props
        cdef CUmemoryPool p = NULL
        cdef Device dev = device_of(device)
        self.pool = NULL
        dev.activate()
        require(<const void *>D.cuMemPoolCreate, b"cuMemPoolCreate", b"IpcMemoryPool")
        require(<const void *>D.cuMemPoolExportToShareableHandle, b"cuMemPoolExportToShareableHandle", b"IpcMemoryPool")
        memset(&props, 0, sizeof(props))
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED
        props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = dev.ordinal
        check(D.cuMemPoolCreate(&p, &props), b"cuMemPoolCreate")
        self.pool = p
        self.device = dev
        self.ctx = dev.ctx

    def __dealloc__(self):
        if self.pool != NULL and bc_driver_usable(ST):
            D.cuMemPoolDestroy(self.pool)    # the driver keeps it until its last block is freed
        self.pool = NULL

    @property
    def handle_int(self):
        """The ``CUmemoryPool`` as an int."""
        return <size_t>self.pool

    handle = _renamed("IpcMemoryPool.handle", "handle_int")   # the old spelling, for one release

    cdef int allocate(self, DeviceBuffer b, size_t size, CUstream s) except -1:
        cdef CUresult rc
        pool_alloc(b, size, self.pool, self.ctx, s, KIND_SYNC, &rc)
        check(rc, b"cuMemAllocFromPoolAsync")
        return 0

    cdef int deallocate(self, DeviceBuffer b) except -1:
        return free_async(b)

    def __repr__(self):
        return f"<barecuda.IpcMemoryPool device={self.device.ordinal} 0x{<size_t>self.pool:x}>"


# ------------------------------------------------------------------ handles
class MemHandle:
    """A picklable handle to a device buffer of another process (see the module notes).

    Attributes
    ----------
    kind : str
        ``"ipc"`` (cuIpcGetMemHandle) or ``"pool"`` (cuMemPoolExportPointer).
    nbytes : int
    shape : tuple of int
    dtype : str
    device_uuid : str
        The exporting GPU.
    hostname, boot_id : str
        The exporting machine.
    pid : int
        The exporting process.
    """

    def __init__(self, kind, data, offset, nbytes, shape, dtype, device_uuid, hostname, boot_id, pid,
                 pool_key=0, pool_fd=-1):
        self.kind = kind
        self.data = bytes(data)
        self.offset = offset
        self.nbytes = nbytes
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device_uuid = device_uuid
        self.hostname = hostname
        self.boot_id = boot_id
        self.pid = pid
        self.pool_key = pool_key
        self.pool_fd = pool_fd
        self._keep = None          # exporter side: the buffer (and its pool) kept alive
        self._owns_fd = False
        self._shared_fd = None     # importer side: multiprocessing's handle to the descriptor

    def __getstate__(self):
        st = dict(self.__dict__)
        st["_keep"] = None
        st["_owns_fd"] = False
        st["_shared_fd"] = None
        if self.kind == "pool" and self._owns_fd and self.pool_fd >= 0:
            # Offer the descriptor through multiprocessing's resource sharer (a Unix
            # socket in this process, SCM_RIGHTS, authenticated with the process
            # family's authkey): works between multiprocessing parents and children
            # without ptrace rights. Other importers fall back to pidfd_getfd.
            try:
                from multiprocessing import resource_sharer
                st["_shared_fd"] = resource_sharer.DupFd(self.pool_fd)
            except Exception:
                st["_shared_fd"] = None
        return st

    def __setstate__(self, st):
        st.setdefault("_shared_fd", None)
        self.__dict__.update(st)

    def __del__(self):
        if self._owns_fd and self.pool_fd >= 0:
            try:
                os.close(self.pool_fd)
            except OSError:
                pass
            self.pool_fd = -1

    def release(self):
        """Exporter side: stop keeping the buffer alive for importers (and close the
        pool's file descriptor). Importers that already opened it keep their mapping."""
        self._keep = None
        self.__del__()

    def __repr__(self):
        return (f"<barecuda.ipc.MemHandle {self.kind} {self.nbytes} bytes shape={self.shape} dtype={self.dtype} "
                f"from pid {self.pid} on {self.hostname} ({self.device_uuid})>")


class EventHandle:
    """A picklable handle to an interprocess event of another process."""

    def __init__(self, data, device_uuid, hostname, boot_id, pid):
        self.data = bytes(data)
        self.device_uuid = device_uuid
        self.hostname = hostname
        self.boot_id = boot_id
        self.pid = pid
        self._keep = None

    def __getstate__(self):
        st = dict(self.__dict__)
        st["_keep"] = None
        return st

    def __repr__(self):
        return f"<barecuda.ipc.EventHandle from pid {self.pid} on {self.hostname} ({self.device_uuid})>"


# ------------------------------------------------------------------ export
cdef str _dtype_name(DeviceBuffer b):
    return str(b.dtype)


def export_buffer(DeviceBuffer buf not None):
    """A picklable :class:`MemHandle` for ``buf`` that another process opens with
    :func:`open_buffer`.

    ``buf`` must come from ``cuMemAlloc`` (:class:`IpcAllocator`) or from a pool
    created with POSIX file descriptor handles (:class:`IpcMemoryPool`). The buffer
    stays alive while the returned handle lives in this process.

    Raises
    ------
    IpcError
        The memory cannot be shared (the device's default pool, a view of foreign
        memory, managed memory), with what to use instead.
    """
    cdef CUipcMemHandle mh
    cdef CUmemPoolPtrExportData pd
    cdef CUmemoryPool pool = NULL
    cdef CUdeviceptr base = 0
    cdef size_t rsize = 0
    cdef CUresult rc
    cdef int fd = -1
    ensure_driver(ST)
    buf._check_open()
    if buf.nbytes == 0:
        raise ValueError("cannot export an empty buffer")
    require(<const void *>D.cuIpcGetMemHandle, b"cuIpcGetMemHandle", b"IPC")
    buf.device.activate()
    host, boot = _machine()
    rc = D.cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, buf.ptr)
    if rc == CUDA_SUCCESS and pool != NULL:
        require(<const void *>D.cuMemPoolExportPointer, b"cuMemPoolExportPointer", b"IPC of pool memory")
        with nogil:
            rc = D.cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
        if rc != CUDA_SUCCESS:
            raise IpcError(
                "this buffer comes from a CUDA memory pool that was not created with "
                "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (a device's default pool -- what cuMemAllocAsync and "
                "barecuda's default allocator use -- never is), so it cannot be shared with another process "
                f"(cuMemPoolExportToShareableHandle returned {_rc_name(rc)}). Allocate shared buffers from "
                "barecuda.ipc.IpcMemoryPool(device) or barecuda.ipc.IpcAllocator(device).")
        rc = D.cuMemPoolExportPointer(&pd, buf.ptr)
        if rc != CUDA_SUCCESS:
            os.close(fd)
            check(rc, b"cuMemPoolExportPointer")
        h = MemHandle("pool", (<char *>pd.reserved)[:64], 0, buf.nbytes, buf.shape, _dtype_name(buf),
                      buf.device.uuid, host, boot, os.getpid(), <size_t>pool, fd)
        h._owns_fd = True
    else:
        rc = D.cuMemGetAddressRange(&base, &rsize, buf.ptr)
        if rc != CUDA_SUCCESS:
            raise IpcError(f"0x{buf.ptr:x} is not device memory this process allocated "
                           f"(cuMemGetAddressRange returned {_rc_name(rc)}); only cuMemAlloc and IPC-pool memory can be "
                           "shared.")
        with nogil:
            rc = D.cuIpcGetMemHandle(&mh, base)
        if rc != CUDA_SUCCESS:
            raise IpcError(
                f"cuIpcGetMemHandle refused this buffer ({_rc_name(rc)}): only memory from cuMemAlloc can be "
                "shared this way (not managed, host or imported memory). Allocate it from "
                "barecuda.ipc.IpcAllocator(device) or barecuda.ipc.IpcMemoryPool(device).")
        h = MemHandle("ipc", (<char *>mh.reserved)[:64], buf.ptr - base, buf.nbytes, buf.shape, _dtype_name(buf),
                      buf.device.uuid, host, boot, os.getpid())
    h._keep = hold(buf)     # an export pins the allocation owner: closing buf defers the free
    return h


def ipc_event(device=None):
    """A new :class:`~barecuda.Event` that can be shared (created with
    ``CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING``; it cannot time)."""
    cdef CUevent h = NULL
    cdef Event ev = Event.__new__(Event, device, timing=False)
    ev.device.activate()
    check(D.cuEventCreate(&h, BC_CU_EVENT_IPC_FLAGS), b"cuEventCreate")
    D.cuEventDestroy(ev.handle)
    ev.handle = h
    return ev


def export_event(Event event not None):
    """A picklable :class:`EventHandle` for ``event`` (made by :func:`ipc_event`)."""
    cdef CUipcEventHandle eh
    cdef CUresult rc
    ensure_driver(ST)
    require(<const void *>D.cuIpcGetEventHandle, b"cuIpcGetEventHandle", b"IPC")
    event.device.activate()
    rc = D.cuIpcGetEventHandle(&eh, event.handle)
    if rc != CUDA_SUCCESS:
        raise IpcError(f"cuIpcGetEventHandle refused this event ({_rc_name(rc)}): only events created with "
                       "CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING can be shared; make it with "
                       "barecuda.ipc.ipc_event(device).")
    host, boot = _machine()
    h = EventHandle((<char *>eh.reserved)[:64], event.device.uuid, host, boot, os.getpid())
    h._keep = event
    return h


# ------------------------------------------------------------------ import
_open_lock = threading.RLock()      # reentrant: a view collected inside the block unmaps under it
_open_views = weakref.WeakValueDictionary()     # handle key -> the live view
_imported_pools = weakref.WeakValueDictionary() # (host, boot, pid, pool_key) -> _ImportedPool


cdef class _ImportedPool:
    """A pool imported from another process; destroyed when its last mapping goes."""
    cdef CUmemoryPool pool
    cdef Device device
    cdef object __weakref__

    def __dealloc__(self):
        if self.pool != NULL and bc_driver_usable(ST):
            D.cuMemPoolDestroy(self.pool)
        self.pool = NULL


cdef class _IpcMapping(Allocator):
    """The 'allocator' of an imported view: unmaps instead of freeing."""
    cdef CUdeviceptr base
    cdef bint from_pool
    cdef object pool            # _ImportedPool kept alive while its pointer is mapped
    cdef object key

    cdef int allocate(self, DeviceBuffer b, size_t size, CUstream s) except -1:
        raise TypeError("an IPC mapping cannot allocate")

    cdef int deallocate(self, DeviceBuffer b) except -1:
        cdef CUdeviceptr base = self.base
        cdef CUresult rc
        b.ptr = 0
        self.base = 0
        with _open_lock:
            if _open_views.get(self.key) is b:
                del _open_views[self.key]
        if base == 0:
            return 0
        set_current(b.ctx)
        if self.from_pool:
            with nogil:
                rc = D.cuMemFree(base)
            check(rc, b"cuMemFree")
        else:
            with nogil:
                rc = D.cuIpcCloseMemHandle(base)
            check(rc, b"cuIpcCloseMemHandle")
        self.pool = None
        return 0


cdef int _pidfd_getfd(int pid, int fd) except -1:
    import ctypes
    import errno
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        raise IpcStaleHandleError(f"the exporting process (pid {pid}) has exited") from None
    try:
        got = libc.syscall(438, pidfd, fd, 0)      # SYS_pidfd_getfd (same number on every Linux arch)
        if got < 0:
            e = ctypes.get_errno()
            if e == errno.EPERM:
                raise IpcError(
                    f"pidfd_getfd could not take the pool's file descriptor from pid {pid} (EPERM): this process "
                    "may not ptrace the exporter (see /proc/sys/kernel/yama/ptrace_scope). Share memory from "
                    "barecuda.ipc.IpcAllocator instead (no file descriptor), or let the exporter allow it "
                    "(prctl PR_SET_PTRACER).")
            if e == errno.EBADF:
                raise IpcStaleHandleError(f"the exporter (pid {pid}) released this pool handle (fd {fd} is closed)")
            raise OSError(e, f"pidfd_getfd(pid {pid}, fd {fd}): {os.strerror(e)}")
        return got
    finally:
        os.close(pidfd)


cdef _ImportedPool _import_pool(object h, Device dev):
    cdef CUmemoryPool p = NULL
    cdef CUmemAccessDesc acc
    cdef CUresult rc
    cdef long long fdv
    cdef int fd
    key = (h.hostname, h.boot_id, h.pid, h.pool_key)
    ip = _imported_pools.get(key)
    if ip is not None:
        return <_ImportedPool>ip
    fd = -1
    shared = getattr(h, "_shared_fd", None)
    if shared is not None:
        try:
            fd = shared.detach()          # from the exporter's resource sharer (one use)
        except Exception:
            fd = -1
        h._shared_fd = None
    if fd < 0:
        fd = _pidfd_getfd(h.pid, h.pool_fd)
    try:
        fdv = fd
        with nogil:
            rc = D.cuMemPoolImportFromShareableHandle(&p, <void *><size_t>fdv, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
        check(rc, b"cuMemPoolImportFromShareableHandle")
    finally:
        os.close(fd)
    cdef _ImportedPool out = _ImportedPool.__new__(_ImportedPool)
    out.pool = p
    out.device = dev
    memset(&acc, 0, sizeof(acc))
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE
    acc.location.id = dev.ordinal
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    check(D.cuMemPoolSetAccess(p, &acc, 1), b"cuMemPoolSetAccess")
    _imported_pools[key] = out
    return out


def open_buffer(h, *, device=None):
    """Map the buffer behind :class:`MemHandle` ``h`` (made by :func:`export_buffer` in
    another process) into this one: a zero-copy :class:`~barecuda.DeviceBuffer` that
    unmaps when closed or dropped.

    Parameters
    ----------
    h : MemHandle
    device : Device or int, optional
        Where to map it. Default: the local device with the exporter's GPU UUID.

    Raises
    ------
    IpcForeignHostError, IpcStaleHandleError, IpcAlreadyOpenError, IpcError
    """
    cdef CUipcMemHandle mh
    cdef CUmemPoolPtrExportData pd
    cdef CUdeviceptr p = 0
    cdef CUresult rc
    cdef _ImportedPool ip = None
    if not isinstance(h, MemHandle):
        raise TypeError(f"expected a barecuda.ipc.MemHandle, not {type(h).__name__}")
    if h.kind not in ("ipc", "pool") or len(h.data) != 64:
        raise ValueError(f"malformed MemHandle (kind {h.kind!r}, {len(h.data)} data bytes)")
    if type(h.offset) is not int or type(h.nbytes) is not int or h.offset < 0 or h.nbytes < 0 \
            or h.offset + h.nbytes > <object>(<size_t>-1 >> 1):
        raise ValueError(f"malformed MemHandle: offset {h.offset!r} and nbytes {h.nbytes!r} must be ints "
                         ">= 0 (below 2**63 together)")
    ensure_driver(ST)
    require(<const void *>D.cuIpcOpenMemHandle, b"cuIpcOpenMemHandle", b"IPC")
    _check_origin(h, "memory")
    cdef Device dev = _local_device(h.device_uuid, device)
    dev.activate()
    key = (h.hostname, h.boot_id, h.pid, h.kind, h.data)
    with _open_lock:
        prev = _open_views.get(key)
        if prev is not None and not prev.is_closed:
            raise IpcAlreadyOpenError(
                f"this handle is already open in this process ({prev!r}); the driver maps an allocation once "
                "per process: use that buffer (or a .view() of it), or close it first.")
        if h.kind == "pool":
            ip = _import_pool(h, dev)
            memcpy(pd.reserved, <char *>h.data, 64)
            with nogil:
                rc = D.cuMemPoolImportPointer(&p, ip.pool, &pd)
        else:
            memcpy(mh.reserved, <char *>h.data, 64)
            with nogil:
                rc = D.cuIpcOpenMemHandle(&p, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        if rc == CUDA_ERROR_ALREADY_MAPPED:
            raise IpcAlreadyOpenError("the driver reports this allocation is already mapped in this process "
                                      "(opened through another handle object); close that view first.")
        if rc == CUDA_ERROR_INVALID_VALUE or rc == CUDA_ERROR_INVALID_HANDLE or rc == CUDA_ERROR_MAP_FAILED:
            try:
                check(rc, b"cuMemPoolImportPointer" if h.kind == "pool" else b"cuIpcOpenMemHandle")
            except CudaError as e:
                raise IpcStaleHandleError(
                    f"the driver could not open this memory handle ({e}); most likely the exporter freed the "
                    "buffer (or released the handle) before it was opened.") from e
        check(rc, b"cuMemPoolImportPointer" if h.kind == "pool" else b"cuIpcOpenMemHandle")
        # Mapped: from here on, any error closes the mapping again (else the allocation
        # could not be opened again in this process: the driver maps it once).
        try:
            _check_mapped_bounds(p, h.offset, h.nbytes)
            m = _IpcMapping.__new__(_IpcMapping)
            (<_IpcMapping>m).device = dev
            (<_IpcMapping>m).ctx = dev.ctx
            (<_IpcMapping>m).base = p
            (<_IpcMapping>m).from_pool = h.kind == "pool"
            (<_IpcMapping>m).pool = ip
            (<_IpcMapping>m).key = key
            b = DeviceBuffer.__new__(DeviceBuffer)
        except BaseException:
            _unmap(p, h.kind == "pool")
            raise
        (<DeviceBuffer>b).ptr = p + <size_t>h.offset
        (<DeviceBuffer>b).nbytes = <size_t>h.nbytes
        (<DeviceBuffer>b).device = dev
        (<DeviceBuffer>b).ctx = dev.ctx
        (<DeviceBuffer>b).stream_handle = NULL
        (<DeviceBuffer>b)._kind = KIND_SYNC
        (<DeviceBuffer>b)._allocator = m           # from here on, closing b unmaps
        _open_views[key] = b
    if h.dtype != "uint8" or len(h.shape) != 1:
        try:
            return b.view(h.dtype, h.shape)      # a typed view; it keeps the mapping (b) alive
        except BaseException:
            b.close()                            # a bad dtype/shape: unmapped again
            raise
    return b


cdef int _check_mapped_bounds(CUdeviceptr p, object offset, object nbytes) except -1:
    """[p + offset, + nbytes) must lie inside the allocation the driver mapped at p
    (cuMemGetAddressRange): a handle's offset and size are the sender's word, not truth."""
    cdef CUdeviceptr base = 0
    cdef size_t size = 0
    cdef CUresult rc = D.cuMemGetAddressRange(&base, &size, p)
    if rc != 0:
        check(rc, b"cuMemGetAddressRange")
    if p < base or offset + nbytes > <object>(base + size - p):
        raise IpcError(f"the handle describes {nbytes} bytes at offset {offset}, but the allocation it maps "
                       f"has {base + size - p} bytes from the mapped address: a malformed or forged handle "
                       "(nothing was opened)")
    return 0


cdef void _unmap(CUdeviceptr p, bint from_pool) noexcept:
    """Close a mapping open_buffer made, on an error before a DeviceBuffer owned it."""
    if from_pool:
        D.cuMemFree(p)
    else:
        D.cuIpcCloseMemHandle(p)


def open_event(h, *, device=None):
    """The :class:`~barecuda.Event` behind :class:`EventHandle` ``h`` (from another
    process): wait on it with ``stream.wait(event)`` or ``event.synchronize()``."""
    cdef CUipcEventHandle eh
    cdef CUevent e = NULL
    cdef CUresult rc
    if not isinstance(h, EventHandle):
        raise TypeError(f"expected a barecuda.ipc.EventHandle, not {type(h).__name__}")
    if len(h.data) != 64:
        raise ValueError("malformed EventHandle")
    ensure_driver(ST)
    require(<const void *>D.cuIpcOpenEventHandle, b"cuIpcOpenEventHandle", b"IPC")
    _check_origin(h, "event")
    cdef Device dev = _local_device(h.device_uuid, device)
    dev.activate()
    memcpy(eh.reserved, <char *>h.data, 64)
    rc = D.cuIpcOpenEventHandle(&e, eh)
    if rc != CUDA_SUCCESS:
        try:
            check(rc, b"cuIpcOpenEventHandle")
        except CudaError as ex:
            raise IpcStaleHandleError(f"the driver could not open this event handle ({ex}); the exporter "
                                      "probably destroyed the event.") from ex
    cdef Event ev = Event.__new__(Event, dev, timing=False)
    D.cuEventDestroy(ev.handle)
    ev.handle = e
    return ev


def open_count():
    """How many imported buffers are mapped in this process right now."""
    return len(_open_views)
