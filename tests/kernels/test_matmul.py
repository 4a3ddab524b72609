"""matmul (csrc/gemm.cu, csrc/gemm_sm90.cu): tensor-core (mma.sync; wgmma on sm_90a) and SIMT
kernels, transposes, alpha/beta, batches.

CPU: the sources compile with real NVRTC for sm_80/sm_90 (and gemm_sm90.cu for sm_90a: wgmma,
no spills, no wgmma serialization) with no warnings; dispatch (which kernel, grid, leading
dims) and argument checks on the driver double.
GPU (--gpu): float64 numpy references on fresh random data (the spec's fp32 thresholds:
4x4 identity, random shapes < 1e-3), odd shapes and tails, torch.matmul; every test with a
``tile`` runs each mma.sync tile and the wgmma kernel (on compute capability 9.0).
"""
import struct

import numpy as np
import pytest

import barecuda as bc
from barecuda.kernels import _matmul as MM
from barecuda.kernels import _registry

gpu = pytest.mark.gpu


def to_dev(x, dtype):
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "float32":
        return bc.to_device(x), x.astype(np.float64)
    if dtype == "float16":
        h = x.astype(np.float16)
        return bc.to_device(h), h.astype(np.float64)
    u = x.view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    back = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return bc.to_device(bits).view("bfloat16", x.shape), back.reshape(x.shape)


