"""The caching allocator on a real GPU (run with --gpu): never reused early, few
driver allocations, trim, fragmentation bound, driver pools, results vs numpy."""
import gc
import time

import pytest

np = pytest.importorskip("numpy")

import barecuda as bc
from ptx import gpu as P

pytestmark = pytest.mark.gpu



class Gate:
    """A host-released gate for the spin kernel (mapped pinned memory)."""

    def __init__(self):
        self.mem = bc.PinnedBuffer(4, mapped=True)
        self.view = memoryview(self.mem).cast("I")
        self.view[0] = 0

    def release(self):
        self.view[0] = 1

    def close(self):
        self.release()
        del self.view


@pytest.fixture
def spin():
    mod = bc.Module.from_ptx(P.SPIN)
    return mod.get_kernel("spin_then_fill")


@pytest.fixture
def gate():
    # Collect leftovers first: a destructor that synchronizes (managed or pitched memory,
    # the plain allocator after cross-stream use) must not run while a kernel spins.
    gc.collect()
    bc.Device(0).synchronize()
    g = Gate()
    try:
        yield g
    finally:
        g.close()              # never leave a kernel spinning (the process would hang)
        bc.Device(0).synchronize()


N = 1 << 18                    # 1 MiB of uint32


def test_dropped_buffer_not_reused_by_other_stream_before_kernel_ends(spin, gate):
    pool = bc.MemoryPool(0)
    s1, s2 = bc.Stream(), bc.Stream()
    a = bc.empty(N, "uint32", stream=s1, allocator=pool)
    aptr = a.ptr
    spin.launch(1, 256, gate.mem.device_ptr, a, N, 7, stream=s1)
    del a                                        # freed while the kernel is still spinning
    b = bc.empty(N, "uint32", stream=s2, allocator=pool)
    c = bc.empty(N, "uint32", stream=s2, allocator=pool)
    assert aptr not in (b.ptr, c.ptr)            # s1's work on it is not done: no reuse
    # Pinned source: a direct DMA (the staged path's shared chunks could wait on s1).
    pattern = bc.pinned_empty(N, "uint32")
    pattern[:] = np.random.default_rng().integers(1, 2**32 - 1, N, dtype=np.uint32)
    b.copy_from(pattern, stream=s2)
    s2.synchronize(timeout=60)
    assert not s1.query()                        # the kernel is still waiting
    gate.release()
    s1.synchronize(timeout=60)                   # a gate that never opens fails, not hangs
    np.testing.assert_array_equal(b.to_numpy(), pattern)
    # Now the event on s1 has completed: s2 may take the block.
    d = bc.empty(N, "uint32", stream=s2, allocator=pool)
    e = bc.empty(N, "uint32", stream=s2, allocator=pool)
    assert aptr in (d.ptr, e.ptr)


def test_same_stream_reuse_is_ordered_after_the_kernel(spin, gate):
    pool = bc.MemoryPool(0)
    s = bc.Stream()
    a = bc.empty(N, "uint32", stream=s, allocator=pool)
    aptr = a.ptr
    spin.launch(1, 256, gate.mem.device_ptr, a, N, 7, stream=s)
    del a
    b = bc.empty(N, "uint32", stream=s, allocator=pool)
    assert b.ptr == aptr                         # same stream: reuse at once, in stream order
    pattern = bc.pinned_empty(N, "uint32")       # pinned: a direct DMA queued behind the kernel
    pattern[:] = np.random.default_rng().integers(8, 2**32 - 1, N, dtype=np.uint32)
    b.copy_from(pattern, stream=s)               # queued after the kernel's writes
    gate.release()
    s.synchronize(timeout=60)
    np.testing.assert_array_equal(b.to_numpy(stream=s), pattern)


def test_used_on_another_stream_is_not_reused_early(spin, gate):
    pool = bc.MemoryPool(0)
    s1, s2 = bc.Stream(), bc.Stream()
    a = bc.empty(N, "uint32", stream=s1, allocator=pool)
    aptr = a.ptr
    spin.launch(1, 256, gate.mem.device_ptr, a, N, 7, stream=s2)    # used elsewhere
    del a
    b = bc.empty(N, "uint32", stream=s1, allocator=pool)
    c = bc.empty(N, "uint32", stream=s2, allocator=pool)
    assert aptr not in (b.ptr, c.ptr)
    assert pool.stats()["deferred"] > 0
    gate.release()
    s2.synchronize(timeout=60)
    pool.trim()                                  # syncs, then gives the block back
    assert pool.stats()["deferred"] == 0


