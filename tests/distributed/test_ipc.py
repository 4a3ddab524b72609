"""CPU tests of barecuda._ipc against the driver double (tests/fakecuda/ipc.c).

The double is one process: it lets a process open its own handle (the real driver
does not), so these tests make a handle look as if another live process (the test
runner's parent) exported it. Real cross-process sharing is in tests/distributed/test_ipc_gpu.py.
"""
import os
import pickle
import subprocess
import sys

import pytest

import barecuda as bc
from barecuda import ipc


def _foreign(h, pid=None):
    """The handle as the importer sees it after pickling, claiming another live exporter."""
    h2 = pickle.loads(pickle.dumps(h))
    h2.pid = os.getppid() if pid is None else pid
    return h2


def _ipc_live(fake):
    fn = fake.lib.fakecuda_ipc_live
    fn.restype = __import__("ctypes").c_int
    return fn()


def test_export_pickle_open_close(fake):
    np = pytest.importorskip("numpy")
    src = np.random.default_rng().random(257).astype(np.float32)
    buf = bc.ipc.IpcAllocator(0).alloc(src.nbytes).view("float32")
    buf.copy_from(src)
    h = ipc.export_buffer(buf)
    assert h.kind == "ipc" and h.nbytes == src.nbytes and h.shape == (257,) and h.dtype == "float32"
    assert h.pid == os.getpid() and h.device_uuid == bc.Device(0).uuid
    h2 = _foreign(h)
    assert h2._keep is None                      # the exporter's reference does not travel
    before = _ipc_live(fake)
    v = ipc.open_buffer(h2)
    assert _ipc_live(fake) == before + 1
    assert v.nbytes == src.nbytes and str(v.dtype) == "float32"
    np.testing.assert_array_equal(v.to_numpy(), src)
    del v
    assert _ipc_live(fake) == before             # dropping the view unmapped it
    assert fake.calls("cuIpcCloseMemHandle") == 1


def test_offset_inside_allocation(fake):
    np = pytest.importorskip("numpy")
    base = bc.ipc.IpcAllocator(0).alloc(4096)
    data = np.arange(4096, dtype=np.uint8)
    base.copy_from(data)
    # a buffer that starts 1024 bytes inside the allocation (a foreign view of it)
    class Inner:
        __cuda_array_interface__ = {"shape": (1024,), "typestr": "|u1", "data": (base.ptr + 1024, False),
                                    "version": 3, "strides": None}
    inner = bc.as_device_buffer(Inner())
    h = _foreign(ipc.export_buffer(inner))
    assert h.offset == 1024 and h.nbytes == 1024
    v = ipc.open_buffer(h)
    np.testing.assert_array_equal(np.frombuffer(v.copy_to(), np.uint8), data[1024:2048])
    v.close()
    # Empty the cell the local class closed over: on a free-threaded 3.13 its functions can
    # outlive gc.collect() once threads have run, and the leak check would count the allocation.
    del base


def test_close_unmaps_and_reopen(fake):
    buf = bc.ipc.IpcAllocator(0).alloc(1024)
    h = _foreign(ipc.export_buffer(buf))
    v = ipc.open_buffer(h)
    v.close()
    assert _ipc_live(fake) == 0
    v2 = ipc.open_buffer(h)                       # may be opened again once closed
    assert v2.ptr == buf.ptr
    v2.close()


def test_open_twice_in_one_process(fake):
    buf = bc.ipc.IpcAllocator(0).alloc(1024)
    h = _foreign(ipc.export_buffer(buf))
    v = ipc.open_buffer(h)
    n = fake.calls("cuIpcOpenMemHandle")
    with pytest.raises(bc.ipc.IpcAlreadyOpenError, match="already open in this process"):
        ipc.open_buffer(h)
    assert fake.calls("cuIpcOpenMemHandle") == n      # refused before the driver
    v.close()


def test_driver_already_mapped_is_mapped(fake):
    # The same allocation through a handle that claims another exporter: only the
    # driver can tell, and its CUDA_ERROR_ALREADY_MAPPED becomes IpcAlreadyOpenError.
    buf = bc.ipc.IpcAllocator(0).alloc(1024)
    h = _foreign(ipc.export_buffer(buf))
    v = ipc.open_buffer(h)
    other = _foreign(ipc.export_buffer(buf), pid=1)
    with pytest.raises(bc.ipc.IpcAlreadyOpenError, match="already mapped"):
        ipc.open_buffer(other)
    v.close()


def test_own_process_refused_before_driver(fake):
    buf = bc.ipc.IpcAllocator(0).alloc(64)
    h = ipc.export_buffer(buf)
    n = fake.calls("cuIpcOpenMemHandle")
    with pytest.raises(bc.ipc.IpcError, match="this very process"):
        ipc.open_buffer(h)
    assert fake.calls("cuIpcOpenMemHandle") == n


