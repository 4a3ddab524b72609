"""Pageable copies through pinned chunks (barecuda._staging) against the fake driver.

The double keeps "device" memory in host RAM (CUdeviceptr == host address), so the
bytes a staged copy leaves on either side are read back with ctypes, independently
of barecuda, and compared with the numpy source. Chunks are configured tiny (4 KiB
x 3, 3 threads) so that every copy goes round the pipeline many times and every
memcpy is split between threads.
"""
import ctypes
import sys
import threading

import pytest

np = pytest.importorskip("numpy")

import barecuda as bc
from barecuda import _staging as st
from barecuda import CudaError
from _helpers import join_all, result_of, run_child

CHUNK = 4096
SIZES = [0, 1, 7, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5, 5 * CHUNK + 4093, (1 << 20) + 3]
OFFSETS = [0, 1, 3, 7]
GUARD = 64


@pytest.fixture
def small_chunks(fake):
    saved = st.configure_staging()
    st.configure_staging(chunk_bytes=CHUNK, chunks=3, threads=3, threshold=0, min_piece=1, min_part=1)
    yield
    st.release()
    st.configure_staging(**saved)


class DeviceMemory:
    """cuMemAlloc'd memory of the fake, read and written here with ctypes."""

    def __init__(self, fake):
        self.lib = fake.lib
        self.lib.cuMemAlloc.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_size_t]
        self.lib.cuMemFree.argtypes = [ctypes.c_ulonglong]
        self.lib.cuMemHostAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]
        self.lib.cuMemFreeHost.argtypes = [ctypes.c_void_p]
        self.ptrs = []
        self.hosts = []

    def alloc(self, n, fill):
        bc.Device(0).set_current()
        p = ctypes.c_ulonglong()
        assert self.lib.cuMemAlloc(ctypes.byref(p), max(n, 1)) == 0
        self.ptrs.append(p.value)
        ctypes.memset(p.value, fill, max(n, 1))
        return p.value

    def pinned(self, n):
        bc.Device(0).set_current()
        p = ctypes.c_void_p()
        assert self.lib.cuMemHostAlloc(ctypes.byref(p), n, 0) == 0
        self.hosts.append(p.value)
        return (ctypes.c_ubyte * n).from_address(p.value)

    @staticmethod
    def read(ptr, n):
        return ctypes.string_at(ptr, n)

    @staticmethod
    def write(ptr, data):
        ctypes.memmove(ptr, bytes(data), len(data))

    def free(self):
        bc.Device(0).set_current()
        for p in self.ptrs:
            self.lib.cuMemFree(p)
        for p in self.hosts:
            self.lib.cuMemFreeHost(p)
        self.ptrs, self.hosts = [], []


@pytest.fixture
def mem(fake):
    m = DeviceMemory(fake)
    yield m
    m.free()


def host_view(n, off, rng):
    """A numpy uint8 view of n fresh random bytes starting `off` bytes into its base."""
    base = rng.integers(0, 256, size=n + off + GUARD, dtype=np.uint8)
    return base, base[off:off + n]


@pytest.fixture
def rng():
    return np.random.default_rng()


# ------------------------------------------------------------------ correctness
@pytest.mark.parametrize("off", OFFSETS)
@pytest.mark.parametrize("n", SIZES)
def test_htod_exact(fake, small_chunks, mem, rng, n, off):
    _, src = host_view(n, off, rng)
    expect = src.tobytes()
    for doff in (0, 3):
        d = mem.alloc(n + 2 * GUARD, 0xA5)
        st.copy_htod(d + GUARD + doff, src)
        got = mem.read(d, n + 2 * GUARD)
        assert got[GUARD + doff:GUARD + doff + n] == expect
        assert got[:GUARD + doff] == b"\xa5" * (GUARD + doff)                  # nothing written before
        assert got[GUARD + doff + n:] == b"\xa5" * (GUARD - doff)              # nor after