def from_dev(b, dtype):
    shape = tuple(b.shape)
    if dtype == "float32":
        return b.to_numpy().reshape(shape).astype(np.float64)
    u = b.view("uint16", shape).to_numpy().reshape(shape)
    if dtype == "float16":
        return u.view(np.float16).astype(np.float64)
    return (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


# ------------------------------------------------------------------ CPU
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("defines", [MM._tc_defines(0, 0), MM._tc_defines(1, 0), MM._tc_defines(0, 1),
                                     MM._tc_defines(1, 1), (("GEMM_SIMT", 1),)])
def test_gemm_source_compiles_without_warnings(arch, defines):
    if arch == "sm_90" and defines[0] == ("TRANS_A", 0) and defines[1] == ("TRANS_B", 0):
        # one tile of each code path besides the default (no double buffering; K 32 with it)
        for bm, bn, wm, wn, bk, st, db in (TILES["128x256w8"], TILES["128x256w8k32db"]):
            oc = _registry.compile_code(MM.SOURCE, defines[:2] + (
                ("GEMM_STAGES", st), ("GEMM_BK", bk), ("GEMM_BM", bm), ("GEMM_BN", bn), ("GEMM_WARPS_M", wm),
                ("GEMM_WARPS_N", wn), ("GEMM_DB", db)), target="cubin", arch=arch)
            assert oc.log.strip() == ""
    oc = _registry.compile_code(MM.SOURCE, defines, target="cubin", arch=arch)
    assert oc.log.strip() == ""


@pytest.mark.parametrize("ta", [0, 1])
@pytest.mark.parametrize("tb", [0, 1])
def test_wgmma_source_compiles_for_sm90a(ta, tb):
    """gemm_sm90.cu for sm_90a: both entries are wgmma kernels that ptxas keeps asynchronous
    (no "wgmma ... serialized" advice), with no spills and no warnings; for sm_90 (no 'a')
    they are stubs (the table's CI compile covers sm_80/sm_90)."""
    import os
    from barecuda._program import Program
    with open(os.path.join(_registry.CSRC, MM.SOURCE_WG)) as f:
        src = f.read()
    defines = MM._wg_defines(ta, tb)
    opts = list(_registry.OPTIONS) + ["--ptxas-options=-v"] + [f"-D{k}={v}" for k, v in defines]
    oc = Program(src, name=MM.SOURCE_WG, include_paths=[_registry.CSRC], options=opts).compile(
        "cubin", arch="sm_90a", cache=True)
    log = oc.log or ""
    assert "warning" not in log.lower() and "serializ" not in log.lower(), log
    assert log.count("0 bytes spill stores, 0 bytes spill loads") == 2, log
    ptx = oc.ptx.decode() if isinstance(oc.ptx, bytes) else oc.ptx
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n256k16") == 2 * 4 and ".target sm_90a" in ptx
    stub = _registry.compile_code(MM.SOURCE_WG, defines, target="ptx", arch="compute_90")
    code = stub.code.decode() if isinstance(stub.code, bytes) else stub.code
    assert "wgmma" not in code and code.count("trap;") == 2
    assert _registry.arch_specific(defines) == 90 and _registry.arch_specific(MM._tc_defines(ta, tb)) is None


_PTX = {}


@pytest.fixture
def fake(fake, monkeypatch):
    """The double loads PTX (ISA line lowered to its driver); see test_attention.py."""
    import re
    from barecuda._program import ObjectCode

    def get(source, name, defines=(), device=None):
        key = (source, defines)
        if key not in _PTX:
            code = _registry.compile_code(source, defines, target="ptx", arch="compute_80").code
            code = code.decode() if isinstance(code, bytes) else code
            _PTX[key] = re.sub(r"^\.version \d+\.\d+", ".version 8.0", code, count=1, flags=re.M)
        return ObjectCode.from_ptx(_PTX[key]).get_kernel(name)
    monkeypatch.setattr(_registry, "get", get)
    return fake


def test_matmul_checks_raise_before_launch(fake):
    a = bc.empty((64, 32), "float16")
    b = bc.empty((32, 48), "float16")
    n0 = fake.launch_count()
    with pytest.raises(ValueError, match="inner"):
        MM.matmul(a, bc.empty((31, 48), "float16"))
    with pytest.raises(TypeError, match="differs"):
        MM.matmul(a, bc.empty((32, 48), "bfloat16"))
    with pytest.raises(TypeError, match="not supported"):
        MM.matmul(bc.empty((4, 4), "int32"), bc.empty((4, 4), "int32"))
    with pytest.raises(ValueError, match="beta"):
        MM.matmul(a, b, beta=1.0)
    with pytest.raises(ValueError, match="out"):
        MM.matmul(a, b, out=bc.empty((64, 47), "float16"))
    with pytest.raises(ValueError, match="backend"):
        MM.matmul(a, b, backend="magic")
    with pytest.raises(ValueError, match="batch"):
        MM.matmul(bc.empty((2, 64, 32), "float16"), bc.empty((3, 32, 48), "float16"))
    with pytest.raises(ValueError, match="2-D"):
        MM.matmul(bc.empty((64,), "float16"), b)
    assert fake.launch_count() == n0


def test_matmul_dispatch_on_the_double(fake, no_cublaslt, monkeypatch):
    monkeypatch.setattr(MM, "WG", 0)        # the mma.sync kernel (the double is a 9.0 device)
    a = bc.empty((300, 64), "bfloat16")
    b = bc.empty((64, 136), "bfloat16")
    out = MM.matmul(a, b)
    la = fake.last_launch()
    assert la.name == "gemm_tc_bf16" and la.block == (32 * MM.WARPS_M * MM.WARPS_N, 1, 1)
    assert la.grid == (-(-300 // MM.BM) * -(-136 // MM.BN), 1, 1) and la.shared == MM.tc_smem(0, 0)
    assert tuple(out.shape) == (300, 136)
    # M, N, K, lda, ldb, ldc after the three pointers
    m, n, k = struct.unpack_from("<3i", la.params, 24)
    lda, ldb, ldc = struct.unpack_from("<3q", la.params, 40)
    assert (m, n, k, lda, ldb, ldc) == (300, 136, 64, 64, 136, 136)
    # trans_b with b given as [N, K]; batched a with a broadcast b
    MM.matmul(bc.empty((3, 40, 64), "float16"), bc.empty((136, 64), "float16"), trans_b=True)
    la = fake.last_launch()
    assert la.name == "gemm_tc_f16" and la.grid == (-(-40 // MM.BM) * -(-136 // MM.BN), 1, 3)
    # K not a multiple of 8 -> SIMT; float32 -> SIMT
    MM.matmul(bc.empty((16, 9), "float16"), bc.empty((9, 16), "float16"))
    assert fake.last_launch().name == "gemm_simt_f16"
    MM.matmul(bc.empty((16, 8), "float32"), bc.empty((8, 16), "float32"))
    assert fake.last_launch().name == "gemm_simt_f32"
    p = MM.plan_matmul(a, b, out=out)
    n0 = fake.launch_count()
    p()
    assert fake.launch_count() == n0 + 1


@pytest.fixture
def no_cublaslt(monkeypatch, tmp_path):
    """cuBLASLt cannot be found (BARECUDA_CUBLASLT names a missing file); "auto"'s memory
    of earlier failures is cleared before and after."""
    monkeypatch.setenv("BARECUDA_CUBLASLT", str(tmp_path / "libcublasLt.so.13"))
    MM._lt_broken.clear()
    yield
    MM._lt_broken.clear()


def test_matmul_dispatch_wgmma_on_the_double(fake, no_cublaslt, monkeypatch):
    """Compute capability 9.0 with room for its stages (the double: 9.0, 227 KB): f16/bf16 on
    the tensor-core layout run gemm_wg_*; other architectures, less shared memory, WG = 0,
    float32 and odd layouts do not."""
    a = bc.empty((300, 64), "bfloat16")
    b = bc.empty((64, 136), "bfloat16")
    MM.matmul(a, b)
    la = fake.last_launch()
    assert la.name == "gemm_wg_bf16" and la.block == (256, 1, 1) and la.shared == MM.wg_smem() == 197632
    assert la.grid == (-(-300 // 128) * -(-136 // 256), 1, 1)
    m, n, k = struct.unpack_from("<3i", la.params, 24)
    lda, ldb, ldc = struct.unpack_from("<3q", la.params, 40)
    assert (m, n, k, lda, ldb, ldc) == (300, 136, 64, 64, 136, 136)
    MM.matmul(bc.empty((3, 64, 40), "float16"), bc.empty((136, 64), "float16"), trans_a=True, trans_b=True)
    la = fake.last_launch()
    assert la.name == "gemm_wg_f16" and la.grid == (1, 1, 3)
    MM.matmul(bc.empty((16, 9), "float16"), bc.empty((9, 16), "float16"))
    assert fake.last_launch().name == "gemm_simt_f16"
    for patch in (("WG", 0), ("_ccs", {0: (8, 0)}), ("_smem_optin", {0: MM.wg_smem() - 1})):
        with monkeypatch.context() as mp:
            mp.setattr(MM, *patch)
            MM.matmul(a, b)
            assert fake.last_launch().name == "gemm_tc_bf16", patch


def test_small_shared_memory_gpus_get_the_small_tile(fake, no_cublaslt, monkeypatch):
    """sm_86/sm_89 allow 99 KB of shared memory a block: the default tile needs more, so the
    tensor-core path takes SMALL_TILE there (the double reports 99 KB here)."""
    monkeypatch.setattr(MM, "_smem_optin", {0: 101376})
    assert MM.tc_smem(0, 0) > 101376 and MM.wg_smem() > 101376
    MM.matmul(bc.empty((300, 64), "bfloat16"), bc.empty((64, 136), "bfloat16"), backend="builtin")
    la = fake.last_launch()
    t = MM.SMALL_TILE
    assert la.name == "gemm_tc_bf16" and la.shared == MM.tc_smem(0, 0, t) <= 101376
    assert la.block == (32 * t[2] * t[3], 1, 1) and la.grid == (-(-300 // t[0]) * -(-136 // t[1]), 1, 1)


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
print("ok")
"""


def test_cublaslt_call_is_recorded_and_reissued(fake, tmp_path):
    """matmul(backend="cublaslt"/"auto") is an op hit: the record's pointers (new arrays,
    out=None), alpha/beta by value, a miss on another stream (its own workspace) and on a
    new geometry, the Matmul and workspace held weakly, CublasLtError from a hit, the
    Python path under capture; on the drivers' doubles."""
    import os
    import subprocess
    import sys
    from conftest import _compiler, FAKE_LIB
    lib = tmp_path / "libcublasLt.so.13"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run(_compiler() + ["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-std=gnu11", "-I",
                                      os.path.join(root, "include"), os.path.join(os.path.dirname(__file__),
                                                                                  "fake_cublaslt.c"),
                                      "-o", str(lib)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    env = dict(os.environ, BARECUDA_CUBLASLT=str(lib), BARECUDA_LIBCUDA=FAKE_LIB)
    r = subprocess.run([sys.executable, "-c", _LT_RECORD_CHILD], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


# ------------------------------------------------------------------ GPU
def _lt_available():
    try:
        from barecuda.kernels import _cublaslt
        return _cublaslt.is_available()
    except ImportError:
        return False


# the builtin kernel always; cuBLASLt too where it can be loaded (the device image has it)
LT_BACKENDS = ("builtin", "cublaslt") if _lt_available() else ("builtin",)
needs_lt = pytest.mark.skipif(not _lt_available(), reason="libcublasLt not found (pip install nvidia-cublas)")


def _random_operands(rng, m, n, k, ta, tb, dtype):
    """Random a (m x k, stored k x m when ta) and b (k x n, stored n x k when tb) on the
    device in dtype, and the float64 product of the values stored."""
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    ad, a64 = to_dev(a, dtype)
    bd, b64 = to_dev(b, dtype)
    return ad, bd, (a64.T if ta else a64) @ (b64.T if tb else b64)


def _assert_matches_float64(backend, dtype, ta, tb, rng, shapes):
    """matmul on `backend` against float64 for each (m, n, k): max error < 1e-3 in fp32,
    2e-3 / 1e-2 of the largest |value| in fp16 / bf16."""
    tol = {"float32": 1e-3, "float16": 2e-3, "bfloat16": 1e-2}[dtype]
    for m, n, k in shapes:
        ad, bd, ref = _random_operands(rng, m, n, k, ta, tb, dtype)
        got = from_dev(MM.matmul(ad, bd, trans_a=ta, trans_b=tb, backend=backend), dtype)
        scale = max(1.0, np.abs(ref).max()) if dtype != "float32" else 1.0
        assert np.abs(got - ref).max() < tol * scale, (m, n, k)


def _alpha_beta_batch(rng, bt, m, n, k, dtype):
    """The builtin matmul with out=c, alpha=0.5, beta=-2 of a [bt, m, k] batch by a [k, n]
    b broadcast over it: (the result read back, its float64 reference)."""
    a = rng.standard_normal((bt, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((bt, m, n)).astype(np.float32)
    ad, a64 = to_dev(a, dtype)
    bd, b64 = to_dev(b, dtype)
    cd, c64 = to_dev(c, dtype)
    MM.matmul(ad, bd, out=cd, alpha=0.5, beta=-2.0, backend="builtin")
    return from_dev(cd, dtype), 0.5 * (a64 @ b64) + -2.0 * c64


@gpu
@needs_lt
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_cublaslt_matches_float64(dtype, ta, tb):
    _assert_matches_float64("cublaslt", dtype, ta, tb, np.random.default_rng(11 + 2 * ta + tb),
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
            ad, bd, ref = _random_operands(rng, m, n, k, False, True, dtype)
            out = bc.empty((m, n), dtype, stream=st)
            assert MM.matmul(ad, bd, trans_b=True, out=out, backend="cublaslt", stream=st) is out
            st.synchronize()
            assert close(from_dev(out, dtype), ref)
    assert O.stats()[0] - hits >= 6                    # (the first call on each stream may miss)
    for _ in range(3):                                  # out=None, "auto" (cuBLASLt at this size)
        ad, bd, ref = _random_operands(rng, m, n, k, False, True, dtype)
        got = MM.matmul(ad, bd, trans_b=True, stream=s)
        s.synchronize()
        assert close(from_dev(got, dtype), ref)
    for _ in range(3):
        ad, bd, ref = _random_operands(rng, m, n, k, True, False, dtype)
        cd, c64 = to_dev(rng.standard_normal((m, n)).astype(np.float32), dtype)
        MM.matmul(ad, bd, trans_a=True, out=cd, alpha=0.5, beta=-2.0, backend="cublaslt", stream=s)
        s.synchronize()
        assert close(from_dev(cd, dtype), 0.5 * ref - 2.0 * c64)
    # stream capture: the Python path (as before the record), captured and replayed
    ad, bd, ref = _random_operands(rng, m, n, k, False, True, dtype)
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


TILES = {"128x256w8": (128, 256, 2, 4, 32, 4, 0), "128x128w4": MM.SMALL_TILE,
         "128x256w8k32db": (128, 256, 2, 4, 32, 4, 1), "128x256w8k64db": (128, 256, 2, 4, 64, 3, 1)}


def _wg_runs():
    try:
        return MM._cc(bc.Device(0)) == (9, 0) and MM.wg_smem() <= MM.smem_limit(bc.Device(0))
    except Exception:       # noqa: BLE001 - no GPU
        return False


@pytest.fixture(params=sorted(TILES) + ["wgmma"])
def tile(request, monkeypatch):
    """Each tensor-core tile the bench compares (BM, BN, warps M x N, BK, stages) on the
    mma.sync kernel, and the wgmma kernel (compute capability 9.0 only)."""
    if request.param == "wgmma":
        if not _wg_runs():
            pytest.skip("the wgmma kernel runs on compute capability 9.0 only")
        monkeypatch.setattr(MM, "WG", 1)
        return request.param
    monkeypatch.setattr(MM, "WG", 0)
    bm, bn, wm, wn, bk, st, db = TILES[request.param]
    for name, v in (("BM", bm), ("BN", bn), ("WARPS_M", wm), ("WARPS_N", wn), ("BK", bk), ("STAGES", st),
                    ("DB", db)):
        monkeypatch.setattr(MM, name, v)
    return request.param


@gpu
def test_fp32_identity_times_matrix_is_the_matrix():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    eye, _ = to_dev(np.eye(4, dtype=np.float32), "float32")
    xd, x64 = to_dev(x, "float32")
    for backend in LT_BACKENDS:
        got = from_dev(MM.matmul(eye, xd, backend=backend), "float32")
        assert np.abs(got - x64).max() < 1e-3
        got = from_dev(MM.matmul(xd, eye, backend=backend), "float32")
        assert np.abs(got - x64).max() < 1e-3


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_random_shapes_match_float64(dtype, ta, tb, tile):
    _assert_matches_float64("builtin", dtype, ta, tb, np.random.default_rng(7 + 2 * ta + tb),
                            [(1, 1, 1), (1, 200, 64), (200, 1, 64), (128, 128, 32), (200, 136, 72), (257, 129, 96),
                             (37, 53, 29), (512, 384, 1024)])


@gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_matmul_alpha_beta_and_batches(dtype, tile):
    rng = np.random.default_rng(3)
    tol = {"float32": 1e-3, "bfloat16": 1e-2}[dtype]
    got, ref = _alpha_beta_batch(rng, 3, 136, 72, 80, dtype)
    assert np.abs(got - ref).max() < tol * max(1.0, np.abs(ref).max() if dtype != "float32" else 1.0)


@gpu
def test_matmul_matches_torch_and_reads_transposed_views():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    a = torch.randn(1024, 768, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 768, device="cuda", dtype=torch.bfloat16)
    ref = (a.float() @ b.float().T)
    out = torch.empty(1024, 512, device="cuda", dtype=torch.bfloat16)
    for backend in LT_BACKENDS:
        out.zero_()
        MM.matmul(a, b.T, out=out, backend=backend)   # a column-major view: read as trans_b, no copy
        torch.cuda.synchronize()
        assert ((out.float() - ref).abs().max() / ref.abs().max()).item() < 1e-2
        out.zero_()
        MM.matmul(a, b, trans_b=True, out=out, backend=backend)
        torch.cuda.synchronize()
        assert ((out.float() - ref).abs().max() / ref.abs().max()).item() < 1e-2


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_wgmma_elementwise_against_float64(dtype, ta, tb, monkeypatch):
    """The wgmma kernel element by element against float64 (on the rounded inputs): every
    element within the output's rounding (2^-8 bf16, 2^-10 f16, relative) plus an fp32
    accumulation allowance that grows with sqrt(K); tails in M, N and K (K a multiple of 8),
    more than one K tile, pipeline depths below and above K's tile count."""
    if not _wg_runs():
        pytest.skip("the wgmma kernel runs on compute capability 9.0 only")
    monkeypatch.setattr(MM, "WG", 1)
    rng = np.random.default_rng(11 + 2 * ta + tb)
    rtol = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -10
    for m, n, k in [(1, 8, 8), (8, 1, 8), (64, 64, 64), (128, 256, 64), (129, 257, 72), (200, 136, 520),
                    (333, 520, 1000), (1024, 768, 2056)]:
        ad, bd, ref = _random_operands(rng, m, n, k, ta, tb, dtype)
        got = from_dev(MM.matmul(ad, bd, trans_a=ta, trans_b=tb, backend="builtin"), dtype)
        err = np.abs(got - ref) - rtol * np.abs(ref)
        assert err.max() < 1e-5 * np.sqrt(k) * 4, (m, n, k, float(err.max()))
    for stages in (3, 5):        # other pipeline depths (5: 241 KB, above the H200's 227: skipped)
        monkeypatch.setattr(MM, "WG_STAGES", stages)
        if MM.wg_smem() > MM.smem_limit(bc.Device(0)):
            continue
        got = from_dev(MM.matmul(ad, bd, trans_a=ta, trans_b=tb, backend="builtin"), dtype)
        assert (np.abs(got - ref) - rtol * np.abs(ref)).max() < 1e-5 * np.sqrt(k) * 4, stages


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_wgmma_alpha_beta_batches_and_views(dtype, monkeypatch):
    """alpha/beta (C read back), 3-D batches with a broadcast operand, strided leading dims
    (a column slice of a wider matrix) on the wgmma kernel."""
    if not _wg_runs():
        pytest.skip("the wgmma kernel runs on compute capability 9.0 only")
    monkeypatch.setattr(MM, "WG", 1)
    rng = np.random.default_rng(5)
    rtol = 2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -9
    bt, m, n, k = 3, 136, 264, 200
    got, ref = _alpha_beta_batch(rng, bt, m, n, k, dtype)
    assert (np.abs(got - ref) - rtol * np.abs(ref)).max() < 1e-3
    # b batched too, a broadcast: trans_b over [bt, n, k]
    bb = rng.standard_normal((bt, n, k)).astype(np.float32)
    bbd, bb64 = to_dev(bb, dtype)
    a2 = rng.standard_normal((m, k)).astype(np.float32)
    a2d, a264 = to_dev(a2, dtype)
    got = from_dev(MM.matmul(a2d, bbd, trans_b=True, backend="builtin"), dtype)
    ref = np.einsum("mk,bnk->bmn", a264, bb64)
    assert (np.abs(got - ref) - (rtol / 2) * np.abs(ref)).max() < 1e-3
    torch = pytest.importorskip("torch")
    x = torch.randn(300, 1024, device="cuda", dtype=getattr(torch, dtype))
    y = torch.randn(512, 640, device="cuda", dtype=getattr(torch, dtype))
    xs, ys = x[:, 8:520], y[:, 16:528]              # leading dims 1024 / 640, not the extents
    out = torch.empty(300, 512, device="cuda", dtype=getattr(torch, dtype))
    MM.matmul(xs, ys, out=out, backend="builtin")
    torch.cuda.synchronize()
    ref = xs.double() @ ys.double()
    assert ((out.double() - ref).abs() - (rtol / 2) * ref.abs()).max().item() < 1e-3


def test_prebuild_gives_the_wgmma_module_one_sm90a_cubin(tmp_path):
    """_prebuild: a BC_SM_A specialization gets one cubin, built for sm_90a and filed as sm_90,
    and compute_90a PTX (ISA 8.0); none for the other architectures asked for."""
    import json
    import os
    from barecuda import _nvrtc
    from barecuda.kernels import _prebuild as PB
    spec = [(MM.SOURCE_WG, ("gemm_wg_f16", "gemm_wg_bf16"), MM._wg_defines(0, 0))]
    out = str(tmp_path / "pre")
    PB.build(out, archs=(80, 90), ptx=True, specs=spec, progress=False, jobs=2)
    with open(os.path.join(out, "manifest.json")) as f:
        (dg, ent), = json.load(f)["entries"].items()
    assert ent["cubins"] == [90] and ent["ptx"] is True
    assert sorted(os.listdir(out)) == sorted(["manifest.json", f"{dg}.sm_90.cubin", f"{dg}.ptx"])
    with open(os.path.join(out, f"{dg}.ptx"), "rb") as f:
        ptx = f.read()
    assert _nvrtc.ptx_version_of(ptx) == (8, 0) and b".target sm_90a" in ptx and b"wgmma.mma_async" in ptx


@gpu
def test_wgmma_prebuilt_cubin_runs(tmp_path, monkeypatch):
    """The wheel's sm_90a cubin (filed as sm_90) is what the registry loads on a 9.0 device,
    and it computes right."""
    if not _wg_runs():
        pytest.skip("the wgmma kernel runs on compute capability 9.0 only")
    import os
    from barecuda.kernels import _prebuild as PB
    monkeypatch.setattr(MM, "WG", 1)
    defines = MM._wg_defines(0, 1)
    out = str(tmp_path / "pre")
    PB.build(out, archs=(90,), ptx=True, specs=[(MM.SOURCE_WG, ("gemm_wg_f16", "gemm_wg_bf16"), defines)],
             progress=False)
    monkeypatch.setenv("BARECUDA_CACHE_DIR", str(tmp_path / "cache"))
    _registry._reset(out)
    try:
        rng = np.random.default_rng(2)
        a = rng.standard_normal((200, 136)).astype(np.float32)
        b = rng.standard_normal((264, 136)).astype(np.float32)
        ad, a64 = to_dev(a, "bfloat16")
        bd, b64 = to_dev(b, "bfloat16")
        got = from_dev(MM.matmul(ad, bd, trans_b=True, backend="builtin"), "bfloat16")
        ref = a64 @ b64.T
        assert (np.abs(got - ref) - 2.0 ** -8 * np.abs(ref)).max() < 1e-3
        assert _registry.origin(MM.SOURCE_WG, defines, bc.Device(0)) == "prebuilt-cubin"
    finally:
        _registry._reset(os.path.join(os.path.dirname(_registry.__file__), "prebuilt"))


def test_warmup_loads_arch_specific_modules_only_on_their_architecture(fake, monkeypatch):
    """``python -m barecuda.kernels warmup`` skips a BC_SM_A module on other architectures
    (no NVRTC needed there for a kernel its family never launches); the double is a 9.0."""
    from barecuda.kernels import __main__ as KM
    calls = []
    monkeypatch.setattr(_registry, "get", lambda s, n, d=(), dev=None: calls.append((s, n, d)))
    monkeypatch.setattr(_registry, "origin", lambda s, d=(), dev=None: "cache")
    for sa, want in ((90, 1), (100, 0)):
        calls.clear()
        spec = (MM.SOURCE_WG, ("gemm_wg_bf16",), (("BC_SM_A", sa), ("TRANS_A", 0), ("TRANS_B", 0)))
        monkeypatch.setattr(_registry, "table", lambda: [spec])
        assert KM.warmup(quiet=True) == ({"cache": 1} if want else {})
        assert len(calls) == want