def test_foreign_host_refused(fake):
    h = _foreign(ipc.export_buffer(bc.ipc.IpcAllocator(0).alloc(64)))
    h.hostname = "some-other-host"
    with pytest.raises(bc.ipc.IpcForeignHostError, match="some-other-host"):
        ipc.open_buffer(h)
    h = _foreign(ipc.export_buffer(bc.ipc.IpcAllocator(0).alloc(64)))
    h.boot_id = "00000000-dead-beef-0000-000000000000"
    with pytest.raises(bc.ipc.IpcForeignHostError, match="boot"):
        ipc.open_buffer(h)


def test_dead_exporter_is_stale(fake):
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                       timeout=60)
    dead = int(p.stdout)
    h = _foreign(ipc.export_buffer(bc.ipc.IpcAllocator(0).alloc(64)), pid=dead)
    with pytest.raises(bc.ipc.IpcStaleHandleError, match="has exited"):
        ipc.open_buffer(h)


def test_freed_buffer_is_stale(fake):
    buf = bc.ipc.IpcAllocator(0).alloc(64)
    h = _foreign(ipc.export_buffer(buf))
    buf.close()
    with pytest.raises(bc.ipc.IpcStaleHandleError, match="freed"):
        ipc.open_buffer(h)


def test_exporter_keeps_buffer_alive(fake):
    import gc
    live = fake.live("mem")
    h = ipc.export_buffer(bc.ipc.IpcAllocator(0).alloc(64))
    gc.collect()
    assert fake.live("mem") == live + 1           # the handle holds the only reference
    h.release()
    del h
    gc.collect()
    assert fake.live("mem") == live


def test_default_pool_buffer_explains(fake):
    buf = bc.alloc(1024)                          # cuMemAllocAsync: the device's default pool
    with pytest.raises(bc.ipc.IpcError, match="default pool"):
        ipc.export_buffer(buf)


def test_ipc_pool_export(fake):
    pool = bc.ipc.IpcMemoryPool(0)
    buf = pool.alloc(4096)
    h = ipc.export_buffer(buf)
    assert h.kind == "pool" and h.pool_fd >= 0 and h.pool_key == pool.handle_int
    os.fstat(h.pool_fd)                           # a real descriptor, owned by the exporter's handle
    h2 = pickle.loads(pickle.dumps(h))
    assert h2.pool_fd == h.pool_fd and not h2._owns_fd
    fd = h.pool_fd
    h.release()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_empty_and_wrong_types(fake):
    with pytest.raises(ValueError, match="empty"):
        ipc.export_buffer(bc.ipc.IpcAllocator(0).alloc(0))
    with pytest.raises(TypeError):
        ipc.open_buffer(b"not a handle")
    with pytest.raises(TypeError):
        ipc.open_event("nope")
    h = _foreign(ipc.export_buffer(bc.ipc.IpcAllocator(0).alloc(64)))
    h.data = b"short"
    with pytest.raises(ValueError, match="malformed"):
        ipc.open_buffer(h)


def test_event_export_open(fake):
    ev = ipc.ipc_event(0)
    h = ipc.export_event(ev)
    assert h.device_uuid == bc.Device(0).uuid
    h2 = pickle.loads(pickle.dumps(h))
    assert h2._keep is None
    h2.pid = os.getppid()
    live = fake.live("event")
    e2 = ipc.open_event(h2)
    assert fake.live("event") == live + 1
    e2.record()
    e2.synchronize()
    del e2
    assert fake.live("event") == live


def test_timing_event_refused(fake):
    with pytest.raises(bc.ipc.IpcError, match="ipc_event"):
        ipc.export_event(bc.Event(0))


def test_pool_descriptor_travels_through_resource_sharer(fake):
    import struct
    pool = bc.ipc.IpcMemoryPool(0)
    buf = pool.alloc(4096)
    h = ipc.export_buffer(buf)
    h2 = pickle.loads(pickle.dumps(h))
    assert h2._shared_fd is not None
    fd = h2._shared_fd.detach()               # SCM_RIGHTS from the exporter's sharer
    try:
        assert fd != h.pool_fd
        # the double writes the pool's address into the descriptor's file: same file
        assert os.pread(fd, struct.calcsize("P"), 0) == struct.pack("P", pool.handle_int)
    finally:
        os.close(fd)


def test_pool_import_reaches_driver(fake):
    pool = bc.ipc.IpcMemoryPool(0)
    h = _foreign(ipc.export_buffer(pool.alloc(4096)))
    # the double has no second process: importing the pool is where it stops
    with pytest.raises(bc.CudaNotSupportedError):
        ipc.open_buffer(h)
    assert fake.calls("cuMemPoolImportFromShareableHandle") == 1


def test_close_while_exported_waits_for_release(fake):
    live = fake.live("mem")
    buf = bc.ipc.IpcAllocator(0).alloc(64)
    h = ipc.export_buffer(buf)
    buf.close()                                   # the handle's pin defers the free
    assert fake.live("mem") == live + 1
    h.release()                                   # the last pin goes: the deferred free runs
    assert fake.live("mem") == live
