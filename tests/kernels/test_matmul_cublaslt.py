"""matmul(backend="cublaslt") and the cuBLASLt half of backend="auto" (kernels/_cublaslt.pyx;
its op hits: kernels/_oplt.pyx).

CPU: the library lookup (the one finder, the pip package named when missing), "auto"
falling back to the builtin kernels, the argument checks on the driver double, and the
recorded call re-issued from C (the driver double + tests/kernels/fake_cublaslt.c, in a
child interpreter).
GPU (--gpu, where libcublasLt loads): float64 numpy references on fresh random data,
alpha/beta and broadcast batches, plans and graph capture, op hits on new data.
"""
import numpy as np
import pytest

import barecuda as bc
from barecuda.kernels import _matmul as MM

from _matmul_helpers import (assert_matches_float64, fake, from_dev, needs_lt, no_cublaslt,  # noqa: F401
                             random_operands, to_dev)

gpu = pytest.mark.gpu


def test_cublaslt_lookup_follows_the_one_finder(monkeypatch, tmp_path):
    from barecuda import _libfind
    from barecuda.kernels import _cublaslt
    assert _libfind.CUBLASLT.packages[13][0] == "nvidia-cublas"
    assert _libfind.CUBLASLT.packages[12][0] == "nvidia-cublas-cu12"
    monkeypatch.delenv("BARECUDA_CUBLASLT", raising=False)
    assert _cublaslt.candidates() == _libfind.candidates(_libfind.CUBLASLT)
    assert any("libcublasLt.so.13" in c for c in _cublaslt.candidates())
    f = tmp_path / "libcublasLt.so.13"
    monkeypatch.setenv("BARECUDA_CUBLASLT", str(f))
    assert _cublaslt.candidates() == [str(f)]


