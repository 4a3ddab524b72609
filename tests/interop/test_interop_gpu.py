"""Ownership and the interop stream rule on a real GPU (run with --gpu; meant to run
under compute-sanitizer memcheck too). Every check compares against numpy on fresh
random data. CPU counterparts: tests/interop/test_interop.py."""
import gc

import pytest

np = pytest.importorskip("numpy")

import barecuda as bc
from ptx import gpu as ptx_kernels
from _helpers import fresh

pytestmark = pytest.mark.gpu


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.fixture
def vadd():
    return bc.Module.from_ptx(ptx_kernels.VADD).get_kernel("vadd")


def _launch_vadd(vadd, out, a, b, n, stream=None):
    vadd.launch((n + 255) // 256, 256, out, a, b, n, stream=stream)


def test_use_after_close_raises_and_touches_nothing(rng):
    a = fresh(1000, "float32", rng)
    b = bc.to_device(a)
    dst = bc.empty(1000, "float32")
    b.close()
    with pytest.raises(ValueError, match="closed"):
        dst.copy_from(b)
    with pytest.raises(ValueError, match="closed"):
        b.copy_to()
    with pytest.raises(ValueError, match="closed"):
        b.memset(0)


def test_view_stays_valid_after_its_owner_closes(vadd, rng):
    n = 1 << 20
    a, c = fresh(n, "float32", rng), fresh(n, "float32", rng)
    owner = bc.to_device(a)
    v = owner.view("float32")
    owner.close()                                   # deferred: the view holds the memory
    s = bc.Stream()
    out = bc.empty(n, "float32", stream=s)
    _launch_vadd(vadd, out, v, bc.to_device(c), n, stream=s)
    del v
    gc.collect()                                     # the free waits for the launch on s
    s.synchronize()
    np.testing.assert_array_equal(out.to_numpy(), a + c)


def test_slices_as_kernel_arguments(vadd, rng):
    n = 10_000
    a, c = fresh(n, "float32", rng), fresh(n, "float32", rng)
    da, dc = bc.to_device(a), bc.to_device(c)
    out = bc.zeros(n, "float32")
    lo, hi = 1234, 8765
    _launch_vadd(vadd, out[lo:hi], da[lo:hi], dc[lo:hi], hi - lo)
    bc.Device().synchronize()
    want = np.zeros(n, np.float32)
    want[lo:hi] = a[lo:hi] + c[lo:hi]
    np.testing.assert_array_equal(out.to_numpy(), want)
    part = bc.empty(hi - lo, "float32")
    part.copy_from(da[lo:hi])
    np.testing.assert_array_equal(part.to_numpy(), a[lo:hi])


def test_dlpack_export_to_per_thread_stream(rng):
    a = fresh(4096, "int32", rng)
    b = bc.to_device(a, stream=bc.Stream())
    v = bc.as_device_buffer(b.__dlpack__(stream=2))
    np.testing.assert_array_equal(v.to_numpy(), a)


def _torch_or_skip():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return torch


@pytest.mark.parametrize("way", ["launch", "bind", "wrap"])
def test_torch_producer_stream_is_honoured(vadd, rng, way):
    """torch writes on its own stream (a long kernel first), we read on ours: the value
    we see is the one torch wrote, whichever way the tensor reaches the kernel."""
    torch = _torch_or_skip()
    n = 1 << 22
    a, c = fresh(n, "float32", rng), fresh(n, "float32", rng)
    s = bc.Stream()
    out = bc.empty(n, "float32", stream=s)
    dc = bc.to_device(c, stream=s)
    t = torch.from_numpy(a).cuda()
    torch.cuda.synchronize()
    ts = torch.cuda.Stream()
    with torch.cuda.stream(ts):
        big = torch.randn(4096, 4096, device="cuda")
        for _ in range(8):
            big = big @ big / 64                      # keep ts busy ...
        t.mul_(2)                                     # ... then write t, still pending
        if way == "launch":
            _launch_vadd(vadd, out, t, dc, n, stream=s)
        elif way == "bind":
            vadd.bind((n + 255) // 256, 256, out, t, dc, n, stream=s)()
        else:
            _launch_vadd(vadd, out, bc.as_device_buffer(t, stream=s), dc, n, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(out.to_numpy(), a * 2 + c)


def test_torch_tensors_on_torch_streams(vadd, rng):
    """The benchmark row's form: every pointer a torch tensor, stream= a torch stream that
    is torch's current stream. Two torch streams in turn, each passed on every launch
    (the foreign stream is read once per object): each launch runs on its own stream and
    sees what torch wrote there."""
    torch = _torch_or_skip()
    n = 1 << 20
    a, c = fresh(n, "float32", rng), fresh(n, "float32", rng)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = []
    for k, ts in enumerate(streams):
        with torch.cuda.stream(ts):
            ta, tc = torch.from_numpy(a).cuda(), torch.from_numpy(c).cuda()
            big = torch.randn(2048, 2048, device="cuda")
            for _ in range(4):
                big = big @ big / 32
            ta.add_(k + 1)
            out = torch.empty_like(ta)
            for _ in range(3):
                _launch_vadd(vadd, out, ta, tc, n, stream=ts)
        outs.append((ts, out))
    for k, (ts, out) in enumerate(outs):
        ts.synchronize()
        np.testing.assert_array_equal(out.cpu().numpy(), (a + (k + 1)) + c)


def test_copies_take_tensors_directly(rng):
    """copy_from / copy_to / to_device with torch and CuPy arrays (read by the tensor
    reader, no DLPack capsule): the bytes, shape and dtype against numpy."""
    torch = _torch_or_skip()
    a = fresh(3000, "float32", rng)
    t = torch.from_numpy(a).cuda()
    b = bc.empty(3000, "float32").copy_from(t)
    np.testing.assert_array_equal(b.to_numpy(), a)
    out = torch.zeros_like(t)
    b.copy_to(out)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), a)
    d = bc.to_device(t.view(30, 100))
    assert d.shape == (30, 100) and d.dtype == "float32"
    np.testing.assert_array_equal(d.to_numpy(), a.reshape(30, 100))
    with pytest.raises(ValueError, match="contiguous"):
        bc.to_device(t.view(30, 100)[:, 0])
    cp = pytest.importorskip("cupy")
    c = cp.asarray(fresh(500, "int64", rng))
    e = bc.to_device(c)
    assert e.dtype == "int64"
    np.testing.assert_array_equal(e.to_numpy(), cp.asnumpy(c))


def test_torch_wrong_device_and_strided(vadd):
    torch = _torch_or_skip()
    t = torch.zeros(64, 2, device="cuda")
    col = t[:, 0]                                     # strided: fine as a pointer
    out = bc.empty(64, "float32")
    _launch_vadd(vadd, out, col, col, 1)
    v = bc.as_device_buffer(col)
    assert v.strides == (2,)
    with pytest.raises(ValueError, match="contiguous"):
        v.copy_to()
    if torch.cuda.device_count() > 1:
        other = torch.zeros(4, device="cuda:1")
        with pytest.raises(ValueError, match="device 1"):
            _launch_vadd(vadd, out, other, other, 1)


def test_cupy_producer_stream_is_honoured(vadd, rng):
    cp = pytest.importorskip("cupy")
    n = 1 << 22
    a, c = fresh(n, "float32", rng), fresh(n, "float32", rng)
    s = bc.Stream()
    out = bc.empty(n, "float32", stream=s)
    dc = bc.to_device(c, stream=s)
    with cp.cuda.Stream(non_blocking=True):
        x = cp.asarray(a)
        for _ in range(20):
            x = x * 1                                 # pending work on cupy's stream
        _launch_vadd(vadd, out, x, dc, n, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(out.to_numpy(), a + c)
