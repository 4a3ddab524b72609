"""The caching allocators against the fake driver: reuse rules, stream ordering,
out-of-memory handling, limit, trim, statistics, and the driver-pool variant."""
import gc
import random

import pytest

import barecuda as bc
from barecuda import _pool
from _helpers import pending_model


@pytest.fixture(autouse=True)
def _collect():
    gc.collect()
    yield
    gc.collect()


@pytest.fixture
def pool(fake):
    p = bc.MemoryPool(0)
    yield p
    gc.collect()


def test_size_classes_bound_rounding():
    prev_cls, prev_r = -1, 0
    r = random.Random(1)
    sizes = sorted({1, 511, 512, 513, 8191, 8192, 8193, 1 << 20, (1 << 20) + 1, 10 << 20, 3 << 30}
                   | {r.randrange(1, 1 << 34) for _ in range(2000)})
    for n in sizes:
        cls, rounded = _pool._size_class(n)
        assert rounded >= n
        assert rounded % 512 == 0
        if n > 8192:
            assert rounded <= n * 1.0625 + 1, n
        else:
            assert rounded - n < 512
        assert 0 <= cls < 832
        assert cls >= prev_cls and rounded >= prev_r            # monotone
        if cls == prev_cls:
            assert rounded == prev_r                             # one class, one size
        prev_cls, prev_r = cls, rounded


@pytest.fixture
def fresh_default(fake):
    """A new default MemoryPool for device 0 (the process-wide one carries other tests' cache)."""
    p = bc.MemoryPool(0)
    prev = bc.set_allocator(p)
    yield p
    gc.collect()
    bc.set_allocator(prev)


def test_default_allocator_is_the_cache(fake):
    assert isinstance(bc.get_allocator(0), bc.MemoryPool)


def test_same_stream_reuse_without_driver_calls(pool, fake):
    s = bc.Stream()
    a = pool.alloc(1 << 20, stream=s)
    ptr = a.ptr
    assert fake.calls("cuMemAllocAsync") == 1
    del a
    assert fake.calls("cuMemFreeAsync") == 0          # cached, not freed
    names = ("cuMemAllocAsync", "cuMemFreeAsync", "cuEventRecord", "cuEventQuery", "cuStreamSynchronize",
             "cuCtxSynchronize")
    before = {k: fake.calls(k) for k in names}
    for _ in range(100):
        b = pool.alloc(1 << 20, stream=s)
        assert b.ptr == ptr
        del b
    assert {k: fake.calls(k) for k in names} == before   # the hot path makes no driver call
    st = pool.stats()
    assert st["cache_hits"] == 100 and st["driver_allocations"] == 1
    assert st["in_use"] == 0 and st["reserved"] == 1 << 20 and st["cached"] == 1 << 20


def test_sizes_in_one_class_share_blocks(pool, fake):
    a = pool.alloc(1_000_000)
    ptr = a.ptr
    del a
    b = pool.alloc(999_000)                 # same class
    assert b.ptr == ptr and b.nbytes == 999_000
    c = pool.alloc(2_000_000)               # another class
    assert c.ptr != ptr
    assert pool.stats()["driver_allocations"] == 2


def test_alloc_launch_free_loop_makes_few_driver_allocations(fresh_default, fake):
    s = bc.Stream()
    sizes = [4096, 1 << 20, 3 * 1000 + 7, 256 << 10]
    for step in range(100):
        bufs = [bc.empty(n, "uint8", stream=s) for n in sizes]
        for b in bufs:
            b.memset(step & 0xFF, stream=s)          # stands in for a launch on s
        del bufs, b          # `b` would keep the last buffer alive into the next step
    assert fake.calls("cuMemAllocAsync") < 10
    assert fake.calls("cuMemAllocAsync") == len(sizes), fresh_default.stats()