@pytest.mark.parametrize("off", OFFSETS)
@pytest.mark.parametrize("n", SIZES)
def test_dtoh_exact(fake, small_chunks, mem, rng, n, off):
    data = rng.integers(0, 256, size=n + GUARD, dtype=np.uint8).tobytes()
    d = mem.alloc(n + GUARD, 0)
    mem.write(d, data)
    for doff in (0, 1):
        base = np.full(n + off + GUARD, 0x5A, dtype=np.uint8)
        dst = base[off:off + n]
        st.copy_dtoh(dst, d + doff)
        assert dst.tobytes() == data[doff:doff + n]
        assert base[:off].tobytes() == b"\x5a" * off
        assert base[off + n:].tobytes() == b"\x5a" * GUARD


@pytest.mark.parametrize("use_stream", [False, True])
def test_round_trip_on_streams(fake, small_chunks, mem, rng, use_stream):
    s = bc.Stream() if use_stream else None
    n = 7 * CHUNK + 13
    d = mem.alloc(n, 0)
    for _ in range(3):          # chunks go round between directions and calls
        _, src = host_view(n, 3, rng)
        st.copy_htod(d, src, stream=s)
        if s is not None:
            s.synchronize()
        assert mem.read(d, n) == src.tobytes()
        out = np.empty(n + 1, dtype=np.uint8)[1:]
        st.copy_dtoh(out, d, stream=s)
        assert out.tobytes() == src.tobytes()


def test_other_dtypes_and_buffer_objects(fake, small_chunks, mem, rng):
    a = rng.standard_normal((33, 17)).astype(np.float32)
    d = mem.alloc(4 * CHUNK, 0)
    st.copy_htod(d, a)
    assert mem.read(d, a.nbytes) == a.tobytes()
    b = np.empty_like(a)
    st.copy_dtoh(b, d)
    np.testing.assert_array_equal(a, b)
    raw = bytes(rng.integers(0, 256, size=3 * CHUNK + 5, dtype=np.uint8))
    st.copy_htod(d, raw)
    ba = bytearray(len(raw))
    st.copy_dtoh(ba, d)
    assert bytes(ba) == raw


def test_rejects_non_contiguous_and_read_only(fake, small_chunks, mem):
    d = mem.alloc(1024, 0)
    with pytest.raises((BufferError, ValueError)):     # numpy says ValueError
        st.copy_htod(d, np.arange(100, dtype=np.uint8)[::2])
    with pytest.raises(BufferError):
        st.copy_dtoh(b"read-only bytes", d)
    ro = np.zeros(16, dtype=np.uint8)
    ro.flags.writeable = False
    with pytest.raises((BufferError, ValueError)):
        st.copy_dtoh(ro, d)


# ------------------------------------------------------------------ paths taken
def test_threshold_picks_the_path(fake, small_chunks, mem, rng):
    st.configure_staging(threshold=3 * CHUNK)
    d = mem.alloc(4 * CHUNK, 0)
    s0 = st.stats()
    _, small = host_view(3 * CHUNK - 1, 0, rng)
    st.copy_htod(d, small)
    st.copy_dtoh(np.empty(3 * CHUNK - 1, np.uint8), d)
    s1 = st.stats()
    assert s1["htod_plain"] - s0["htod_plain"] == 1 and s1["htod_staged"] == s0["htod_staged"]
    assert s1["dtoh_plain"] - s0["dtoh_plain"] == 1 and s1["dtoh_staged"] == s0["dtoh_staged"]
    calls = fake.calls("cuMemcpyHtoDAsync")
    _, big = host_view(3 * CHUNK, 0, rng)
    st.copy_htod(d, big)
    s2 = st.stats()
    assert s2["htod_staged"] - s1["htod_staged"] == 1
    assert s2["htod_staged_bytes"] - s1["htod_staged_bytes"] == 3 * CHUNK
    assert fake.calls("cuMemcpyHtoDAsync") - calls == 3          # one DMA per chunk-sized piece
    assert mem.read(d, 3 * CHUNK) == big.tobytes()


def test_plain_dtoh_on_a_stream_is_synchronous(fake, small_chunks, mem, rng):
    st.configure_staging(threshold=1 << 30)
    s = bc.Stream()
    d = mem.alloc(100, 0)
    data = rng.integers(0, 256, size=100, dtype=np.uint8)
    mem.write(d, data)
    out = np.empty(100, np.uint8)
    before = fake.calls("cuStreamSynchronize")
    st.copy_dtoh(out, d, stream=s)
    assert fake.calls("cuStreamSynchronize") == before + 1
    assert out.tobytes() == data.tobytes()


