"""Many threads at once on the driver double: 32 threads x 500 iterations.

Every thread allocates through each allocator (the caching pool, the driver
allocator, a driver memory pool), copies host->device and back through the staging
pipeline (configured tiny so that every copy is staged), launches a kernel directly
and through a bound plan, records and waits for events, and replaces its stream now
and then. Run once with launches holding the GIL and once releasing it.

What is checked: every round trip returns the bytes that went in (per thread, per
iteration, so a mix-up between threads shows), nothing raises, and afterwards no
handle of any kind is left alive (the leak check of tests/conftest.py runs after
each test; this test also checks it inline, with its own message).
"""
import gc
import threading

import numpy as np
import pytest

import barecuda as bc
from barecuda import _launch, _staging
from _helpers import join_all

THREADS = 32
ITERATIONS = 500
N = 64                      # float32 elements per buffer
NEW_STREAM_EVERY = 100


def _releases_gil_switch():
    """The GIL switch: the public name once the launch work lands, else the module's."""
    return getattr(bc, "set_launch_releases_gil", None) or _launch.set_launch_releases_gil


@pytest.fixture
def staged_small():
    """Stage every copy (threshold 0) through small chunks, restored afterwards."""
    saved = bc.configure_staging()
    bc.configure_staging(chunk_bytes=128, chunks=2, threads=2, threshold=0, min_piece=64, min_part=64)
    yield
    bc.configure_staging(**saved)
    _staging.release()


def _live(fake):
    return {k: fake.live(k) for k in ("mem", "host_mem", "host_register", "stream", "event", "module", "pool")}


@pytest.mark.parametrize("releases_gil", [False, True], ids=["gil_held", "gil_released"])
def test_threads_hammer_everything(fake, ptx, staged_small, releases_gil):
    switch = _releases_gil_switch()
    before = _live(fake)
    kernel = bc.Module.from_ptx(ptx.VADD).get_kernel("vadd")
    # A caching pool of the test's own: its event free list goes with it (trim() keeps
    # it today, issue 9 item 10, so the process-wide default pool would hold events).
    cache_pool = bc.MemoryPool(0)
    driver_pool = bc.DriverMemoryPool(0)
    allocators = [cache_pool, bc.DriverAllocator(0), driver_pool]
    errors = []
    retired = []     # every stream the threads used
    start = threading.Barrier(THREADS, timeout=60)
    old = switch(releases_gil)

    def work(tid):
        try:
            rng = np.random.default_rng(tid)
            start.wait()
            s = bc.Stream()
            for i in range(ITERATIONS):
                if i and i % NEW_STREAM_EVERY == 0:
                    s.synchronize()
                    retired.append(s)    # closed after the caches are trimmed (see below)
                    s = bc.Stream()
                src = rng.standard_normal(N, dtype=np.float32)
                buf = bc.alloc(N * 4, stream=s, allocator=allocators[(tid + i) % len(allocators)])
                buf.copy_from(src, stream=s)                      # staged host->device
                if i % 2:
                    kernel.launch(1, 32, buf, buf, buf, 0, stream=s)     # n = 0: reads nothing
                else:
                    plan = kernel.bind(1, 32, buf, buf, buf, 0, stream=s)
                    plan()
                ev = bc.Event(timing=False)
                ev.record(s)
                out = np.empty(N, dtype=np.float32)
                buf.copy_to(out, stream=s)                        # staged device->host
                ev.synchronize()
                s.synchronize()
                if not np.array_equal(out, src):
                    raise AssertionError(f"thread {tid} iteration {i}: round trip changed the data")
                buf.close()
            s.synchronize()
            retired.append(s)
        except BaseException as e:  # noqa: BLE001 - reported below, by thread
            errors.append((tid, repr(e)))

    try:
        threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(THREADS)]
        for t in threads:
            t.start()
        join_all(threads, timeout=240)
    finally:
        switch(old)
    assert not errors, errors[:5]
    assert fake.launch_count() >= THREADS * ITERATIONS

    # Trim before closing the streams the cached blocks were freed on: closing them
    # first breaks trimming today (issue 9 item 3, test_trim_after_stream_close).
    gc.collect()
    cache_pool.trim()
    driver_pool.trim()
    del kernel, allocators, cache_pool, driver_pool
    gc.collect()
    for s in retired:
        s.close()
    _staging.release()
    gc.collect()
    assert _live(fake) == before, f"live handles before {before}, after {_live(fake)}"


def test_trim_after_stream_close(fake):
    before = fake.live("mem")
    s = bc.Stream()
    b = bc.alloc(1000, stream=s)
    b.close()
    s.close()
    bc.trim_memory()
    assert fake.live("mem") <= before
