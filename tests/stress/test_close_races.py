"""Issue 21, defects 5 and 6: close() on one thread while another thread's driver call
on the same buffer or stream is in flight without the GIL.

The shape of the audit's race scripts: a worker starts an operation (memset, a copy
host->device, device->host or device->device, a stream synchronize, a launch with the
GIL released); the driver double sleeps at that entry point (``fake.delay``: outside
its lock, before it reads the arguments), so the worker sits in the driver without the
GIL; the main thread closes the buffer (or the stream) in that window and at once
allocates the same size again, filling it with a pattern of its own. Before the use
counts, the free ran in the gap: the worker's write then landed on the closer's new
buffer (the caching pool hands the same block back), or the driver got freed memory
or a destroyed stream (an error). Now close() marks the object closed at once and the
free or destroy waits for the call in flight; nothing is lost (the leak check of
tests/conftest.py runs after each test).

Each test runs a fixed number of trials with a fixed seed and a time cap of a few
seconds; a trial in which the close came first (the worker got "closed") is fine, any
error of another kind or a changed pattern is a failure.
"""
import random
import threading
import time

import pytest

import barecuda as bc
from barecuda import _launch
from _helpers import join_all

SEED = 21
TRIALS = 12
CAP_S = 4.0                 # seconds per test at most (the trials stop early past it)
DELAY_US = 3000             # the driver double's sleep at the delayed entry point
N = 4096                    # bytes per buffer


def _allocator(kind):
    return bc.MemoryPool(0) if kind == "pool" else bc.DriverAllocator(0)


def _is_closed_error(e):
    return isinstance(e, ValueError) and "closed" in str(e)


def _race(fake, symbol, start, close_and_reuse, trials=TRIALS):
    """Run `trials` races; returns the list of failures (strings).

    start(): prepares one trial and returns (work, after): work() runs on the worker
    thread (the delayed driver call in it); close_and_reuse() runs on this thread while
    the worker sits in the driver and returns check(), called once the worker is done,
    which returns a failure string or None."""
    rng = random.Random(SEED)
    failures = []
    fake.delay(symbol, DELAY_US)
    end = time.monotonic() + CAP_S
    try:
        for trial in range(trials):
            if time.monotonic() > end:
                break
            work = start()
            errors = []
            entered = threading.Event()

            def worker():
                entered.set()
                try:
                    work()
                except BaseException as e:       # noqa: B036 -- reported below
                    errors.append(e)

            t = threading.Thread(target=worker, daemon=True)
            t.start()
            entered.wait(5)
            # Sleeping lets the worker take the GIL, reach the driver and release it;
            # then close inside the double's delay (the seed picks where in it).
            time.sleep(rng.uniform(0.3, 0.6) * DELAY_US / 1e6)
            check = close_and_reuse()
            join_all([t], timeout=30)
            for e in errors:
                if not _is_closed_error(e):
                    failures.append(f"trial {trial}: the worker's call failed: {e!r}")
            msg = check()
            if msg:
                failures.append(f"trial {trial}: {msg}")
    finally:
        fake.delay(symbol, 0)
    return failures


def _buffer_race(fake, symbol, kind, work_on):
    """A buffer race: work_on(b) is the worker's operation on b; the closer closes b,
    allocates N bytes from the same allocator and fills them with a pattern."""
    alloc = _allocator(kind)
    state = {}
    pattern = bytes(random.Random(SEED).randrange(256) for _ in range(N))

    def start():
        b = alloc.alloc(N)
        b.memset(0x11)
        state["b"] = b
        return lambda: work_on(b)

    def close_and_reuse():
        state["b"].close()
        nb = alloc.alloc(N)
        # The fill must not go through the delayed entry point (each test delays
        # another one than this copy's or this memset's).
        if symbol.startswith("cuMemcpyHtoD"):
            nb.memset(0x5A)
            expect = b"\x5a" * N
        else:
            nb.copy_from(pattern)
            expect = pattern

        def check():
            got = nb.copy_to()
            nb.close()
            return None if bytes(got) == expect else "the closer's new buffer was overwritten by the worker"
        return check

    failures = _race(fake, symbol, start, close_and_reuse)
    alloc_trim = getattr(alloc, "trim", None)
    if alloc_trim is not None:
        alloc_trim()
    return failures


