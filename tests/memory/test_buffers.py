"""DeviceBuffer, PinnedBuffer, copies, memset and interop against the fake driver.

The double keeps "device" memory in host RAM (CUdeviceptr == host address), so every
copy direction can be checked byte for byte against numpy / bytes computed here.
"""
import gc
import weakref
import random
import subprocess
import sys
import warnings

import pytest

np = pytest.importorskip("numpy")

import barecuda as bc
from barecuda import CudaOutOfMemoryError, CudaWarning
from _helpers import fresh


@pytest.fixture(autouse=True)
def _collect(request):
    gc.collect()       # buffers left in cycles by earlier tests must not move live counts
    prev = None
    if "fake" in request.fixturenames:
        # These tests pin down the plain driver allocator's contract (one driver
        # allocation per buffer, freed in stream order); the cache is in test_pool.py.
        prev = bc.get_allocator(0)
        bc.set_allocator(bc.DriverAllocator(0))
    yield
    if prev is not None:
        gc.collect()
        bc.set_allocator(prev)


def rng_bytes(n, seed=None):
    r = random.Random(seed)
    return bytes(r.getrandbits(8) for _ in range(n))




# ------------------------------------------------------------------ basics
def _env():
    import os
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def test_import_does_not_import_numpy():
    code = "import sys, barecuda; assert 'numpy' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def test_empty_without_numpy_uses_name_table(fake):
    code = ("import sys; sys.modules['numpy'] = None\n"
            "import barecuda as bc\n"
            "b = bc.empty((2, 3), 'float32')\n"
            "assert b.nbytes == 24 and b.shape == (2, 3) and b.dtype == 'float32', (b.nbytes, b.dtype)\n"
            "assert b.__cuda_array_interface__['typestr'] == '<f4'\n"
            "b2 = bc.empty(5, 'u2'); assert b2.dtype == 'uint16' and b2.nbytes == 10\n"
            "b3 = bc.empty(4, float); assert b3.dtype == 'float64'\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("dtype,itemsize", [("float32", 4), ("int8", 1), ("uint64", 8), ("float16", 2),
                                            ("complex128", 16), ("bool", 1), (np.float64, 8),
                                            (np.dtype("<i2"), 2), ("f4", 4), ("<u4", 4)])
def test_empty_shape_dtype(fake, dtype, itemsize):
    b = bc.empty((3, 5), dtype)
    assert b.shape == (3, 5)
    assert b.nbytes == 15 * itemsize
    assert b.size == 15
    assert len(b) == 3
    assert b.dtype == np.dtype(dtype)
    assert b.ptr != 0
    assert b.device == bc.Device(0)
    assert "DeviceBuffer" in repr(b)


def test_empty_int_shape_and_zero_size(fake):
    b = bc.empty(7, "int32")
    assert b.shape == (7,) and b.nbytes == 28
    before = fake.calls("cuMemAllocAsync")
    z = bc.empty(0, "float32")
    assert z.nbytes == 0 and z.shape == (0,)
    assert fake.calls("cuMemAllocAsync") == before      # nothing to allocate
    assert z.to_numpy().shape == (0,)
    z.close()


def test_bad_shapes_and_dtypes(fake):
    with pytest.raises(ValueError):
        bc.empty(-1)
    with pytest.raises(TypeError):
        bc.empty("abc")
    with pytest.raises(TypeError):
        bc.empty(3, "not-a-dtype")
    with pytest.raises(ValueError):
        bc.alloc(-5)


def test_alloc_uses_stream_ordered_allocation(fake):
    s = bc.Stream()
    before = fake.live("mem")
    b = bc.alloc(1000, stream=s)
    assert fake.calls("cuMemAllocAsync") == 1
    assert fake.live("mem") == before + 1
    assert b.stream is s
    assert b.nbytes == 1000 and b.shape == (1000,)
    del b
    gc.collect()
    assert fake.live("mem") == before
    assert fake.calls("cuMemFreeAsync") == 1


