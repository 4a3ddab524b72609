"""Staged pageable copies (barecuda._staging) on a real GPU (run with --gpu).

Device memory is allocated, filled and read back here through the driver's own
synchronous calls (ctypes on the library barecuda loaded), so the reference path
shares no code with the staging engine. Every check is against numpy on fresh
random data. Both the default configuration (8 MiB chunks, 8 MiB threshold) and a
small one (64 KiB chunks, threshold 0: every copy staged, many pipeline rounds)
are tested.
"""
import ctypes
import time

import pytest

np = pytest.importorskip("numpy")

import barecuda as bc
from barecuda import _staging as st
from barecuda.bench._baseline import bench_copy   # the benchmark wing's raw copy measurement

pytestmark = pytest.mark.gpu

MiB = 1 << 20
GUARD = 256


def assert_equal(got, expect, err_msg=""):
    """np.testing.assert_array_equal's report, at np.array_equal's cost when they match
    (the report itself takes seconds on the 256 MiB cases)."""
    if not np.array_equal(got, expect):
        np.testing.assert_array_equal(got, expect, err_msg=err_msg)


class Driver:
    """The few driver calls the reference path needs, through ctypes."""

    def __init__(self):
        lib = self.lib = ctypes.CDLL(bc.driver_path())
        u64, sz = ctypes.c_ulonglong, ctypes.c_size_t
        self.alloc_ = lib.cuMemAlloc_v2
        self.alloc_.argtypes = [ctypes.POINTER(u64), sz]
        self.free_ = lib.cuMemFree_v2
        self.free_.argtypes = [u64]
        self.htod_ = lib.cuMemcpyHtoD_v2
        self.htod_.argtypes = [u64, ctypes.c_void_p, sz]
        self.dtoh_ = lib.cuMemcpyDtoH_v2
        self.dtoh_.argtypes = [ctypes.c_void_p, u64, sz]
        self.memset_ = lib.cuMemsetD8_v2
        self.memset_.argtypes = [u64, ctypes.c_ubyte, sz]
        self.sync_ = lib.cuCtxSynchronize
        self.ptrs = []

    def alloc(self, n, fill):
        bc.Device(0).set_current()
        p = ctypes.c_ulonglong()
        assert self.alloc_(ctypes.byref(p), n) == 0
        self.ptrs.append(p.value)
        assert self.memset_(p.value, fill, n) == 0
        assert self.sync_() == 0
        return p.value

    def read(self, ptr, n):
        assert self.sync_() == 0            # everything queued (on any stream) has landed
        out = np.empty(n, np.uint8)
        assert self.dtoh_(out.ctypes.data, ptr, n) == 0
        return out

    def write(self, ptr, a):
        assert self.htod_(ptr, a.ctypes.data, a.nbytes) == 0
        assert self.sync_() == 0

    def free(self):
        self.sync_()
        for p in self.ptrs:
            self.free_(p)
        self.ptrs = []


@pytest.fixture
def drv():
    d = Driver()
    yield d
    d.free()


@pytest.fixture(params=["default", "small"])
def config(request):
    saved = st.configure()
    if request.param == "small":
        st.configure(chunk_bytes=64 << 10, chunks=3, threads=3, threshold=0, min_piece=1, min_part=4096)
    chunk = st.configure()["chunk_bytes"]
    yield chunk
    if request.param != "default":   # the default stagers stay built for the next test
        st.release()
        st.configure(**saved)


@pytest.fixture
def rng():
    return np.random.default_rng()


def sizes(chunk):
    return [0, 1, 7, chunk - 1, chunk, chunk + 1, 3 * chunk + 5, 256 * MiB]


def host_view(n, off, rng):
    base = rng.integers(0, 256, size=n + off + GUARD, dtype=np.uint8)
    return base[off:off + n]


@pytest.mark.parametrize("use_stream", [False, True], ids=["default_stream", "stream"])
@pytest.mark.parametrize("off", [0, 1, 3, 7])
def test_htod(drv, config, rng, off, use_stream):
    s = bc.Stream() if use_stream else None
    for n in sizes(config):
        src = host_view(n, off, rng)
        expect = src.copy()
        d = drv.alloc(n + 2 * GUARD, 0xA5)
        st.copy_htod(d + GUARD + off, src, stream=s)
        src[:] = 0                            # the source may be reused once copy_htod returns
        got = drv.read(d, n + 2 * GUARD)
        assert_equal(got[GUARD + off:GUARD + off + n], expect, err_msg=f"n={n}")
        assert (got[:GUARD + off] == 0xA5).all() and (got[GUARD + off + n:] == 0xA5).all(), f"n={n}"


@pytest.mark.parametrize("use_stream", [False, True], ids=["default_stream", "stream"])
@pytest.mark.parametrize("off", [0, 1, 3, 7])
def test_dtoh(drv, config, rng, off, use_stream):
    s = bc.Stream() if use_stream else None
    for n in sizes(config):
        data = rng.integers(0, 256, size=n + GUARD, dtype=np.uint8)
        d = drv.alloc(n + GUARD, 0)
        drv.write(d, data)
        base = np.full(n + off + GUARD, 0x5A, np.uint8)
        st.copy_dtoh(base[off:off + n], d + off, stream=s)
        assert_equal(base[off:off + n], data[off:off + n], err_msg=f"n={n}")
        assert (base[:off] == 0x5A).all() and (base[off + n:] == 0x5A).all(), f"n={n}"


def test_ordered_after_queued_work(drv, config, rng):
    """A staged DtoH on a stream sees what an earlier staged HtoD on it wrote, with no sync between."""
    n = 64 * MiB + 3
    s = bc.Stream()
    d = drv.alloc(n, 0)
    for _ in range(3):
        a = rng.integers(0, 256, size=n, dtype=np.uint8)
        st.copy_htod(d, a, stream=s)
        out = np.empty(n, np.uint8)
        st.copy_dtoh(out, d, stream=s)
        assert_equal(out, a)


def test_256_mib_copies_exact_rates_printed(drv, rng):
    """256 MiB both ways: bench_copy checks its staged bytes, the round trip below is
    compared with the source; GB/s are printed, never asserted (bench/ reports them)."""
    n = 256 * MiB
    print()
    for direction in ("htod", "dtoh"):
        staged, plain, pinned = bench_copy(direction, n, 5)
        print(f"bench_copy {direction} 256 MiB: staged {staged:6.1f} GB/s  plain pageable {plain:6.1f}  "
              f"pinned {pinned:6.1f}  staged/plain {staged / plain:5.2f}x  staged/pinned {staged / pinned:4.2f}")
    a = rng.integers(0, 256, size=n, dtype=np.uint8)
    out = np.empty_like(a)
    out[:] = 1                                  # fault the pages in before timing
    d = drv.alloc(n, 0)
    for name, fn in (("copy_htod", lambda: st.copy_htod(d, a)), ("copy_dtoh", lambda: st.copy_dtoh(out, d))):
        fn()
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            drv.sync_()
            ts.append(time.perf_counter() - t0)
        print(f"{name} numpy 256 MiB: {n / sorted(ts)[2] / 1e9:6.1f} GB/s (median of 5)")
    assert_equal(out, a)
    print(st.stats())