def test_small_copies_skip_the_stager(fake, mem, rng):
    saved = st.configure_staging()
    try:
        st.configure_staging(threshold=1 << 20)
        st.release()
        live = fake.live("host_mem")
        d = mem.alloc(1000, 0)
        _, src = host_view(1000, 1, rng)
        st.copy_htod(d, src)
        out = np.empty(1000, np.uint8)
        st.copy_dtoh(out, d)
        assert out.tobytes() == src.tobytes()
        assert fake.live("host_mem") == live            # no chunks were allocated
        assert fake.calls("cuMemHostAlloc") == 0
        assert fake.calls("cuPointerGetAttribute") == 0  # nor any probing
    finally:
        st.configure_staging(**saved)


def test_pinned_host_memory_is_copied_directly(fake, small_chunks, mem, rng):
    n = 3 * CHUNK + 5
    host = mem.pinned(n + 8)
    data = rng.integers(0, 256, size=n + 8, dtype=np.uint8)
    ctypes.memmove(host, data.tobytes(), n + 8)
    view = memoryview(host).cast("B")[8:]
    d = mem.alloc(n, 0)
    s0 = st.stats()
    st.copy_htod(d, view)
    assert mem.read(d, n) == data[8:].tobytes()
    ctypes.memset(ctypes.addressof(host), 0, n + 8)
    st.copy_dtoh(view, d)
    assert bytes(view) == data[8:].tobytes()
    s1 = st.stats()
    assert s1["pinned_direct"] - s0["pinned_direct"] == 2
    assert s1["htod_staged"] == s0["htod_staged"] and s1["dtoh_staged"] == s0["dtoh_staged"]


# ------------------------------------------------------------------ failures and lifetime
@pytest.mark.parametrize("symbol,direction", [
    ("cuMemcpyHtoDAsync", "htod"), ("cuMemcpyDtoHAsync", "dtoh"),
    ("cuEventRecord", "htod"), ("cuEventRecord", "dtoh"),
])
def test_fault_mid_copy_raises_and_leaves_the_stager_usable(fake, small_chunks, mem, rng, symbol, direction):
    n = 5 * CHUNK + 77
    d = mem.alloc(n, 0)
    _, src = host_view(n, 1, rng)
    out = np.empty(n, np.uint8)
    st.copy_htod(d, src)          # chunks built before counting
    live_host, live_ev = fake.live("host_mem"), fake.live("event")
    fake.fail(symbol, 700, after=2)
    with pytest.raises(CudaError) as ei:
        if direction == "htod":
            st.copy_htod(d, src)
        else:
            st.copy_dtoh(out, d)
    assert ei.value.code == 700 and ei.value.call == symbol
    for _ in range(5):            # the next copies work, chunks are not stuck, nothing leaks
        _, src = host_view(n, 3, rng)
        st.copy_htod(d, src)
        assert mem.read(d, n) == src.tobytes()
        st.copy_dtoh(out, d)
        assert out.tobytes() == src.tobytes()
        assert fake.live("host_mem") == live_host
        assert fake.live("event") == live_ev


def test_event_query_failure_is_reported_and_retried(fake, small_chunks, mem, rng):
    n = 4 * CHUNK
    d = mem.alloc(n, 0)
    _, src = host_view(n, 0, rng)
    st.copy_htod(d, src)                        # every chunk now carries a recorded event
    fake.fail("cuEventQuery", 999)
    with pytest.raises(CudaError) as ei:
        st.copy_htod(d, src)
    assert ei.value.code == 999 and ei.value.call == "cuEventQuery"
    _, src = host_view(n, 0, rng)
    st.copy_htod(d, src)
    assert mem.read(d, n) == src.tobytes()