def test_cross_stream_reuse_waits_for_an_event(pool, fake):
    s1, s2 = bc.Stream(), bc.Stream()
    a = pool.alloc(1 << 20, stream=s1)
    aptr = a.ptr
    del a                                        # cached on s1
    rec = fake.calls("cuEventRecord")
    b = pool.alloc(1 << 20, stream=s2)           # s2 may not take it yet: an event is recorded on s1
    assert b.ptr != aptr
    assert fake.calls("cuEventRecord") == rec + 1
    assert pool.stats()["driver_allocations"] == 2
    q = fake.calls("cuEventQuery")
    c = pool.alloc(1 << 20, stream=s2)           # event complete (the double runs work at once): reuse
    assert fake.calls("cuEventQuery") == q + 1
    assert c.ptr == aptr
    st = pool.stats()
    assert st["driver_allocations"] == 2 and st["cross_stream_reuses"] == 1


def test_cross_stream_reuse_refused_while_event_pending(pool, fake):
    s1, s2 = bc.Stream(), bc.Stream()
    a = pool.alloc(4096, stream=s1)
    aptr = a.ptr
    del a
    b = pool.alloc(4096, stream=s2)              # records the event
    fake.fail("cuEventQuery", 600)               # CUDA_ERROR_NOT_READY: s1's work still running
    c = pool.alloc(4096, stream=s2)
    assert c.ptr != aptr and b.ptr != aptr
    d = pool.alloc(4096, stream=s1)              # s1 itself may reuse at once
    assert d.ptr == aptr


def test_used_elsewhere_is_deferred_until_a_context_sync(pool, fake):
    s1, s2 = bc.Stream(), bc.Stream()
    a = pool.alloc(8192, stream=s1)
    aptr = a.ptr
    a.memset(0, stream=s2)                       # async use on another stream
    del a
    st = pool.stats()
    assert st["deferred"] == 8192
    b = pool.alloc(8192, stream=s1)              # not reusable, even by s1
    assert b.ptr != aptr
    syncs = fake.calls("cuCtxSynchronize")
    pool.trim()
    assert fake.calls("cuCtxSynchronize") == syncs + 1
    assert pool.stats()["deferred"] == 0
    assert pool.stats()["reserved"] == 8192      # only b remains


def test_deferred_limit_forces_a_sync_and_reuse(fake):
    p = bc.MemoryPool(0, deferred_limit=8192)
    s1, s2 = bc.Stream(), bc.Stream()
    a = p.alloc(8192, stream=s1)
    aptr = a.ptr
    a.memset(1, stream=s2)
    del a
    syncs = fake.calls("cuCtxSynchronize")
    b = p.alloc(8192, stream=s2)
    assert fake.calls("cuCtxSynchronize") == syncs + 1
    assert b.ptr == aptr
    assert p.stats()["context_syncs"] == 1


def test_oom_releases_cache_and_retries(pool, fake):
    s = bc.Stream()
    cached = [pool.alloc(1 << 20, stream=s) for _ in range(3)]
    del cached
    live = fake.live("mem")
    assert live >= 3
    fake.fail("cuMemAllocAsync", 2)               # first try fails, the retry succeeds
    b = pool.alloc(5 << 20, stream=s)
    assert b.nbytes == 5 << 20
    st = pool.stats()
    assert st["oom_retries"] == 1 and st["cached"] == 0
    assert fake.live("mem") == live - 3 + 1


def test_oom_after_retry_raises_with_size_and_stats(pool, fake):
    keep = pool.alloc(1 << 20)
    live = fake.live("mem")
    fake.fail("cuMemAllocAsync", 2, times=2)
    with pytest.raises(bc.CudaOutOfMemoryError) as ei:
        pool.alloc(123_456_789)
    msg = str(ei.value)
    assert "123456789 bytes" in msg and "pool stats" in msg and "in_use=1.0 MiB" in msg
    assert isinstance(ei.value, MemoryError)
    assert fake.live("mem") == live
    assert pool.stats()["in_use"] == 1 << 20
    del keep


