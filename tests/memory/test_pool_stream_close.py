"""Closing a stream that memory is ordered on (issue 9 item 3), on the driver double:
blocks cached on the stream and live buffers that outlive it are freed without naming
the destroyed stream, and never before the work queued on it is done."""
import gc

import pytest

import barecuda as bc
from barecuda import _pool
from _helpers import live_mem_after_gc as _mem_after_gc


def test_cached_block_of_closed_stream_is_deferred_then_trimmed(fake):
    pool = bc.MemoryPool(0)
    s = bc.Stream()
    before = fake.live("mem")
    b = pool.alloc(1000, stream=s)
    b.close()
    assert pool.stats()["streams"] == 1 and pool.stats()["cached"] > 0
    s.close()
    st = pool.stats()
    assert st["streams"] == 0                    # the cache of the closed stream is gone
    assert st["deferred"] == st["cached"] > 0    # its block waits for a context sync
    pool.trim()
    assert pool.stats()["reserved"] == 0
    assert fake.live("mem") == before


def test_the_documented_sequence_on_the_default_pool(fake):
    before = fake.live("mem")
    s = bc.Stream()
    b = bc.empty(1000, stream=s)
    b.close()
    s.close()
    bc.trim_memory()
    assert fake.live("mem") <= before


def test_block_of_closed_stream_not_reused_before_its_work_is_done(fake, vadd, pending):
    pool = bc.MemoryPool(0)
    s = bc.Stream()
    b = pool.alloc(4096, stream=s)
    vadd.launch(1, 32, b, b, b, 1, stream=s)       # pending on s
    ptr = b.ptr
    b.close()
    s.close()                                       # work still queued on the dead stream
    s2 = bc.Stream()
    c = pool.alloc(4096, stream=s2)
    # Either a new block, or the old one after a context sync completed s's work.
    assert pending.fakecuda_pending_refs(c.ptr, s2.handle_int, 0) <= 0
    vadd.launch(1, 32, c, c, c, 1, stream=s2)
    c.close()
    pool.trim()
    del ptr


@pytest.mark.parametrize("kind", ["cache", "closed_cache", "driver", "driver_pool"])
def test_live_buffer_outliving_its_stream(fake, vadd, pending, kind):
    """A buffer whose stream is closed while it lives (work still queued) is freed
    later without naming the dead stream and without an early free."""
    mk = {"cache": bc.MemoryPool, "closed_cache": bc.MemoryPool, "driver": bc.DriverAllocator,
          "driver_pool": bc.DriverMemoryPool}[kind]
    alloc = mk(0)
    before = fake.live("mem")
    with bc.Stream() as s:
        b = alloc.alloc(4096, stream=s)
        vadd.launch(1, 32, b, b, b, 1, stream=s)
    with pytest.raises(ValueError, match="closed"):
        s.synchronize()
    if kind == "closed_cache":
        alloc.close()
    b.close()                                        # must not raise CudaInvalidHandleError
    if hasattr(alloc, "trim"):
        alloc.trim()
    if kind != "driver_pool":
        assert fake.live("mem") <= before


def test_buffer_dropped_after_stream_destructor(fake, vadd, pending):
    pool = bc.MemoryPool(0)
    s = bc.Stream()
    b = pool.alloc(4096, stream=s)
    vadd.launch(1, 32, b, b, b, 1, stream=s)
    s.close()
    del s
    gc.collect()
    del b
    gc.collect()
    pool.trim()
    assert pool.stats()["reserved"] == 0


def test_stream_dropped_by_trim_runs_the_hook_safely(fake):
    """trim() drops the pool's last reference to an idle stream: the stream's destructor
    runs the close hook while the pool is walking its caches."""
    pool = bc.MemoryPool(0)
    for _ in range(5):
        s = bc.Stream()
        pool.alloc(512, stream=s).close()
        del s
    live = fake.live("stream")
    pool.trim()
    assert fake.live("stream") <= live - 5
    assert pool.stats()["streams"] == 0


def test_pool_dropped_with_cached_streams(fake):
    pool = bc.MemoryPool(0)
    for _ in range(3):
        s = bc.Stream()
        pool.alloc(512, stream=s).close()
        del s
    streams = fake.live("stream")
    del pool
    gc.collect()
    assert fake.live("stream") <= streams - 3
    assert all(isinstance(k, int) for k in _pool._live_pools)


ALLOCATORS = {"cache": bc.MemoryPool, "driver": bc.DriverAllocator, "driver_pool": bc.DriverMemoryPool}


def _outliving(alloc, vadd, pending, n=4096):
    """A buffer (with a view made before the close) whose stream is closed while a
    launch on it is still pending: (buffer, view, stream)."""
    s = bc.Stream()
    b = alloc.alloc(n, stream=s)
    v = b.view("float32")
    vadd.launch(1, 32, b, b, b, 1, stream=s)           # pending on s
    assert pending.fakecuda_pending_refs(b.ptr, None, 1) > 0
    s.close()
    return b, v, s


def _dead_work_done(pending, b_ptr):
    """The launch queued on the closed stream has completed (nothing references it)."""
    return pending.fakecuda_pending_refs(b_ptr, None, 1) <= 0