def test_no_leak_across_repeated_copies_and_release(fake, small_chunks, mem, rng):
    st.release()
    base_host, base_ev = fake.live("host_mem"), fake.live("event")
    n = 3 * CHUNK + 5
    d = mem.alloc(n, 0)
    out = np.empty(n, np.uint8)
    for i in range(20):
        _, src = host_view(n, i % 8, rng)
        st.copy_htod(d, src)
        st.copy_dtoh(out, d)
        assert out.tobytes() == src.tobytes()
        assert fake.live("host_mem") == base_host + 3
        assert fake.live("event") == base_ev + 3
    assert st.stats()["pinned_bytes"] == 3 * CHUNK
    assert st.stats()["worker_threads"] == 2
    st.release()
    assert fake.live("host_mem") == base_host
    assert fake.live("event") == base_ev
    assert st.stats()["pinned_bytes"] == 0 and st.stats()["worker_threads"] == 0


def test_chunk_allocation_failure_falls_back_to_the_plain_path(fake, small_chunks, mem, rng):
    st.release()
    base = fake.live("host_mem")
    fake.fail("cuMemHostAlloc", 2, after=1)     # second of three chunks: out of memory
    n = 3 * CHUNK + 5
    d = mem.alloc(n, 0)
    _, src = host_view(n, 7, rng)
    s0 = st.stats()
    st.copy_htod(d, src)
    assert mem.read(d, n) == src.tobytes()
    s1 = st.stats()
    assert s1["fallbacks"] - s0["fallbacks"] == 1 and s1["htod_plain"] - s0["htod_plain"] == 1
    assert fake.live("host_mem") == base        # the one chunk that was allocated was freed
    _, src = host_view(n, 1, rng)
    st.copy_htod(d, src)                        # next copy builds the chunks
    assert mem.read(d, n) == src.tobytes()
    assert fake.live("host_mem") == base + 3
    assert st.stats()["htod_staged"] - s1["htod_staged"] == 1


def test_reconfigure_rebuilds(fake, small_chunks, mem, rng):
    n = 10 * CHUNK + 1
    d = mem.alloc(n, 0)
    _, src = host_view(n, 0, rng)
    st.copy_htod(d, src)
    base = fake.live("host_mem")
    builds = st.stats()["builds"]
    st.configure_staging(chunks=5, chunk_bytes=2 * CHUNK, threads=2)
    assert fake.live("host_mem") == base        # lazily: nothing until the next copy
    _, src = host_view(n, 1, rng)
    out = np.empty(n, np.uint8)
    st.copy_htod(d, src)
    st.copy_dtoh(out, d)
    assert out.tobytes() == src.tobytes()
    assert fake.live("host_mem") == base + 2
    assert st.stats()["builds"] == builds + 1
    assert st.stats()["pinned_bytes"] == 5 * 2 * CHUNK


def test_same_configuration_again_keeps_the_chunks(fake, small_chunks, mem, rng):
    n = 10 * CHUNK + 1
    d = mem.alloc(n, 0)
    _, src = host_view(n, 0, rng)
    st.copy_htod(d, src)
    builds = st.stats()["builds"]
    st.configure_staging(**st.configure_staging())   # the values it already has
    _, src = host_view(n, 2, rng)
    out = np.empty(n, np.uint8)
    st.copy_htod(d, src)
    st.copy_dtoh(out, d)
    assert out.tobytes() == src.tobytes()
    assert st.stats()["builds"] == builds


def test_configure_validates():
    saved = st.configure_staging()
    for bad in ({"chunks": 0}, {"chunks": 65}, {"threads": 0}, {"threads": 65},
                {"chunk_bytes": 0}, {"threshold": -1}, {"min_piece": 0}, {"min_part": 0},
                {"spin_us": -1}, {"spin_us": 1_000_001}):
        with pytest.raises(ValueError):
            st.configure_staging(**bad)
    assert st.configure_staging() == saved


@pytest.mark.parametrize("bad", [{"chunk_bytes": 1.5}, {"chunks": 2.0}, {"threads": True}, {"threshold": "8"},
                                 {"min_part": 1 << 64}])
def test_configure_refuses_non_integers_and_changes_nothing(bad):
    """An integer setting given a float, a bool or a string is a TypeError, not truncated
    (chunk_bytes=1.5 used to set 1 byte); one past size_t is a ValueError; nothing changes."""
    saved = st.configure_staging()
    with pytest.raises(ValueError if bad.get("min_part") else TypeError, match=next(iter(bad))):
        st.configure_staging(threads=2, **bad)
    assert st.configure_staging() == saved