def test_close_is_idempotent_and_context_manager(fake):
    before = fake.live("mem")
    with bc.alloc(64) as b:
        assert fake.live("mem") == before + 1
    assert fake.live("mem") == before
    assert b.is_closed
    b.close()
    b.close()
    assert fake.calls("cuMemFreeAsync") == 1
    with pytest.raises(ValueError, match="closed"):
        b.to_numpy()
    assert "closed" in repr(b)


def test_constructor_failure_leaves_nothing(fake):
    before = fake.live("mem")
    fake.fail("cuMemAllocAsync", 2)
    with pytest.raises(CudaOutOfMemoryError) as ei:
        bc.empty(1 << 20, "float32")
    assert isinstance(ei.value, MemoryError)
    assert str(4 << 20) in str(ei.value)          # names the requested size
    assert fake.live("mem") == before
    assert fake.calls("cuMemFreeAsync") == 0


def test_to_device_failure_in_copy_frees_the_buffer(fake):
    before = fake.live("mem")
    fake.fail("cuMemcpyHtoDAsync", 1)
    with pytest.raises(bc.CudaInvalidValueError):
        bc.to_device(np.arange(10.0))
    gc.collect()
    assert fake.live("mem") == before


def test_destructor_failure_becomes_warning(fake):
    b = bc.alloc(256)
    fake.fail("cuMemFreeAsync", 1)
    with pytest.warns(CudaWarning, match="cuMemFreeAsync"):
        del b
        gc.collect()


def test_close_failure_raises(fake):
    b = bc.alloc(256)
    fake.fail("cuMemFreeAsync", 1)
    with pytest.raises(bc.CudaError):
        b.close()
    assert b.is_closed          # never freed twice
    b.close()
    assert fake.calls("cuMemFreeAsync") == 1


def test_used_elsewhere_waits_for_the_context_before_free(fake):
    s1, s2 = bc.Stream(), bc.Stream()
    b = bc.alloc(128, stream=s1)
    b.memset(1, stream=s2)          # async use on another stream
    syncs = fake.calls("cuCtxSynchronize")
    del b
    gc.collect()
    assert fake.calls("cuCtxSynchronize") == syncs + 1
    assert fake.calls("cuMemFreeAsync") == 1


def test_same_stream_use_does_not_synchronize(fake):
    s1 = bc.Stream()
    b = bc.alloc(128, stream=s1)
    b.memset(1, stream=s1)
    del b
    gc.collect()
    assert fake.calls("cuCtxSynchronize") == 0
    assert fake.calls("cuMemFreeAsync") == 1


# ------------------------------------------------------------------ copies
@pytest.mark.parametrize("n", [0, 1, 7, 1000, 4099])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint64", "bool", "int16"])
def test_round_trip_numpy(fake, n, dtype):
    a = fresh(n, dtype, seed=n)
    b = bc.to_device(a)
    assert b.shape == a.shape and b.dtype == a.dtype and b.nbytes == a.nbytes
    out = b.to_numpy()
    assert out.dtype == a.dtype
    np.testing.assert_array_equal(out, a)
    # The double's device memory is host RAM: check the bytes where they live.
    if n:
        raw = (np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * a.nbytes).from_address(b.ptr)))
        assert raw.tobytes() == a.tobytes()


@pytest.mark.parametrize("n", [1, 3, 1001])
def test_bytes_and_bytearray_both_ways(fake, n):
    data = rng_bytes(n, seed=n)
    b = bc.to_device(data)
    assert b.dtype == np.uint8 and b.shape == (n,)
    assert bytes(b.copy_to()) == data
    dst = bytearray(n)
    assert b.copy_to(dst) is dst
    assert bytes(dst) == data
    other = rng_bytes(n, seed=n + 1)
    b.copy_from(memoryview(other))
    assert bytes(b.copy_to()) == other


def test_multidim_and_memoryview_format(fake):
    a = fresh(24, "int32", 3).reshape(2, 3, 4)
    b = bc.to_device(memoryview(a))
    assert b.shape == (2, 3, 4) and b.dtype == np.int32
    np.testing.assert_array_equal(b.to_numpy(), a)