def test_hundred_alloc_launch_free_steps(spin):
    pool = bc.MemoryPool(0)
    prev = bc.set_allocator(pool)
    try:
        g = Gate()
        g.release()
        s = bc.Stream()
        for _ in range(100):
            x = bc.empty(N, "uint32", stream=s)
            y = bc.empty(4099, "float32", stream=s)
            spin.launch(1, 256, g.mem.device_ptr, x, N, 3, stream=s)
            del x, y
        s.synchronize(timeout=60)
        assert pool.stats()["driver_allocations"] < 10
        g.close()
    finally:
        bc.set_allocator(prev)


def test_values_through_pool_buffers():
    rng = np.random.default_rng()
    pool = bc.MemoryPool(0)
    s = bc.Stream()
    for n in (1, 7, 1000003, 2**24 + 17):
        a = rng.standard_normal(n).astype(np.float32)
        b = bc.to_device(a, stream=s, allocator=pool)
        np.testing.assert_array_equal(b.to_numpy(stream=s), a)
        del b


def test_fragmentation_experiment():
    """The seed experiment: 10,000 steps, 70% allocate / 30% free, sizes 1 KB-10 MB,
    fixed seed; reserved after trim() <= 1.10x live requested bytes."""
    import random
    pool = bc.MemoryPool(0)
    rng = random.Random(20261121)
    live = []
    free_mem = bc.Device(0).mem_info()[0]
    budget = int(free_mem * 0.6)
    total = 0
    for _ in range(10_000):
        if live and rng.random() < 0.3:
            b = live.pop(rng.randrange(len(live)))
            total -= b.nbytes
            del b
        else:
            n = rng.randint(1000, 10_000_000)
            if total + n > budget:             # stay inside the GPU (the sequence is the same)
                continue
            live.append(pool.alloc(n))
            total += n
    pool.trim()
    st = pool.stats()
    assert st["in_use"] == total
    assert st["reserved"] <= 1.10 * total, st


def test_oom_message_names_size_and_stats():
    pool = bc.MemoryPool(0)
    total = bc.Device(0).total_memory
    with pytest.raises(bc.CudaOutOfMemoryError) as ei:
        pool.alloc(total * 4)
    assert str(total * 4) in str(ei.value) and "pool stats" in str(ei.value)


def test_limit_on_gpu():
    pool = bc.MemoryPool(0, limit=64 << 20)
    a = pool.alloc(40 << 20)
    with pytest.raises(bc.CudaOutOfMemoryError):
        pool.alloc(40 << 20)
    del a
    pool.alloc(40 << 20)


def test_driver_memory_pool_steady_state():
    pool = bc.DriverMemoryPool(0)
    s = bc.Stream()
    for _ in range(3):
        b = pool.alloc(64 << 20, stream=s)
        del b
    s.synchronize()
    reserved = pool.stats()["reserved"]
    assert reserved >= 64 << 20                  # release threshold keeps it
    rng = np.random.default_rng()
    a = rng.standard_normal(1000003)
    b = bc.to_device(a, stream=s, allocator=pool)
    np.testing.assert_array_equal(b.to_numpy(stream=s), a)
    pool.trim()


def test_hot_path_speed_report():
    """Not an assertion on speed (bench/ measures): just exercises the hot path."""
    pool = bc.MemoryPool(0)
    prev = bc.set_allocator(pool)
    try:
        a = bc.alloc(1 << 20)
        del a
        t0 = time.perf_counter()
        for _ in range(100_000):
            a = bc.alloc(1 << 20)
            del a
        dt = (time.perf_counter() - t0) / 100_000
        print(f"alloc+free of a cached 1 MiB block: {dt * 1e9:.0f} ns")
        assert pool.stats()["driver_allocations"] == 1
    finally:
        bc.set_allocator(prev)