def test_configure_accepts_index_integers():
    np = pytest.importorskip("numpy")
    saved = st.configure_staging()
    try:
        assert st.configure_staging(chunks=np.int64(5))["chunks"] == 5
    finally:
        st.configure_staging(**saved)


def test_concurrent_copies_serialize_correctly(fake, small_chunks, mem):
    n = 6 * CHUNK + 11
    nthreads = 6
    dptrs = [mem.alloc(n, 0) for _ in range(nthreads)]
    errors = []

    def work(i):
        try:
            r = np.random.default_rng(i)
            dev = bc.Device(0)
            dev.set_current()
            for _ in range(15):
                src = r.integers(0, 256, size=n, dtype=np.uint8)
                st.copy_htod(dptrs[i], src)
                out = np.empty(n, np.uint8)
                st.copy_dtoh(out, dptrs[i])
                assert out.tobytes() == src.tobytes()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(nthreads)]
    for t in ts:
        t.start()
    join_all(ts, timeout=120)
    assert not errors, errors


def test_zero_bytes_makes_no_driver_call(fake, small_chunks, mem):
    d = mem.alloc(16, 0)
    st.copy_htod(d, b"")
    st.copy_dtoh(bytearray(), d)
    assert fake.calls("cuMemcpyHtoDAsync") == 0 and fake.calls("cuMemcpyDtoHAsync") == 0


# ------------------------------------------------------------------ fork
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="os.fork semantics tested on Linux")
def test_forked_child_never_touches_the_stager(fake_lib_path):
    code = """
        import json, os, sys
        import numpy as np
        import barecuda as bc
        from barecuda import _staging as st
        from _helpers import in_fork
        st.configure_staging(chunk_bytes=4096, chunks=3, threads=3, threshold=0, min_piece=1, min_part=1)
        bc.Device(0).set_current()
        import ctypes
        lib = ctypes.CDLL(os.environ["BARECUDA_LIBCUDA"])
        p = ctypes.c_ulonglong()
        assert lib.cuMemAlloc(ctypes.byref(p), ctypes.c_size_t(20000)) == 0
        src = np.random.default_rng().integers(0, 256, 20000, dtype=np.uint8)
        st.copy_htod(p.value, src)                 # parent: threads and chunks exist
        def child():
            res = {}
            try:
                st.copy_htod(p.value, src)
                res["raised"] = None
            except Exception as e:
                res["raised"] = type(e).__name__
            res["config"] = st.configure_staging(threads=2)["threads"]
            res["stagers"] = st.stats()["stagers"]
            return json.dumps(res)
        data = in_fork(child)
        out = np.empty(20000, np.uint8)
        st.copy_dtoh(out, p.value)                 # the parent's stager still works
        print("RESULT " + json.dumps({"child": json.loads(data), "ok": out.tobytes() == src.tobytes()}))
    """
    r = result_of(run_child(code, fake_lib_path, timeout=60))
    assert r["ok"]
    assert r["child"] == {"raised": "ForkedProcessError", "config": 2, "stagers": 0}


def test_exit_releases_when_the_driver_is_usable(fake_lib_path):
    """A process that staged copies exits cleanly (chunks and threads torn down at exit)."""
    code = """
        import os, ctypes
        import numpy as np
        import barecuda as bc
        from barecuda import _staging as st
        st.configure_staging(chunk_bytes=4096, chunks=3, threads=3, threshold=0, min_piece=1, min_part=1)
        bc.Device(0).set_current()
        lib = ctypes.CDLL(os.environ["BARECUDA_LIBCUDA"])
        p = ctypes.c_ulonglong()
        assert lib.cuMemAlloc(ctypes.byref(p), ctypes.c_size_t(20000)) == 0
        st.copy_htod(p.value, np.ones(20000, np.uint8))
        lib.fakecuda_live.restype = ctypes.c_int
        st._on_exit()                              # what atexit runs (again, harmlessly, at exit)
        print("LIVE", lib.fakecuda_live(b"host_mem"), lib.fakecuda_live(b"event"))
    """
    assert "LIVE 0 0" in run_child(code, fake_lib_path, timeout=60)