def test_cublaslt_missing_library_names_the_package(tmp_path):
    """In a child interpreter (a library this process already opened stays loaded)."""
    import os
    import subprocess
    import sys
    code = ("from barecuda.kernels import _cublaslt\n"
            "from barecuda._errors import _LibraryNotFoundError\n"
            "assert _cublaslt.is_available() is False\n"
            "try:\n"
            "    _cublaslt.load()\n"
            "except _cublaslt.CublasLtNotFoundError as e:\n"
            "    assert isinstance(e, _LibraryNotFoundError) and isinstance(e, OSError) and e.tried\n"
            "    print(e)\n"
            "else:\n"
            "    raise SystemExit('loaded')\n")
    env = dict(os.environ, BARECUDA_CUBLASLT=str(tmp_path / "libcublasLt.so.13"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "pip install nvidia-cublas" in r.stdout and "BARECUDA_CUBLASLT" in r.stdout


def test_cublaslt_backend_missing_raises_and_auto_falls_back(fake, no_cublaslt):
    from barecuda.kernels import _cublaslt
    a = bc.empty((256, 128), "bfloat16")
    b = bc.empty((128, 256), "bfloat16")
    n0 = fake.launch_count()
    with pytest.raises(_cublaslt.CublasLtNotFoundError, match="nvidia-cublas"):
        MM.matmul(a, b, backend="cublaslt")
    with pytest.raises(_cublaslt.CublasLtNotFoundError, match="nvidia-cublas"):
        MM.plan_matmul(a, b, out=bc.empty((256, 256), "bfloat16"), backend="cublaslt")
    assert fake.launch_count() == n0
    MM.matmul(a, b, backend="auto")                   # builtin, and remembered
    assert fake.last_launch().name in ("gemm_tc_bf16", "gemm_wg_bf16") and fake.launch_count() == n0 + 1
    assert 0 in MM._lt_broken
    MM.matmul(bc.empty((64, 64), "float32"), bc.empty((64, 64), "float32"))
    assert fake.last_launch().name == "gemm_simt_f32"


def test_cublaslt_argument_checks(fake, no_cublaslt):
    a = bc.empty((64, 32), "float16")
    with pytest.raises(ValueError, match="backend"):
        MM.plan_matmul(a, bc.empty((32, 48), "float16"), backend="cuBLAS")
    # no unit stride in either dimension: a layout cuBLASLt cannot read (checked before loading it)
    base = bc.empty((64, 64), "float16")

    class Strided:       # every other row and column: element strides (128, 2)
        __cuda_array_interface__ = {"shape": (32, 32), "typestr": "<f2", "data": (base.ptr, False),
                                    "strides": (256, 4), "version": 3}
    strided = Strided()
    with pytest.raises(ValueError, match="unit stride"):
        MM.matmul(strided, bc.empty((32, 8), "float16"), backend="cublaslt")
    assert MM._lt_layout(am=1, ak=64, m=64, k=32, bk=1, bn=32, n=48) == (True, 64, True, 32)
    assert MM._lt_layout(am=40, ak=1, m=7, k=33, bk=48, bn=1, n=48) == (False, 40, False, 48)
    assert MM._lt_layout(am=2, ak=128, m=32, k=32, bk=48, bn=1, n=48) is None
    assert not MM._auto_prefers_lt("bf16", 16, 16, 16, 1) and MM._auto_prefers_lt("bf16", 64, 64, 64, 1)
    assert not MM._auto_prefers_lt("f32", 64, 64, 64, 1) and MM._auto_prefers_lt("f32", 128, 128, 128, 1)
    assert MM._auto_prefers_lt("bf16", 4096, 4096, 4096, 1) and MM._auto_prefers_lt("bf16", 16, 16, 64, 16)
    # Closed here: on a free-threaded 3.13t the local class above (its body names `base`)
    # may outlive the test until a later collection, and the leak check runs first.
    base.close()
    a.close()


# The recorded cuBLASLt call, on the driver double with the cuBLASLt double
# (tests/kernels/fake_cublaslt.c: cublasLtMatmul records its arguments), in a child
# interpreter: a library this process opened stays loaded, and the other tests need none.
_LT_RECORD_CHILD = r"""
import ctypes, gc, os, sys
import barecuda as bc
from barecuda.kernels import _matmul as MM, _opcall as O, _cublaslt
lt = ctypes.CDLL(os.environ["BARECUDA_CUBLASLT"])
last = (ctypes.c_uint64 * 8)()
ab = (ctypes.c_float * 2)()


def issued():
    lt.fake_lt_last(last, ab)
    return list(last[:7]), (ab[0], ab[1])


def buf(shape):
    return bc.zeros(shape, "float16", stream=s)


s, s2 = bc.Stream(), bc.Stream()
m, n, k = 96, 80, 64
a, b, o = buf((m, k)), buf((k, n)), buf((m, n))
h0, m0, r0 = O.stats()
assert MM.matmul(a, b, out=o, backend="cublaslt", stream=s) is o
assert O.stats() == (h0, m0 + 1, r0 + 1) and MM.matmul.memo_size == 1 and lt.fake_lt_calls() == 1
ws = MM._lt_ws[(0, s.handle_int)]
# cuBLAS's A is our b, its B our a; C = D = out; the stream's workspace
want = [b.ptr, a.ptr, o.ptr, o.ptr, ws.ptr, ws.nbytes, s.handle_int]
assert issued() == (want, (1.0, 0.0)), (issued(), want)
# a hit: new arrays of the same signature, issued from C with their addresses
a2, b2, o2 = buf((m, k)), buf((k, n)), buf((m, n))
assert MM.matmul(a2, b2, out=o2, backend="cublaslt", stream=s) is o2
assert O.stats()[:2] == (h0 + 1, m0 + 1) and lt.fake_lt_calls() == 2
assert issued() == ([b2.ptr, a2.ptr, o2.ptr, o2.ptr, ws.ptr, ws.nbytes, s.handle_int], (1.0, 0.0))
# alpha/beta by value: another record, issued with its values
assert MM.matmul(a, b, out=o, alpha=0.5, beta=-2.0, backend="cublaslt", stream=s) is o
assert MM.matmul(a2, b2, out=o2, alpha=0.5, beta=-2.0, backend="cublaslt", stream=s) is o2
assert O.stats()[:2] == (h0 + 2, m0 + 2) and issued()[1] == (0.5, -2.0) and issued()[0][0] == b2.ptr
# another stream: a miss (its own workspace, made by the Python path), then hits there;
# the record is that stream's now (one record per signature), the first stream misses once
h, mi = O.stats()[:2]
MM.matmul(a, b, out=o, backend="cublaslt", stream=s2)
ws2 = MM._lt_ws[(0, s2.handle_int)]
assert ws2.ptr != ws.ptr and issued()[0][4:] == [ws2.ptr, ws2.nbytes, s2.handle_int]
MM.matmul(a2, b2, out=o2, backend="cublaslt", stream=s2)
assert O.stats()[:2] == (h + 1, mi + 1) and issued()[0][:1] + issued()[0][4:] == [b2.ptr, ws2.ptr, ws2.nbytes,
                                                                                   s2.handle_int]
MM.matmul(a, b, out=o, backend="cublaslt", stream=s)
MM.matmul(a, b, out=o, backend="cublaslt", stream=s)
assert O.stats()[:2] == (h + 2, mi + 2) and issued()[0][4:] == [ws.ptr, ws.nbytes, s.handle_int]
assert MM.matmul.memo_size == 2
# out=None: a new output each hit, made as the Python path makes it
h, mi = O.stats()[:2]
r1 = MM.matmul(a, b, backend="cublaslt", stream=s)
r2 = MM.matmul(a2, b2, backend="cublaslt", stream=s)
assert O.stats()[:2] == (h + 1, mi + 1)
assert type(r2) is bc.DeviceBuffer and r2 is not r1 and r2.ptr != r1.ptr and tuple(r2.shape) == (m, n)
assert str(r2.dtype) == "float16" and issued()[0][:4] == [b2.ptr, a2.ptr, r2.ptr, r2.ptr]
# a changed geometry, and "auto" (which takes cuBLASLt here): misses, then hits
h, mi = O.stats()[:2]
for _ in range(2):
    MM.matmul(a, buf((k, n + 8)), out=buf((m, n + 8)), backend="cublaslt", stream=s)
    MM.matmul(a, b, out=o, stream=s)
assert O.stats()[:2] == (h + 2, mi + 2) and issued()[0][0] == b.ptr
# the launch switch: released GIL, the same call
bc.set_launch_releases_gil(True)
try:
    MM.matmul(a2, b2, out=o2, backend="cublaslt", stream=s)
finally:
    bc.set_launch_releases_gil(False)
assert O.stats()[0] == h + 3 and issued()[0][0] == b2.ptr
# a cuBLASLt status: CublasLtError on a hit, as Matmul.run raises it
lt.fake_lt_fail(13)
try:
    MM.matmul(a, b, out=o, backend="cublaslt", stream=s)
except _cublaslt.CublasLtError as e:
    assert (e.status, e.call, e.name) == (13, "cublasLtMatmul", "CUBLAS_STATUS_EXECUTION_FAILED"), e
else:
    raise SystemExit("no CublasLtError")
lt.fake_lt_fail(0)
# the caches own the Matmul and the workspace: once dropped, the next call takes the
# Python path (which makes them again) and is recorded again
del ws, ws2
for clear in (MM._lt_cache.clear, MM._lt_ws.clear):
    clear()
    gc.collect()
    h, mi = O.stats()[:2]
    MM.matmul(a, b, out=o, backend="cublaslt", stream=s)
    MM.matmul(a, b, out=o, backend="cublaslt", stream=s)
    assert O.stats()[:2] == (h + 1, mi + 1), clear
# under stream capture: the Python path, every call (as before the record); hits after
h, mi = O.stats()[:2]
n0 = lt.fake_lt_calls()
with s.capture() as g:
    MM.matmul(a, b, out=o, backend="cublaslt", stream=s)
    MM.matmul(a2, b2, out=o2, backend="cublaslt", stream=s)
assert O.stats()[:2] == (h, mi + 2) and lt.fake_lt_calls() == n0 + 2 and issued()[0][6] == s.handle_int
MM.matmul(a, b, out=o, backend="cublaslt", stream=s)
assert O.stats()[:2] == (h + 1, mi + 2)
# a closed stream after hits on it: the Python path's error
s3 = bc.Stream()
MM.matmul(a, b, out=o, backend="cublaslt", stream=s3)
MM.matmul(a, b, out=o, backend="cublaslt", stream=s3)
s3.close()
n0 = lt.fake_lt_calls()
try:
    MM.matmul(a, b, out=o, backend="cublaslt", stream=s3)
except ValueError as e:
    assert "closed" in str(e) and lt.fake_lt_calls() == n0, e
else:
    raise SystemExit("a closed stream was accepted")
# a closed buffer: the Python path's error
a2.close()
try:
    MM.matmul(a2, b2, out=o2, backend="cublaslt", stream=s)
except ValueError as e:
    assert "closed" in str(e)
else:
    raise SystemExit("a closed buffer was accepted")
# Matmul(heuristic=i) takes the heuristic's rank i (the double ranks 4: rank i needs (i + 1) MiB)
lt.fake_lt_last_algo.restype = ctypes.c_uint64
dev = bc.Device(0)
geo = (dev, "float16", m, n, k, False, k, False, n, n)
assert _cublaslt.Matmul(*geo).heuristic == 0 and _cublaslt.Matmul(*geo).workspace_size == 1 << 20
mm3 = _cublaslt.Matmul(*geo, heuristic=3)
assert (mm3.heuristic, mm3.workspace_size) == (3, 4 << 20)
wsb = bc.empty((4 << 20,), "uint8")
mm3.run(a.ptr, b.ptr, o.ptr, workspace=wsb.ptr, workspace_bytes=wsb.nbytes, stream=s)
assert lt.fake_lt_last_algo() == 4, lt.fake_lt_last_algo()
try:
    mm3.run(a.ptr, b.ptr, o.ptr, workspace=wsb.ptr, workspace_bytes=3 << 20, stream=s)
except ValueError as e:
    assert "4194304" in str(e), e
else:
    raise SystemExit("a workspace under the rank's need was accepted")
for bad, says in ((4, "offers 4 algorithms for this geometry (ranks 0 to 3)"), (-1, "a rank from 0 to 15"),
                  (16, "a rank from 0 to 15")):
    try:
        _cublaslt.Matmul(*geo, heuristic=bad)
    except ValueError as e:
        assert says in str(e), e
    else:
        raise SystemExit(f"heuristic={bad} was accepted")
assert _cublaslt.MAX_HEURISTIC == 15
print("ok")
"""


def test_cublaslt_call_is_recorded_and_reissued(fake, fake_lib_path, tmp_path):
    """matmul(backend="cublaslt"/"auto") is an op hit: the record's pointers (new arrays,
    out=None), alpha/beta by value, a miss on another stream (its own workspace) and on a
    new geometry, the Matmul and workspace held weakly, CublasLtError from a hit, the
    Python path under capture; on the drivers' doubles."""
    import os
    import shutil
    import subprocess
    import sys
    # the C compiler as tests/conftest.py picks it for the driver double (not imported from
    # there: in a whole-suite run the name `conftest` may be another folder's conftest.py)
    cc = os.environ.get("CC", "").split() or [n for n in ("cc", "gcc", "clang") if shutil.which(n)][:1]
    if not cc:
        pytest.skip("no C compiler")
    lib = tmp_path / "libcublasLt.so.13"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run(cc + ["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-std=gnu11", "-I",
                                      os.path.join(root, "include"), os.path.join(os.path.dirname(__file__),
                                                                                  "fake_cublaslt.c"),
                                      "-o", str(lib)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    env = dict(os.environ, BARECUDA_CUBLASLT=str(lib), BARECUDA_LIBCUDA=fake_lib_path)
    r = subprocess.run([sys.executable, "-c", _LT_RECORD_CHILD], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


# ------------------------------------------------------------------ GPU
@gpu
@needs_lt
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_cublaslt_matches_float64(dtype, ta, tb):
    assert_matches_float64("cublaslt", dtype, ta, tb, np.random.default_rng(11 + 2 * ta + tb),
                            [(1, 1, 1), (1, 200, 64), (200, 1, 64), (37, 53, 29), (257, 129, 96), (512, 384, 1024)])


@gpu
@needs_lt
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cublaslt_alpha_beta_and_broadcast_batches(dtype):
    rng = np.random.default_rng(4)
    tol = {"float32": 1e-3, "bfloat16": 1e-2}[dtype]
    bt, m, n, k = 3, 136, 72, 80
    for a_shape, b_shape in [((bt, m, k), (k, n)), ((m, k), (bt, k, n)), ((bt, m, k), (bt, k, n))]:
        a = rng.standard_normal(a_shape).astype(np.float32)
        b = rng.standard_normal(b_shape).astype(np.float32)
        c = rng.standard_normal((bt, m, n)).astype(np.float32)
        ad, a64 = to_dev(a, dtype)
        bd, b64 = to_dev(b, dtype)
        cd, c64 = to_dev(c, dtype)
        MM.matmul(ad, bd, out=cd, alpha=0.5, beta=-2.0, backend="cublaslt")
        ref = 0.5 * (a64 @ b64) + -2.0 * c64
        got = from_dev(cd, dtype)
        assert np.abs(got - ref).max() < tol * max(1.0, np.abs(ref).max() if dtype != "float32" else 1.0)


@gpu
@needs_lt
def test_cublaslt_auto_plan_and_graph_capture():
    """auto picks cuBLASLt for a large shape; the cuBLASLt plan replays and records under
    stream capture with its own workspace; replays read the new input."""
    rng = np.random.default_rng(9)
    m, n, k = 256, 192, 320
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    ad, a64 = to_dev(a, "bfloat16")
    bd, b64 = to_dev(b, "bfloat16")
    MM._lt_cache.clear()
    MM._lt_broken.clear()
    got = from_dev(MM.matmul(ad, bd, trans_b=True), "bfloat16")      # auto
    assert any(key[2:5] == (m, n, k) for key in MM._lt_cache), "auto did not take cuBLASLt"
    ref = a64 @ b64.T
    assert np.abs(got - ref).max() < 1e-2 * np.abs(ref).max()
    s = bc.Stream()
    out = bc.empty((m, n), "bfloat16", stream=s)
    p = MM.plan_matmul(ad, bd, trans_b=True, out=out, backend="cublaslt", stream=s)
    p.launch()
    s.synchronize()
    assert np.abs(from_dev(out, "bfloat16") - ref).max() < 1e-2 * np.abs(ref).max()
    with s.capture() as g:
        p.launch(s)
    g.keep_alive(p)
    exe = g.instantiate()
    a2 = rng.standard_normal((m, k)).astype(np.float32)
    a2d, a264 = to_dev(a2, "bfloat16")
    ad.copy_from(a2d, stream=s)
    exe.launch(s)
    s.synchronize()
    ref2 = a264 @ b64.T
    assert np.abs(from_dev(out, "bfloat16") - ref2).max() < 1e-2 * np.abs(ref2).max()


@gpu
@needs_lt
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cublaslt_hits_match_float64(dtype):
    """A repeated cuBLASLt call is an op hit (issued from the record, _oplt): each call on
    new data against float64, on two streams (the first call on each a miss: its own
    workspace), with out=None, and with alpha/beta reading out; under stream capture the
    Python path runs (captured, replayed on new input), hits again after it."""
    from barecuda.kernels import _opcall as O
    MM.matmul.clear()           # (the earlier tests' misses in a row would thin out recording)
    rng = np.random.default_rng(21)
    tol = {"float32": 1e-3, "bfloat16": 1e-2}[dtype]
    m, n, k = 136, 72, 80

    def close(got, ref):
        return np.abs(got - ref).max() < tol * max(1.0, np.abs(ref).max() if dtype != "float32" else 1.0)
    s, s2 = bc.Stream(), bc.Stream()
    hits = O.stats()[0]
    for st in (s, s2, s):
        for _ in range(3):
            ad, bd, ref = random_operands(rng, m, n, k, False, True, dtype)
            out = bc.empty((m, n), dtype, stream=st)
            assert MM.matmul(ad, bd, trans_b=True, out=out, backend="cublaslt", stream=st) is out
            st.synchronize()
            assert close(from_dev(out, dtype), ref)
    assert O.stats()[0] - hits >= 6                    # (the first call on each stream may miss)
    for _ in range(3):                                  # out=None, "auto" (cuBLASLt at this size)
        ad, bd, ref = random_operands(rng, m, n, k, False, True, dtype)
        got = MM.matmul(ad, bd, trans_b=True, stream=s)
        s.synchronize()
        assert close(from_dev(got, dtype), ref)
    for _ in range(3):
        ad, bd, ref = random_operands(rng, m, n, k, True, False, dtype)
        cd, c64 = to_dev(rng.standard_normal((m, n)).astype(np.float32), dtype)
        MM.matmul(ad, bd, trans_a=True, out=cd, alpha=0.5, beta=-2.0, backend="cublaslt", stream=s)
        s.synchronize()
        assert close(from_dev(cd, dtype), 0.5 * ref - 2.0 * c64)
    # stream capture: the Python path (as before the record), captured and replayed
    ad, bd, ref = random_operands(rng, m, n, k, False, True, dtype)
    out = bc.empty((m, n), dtype, stream=s)
    MM.matmul(ad, bd, trans_b=True, out=out, backend="cublaslt", stream=s)
    h, mi = O.stats()[:2]
    with s.capture() as g:
        MM.matmul(ad, bd, trans_b=True, out=out, backend="cublaslt", stream=s)
    assert O.stats()[:2] == (h, mi + 1)
    exe = g.instantiate()
    a2, a264 = to_dev(rng.standard_normal((m, k)).astype(np.float32), dtype)
    ad.copy_from(a2, stream=s)
    exe.launch(s)
    s.synchronize()
    b64 = from_dev(bd, dtype)
    assert close(from_dev(out, dtype), a264 @ b64.T)
    MM.matmul(ad, bd, trans_b=True, out=out, backend="cublaslt", stream=s)
    s.synchronize()
    assert O.stats()[0] == h + 1 and close(from_dev(out, dtype), a264 @ b64.T)


@gpu
@needs_lt
def test_cublaslt_hits_with_torch_tensors():
    """Torch tensors in and out (on torch's current stream): hits return the caller's
    tensor, each call on new tensors matches torch's float64 product; out=None gives a
    DeviceBuffer."""
    torch = pytest.importorskip("torch")
    from barecuda.kernels import _opcall as O
    MM.matmul.clear()
    m, n, k = 192, 136, 96
    g = torch.Generator(device="cuda").manual_seed(5)
    hits = O.stats()[0]
    for _ in range(4):
        ta = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
        tb = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g)
        to = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        assert MM.matmul(ta, tb, trans_b=True, out=to, backend="cublaslt") is to
        ref = ta.double() @ tb.double().T
        assert (to.double() - ref).abs().max().item() < 1e-2 * ref.abs().max().item()
        got = MM.matmul(ta, tb, trans_b=True, backend="cublaslt")
        assert type(got) is bc.DeviceBuffer and tuple(got.shape) == (m, n)
        torch.cuda.synchronize()
        assert np.abs(from_dev(got, "bfloat16") - ref.cpu().numpy()).max() < 1e-2 * ref.abs().max().item()
    if hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):        # keyed tensors (PyTorch 2.10+)
        assert O.stats()[0] - hits >= 6