@pytest.mark.parametrize("kind", ["pool", "driver"])
def test_buffer_close_races_memset(fake, kind):
    failures = _buffer_race(fake, "cuMemsetD32Async", kind, lambda b: b.memset(0x7E7E7E7E, width=32))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("kind", ["pool", "driver"])
def test_buffer_close_races_copy_h2d(fake, kind):
    src = bytes(range(256)) * (N // 256)
    pinned = bc.PinnedBuffer(N) if hasattr(bc, "PinnedBuffer") else None
    if pinned is not None:
        memoryview(pinned)[:] = src
    s = bc.Stream()
    try:
        # a pinned source on a stream: one cuMemcpyHtoDAsync, no staging threads
        failures = _buffer_race(fake, "cuMemcpyHtoDAsync", kind,
                                lambda b: (b.copy_from(pinned if pinned is not None else src, stream=s),
                                           s.synchronize()))
    finally:
        s.synchronize()
        s.close()
        if pinned is not None:
            pinned.close()
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("kind", ["pool", "driver"])
def test_buffer_close_races_copy_d2h(fake, kind):
    seen = []

    def work(b):
        out = bytearray(N)
        b.copy_to(out)
        seen.append(bytes(out))
    failures = _buffer_race(fake, "cuMemcpyDtoH", kind, work)     # (stream=None, small: one cuMemcpyDtoH)
    # what the worker read is the buffer it copied (0x11), never the closer's pattern
    failures += [f"the worker read bytes it does not own ({sorted(set(x))[:4]}...)"
                 for x in seen if x != b"\x11" * N]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("kind", ["pool", "driver"])
def test_buffer_close_races_copy_d2d(fake, kind):
    src = bc.alloc(N)
    src.memset(0x77)
    try:
        failures = _buffer_race(fake, "cuMemcpyDtoDAsync", kind, lambda b: b.copy_from(src))
    finally:
        src.close()
    assert not failures, "\n".join(failures)


@pytest.fixture
def gil_released():
    old = _launch.set_launch_releases_gil(True)
    yield
    _launch.set_launch_releases_gil(old)


@pytest.mark.parametrize("kind", ["pool", "driver"])
def test_buffer_close_races_launch_gil_released(fake, ptx, gil_released, kind):
    """A launch releasing the GIL: the double does not run kernels, so the check is the
    address the launch carried: the closer's new buffer must not get it while the launch
    is in flight (the kernel would write into it)."""
    kernel = bc.Module.from_ptx(ptx.VADD).get_kernel("vadd")
    alloc = _allocator(kind)
    rng = random.Random(SEED)
    failures = []
    fake.delay("cuLaunchKernel", DELAY_US)
    try:
        for trial in range(TRIALS):
            b = alloc.alloc(N)
            errors = []
            entered = threading.Event()

            def worker(b=b):
                entered.set()
                try:
                    kernel.launch(1, 32, b, b, b, 0)
                except BaseException as e:      # noqa: B036
                    errors.append(e)
            t = threading.Thread(target=worker, daemon=True)
            t.start()
            entered.wait(5)
            time.sleep(rng.uniform(0.3, 0.6) * DELAY_US / 1e6)
            old = b.ptr
            b.close()
            nb = alloc.alloc(N)
            in_flight = t.is_alive()
            same = nb.ptr == old
            join_all([t], timeout=30)
            failures += [f"trial {trial}: {e!r}" for e in errors if not _is_closed_error(e)]
            if in_flight and same:
                failures.append(f"trial {trial}: the closer got the launch's memory back while the launch was "
                                "in flight")
            nb.close()
    finally:
        fake.delay("cuLaunchKernel", 0)
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------------ streams
def _stream_race(fake, symbol, work_on):
    """The worker uses stream s in a delayed call; the closer closes s and creates a new
    stream at once (the double may hand the same handle back)."""
    state = {}

    def start():
        s = bc.Stream()
        state["s"] = s
        return lambda: work_on(s)

    def close_and_reuse():
        state["s"].close()
        ns = bc.Stream()

        def check():
            ns.close()
            return None
        return check
    return _race(fake, symbol, start, close_and_reuse)


def test_stream_close_races_memset(fake):
    b = bc.alloc(N)
    try:
        failures = _stream_race(fake, "cuMemsetD8Async", lambda s: b.memset(1, stream=s))
    finally:
        b.close()
    assert not failures, "\n".join(failures)


def test_stream_close_races_copy(fake):
    b = bc.alloc(N)
    src = bc.alloc(N)
    try:
        failures = _stream_race(fake, "cuMemcpyDtoDAsync", lambda s: b.copy_from(src, stream=s))
    finally:
        b.close()
        src.close()
    assert not failures, "\n".join(failures)


def test_stream_close_races_synchronize(fake):
    failures = _stream_race(fake, "cuStreamQuery", lambda s: s.synchronize())
    assert not failures, "\n".join(failures)


def test_stream_close_races_launch(fake, ptx, gil_released):
    kernel = bc.Module.from_ptx(ptx.VADD).get_kernel("vadd")
    b = bc.alloc(N)
    try:
        failures = _stream_race(fake, "cuLaunchKernel", lambda s: kernel.launch(1, 32, b, b, b, 0, stream=s))
    finally:
        b.close()
    assert not failures, "\n".join(failures)


def test_stream_close_races_plan(fake, ptx, gil_released):
    kernel = bc.Module.from_ptx(ptx.VADD).get_kernel("vadd")
    b = bc.alloc(N)
    try:
        failures = _stream_race(fake, "cuLaunchKernel", lambda s: kernel.bind(1, 32, b, b, b, 0, stream=s)())
    finally:
        b.close()
    assert not failures, "\n".join(failures)


def test_event_close_races_synchronize(fake):
    """Event.close() while another thread waits in Event.synchronize() (GIL released
    between polls): the destroy waits for the wait, so the waiter never hands the
    driver a destroyed event."""
    state = {}

    def start():
        ev = bc.Event()
        ev.record()
        state["ev"] = ev
        return lambda: ev.synchronize()

    def close_and_reuse():
        state["ev"].close()
        assert state["ev"].is_closed
        ne = bc.Event().record()

        def check():
            ne.close()
            return None
        return check
    failures = _race(fake, "cuEventQuery", start, close_and_reuse)
    assert not failures, "\n".join(failures)


def test_event_close_during_wait_destroys_once_after(fake):
    """The deferred destroy runs exactly once, when the wait returns."""
    ev = bc.Event().record()
    before = fake.calls("cuEventDestroy")
    fake.delay("cuEventQuery", 50000)
    try:
        t = threading.Thread(target=ev.synchronize, daemon=True)
        t.start()
        time.sleep(0.02)
        ev.close()
        assert ev.is_closed
        assert fake.calls("cuEventDestroy") == before          # deferred
        join_all([t], timeout=30)
    finally:
        fake.delay("cuEventQuery", 0)
    assert fake.calls("cuEventDestroy") == before + 1
    with pytest.raises(ValueError, match="closed"):
        ev.synchronize()


def test_close_while_in_use_frees_once_after(fake):
    """The deferred free runs exactly once, when the call returns (no leak, no double
    free): counted on the double."""
    alloc = bc.DriverAllocator(0)
    b = alloc.alloc(N)
    frees_before = fake.calls("cuMemFreeAsync") + fake.calls("cuMemFree")
    fake.delay("cuMemsetD8Async", 50000)
    try:
        t = threading.Thread(target=lambda: b.memset(3), daemon=True)
        t.start()
        time.sleep(0.02)
        b.close()
        assert b.is_closed
        assert fake.calls("cuMemFreeAsync") + fake.calls("cuMemFree") == frees_before   # deferred
        join_all([t], timeout=30)
    finally:
        fake.delay("cuMemsetD8Async", 0)
    assert fake.calls("cuMemFreeAsync") + fake.calls("cuMemFree") == frees_before + 1