@pytest.mark.parametrize("nt", [False, True], ids=["memcpy", "streaming_stores"])
def test_both_copy_kernels_exact(fake, small_chunks, mem, rng, nt):
    st.configure_staging(nt_htod=nt, nt_dtoh=nt, chunk_bytes=3 * CHUNK, min_part=300)
    for n in (255, 256, 257, 1000, 3 * CHUNK - 1, 7 * CHUNK + 333):
        for off in (0, 1, 7, 15):
            _, src = host_view(n, off, rng)
            d = mem.alloc(n + GUARD, 0xEE)
            st.copy_htod(d + off, src)
            got = mem.read(d, n + GUARD)
            assert got[off:off + n] == src.tobytes() and got[:off] == b"\xee" * off
            assert got[off + n:] == b"\xee" * (GUARD - off)
            base = np.full(n + 2 * GUARD, 0x11, np.uint8)
            st.copy_dtoh(base[off + 3:off + 3 + n], d + off)
            assert base[off + 3:off + 3 + n].tobytes() == src.tobytes()
            assert (base[:off + 3] == 0x11).all() and (base[off + 3 + n:] == 0x11).all()


@pytest.mark.parametrize("n", [1, CHUNK + 1, (2 << 20) - 1, (5 << 20) + 4093])
@pytest.mark.parametrize("off", [0, 3, 4095])
def test_fresh_destination_is_faulted_in_place_and_exact(fake, small_chunks, mem, rng, n, off):
    """fresh=True: the threads write into every page of the destination before the
    copy (2 MiB blocks taken from a shared counter); nothing outside it is touched
    and every byte ends up as on the device."""
    st.configure_staging(threads=4)
    data = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
    d = mem.alloc(n, 0)
    mem.write(d, data)
    base = np.full(n + off + GUARD, 0x5A, dtype=np.uint8)
    dst = base[off:off + n]
    st.copy_dtoh(dst, d, fresh=True)
    assert dst.tobytes() == data
    assert base[:off].tobytes() == b"\x5a" * off and base[off + n:].tobytes() == b"\x5a" * GUARD


@pytest.mark.parametrize("n", [CHUNK * 3 + 7, (3 << 20) + 5])
def test_to_numpy_and_copy_to_new_buffer_through_the_stager(fake, small_chunks, rng, n):
    """to_numpy() and copy_to() allocate the result themselves (np.empty, an
    uninitialised bytearray) and take the fresh-destination path."""
    src = rng.integers(0, 256, size=n, dtype=np.uint8)
    buf = bc.to_device(src)
    before = st.stats()["dtoh_staged"]
    assert np.array_equal(buf.to_numpy(), src)
    out = buf.copy_to()
    assert isinstance(out, bytearray) and bytes(out) == src.tobytes()
    assert st.stats()["dtoh_staged"] == before + 2


@pytest.mark.parametrize("spin_us", [0, 3000])
def test_spin_setting_never_changes_the_bytes(fake, small_chunks, mem, rng, spin_us):
    """spin_us=0: every worker sleeps on the condition variable between pieces (the
    wake-up path every time); a long spin keeps them polling. Both copy exactly."""
    assert st.configure_staging(spin_us=spin_us, threads=4)["spin_us"] == spin_us
    n = 40 * CHUNK + 17
    _, src = host_view(n, 5, rng)
    d = mem.alloc(n, 0)
    st.copy_htod(d, src)
    assert mem.read(d, n) == src.tobytes()
    out = np.empty(n, np.uint8)
    st.copy_dtoh(out, d)
    assert out.tobytes() == src.tobytes()


def test_configure_staging_is_public():
    import barecuda
    assert barecuda.configure_staging is st.configure_staging
    assert "configure_staging" in barecuda.__all__
    saved = barecuda.configure_staging()
    try:
        assert barecuda.configure_staging(threshold=12345)["threshold"] == 12345
        assert st.configure_staging()["threshold"] == 12345
    finally:
        barecuda.configure_staging(**saved)
    assert barecuda.configure_staging() == saved