def test_limit(fake):
    p = bc.MemoryPool(0, limit=1 << 20)
    a = p.alloc(600_000)
    with pytest.raises(bc.CudaOutOfMemoryError, match="limit"):
        p.alloc(600_000 + 100_000)
    assert p.stats()["reserved"] <= 1 << 20
    aptr = a.ptr
    del a
    b = p.alloc(600_000)                     # reuses the cached block
    assert b.ptr == aptr
    del b
    c = p.alloc(900_000)                     # other class: cache released to fit under the limit
    assert p.stats()["reserved"] <= 1 << 20
    p.limit = None
    assert p.limit is None
    del c


def test_trim_gives_everything_cached_back(pool, fake):
    s = bc.Stream()
    live0 = fake.live("mem")
    keep = [pool.alloc(n, stream=s) for n in (1000, 5000, 70_000)]
    tmp = [pool.alloc(n, stream=s) for n in (2000, 300_000, 1 << 20)]
    del tmp
    assert fake.live("mem") == live0 + 6
    pool.trim()
    assert fake.live("mem") == live0 + 3
    st = pool.stats()
    assert st["cached"] == 0
    assert st["reserved"] == st["in_use_rounded"]
    assert st["in_use"] == 1000 + 5000 + 70_000
    del keep
    pool.trim()
    assert fake.live("mem") == live0
    assert pool.stats()["reserved"] == 0


def test_pool_keeps_stream_alive_until_trim(pool, fake):
    streams0 = fake.live("stream")
    s = bc.Stream()
    a = pool.alloc(4096, stream=s)
    del a, s
    gc.collect()
    assert fake.live("stream") == streams0 + 1     # blocks are ordered on it: keep the handle
    pool.trim()
    gc.collect()
    assert fake.live("stream") == streams0


def test_dropping_the_pool_frees_its_cache(fake):
    live0 = fake.live("mem")
    p = bc.MemoryPool(0)
    a = p.alloc(1 << 16)
    b = p.alloc(1 << 17)
    del a
    assert fake.live("mem") == live0 + 2
    del p                                      # b still holds it
    gc.collect()
    assert fake.live("mem") == live0 + 2
    del b
    gc.collect()
    assert fake.live("mem") == live0


def test_pool_free_failure_in_destructor_warns(fake):
    p = bc.MemoryPool(0)
    a = p.alloc(1 << 16)
    del a
    fake.fail("cuMemFreeAsync", 1)
    with pytest.warns(bc.CudaWarning):
        del p
        gc.collect()


def test_zero_size_from_pool(pool, fake):
    z = pool.alloc(0)
    assert z.ptr == 0 and z.nbytes == 0
    assert fake.calls("cuMemAllocAsync") == 0


def test_copies_through_pool_buffers(pool, fake):
    data = bytes(random.Random(3).getrandbits(8) for _ in range(10_001))
    b = bc.to_device(data, allocator=pool)
    assert bytes(b.copy_to()) == data
    del b
    b2 = bc.to_device(data[::-1], allocator=pool)        # reused block, new contents
    assert bytes(b2.copy_to()) == data[::-1]


def test_fragmentation_experiment_scaled(fake):
    """The seed experiment (70% allocate / 30% free, random sizes), scaled to what the
    double holds in host RAM: reserved after trim() stays within 1.10x live bytes."""
    p = bc.MemoryPool(0)
    rng = random.Random(12345)
    live = []
    for _ in range(10_000):
        if live and rng.random() < 0.3:
            live.pop(rng.randrange(len(live)))
        else:
            live.append(p.alloc(rng.randint(1 << 10, 64 << 10)))
    p.trim()
    requested = sum(b.nbytes for b in live)
    st = p.stats()
    assert st["in_use"] == requested
    assert st["reserved"] <= 1.10 * requested, (st["reserved"] / requested)
    del live
    p.trim()
    assert p.stats()["reserved"] == 0