@pytest.mark.parametrize("kind", sorted(ALLOCATORS))
@pytest.mark.parametrize("how", ["cai", "dlpack", "dlpack_capsule", "as_device_buffer"])
def test_reimport_of_buffer_whose_stream_was_closed(fake, vadd, pending, kind, how):
    """A DLPack/CAI re-import of our buffer whose Stream was closed never names the
    destroyed handle (the double answers CudaInvalidHandleError to that), and the
    consumer is ordered after the work still queued on the closed stream: that work is
    done before the import returns (a context wait: no event can be recorded on a dead
    stream). The re-import still holds the owner."""
    b, v, s = _outliving(ALLOCATORS[kind](0), vadd, pending)
    ptr = b.ptr
    waits = fake.calls("cuCtxSynchronize")
    if how == "cai":
        r = bc.DeviceBuffer.from_cuda_array_interface(b)
    elif how == "dlpack":
        r = bc.DeviceBuffer.from_dlpack(b)
    elif how == "dlpack_capsule":
        r = bc.as_device_buffer(b.__dlpack__(stream=1))
    else:
        r = bc.as_device_buffer(b.__cuda_array_interface__)
    assert fake.calls("cuCtxSynchronize") > waits
    assert _dead_work_done(pending, ptr)
    assert r.ptr == ptr and b.stream is None            # moved to the legacy default stream
    s2 = bc.Stream()
    vadd.launch(1, 32, r, v, r, 1, stream=s2)           # pending on s2, through the import and the view
    b.close()
    if how != "as_device_buffer":                       # a CAI dict import does not hold the owner
        c = ALLOCATORS[kind](0).alloc(4096, stream=bc.Stream())
        assert pending.fakecuda_pending_refs(c.ptr, None, 1) <= 0 or c.ptr != ptr
        del c
    del r, v
    gc.collect()
    s2.synchronize()


USES = {
    "copy_from_host": lambda b, o: b.copy_from(bytes(b.nbytes)),
    "copy_to_host": lambda b, o: b.copy_to(),
    "to_numpy": lambda b, o: b.to_numpy(),
    "memset": lambda b, o: b.memset(7),
    "copy": lambda b, o: b.copy().close(),
    "view": lambda b, o: b.view("int32").memset(1),
    "slice": lambda b, o: b[0:16].copy_to(),
    "copy_from_device": lambda b, o: b.copy_from(o),
    "copy_to_device": lambda b, o: o.copy_from(b),
    "copy_2d_dst": lambda b, o: bc.copy_2d(b, o, 64, 4),
    "copy_2d_src": lambda b, o: bc.copy_2d(o, b, 64, 4),
    "cai": lambda b, o: b.__cuda_array_interface__["stream"] == 1 or pytest.fail("stream"),
    "dlpack_export": lambda b, o: bc.as_device_buffer(b.__dlpack__(stream=1)).close(),
    "launch_on_its_stream": lambda b, o: (b.stream is None or pytest.fail("stream")),
}


@pytest.mark.parametrize("kind", sorted(ALLOCATORS))
@pytest.mark.parametrize("use", sorted(USES))
def test_every_use_of_a_buffer_whose_stream_was_closed(fake, vadd, pending, kind, use):
    """Every operation that orders work on a buffer's own stream (copies without a
    stream, memset, copy(), views, exports, the ``stream`` property) goes through one
    reader (_buffer.pxd: order_stream): after its Stream was closed it waits for the
    work queued there and uses the legacy default stream instead of the dead handle."""
    alloc = ALLOCATORS[kind](0)
    other = alloc.alloc(4096)
    b, v, s = _outliving(alloc, vadd, pending)
    ptr = b.ptr
    USES[use](b, other)
    assert _dead_work_done(pending, ptr)
    assert b.stream is None
    v.copy_from(bytes(4096))                            # a view made before the close works too
    b.close()
    del v
    other.close()
    gc.collect()
    if hasattr(alloc, "trim"):
        alloc.trim()


def test_view_made_after_the_close_is_on_the_safe_stream(fake, vadd, pending):
    b, v0, s = _outliving(bc.DriverAllocator(0), vadd, pending)
    del v0
    v = b[0:64]
    assert v.stream is None and b.stream is None
    assert _dead_work_done(pending, b.ptr)
    # The owner counts as used elsewhere from now on: its free waits for the context.
    s2 = bc.Stream(non_blocking=True)
    vadd.launch(1, 32, v, v, v, 1, stream=s2)
    syncs = fake.calls("cuCtxSynchronize")
    del v
    b.close()
    assert fake.calls("cuCtxSynchronize") > syncs
    s2.close()


@pytest.mark.parametrize("use", [None, "copy_to", "prefetch"])
def test_managed_buffer_whose_stream_was_closed(fake, vadd, pending, use):
    s = bc.Stream()
    m = bc.managed_empty(4096, stream=s)
    vadd.launch(1, 32, m, m, m, 1, stream=s)
    ptr = m.ptr
    s.close()
    if use == "copy_to":
        m.copy_to()
        assert _dead_work_done(pending, ptr)
    elif use == "prefetch":
        m.prefetch(0)
        assert _dead_work_done(pending, ptr)
    m.close()                   # freeing waits for the (safe) stream, not the dead handle


# ================================================== the simplest cases
def test_buffer_then_stream_closed_then_trim(fake):
    """`s = bc.Stream(); b = bc.empty(1000, stream=s); b.close(); s.close();
    bc.trim_memory()`: no error, nothing leaks (more: above)."""
    live = fake.live("mem")
    s = bc.Stream(); b = bc.empty(1000, stream=s); b.close(); s.close(); bc.trim_memory()
    assert _mem_after_gc(fake) == live


def test_buffer_outliving_its_with_block(fake, vadd):
    np = pytest.importorskip("numpy")
    live = fake.live("mem")
    with bc.Stream() as s:
        b = bc.empty(1000, stream=s)
    vadd.launch(1, 32, b, b, b, 1)
    np.testing.assert_array_equal(b.copy_from(bytes(1000)).to_numpy(), np.zeros(1000, np.uint8))
    del b
    bc.trim_memory()
    assert _mem_after_gc(fake) == live
