"""DeviceBuffer, PinnedBuffer, copies and interop on a real GPU (run with --gpu).

Every check compares against numpy on fresh random data.
"""
import gc

import pytest

np = pytest.importorskip("numpy")

import barecuda as bc
from _helpers import fresh

pytestmark = pytest.mark.gpu

SIZES = [1, 7, 1000003, 2**24 + 17]
DTYPES = ["float32", "float64", "int8", "uint64", "int32", "float16", "bool"]


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip(n, dtype, rng):
    a = fresh(n, dtype, rng)
    b = bc.to_device(a)
    assert b.shape == a.shape and b.dtype == a.dtype
    np.testing.assert_array_equal(b.to_numpy(), a)


@pytest.mark.parametrize("n", SIZES)
def test_async_round_trip_on_stream(n, rng):
    a = fresh(n, "float32", rng)
    s = bc.Stream()
    b = bc.to_device(a, stream=s)
    out = np.empty_like(a)
    b.copy_to(out, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(out, a)
    b2 = bc.empty(n, "float32", stream=s)
    b2.copy_from(b, stream=s)
    np.testing.assert_array_equal(b2.to_numpy(stream=s), a)


@pytest.mark.parametrize("n", [1, 7, 1000003])
def test_device_to_device_and_copy(n, rng):
    a = fresh(n, "uint64", rng)
    src = bc.to_device(a)
    dst = bc.empty(n, "uint64").copy_from(src)
    np.testing.assert_array_equal(dst.to_numpy(), a)
    np.testing.assert_array_equal(src.copy().to_numpy(), a)


@pytest.mark.parametrize("width,dtype", [(8, np.uint8), (16, np.uint16), (32, np.uint32)])
@pytest.mark.parametrize("n", [1, 7, 1000003])
def test_memset(width, dtype, n, rng):
    value = int(rng.integers(1, 1 << width))
    b = bc.to_device(fresh(n, dtype, rng))
    b.memset(value, width=width)
    np.testing.assert_array_equal(b.to_numpy(), np.full(n, value, dtype=dtype))
    s = bc.Stream()
    b.memset(value ^ 1, width=width, stream=s)
    np.testing.assert_array_equal(b.to_numpy(stream=s), np.full(n, value ^ 1, dtype=dtype))


def test_zeros_are_zero(rng):
    b = bc.to_device(fresh(4099, "float32", rng))
    del b
    z = bc.zeros(4099, "float32")          # may well reuse the same (non-zero) memory
    np.testing.assert_array_equal(z.to_numpy(), np.zeros(4099, np.float32))


@pytest.mark.parametrize("n", [1, 7, 1000003, 2**24 + 17])
def test_pinned_round_trip(n, rng):
    a = fresh(n, "float32", rng)
    h = bc.pinned_empty(n, "float32")
    h[:] = a
    s = bc.Stream()
    b = bc.to_device(h, stream=s)
    out = bc.pinned_empty(n, "float32")
    b.copy_to(out, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(out, a)


def test_mapped_pinned_is_visible_from_device(rng):
    a = fresh(1000, "int32", rng)
    p = bc.PinnedBuffer(a.nbytes, mapped=True)
    np.frombuffer(p, dtype=np.int32)[:] = a
    view = bc.as_device_buffer({"shape": (1000,), "typestr": "<i4", "data": (p.device_ptr, False),
                                "version": 3, "strides": None})
    np.testing.assert_array_equal(view.to_numpy(), a)


def test_drop_buffer_with_queued_work_is_safe(rng):
    # Queue a lot of copies on a stream that read `src`, drop `src` at once: the
    # stream-ordered free must wait for them.
    a = fresh(2**22, "float32", rng)
    s = bc.Stream()
    src = bc.to_device(a, stream=s)
    outs = [bc.empty(a.shape, "float32", stream=s) for _ in range(8)]
    for o in outs:
        o.copy_from(src, stream=s)
    del src
    gc.collect()
    junk = [bc.to_device(np.zeros(2**22, np.float32), stream=s) for _ in range(4)]
    s.synchronize()
    for o in outs:
        np.testing.assert_array_equal(o.to_numpy(), a)
    del junk


# ------------------------------------------------------------------ torch
@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return torch


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int64", "float16", "bool", "uint8"])
def test_torch_from_dlpack_reads_our_values(torch, dtype, rng):
    a = fresh(1000003, dtype, rng).reshape(1000003, 1)
    b = bc.to_device(a)
    t = torch.from_dlpack(b)
    assert t.device.type == "cuda" and tuple(t.shape) == a.shape
    np.testing.assert_array_equal(t.cpu().numpy(), a)
    # our export keeps our buffer alive
    del b
    gc.collect()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(t.cpu().numpy(), a)


def test_torch_from_dlpack_on_stream(torch, rng):
    a = fresh(2**20, "float32", rng)
    s = bc.Stream()
    b = bc.to_device(a, stream=s)
    t = torch.from_dlpack(b)            # torch's current stream waits for ours
    np.testing.assert_array_equal(t.cpu().numpy(), a)


def test_torch_tensor_imports_zero_copy_and_stays_alive(torch, rng):
    a = fresh(1000003, "float32", rng)
    t = torch.from_numpy(a).cuda()
    v = bc.as_device_buffer(t)
    assert v.ptr == t.data_ptr() and v.shape == (1000003,) and v.dtype == np.float32
    del t
    gc.collect()
    torch.cuda.empty_cache()
    np.testing.assert_array_equal(v.to_numpy(), a)


def test_torch_cai_import(torch, rng):
    a = fresh(4097, "int32", rng)
    t = torch.from_numpy(a).cuda()
    v = bc.DeviceBuffer.from_cuda_array_interface(t)
    del t
    gc.collect()
    torch.cuda.empty_cache()
    np.testing.assert_array_equal(v.to_numpy(), a)


def test_torch_writes_through_our_view(torch, rng):
    a = fresh(1000, "float32", rng)
    b = bc.to_device(a)
    t = torch.from_dlpack(b)
    t.mul_(2)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(b.to_numpy(), a * 2)


def test_torch_non_contiguous_is_a_pointer_view_that_copies_refuse(torch):
    # docs/interop.md: a strided import is a pointer-only view (a kernel may use it, as CUDA C
    # would); a copy that needs contiguous memory refuses it and says how to fix it.
    base = torch.arange(20, device="cuda", dtype=torch.float32)
    t = base[::2]
    v = bc.as_device_buffer(t)
    assert v.ptr == t.data_ptr() == base.data_ptr()
    with pytest.raises((BufferError, ValueError), match="contiguous"):
        v.to_numpy()


def test_copy_from_torch_tensor(torch, rng):
    a = fresh(1000, "float64", rng)
    t = torch.from_numpy(a).cuda()
    b = bc.empty(1000, "float64").copy_from(t)
    np.testing.assert_array_equal(b.to_numpy(), a)


# ------------------------------------------------------------------ CuPy
@pytest.fixture
def cupy():
    cupy = pytest.importorskip("cupy")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception:
        pytest.skip("CuPy has no CUDA")
    return cupy


@pytest.mark.parametrize("dtype", ["float32", "int16", "uint64", "complex64"])
def test_cupy_asarray_and_from_dlpack(cupy, dtype, rng):
    a = fresh(1000003, "float32" if dtype == "complex64" else dtype, rng).astype(dtype)
    b = bc.to_device(a)
    c1 = cupy.asarray(b)
    assert c1.data.ptr == b.ptr
    np.testing.assert_array_equal(cupy.asnumpy(c1), a)
    c2 = cupy.from_dlpack(b)
    np.testing.assert_array_equal(cupy.asnumpy(c2), a)


def test_cupy_array_imports_and_stays_alive(cupy, rng):
    a = fresh(1000003, "float64", rng)
    c = cupy.asarray(a)
    v = bc.as_device_buffer(c)
    assert v.ptr == c.data.ptr
    del c
    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()
    np.testing.assert_array_equal(v.to_numpy(), a)
    c2 = cupy.asarray(a)
    v2 = bc.DeviceBuffer.from_cuda_array_interface(c2)
    del c2
    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()
    np.testing.assert_array_equal(v2.to_numpy(), a)


# ------------------------------------------------------------------ other kinds
def test_managed_round_trip_prefetch_advise(rng):
    a = fresh(1000003, "float32", rng)
    m = bc.managed_empty(a.shape, "float32")
    m.copy_from(a)
    dev = bc.Device(0)
    if dev.attribute("concurrent_managed_access"):
        s = bc.Stream()
        m.advise("preferred_location", 0).advise("accessed_by", 0)
        m.prefetch(0, stream=s)
        s.synchronize()
        m.prefetch("cpu", stream=s)
        s.synchronize()
    np.testing.assert_array_equal(m.to_numpy(), a)
    out = bc.empty(a.shape, "float32").copy_from(m)
    np.testing.assert_array_equal(out.to_numpy(), a)


@pytest.mark.parametrize("width,height", [(1, 1), (7, 3), (1000, 517)])
def test_pitched_2d(width, height, rng):
    h = fresh(width * height, "uint8", rng).reshape(height, width)
    buf, pitch = bc.alloc_pitch(width, height)
    assert pitch >= width
    bc.copy_2d(buf, h, width, height, dst_pitch=pitch)
    out = np.zeros_like(h)
    bc.copy_2d(out, buf, width, height, src_pitch=pitch)
    np.testing.assert_array_equal(out, h)
    s = bc.Stream()
    buf2, pitch2 = bc.alloc_pitch(width, height)
    bc.copy_2d(buf2, buf, width, height, dst_pitch=pitch2, src_pitch=pitch, stream=s)
    out2 = np.zeros_like(h)
    bc.copy_2d(out2, buf2, width, height, src_pitch=pitch2, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(out2, h)


def test_copy_3d(rng):
    a = fresh(17 * 19 * 23, "uint8", rng).reshape(17, 19, 23)
    d = bc.alloc(a.nbytes)
    bc.copy_3d(d, a, 23, 19, 17)
    out = np.zeros((5, 6, 7), np.uint8)
    bc.copy_3d(out, d, 7, 6, 5, src_pitch=23, src_height=19, src_pos=(2, 3, 4))
    np.testing.assert_array_equal(out, a[4:9, 3:9, 2:9])


def test_register_host_copies(rng):
    a = fresh(2**22 + 3, "float32", rng)
    out = np.empty_like(a)
    s = bc.Stream()
    with bc.register_host(a), bc.register_host(out):
        b = bc.to_device(a, stream=s)
        b.copy_to(out, stream=s)
        s.synchronize()
    np.testing.assert_array_equal(out, a)


def test_pinned_pool_on_gpu(rng):
    pp = bc.PinnedMemoryPool(0)
    s = bc.Stream()
    a = fresh(1 << 20, "float32", rng)
    for _ in range(5):
        h = pp.array(a.shape, "float32")
        h[:] = a
        d = bc.to_device(h, stream=s)
        back = pp.array(a.shape, "float32")
        d.copy_to(back, stream=s)
        s.synchronize()
        np.testing.assert_array_equal(back, a)
        del h, back, d
    assert pp.stats()["driver_allocations"] <= 4


def test_peer_copy():
    if bc.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    rng = np.random.default_rng()
    a = fresh(1000003, "float64", rng)
    d0 = bc.to_device(a, device=0)
    d1 = bc.empty(a.shape, "float64", device=1)
    d1.copy_from(d0)
    np.testing.assert_array_equal(d1.to_numpy(), a)
    if bc.Device(1).can_access_peer(0):
        bc.Device(1).enable_peer_access(0)
        s = bc.Stream(1)
        d2 = bc.empty(a.shape, "float64", stream=s)
        d2.copy_from(d0, stream=s)
        np.testing.assert_array_equal(d2.to_numpy(stream=s), a)