def test_memory_stats_and_trim_memory(fresh_default, fake):
    b = bc.alloc(4096)
    st = bc.memory_stats()
    assert st["in_use"] >= 4096
    del b
    bc.trim_memory()
    assert bc.memory_stats()["cached"] == 0


# --------------------------------------------------------- driver pools
def test_driver_memory_pool(fake):
    pools0 = fake.live("pool")
    p = bc.DriverMemoryPool(0)
    assert fake.live("pool") == pools0 + 1
    assert p.stats()["release_threshold"] == 2**64 - 1
    s = bc.Stream()
    a = p.alloc(1 << 20, stream=s)
    assert fake.calls("cuMemAllocFromPoolAsync") == 1
    assert p.stats()["in_use"] == 1 << 20
    data = bytes(range(256)) * 4096
    a.copy_from(data)
    assert bytes(a.copy_to()) == data
    del a
    assert fake.calls("cuMemFreeAsync") == 1
    assert p.stats()["in_use"] == 0
    p.trim()
    del p
    gc.collect()
    assert fake.live("pool") == pools0


def test_driver_memory_pool_threshold_and_failures(fake):
    p = bc.DriverMemoryPool(0, release_threshold=1 << 20)
    assert p.stats()["release_threshold"] == 1 << 20
    pools0 = fake.live("pool")
    fake.fail("cuMemPoolSetAttribute", 1)
    with pytest.raises(bc.CudaError):
        bc.DriverMemoryPool(0)
    assert fake.live("pool") == pools0                 # constructor failure leaves nothing
    fake.fail("cuMemAllocFromPoolAsync", 2)
    with pytest.raises(bc.CudaOutOfMemoryError, match="requested 4096 bytes"):
        p.alloc(4096)
    d = bc.DriverMemoryPool(0, default=True)
    assert d.alloc(100).nbytes == 100


# ------------------------------------------------------------ pinned pool
def test_pinned_pool_reuse_and_trim(fake):
    pp = bc.PinnedMemoryPool(0)
    live = fake.live("host_mem")
    a = pp.empty(1000)
    aptr = a.ptr
    memoryview(a)[:3] = b"abc"
    del a
    b = pp.empty(900)                            # same class, copy-free: reused at once
    assert b.ptr == aptr and b.nbytes == 900
    assert fake.live("host_mem") == live + 1
    st = pp.stats()
    assert st["driver_allocations"] == 1 and st["cache_hits"] == 1
    del b
    pp.trim()
    assert fake.live("host_mem") == live
    assert pp.stats()["reserved"] == 0


def test_pinned_pool_waits_for_the_copy_event(fake):
    pp = bc.PinnedMemoryPool(0)
    s = bc.Stream()
    dev = bc.alloc(4096, stream=s)
    a = pp.empty(4096)
    aptr = a.ptr
    dev.copy_from(a, stream=s)                  # async use: an event is recorded
    del a
    fake.fail("cuEventQuery", 600)              # the copy has not run yet
    b = pp.empty(4096)
    assert b.ptr != aptr and pp.stats()["busy_skips"] == 1
    c = pp.empty(4096)                          # now the event reports completion
    assert c.ptr == aptr
    arr = pp.array((8, 8), "float64")
    assert arr.shape == (8, 8) and arr.dtype.name == "float64"


# ------------------------------------------- never freed early (property test)
import ctypes

from hypothesis import HealthCheck, example, given, settings, strategies as st




def test_pending_model_detects_an_early_free(fake, vadd):
    """The detector the property test relies on can fail."""
    lib = pending_model(fake)
    lib.fakecuda_pending_mode(1)
    s1, s2 = bc.Stream(), bc.Stream()
    p = ctypes.c_ulonglong()
    assert lib.cuMemAlloc(ctypes.byref(p), 256) == 0
    vadd.launch(1, 32, p.value, p.value, p.value, 1, stream=s2)
    assert lib.fakecuda_pending_refs(p.value, s1.handle_int, 0) >= 1
    ev = bc.Event(timing=False).record(s2)
    assert not ev.query()                                # s2's launch is pending
    assert lib.cuMemFreeAsync(p.value, s1.handle_int) == 0   # wrong stream, work pending
    assert lib.fakecuda_early_frees() == 1
    q = ctypes.c_ulonglong()
    assert lib.cuMemAlloc(ctypes.byref(q), 256) == 0
    vadd.launch(1, 32, q.value, q.value, q.value, 1, stream=s2)
    s2.synchronize()
    assert ev.query()
    assert lib.cuMemFreeAsync(q.value, s1.handle_int) == 0   # after the sync: fine
    assert lib.fakecuda_early_frees() == 1


