"""Seed checks on a real GPU (run with --gpu; tools/gpu-check.sh runs them every time).

* trueno H13: 4 threads x 1,000 launches on one context, with the GIL held and with
  it released -- every launch of every thread lands (per-thread counters, started
  from fresh random values, compared with numpy).
* H10: kernels spinning on N streams overlap: N streams finish in well under the
  serial time (asserted with a wide margin, > 1.5x for 4 streams; the exact speed-up
  is a timing and belongs to the benchmark).
* M12: a host-to-device copy from pinned memory on one stream overlaps a kernel on
  another (total well under the sum of the two alone), and the copied bytes are
  right.

Each wait has its own timeout, so a broken driver or scheduler fails the test
instead of hanging the suite.
"""
import threading
import time

import pytest

np = pytest.importorskip("numpy")

import barecuda as bc
from ptx import gpu as P

pytestmark = pytest.mark.gpu


WAIT_S = 60          # per wait: a hang fails the test


@pytest.fixture(scope="module")
def kernels():
    bc.Device(0).set_current()
    mod = bc.Module.from_ptx(P.SEED)
    yield mod.get_kernel("bc_seed_count"), mod.get_kernel("bc_seed_spin")


def _gil_switch():
    setter = getattr(bc, "set_launch_releases_gil", None)
    getter = getattr(bc, "launch_releases_gil", None)
    if not callable(setter):
        from barecuda import _launch
        setter, getter = _launch.set_launch_releases_gil, _launch.launch_releases_gil
    return setter, getter


def _sync(stream):
    """Synchronize with a deadline (polling the stream), so a hang fails the test."""
    t_end = time.monotonic() + WAIT_S
    done = threading.Event()
    err = []

    def wait():
        try:
            stream.synchronize()
        except BaseException as e:   # noqa: BLE001 -- re-raised in the test's thread
            err.append(e)
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    assert done.wait(max(0.0, t_end - time.monotonic())), f"stream did not finish within {WAIT_S} s"
    if err:
        raise err[0]


@pytest.mark.parametrize("releases_gil", [False, True], ids=["gil-held", "gil-released"])
def test_four_threads_thousand_launches_each(kernels, releases_gil):
    count, _ = kernels
    nthreads, nlaunch = 4, 1000
    rng = np.random.default_rng()
    start = rng.integers(0, 1 << 20, size=nthreads, dtype=np.uint32)
    ctr = bc.to_device(start)
    set_gil, get_gil = _gil_switch()
    old = get_gil()
    set_gil(releases_gil)
    errors = []
    barrier = threading.Barrier(nthreads)
    streams = [bc.Stream() for _ in range(nthreads)]

    def worker(t):
        try:
            s = streams[t]
            barrier.wait(timeout=WAIT_S)
            for _ in range(nlaunch):
                count.launch(1, 1, ctr, t, stream=s)
        except BaseException as e:   # noqa: BLE001 -- reported by the test's thread
            errors.append(e)

    try:
        ts = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(nthreads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(WAIT_S)
            assert not t.is_alive(), f"a launching thread did not finish within {WAIT_S} s"
    finally:
        set_gil(old)
    assert not errors, errors[0]
    for s in streams:
        _sync(s)
    got = ctr.to_numpy()
    np.testing.assert_array_equal(got, start + np.uint32(nlaunch))


def _spin_all(spin, out, streams, per_stream, ns):
    """Launch per_stream spins on each stream (round-robin), wait, return seconds."""
    t0 = time.perf_counter()
    slot = 0
    for _ in range(per_stream):
        for s in streams:
            spin.launch(1, 1, out, slot, ns, stream=s)
            slot += 1
    for s in set(streams):
        _sync(s)
    return time.perf_counter() - t0


def test_spinning_kernels_on_four_streams_overlap(kernels):
    _, spin = kernels
    nstreams, per_stream, ns = 4, 4, 20_000_000          # 16 kernels of 20 ms
    n = nstreams * per_stream
    out = bc.to_device(np.zeros(n, np.uint64))
    streams = [bc.Stream(non_blocking=True) for _ in range(nstreams)]
    _spin_all(spin, out, streams[:1], 1, 1000)            # warm-up (module load, first launch)
    serial = _spin_all(spin, out, [streams[0]] * nstreams, per_stream, ns)
    got_serial = out.to_numpy()
    parallel = _spin_all(spin, out, streams, per_stream, ns)
    got = out.to_numpy()
    # every kernel really spun its 20 ms (the values the kernels wrote, not our clock)
    assert (got_serial >= ns).all() and (got >= ns).all()
    assert serial >= n * ns * 1e-9 * 0.95                  # one stream: one after another
    speedup = serial / parallel
    print(f"\n{nstreams} streams: serial {serial * 1e3:.1f} ms, concurrent {parallel * 1e3:.1f} ms, "
          f"speed-up {speedup:.2f}x")
    assert speedup > 1.5, f"4 streams ran {speedup:.2f}x faster than one (expected ~4x)"


def test_host_to_device_copy_overlaps_a_kernel(kernels):
    _, spin = kernels
    rng = np.random.default_rng()
    n = 512 << 20                                          # ~10 ms at pinned speed on an H200
    pinned = bc.PinnedBuffer(n)
    src = np.frombuffer(pinned, dtype=np.uint8)
    src[:] = rng.integers(0, 256, size=n, dtype=np.uint8)
    dst = bc.empty(n, "uint8")
    out = bc.to_device(np.zeros(4, np.uint64))
    s_copy, s_kern = bc.Stream(non_blocking=True), bc.Stream(non_blocking=True)
    dst.copy_from(pinned, stream=s_copy)                   # warm-up
    spin.launch(1, 1, out, 0, 1000, stream=s_kern)
    _sync(s_copy)
    _sync(s_kern)

    t0 = time.perf_counter()
    dst.copy_from(pinned, stream=s_copy)
    _sync(s_copy)
    t_copy = time.perf_counter() - t0
    ns = max(int(t_copy * 1e9), 5_000_000)                 # a kernel as long as the copy
    t0 = time.perf_counter()
    spin.launch(1, 1, out, 1, ns, stream=s_kern)
    _sync(s_kern)
    t_kern = time.perf_counter() - t0

    dst_check = bc.empty(n, "uint8")
    t0 = time.perf_counter()
    spin.launch(1, 1, out, 2, ns, stream=s_kern)
    dst_check.copy_from(pinned, stream=s_copy)
    _sync(s_copy)
    _sync(s_kern)
    t_both = time.perf_counter() - t0
    print(f"\ncopy {n >> 20} MiB {t_copy * 1e3:.1f} ms, kernel {t_kern * 1e3:.1f} ms, "
          f"both on two streams {t_both * 1e3:.1f} ms")
    np.testing.assert_array_equal(dst_check.to_numpy(), src)
    assert (out.to_numpy()[1:3] >= ns).all()
    assert t_both < 0.8 * (t_copy + t_kern), "the copy did not overlap the kernel"