def test_device_to_device(fake):
    a = fresh(333, "float64", 5)
    src = bc.to_device(a)
    dst = bc.empty(333, "float64")
    dst.copy_from(src)
    np.testing.assert_array_equal(dst.to_numpy(), a)
    dst2 = bc.empty(333, "float64")
    src.copy_to(dst2)
    np.testing.assert_array_equal(dst2.to_numpy(), a)
    c = src.copy()
    assert c.ptr != src.ptr
    np.testing.assert_array_equal(c.to_numpy(), a)
    d = bc.to_device(src)                     # device array in: device-to-device clone
    assert d.ptr != src.ptr
    np.testing.assert_array_equal(d.to_numpy(), a)


def test_async_copies_on_a_stream(fake):
    s = bc.Stream()
    a = fresh(1000, "float32", 8)
    b = bc.to_device(a, stream=s)
    assert fake.calls("cuMemcpyHtoDAsync") == 1
    out = np.empty_like(a)
    b.copy_to(out, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(out, a)
    np.testing.assert_array_equal(b.to_numpy(stream=s), a)


def test_sync_copy_synchronizes_the_buffer_stream(fake):
    s = bc.Stream()
    b = bc.alloc(16, stream=s)
    n = fake.calls("cuStreamSynchronize")
    b.copy_from(bytes(16))
    assert fake.calls("cuStreamSynchronize") == n + 1


@pytest.mark.parametrize("direction", ["from_host", "to_host", "from_dev", "to_dev"])
def test_size_mismatch_raises_before_any_driver_call(fake, direction):
    b = bc.alloc(16)
    other = bc.alloc(17)
    names = ["cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync", "cuMemcpyPeerAsync",
             "cuStreamSynchronize", "cuEventRecord", "cuStreamWaitEvent"]
    before = {k: fake.calls(k) for k in names}
    with pytest.raises(ValueError, match="size mismatch"):
        if direction == "from_host":
            b.copy_from(bytes(15))
        elif direction == "to_host":
            b.copy_to(bytearray(17))
        elif direction == "from_dev":
            b.copy_from(other)
        else:
            b.copy_to(other)
    assert {k: fake.calls(k) for k in names} == before


def test_non_contiguous_and_readonly_are_clear_errors(fake):
    a = np.arange(20, dtype=np.float32)[::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        bc.to_device(a)
    b = bc.alloc(40)
    with pytest.raises(ValueError, match="C-contiguous"):
        b.copy_from(a)
    with pytest.raises(ValueError, match="C-contiguous"):
        b.copy_to(np.empty(20, np.float32)[::2])
    with pytest.raises(ValueError, match="read-only"):
        b.copy_to(bytes(40))
    with pytest.raises(TypeError):
        b.copy_from(12345)


# ------------------------------------------------------------------ memset
@pytest.mark.parametrize("width,dtype", [(8, np.uint8), (16, np.uint16), (32, np.uint32)])
@pytest.mark.parametrize("count", [0, 1, 5, 1000])
def test_memset_widths(fake, width, dtype, count):
    value = random.Random(width * 1000 + count).getrandbits(width)
    b = bc.empty(count, dtype)
    b.memset(value, width=width)
    np.testing.assert_array_equal(b.to_numpy(), np.full(count, value, dtype=dtype))


def test_memset_negative_is_twos_complement(fake):
    b = bc.empty(4, np.int32).memset(-2, width=32)
    np.testing.assert_array_equal(b.to_numpy(), np.full(4, -2, np.int32))


@pytest.mark.parametrize("width,value", [(8, 256), (8, -129), (16, 1 << 16), (32, 1 << 32), (32, -(1 << 31) - 1)])
def test_memset_range_errors(fake, width, value):
    b = bc.alloc(16)
    with pytest.raises(OverflowError):
        b.memset(value, width=width)
    assert fake.calls("cuMemsetD8Async") + fake.calls("cuMemsetD16Async") + fake.calls("cuMemsetD32Async") == 0


def test_memset_size_and_width_checks(fake):
    with pytest.raises(ValueError, match="multiple"):
        bc.alloc(6).memset(0, width=32)
    with pytest.raises(ValueError, match="width"):
        bc.alloc(8).memset(0, width=64)


def test_zeros(fake):
    z = bc.zeros((4, 4), "float64")
    np.testing.assert_array_equal(z.to_numpy(), np.zeros((4, 4)))


def test_memset_on_stream_is_async(fake):
    s = bc.Stream()
    b = bc.alloc(64, stream=s)
    n = fake.calls("cuStreamSynchronize")
    b.memset(7, stream=s)
    assert fake.calls("cuStreamSynchronize") == n
    s.synchronize()
    assert bytes(b.copy_to()) == bytes([7]) * 64


# ------------------------------------------------------------------ CAI / DLPack
def test_cuda_array_interface(fake):
    b = bc.empty((3, 4), "float32")
    cai = b.__cuda_array_interface__
    assert cai == {"shape": (3, 4), "typestr": "<f4", "descr": [("", "<f4")], "data": (b.ptr, False),
                   "strides": None, "version": 3, "stream": 1}
    s = bc.Stream()
    b2 = bc.empty(2, "uint16", stream=s)
    assert b2.__cuda_array_interface__["stream"] == s.handle_int
    assert b2.__cuda_array_interface__["typestr"] == "<u2"


def test_cai_import_is_a_zero_copy_view(fake):
    a = fresh(50, "float32", 2)
    src = bc.to_device(a)

    class Producer:
        def __init__(self, buf):
            self.buf = buf
            self.__cuda_array_interface__ = dict(buf.__cuda_array_interface__, stream=None)

    prod = Producer(src)
    v = bc.as_device_buffer(prod)
    assert v.ptr == src.ptr and v.shape == (50,) and v.dtype == np.float32 and v.is_view
    assert v.owner is src           # the memory is ours: the import pins its owner (docs/errors.md)
    kept = weakref.ref(prod)
    del prod
    gc.collect()
    assert kept() is not None       # ... and still keeps the producer alive
    np.testing.assert_array_equal(v.to_numpy(), a)
    before = fake.live("mem")
    del v
    gc.collect()
    assert fake.live("mem") == before       # views never free


def test_cai_import_waits_on_producer_stream(fake):
    s = bc.Stream()
    src = bc.empty(8, "float32", stream=s)
    ours = bc.Stream()
    n_wait = fake.calls("cuStreamWaitEvent")
    v = bc.DeviceBuffer.from_cuda_array_interface(src, stream=ours)
    assert fake.calls("cuStreamWaitEvent") == n_wait + 1
    assert v.stream is ours


def test_cai_strided_import_is_a_pointer_only_view(fake):
    b = bc.empty(16, "float32")
    cai = dict(b.__cuda_array_interface__, shape=(4, 2), strides=(16, 4))
    v = bc.as_device_buffer(cai)
    # accepted as a strided view: it spans rows 0..3, 2 of every 4 elements
    assert v.ptr == b.ptr and v.shape == (4, 2) and v.strides == (4, 1)
    assert v.nbytes == (3 * 4 + 1 + 1) * 4
    before = fake.calls("cuMemcpyDtoHAsync") + fake.calls("cuMemcpyDtoDAsync")
    for op in (lambda: v.copy_to(), lambda: v.copy_from(bytes(v.nbytes)), lambda: v.memset(0),
               lambda: bc.to_device(v), lambda: v[0:1]):
        with pytest.raises(ValueError, match=r"contiguous.*(\.contiguous\(\)|ascontiguousarray)"):
            op()
    assert fake.calls("cuMemcpyDtoHAsync") + fake.calls("cuMemcpyDtoDAsync") == before
    ok = dict(b.__cuda_array_interface__, shape=(4, 4), strides=(16, 4))
    w = bc.as_device_buffer(ok)
    assert w.shape == (4, 4) and w.strides is None


@pytest.mark.parametrize("max_version,name", [(None, "dltensor"), ((0, 8), "dltensor"),
                                              ((1, 0), "dltensor_versioned"), ((1, 3), "dltensor_versioned")])
def test_dlpack_capsule_names(fake, max_version, name):
    b = bc.empty((2, 3), "int16")
    cap = b.__dlpack__(max_version=max_version)
    assert type(cap).__name__ == "PyCapsule"
    assert f'"{name}"' in repr(cap)
    assert b.__dlpack_device__() == (2, 0)


@pytest.mark.parametrize("versioned", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint64", "bool", "complex64", "float16"])
def test_dlpack_round_trip_through_our_importer(fake, versioned, dtype):
    a = fresh(12, dtype if dtype not in ("complex64",) else "float32", 4)
    a = a.astype(dtype).reshape(3, 4)
    src = bc.to_device(a)
    cap = src.__dlpack__(max_version=(1, 0) if versioned else None)
    v = bc.as_device_buffer(cap)
    assert v.ptr == src.ptr and v.shape == (3, 4) and v.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(v.to_numpy(), a)
    # the capsule was consumed: the export's reference to src now belongs to v, and
    # the re-import resolved to the owner (v holds src itself too)
    assert '"used_dltensor' in repr(cap)
    assert v.owner is src
    ref = sys.getrefcount(src)
    del v
    gc.collect()
    assert sys.getrefcount(src) == ref - 2     # deleter ran exactly once; the owner let go


def test_unconsumed_capsule_releases_the_exporter(fake):
    src = bc.alloc(32)
    ref = sys.getrefcount(src)
    cap = src.__dlpack__()
    assert sys.getrefcount(src) == ref + 1
    del cap
    assert sys.getrefcount(src) == ref


def test_dlpack_keeps_exporter_alive(fake):
    a = fresh(64, "float64", 9)
    src = bc.to_device(a)
    ptr = src.ptr
    before = fake.live("mem")
    v = bc.DeviceBuffer.from_dlpack(src)
    del src
    gc.collect()
    assert fake.live("mem") == before           # still alive through the view
    np.testing.assert_array_equal(v.to_numpy(), a)
    assert v.ptr == ptr
    del v
    gc.collect()
    assert fake.live("mem") == before - 1


def test_dlpack_stream_handshake(fake):
    s = bc.Stream()
    b = bc.empty(4, "float32", stream=s)
    consumer = bc.Stream()
    n = fake.calls("cuStreamWaitEvent")
    b.__dlpack__(stream=consumer.handle_int)
    assert fake.calls("cuStreamWaitEvent") == n + 1
    b.__dlpack__(stream=-1)                     # no synchronization asked
    assert fake.calls("cuStreamWaitEvent") == n + 1
    b.__dlpack__(stream=s.handle_int)           # same stream: nothing to do
    assert fake.calls("cuStreamWaitEvent") == n + 1
    b.__dlpack__(stream=1)                      # legacy default stream
    assert fake.calls("cuStreamWaitEvent") == n + 2
    legacy = bc.empty(4, "float32")
    legacy.__dlpack__(stream=1)                 # legacy on both sides
    legacy.__dlpack__(stream=None)
    assert fake.calls("cuStreamWaitEvent") == n + 2


def test_dlpack_device_and_copy_flags(fake):
    b = bc.to_device(np.arange(6, dtype=np.int32))
    with pytest.raises(BufferError):
        b.__dlpack__(dl_device=(1, 0))
    b.__dlpack__(dl_device=(2, 0))
    cap = b.__dlpack__(copy=True, max_version=(1, 0))
    v = bc.as_device_buffer(cap)
    assert v.ptr != b.ptr
    np.testing.assert_array_equal(v.to_numpy(), np.arange(6, dtype=np.int32))


def test_numpy_host_array_is_not_a_device_array(fake):
    with pytest.raises(TypeError):
        bc.as_device_buffer(np.arange(3))


def test_view_dtype_and_shape(fake):
    a = fresh(8, "float32", 1)
    b = bc.to_device(a)
    v = b.view("uint32", (2, 4))
    assert v.ptr == b.ptr and v.shape == (2, 4)
    np.testing.assert_array_equal(v.to_numpy(), a.view(np.uint32).reshape(2, 4))
    with pytest.raises(ValueError):
        b.view("float64", (3,))


# ------------------------------------------------------------------ pinned
def test_pinned_buffer_protocol(fake):
    before = fake.live("host_mem")
    p = bc.PinnedBuffer(100)
    assert fake.live("host_mem") == before + 1
    assert p.nbytes == 100 and len(p) == 100 and p.ptr != 0
    m = memoryview(p)
    assert m.format == "B" and m.nbytes == 100 and not m.readonly
    data = rng_bytes(100, 1)
    m[:] = data
    arr = np.asarray(p)
    assert arr.dtype == np.uint8 and arr.tobytes() == data
    with pytest.raises(BufferError):
        p.close()
    del m, arr
    p.close()
    p.close()
    assert p.is_closed
    assert fake.live("host_mem") == before
    with pytest.raises(BufferError):
        memoryview(p)


def test_pinned_copies_both_ways(fake):
    a = fresh(257, "float64", 11)
    h = bc.pinned_empty(a.shape, a.dtype)
    h[...] = a
    s = bc.Stream()
    b = bc.to_device(h, stream=s)
    out = bc.pinned_empty(a.shape, a.dtype)
    b.copy_to(out, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(out, a)


def test_pinned_close_waits_for_async_copy(fake):
    p = bc.PinnedBuffer(64)
    s = bc.Stream()
    b = bc.alloc(64, stream=s)
    b.copy_from(p, stream=s)
    n = fake.calls("cuEventSynchronize")
    p.close()
    assert fake.calls("cuEventSynchronize") == n + 1


@pytest.mark.parametrize("op", ["2d_htod", "2d_dtoh", "3d_htod", "3d_dtoh", "2d_view_htod"])
def test_pinned_close_waits_for_async_pitched_copy(fake, op):
    """copy_2d/copy_3d on a stream with a PinnedBuffer side (or a numpy view of one)
    record their use as 1-D copies do: close() waits for the copy's stream before it
    frees the host memory."""
    p = bc.PinnedBuffer(256)
    s = bc.Stream()
    b = bc.alloc(256, stream=s)
    host = np.frombuffer(p, np.uint8) if op.startswith("2d_view") else p
    rec = fake.calls("cuEventRecord")
    if op.startswith("2d"):
        dst, src = (b, host) if op.endswith("htod") else (host, b)
        bc.copy_2d(dst, src, 16, 16, stream=s)
    else:
        dst, src = (b, host) if op.endswith("htod") else (host, b)
        bc.copy_3d(dst, src, 16, 4, 4, stream=s)
    assert fake.calls("cuEventRecord") == rec + 1       # the guard event, on s
    del host, dst, src
    n, freed = fake.calls("cuEventSynchronize"), fake.live("host_mem")
    p.close()
    assert fake.calls("cuEventSynchronize") == n + 1    # waited for the copy ...
    assert fake.live("host_mem") == freed - 1           # ... then freed
    s.synchronize()


def test_pinned_pitched_copy_without_stream_records_nothing(fake):
    """Synchronous pitched copies are complete on return: no guard event."""
    p = bc.PinnedBuffer(256)
    b = bc.alloc(256)
    rec = fake.calls("cuEventRecord")
    bc.copy_2d(b, p, 16, 16)
    bc.copy_3d(p, b, 16, 4, 4)
    assert fake.calls("cuEventRecord") == rec
    n = fake.calls("cuEventSynchronize")
    p.close()
    assert fake.calls("cuEventSynchronize") == n


def test_pinned_mapped_and_failures(fake):
    p = bc.PinnedBuffer(64, mapped=True)
    assert p.mapped and p.device_ptr == p.ptr      # the double maps at the same address
    q = bc.PinnedBuffer(64)
    with pytest.raises(ValueError):
        q.device_ptr
    before = fake.live("host_mem")
    fake.fail("cuMemHostAlloc", 2)
    with pytest.raises(CudaOutOfMemoryError):
        bc.PinnedBuffer(1 << 20)
    assert fake.live("host_mem") == before
    fake.fail("cuMemHostGetDevicePointer", 1)
    with pytest.raises(bc.CudaError):
        bc.PinnedBuffer(64, mapped=True)
    assert fake.live("host_mem") == before


def test_pinned_destructor_failure_warns(fake):
    p = bc.PinnedBuffer(64)
    fake.fail("cuMemFreeHost", 1)
    with pytest.warns(CudaWarning):
        del p
        gc.collect()


def test_zero_size_pinned(fake):
    p = bc.PinnedBuffer(0)
    assert len(memoryview(p)) == 0
    assert fake.calls("cuMemHostAlloc") == 0


# ------------------------------------------------------------------ other kinds
def test_managed_memory(fake):
    live = fake.live("managed")
    a = fresh(100, "float32", 21)
    m = bc.managed_empty(100, "float32")
    assert m.is_managed and fake.live("managed") == live + 1
    m.copy_from(a)
    np.testing.assert_array_equal(m.to_numpy(), a)
    m.prefetch(0).prefetch("cpu").advise("read_mostly", 0).advise("preferred_location", None)
    assert fake.calls("cuMemPrefetchAsync") == 2 and fake.calls("cuMemAdvise") == 2
    with pytest.raises(ValueError):
        m.advise("sideways", 0)
    with pytest.raises(ValueError, match="managed"):
        bc.alloc(16).prefetch(0)
    del m
    gc.collect()
    assert fake.live("managed") == live
    fake.fail("cuMemAllocManaged", 2)
    with pytest.raises(CudaOutOfMemoryError):
        bc.managed_empty(10)
    assert fake.live("managed") == live


@pytest.mark.parametrize("width,height", [(1, 1), (10, 3), (513, 7)])
def test_pitched_copy_2d_round_trip(fake, width, height):
    buf, pitch = bc.alloc_pitch(width, height)
    assert pitch >= width and buf.nbytes == pitch * height
    h = fresh(width * height, "uint8", width).reshape(height, width)
    bc.copy_2d(buf, h, width, height, dst_pitch=pitch)
    out = np.zeros_like(h)
    bc.copy_2d(out, buf, width, height, src_pitch=pitch)
    np.testing.assert_array_equal(out, h)
    # device to device, into a sub-rectangle of a wider host image
    big = np.zeros((height + 2, width + 5), np.uint8)
    bc.copy_2d(big, buf, width, height, dst_pitch=width + 5, dst_x=3, dst_y=1, src_pitch=pitch)
    np.testing.assert_array_equal(big[1:height + 1, 3:width + 3], h)
    assert big[0].sum() == 0 and big[:, :3].sum() == 0


def test_copy_2d_bounds_checked_before_driver(fake):
    buf = bc.alloc(100)
    with pytest.raises(ValueError):
        bc.copy_2d(buf, bytes(100), 10, 11)              # 110 bytes > 100
    with pytest.raises(ValueError, match="pitch"):
        bc.copy_2d(buf, bytes(100), 10, 5, dst_pitch=8)
    assert fake.calls("cuMemcpy2DAsync") == 0


def test_copy_3d_box(fake):
    a = fresh(4 * 5 * 6, "uint8", 7).reshape(4, 5, 6)
    d = bc.alloc(a.nbytes)
    bc.copy_3d(d, a, 6, 5, 4)
    np.testing.assert_array_equal(d.to_numpy().reshape(4, 5, 6), a)
    # a 2x3x4 sub-box starting at (x=1, y=1, z=1)
    out = np.zeros((2, 3, 4), np.uint8)
    bc.copy_3d(out, d, 4, 3, 2, src_pitch=6, src_height=5, src_pos=(1, 1, 1))
    np.testing.assert_array_equal(out, a[1:3, 1:4, 1:5])


def test_register_host(fake):
    arr = fresh(4096, "uint8", 3)
    live = fake.live("host_register")
    with bc.register_host(arr, mapped=True) as r:
        assert fake.live("host_register") == live + 1
        assert r.nbytes == 4096 and r.ptr == arr.ctypes.data
        assert r.device_ptr != 0
        b = bc.to_device(arr)
        np.testing.assert_array_equal(b.to_numpy(), arr)
    assert fake.live("host_register") == live
    r.close()
    fake.fail("cuMemHostRegister", 1)
    with pytest.raises(bc.CudaError):
        bc.register_host(arr)
    assert fake.live("host_register") == live
    with pytest.raises(ValueError, match="read-only"):
        bc.register_host(bytes(10))
    bc.register_host(bytes(10), read_only=True).close()


def test_fractional_sizes_are_refused(fake):
    with pytest.raises(TypeError):
        bc.alloc(1.5)
    with pytest.raises(TypeError):
        bc.alloc(16).memset(1.7)


# CUDA leaves an overlapping copy within one allocation undefined: refused with ValueError
# before the driver (docs/errors.md, "Overlapping copies"; issue 21).
def test_overlapping_copy_refused(fake):
    b = bc.alloc(1024)
    b.memset(7)
    before = fake.calls("cuMemcpyDtoDAsync")
    for dst, src in ((b[0:512], b[256:768]), (b[256:768], b[0:512]), (b, b), (b[0:512], b.view()[100:612])):
        with pytest.raises(ValueError, match="overlapping copy"):
            dst.copy_from(src)
    with pytest.raises(ValueError, match="overlapping copy"):
        b[0:512].copy_to(b[1:513])
    assert fake.calls("cuMemcpyDtoDAsync") == before          # refused before the driver
    b[0:512].copy_from(b[512:1024])                             # adjacent, not overlapping: fine
    b.close()


def test_overlapping_pitched_copy_refused(fake):
    """copy_2d/copy_3d within one allocation: rows that share a byte are refused before
    the driver; boxes side by side (interleaved rows, one envelope) pass and copy."""
    pitch, rows = 64, 16
    b = bc.alloc(pitch * rows)
    b.copy_from(bytes(range(256)) * (pitch * rows // 256))
    before = fake.calls("cuMemcpy2DAsync") + fake.calls("cuMemcpy3DAsync")
    with pytest.raises(ValueError, match="overlapping copy"):      # same rows, shifted 8 bytes
        bc.copy_2d(b, b, 16, 4, dst_pitch=pitch, src_pitch=pitch, dst_x=8, src_x=0)
    with pytest.raises(ValueError, match="overlapping copy"):      # one row down, pitch apart
        bc.copy_2d(b, b, 16, 4, dst_pitch=pitch, src_pitch=pitch, dst_y=1)
    with pytest.raises(ValueError, match="overlapping copy"):      # src's pitch lands on dst's last row
        bc.copy_2d(b, b, 8, 3, dst_pitch=pitch, src_pitch=2 * pitch, dst_y=4, src_y=0)
    with pytest.raises(ValueError, match="overlapping copy"):
        bc.copy_3d(b, b, 8, 2, 2, dst_pitch=pitch, src_pitch=pitch, dst_height=4, src_height=4,
                   dst_pos=(4, 1, 1), src_pos=(0, 1, 1))
    assert fake.calls("cuMemcpy2DAsync") + fake.calls("cuMemcpy3DAsync") == before
    # Left half of each row to its right half: the envelopes overlap, no byte does.
    host = bytearray(b.copy_to())
    bc.copy_2d(b, b, 32, rows, dst_pitch=pitch, src_pitch=pitch, dst_x=32, src_x=0)
    for r in range(rows):
        host[r * pitch + 32:r * pitch + 64] = host[r * pitch:r * pitch + 32]
    assert bytes(b.copy_to()) == bytes(host)
    # Even rows onto odd rows: two views of one allocation, a pitch of two rows each.
    bc.copy_2d(b[pitch:], b, pitch, rows // 2, dst_pitch=2 * pitch, src_pitch=2 * pitch)
    for r in range(0, rows, 2):
        host[(r + 1) * pitch:(r + 2) * pitch] = host[r * pitch:(r + 1) * pitch]
    assert bytes(b.copy_to()) == bytes(host)
    b.close()