OPS = st.lists(st.one_of(
    st.tuples(st.just("alloc"), st.integers(0, 3), st.sampled_from([512, 3000, 4096, 100_000, 1 << 20])),
    st.tuples(st.just("launch"), st.integers(0, 31), st.integers(0, 3)),
    st.tuples(st.just("del"), st.integers(0, 31)),
    st.tuples(st.just("gc")),
    st.tuples(st.just("sync"), st.integers(0, 4)),         # 4: the whole context
    st.tuples(st.just("trim")),
    # dependants of an allocation: launches through them must hold the owner's free
    st.tuples(st.just("derive"), st.integers(0, 31), st.sampled_from(["view", "slice", "dlpack", "cai", "cai_dict"])),
    st.tuples(st.just("close"), st.integers(0, 31)),
    # close a stream with blocks cached or live buffers ordered on it (a new one takes its place)
    st.tuples(st.just("sclose"), st.integers(0, 3)),
    # plans: bind a buffer (or a dependant) on a stream, launch a plan, repoint one of
    # its arguments (set_arg), drop it
    st.tuples(st.just("bind"), st.integers(0, 31), st.integers(0, 3)),
    st.tuples(st.just("plan"), st.integers(0, 31)),
    st.tuples(st.just("set_arg"), st.integers(0, 31), st.integers(0, 31)),
    st.tuples(st.just("pdel"), st.integers(0, 31)),
    # a raw int address: untracked by design (docs/interop.md). On the owner's own
    # stream (4) it needs nothing; on another stream the test does what the contract asks
    # of the caller and waits for that stream before letting go of anything
    st.tuples(st.just("raw"), st.integers(0, 31), st.integers(0, 4)),
), max_size=80)


def _derive(b, how):
    if how == "view":
        return b.view("float32")
    if how == "slice":
        return b[0:max(4, b.nbytes // 2)]
    if how == "dlpack":
        return bc.as_device_buffer(b.__dlpack__(stream=-1))
    if how == "cai_dict":           # our memory described by address only: resolved to its owner
        return bc.as_device_buffer({"data": (b.ptr, False), "shape": (b.nbytes,), "typestr": "|u1", "version": 3})
    return bc.DeviceBuffer.from_cuda_array_interface(b)


# The shortest ways to lose memory through a dependant, run on every test run besides the
# random search: use on another stream through a view / slice / re-import / plan, then
# the owner goes and its memory is freed or handed out again on the owner's stream.
# (These fail at once if note_use marks the dependant instead of the owner.)
_SEEDED = [[("alloc", 0, 4096), ("derive", 0, how), ("launch", 1, 1), ("del", 1), ("close", 0),
            ("alloc", 0, 4096)] for how in ("view", "slice", "dlpack", "cai", "cai_dict")] + [
    [("alloc", 0, 4096), ("derive", 0, "view"), ("bind", 1, 1), ("plan", 0), ("pdel", 0), ("del", 1),
     ("close", 0), ("alloc", 0, 4096)],
    [("alloc", 0, 4096), ("bind", 0, 1), ("plan", 0), ("close", 0), ("pdel", 0), ("alloc", 0, 4096)],
    [("alloc", 0, 4096), ("derive", 0, "view"), ("launch", 1, 1), ("sclose", 0), ("del", 1), ("close", 0),
     ("alloc", 0, 4096)],
]


def _seeded(test):
    for ops in _SEEDED:
        test = example(ops=ops)(test)
    return test


@pytest.mark.parametrize("kind", ["cache", "driver", "driver_pool"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
@_seeded
def test_never_freed_or_reused_while_queued_work_uses_it(fake, vadd, kind, ops):
    lib = pending_model(fake)
    lib.fakecuda_pending_mode(0)                            # forget the previous example's work
    gc.collect()
    early0 = lib.fakecuda_early_frees()
    lib.fakecuda_pending_mode(1)
    try:
        alloc = {"cache": bc.MemoryPool, "driver": bc.DriverAllocator, "driver_pool": bc.DriverMemoryPool}[kind](0)
        streams = [bc.Stream() for _ in range(4)]
        bufs = []
        plans = []
        for op in ops:
            if op[0] == "alloc":
                s = streams[op[1]]
                b = alloc.alloc(op[2], stream=s)
                # No queued work on another stream may still use the memory we were given.
                assert lib.fakecuda_pending_refs(b.ptr, s.handle_int, 0) <= 0, (op, kind)
                bufs.append(b)
            elif op[0] == "launch" and bufs:
                b = bufs[op[1] % len(bufs)]
                if not b.is_closed and b.nbytes >= 4:
                    vadd.launch(1, 32, b, b, b, 1, stream=streams[op[2]])
                del b
            elif op[0] == "del" and bufs:
                bufs.pop(op[1] % len(bufs))
            elif op[0] == "gc":
                gc.collect()
            elif op[0] == "sync":
                if op[1] == 4:
                    bc.Device(0).synchronize()
                else:
                    streams[op[1]].synchronize()
            elif op[0] == "trim" and hasattr(alloc, "trim"):
                alloc.trim()
            elif op[0] == "derive" and bufs:
                b = bufs[op[1] % len(bufs)]
                if not b.is_closed:                # its stream may have been closed: still fine
                    bufs.append(_derive(b, op[2]))
                del b
            elif op[0] == "bind" and bufs:
                b = bufs[op[1] % len(bufs)]
                if not b.is_closed and b.nbytes >= 4:
                    plans.append(vadd.bind(1, 32, b, b, b, 1, stream=streams[op[2]]))
                del b
            elif op[0] == "plan" and plans:
                p = plans[op[1] % len(plans)]
                if p.stream.is_closed:
                    with pytest.raises(ValueError, match="closed"):
                        p()
                else:
                    p()
                del p
            elif op[0] == "set_arg" and plans and bufs:
                p, b = plans[op[1] % len(plans)], bufs[op[2] % len(bufs)]
                if not b.is_closed and b.nbytes >= 4 and not p.stream.is_closed:
                    p.set_arg(op[2] % 3, b)
                del p, b
            elif op[0] == "pdel" and plans:
                plans.pop(op[1] % len(plans))
            elif op[0] == "raw" and bufs:
                b = bufs[op[1] % len(bufs)]
                o = b.owner if type(b.owner) is bc.DeviceBuffer else b
                if not b.is_closed and b.nbytes >= 4 and not o.is_closed:
                    if op[2] == 4:                  # the owner's stream (the safe one if it was closed)
                        vadd.launch(1, 32, b.ptr, b.ptr, b.ptr, 1, stream=o.stream)
                    else:
                        vadd.launch(1, 32, b.ptr, b.ptr, b.ptr, 1, stream=streams[op[2]])
                        streams[op[2]].synchronize()
                del b, o
            elif op[0] == "close" and bufs:
                bufs.pop(op[1] % len(bufs)).close()     # an owner's free waits for its dependants
            elif op[0] == "sclose":
                streams[op[1]].close()
                streams[op[1]] = bc.Stream()
        del bufs, plans
        gc.collect()
        if hasattr(alloc, "trim"):
            alloc.trim()
        assert lib.fakecuda_early_frees() == early0
    finally:
        lib.fakecuda_pending_mode(0)
