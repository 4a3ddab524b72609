"""matmul (csrc/gemm.cu, csrc/gemm_sm90.cu): tensor-core (mma.sync; wgmma on sm_90a) and SIMT
kernels, transposes, alpha/beta, batches.

CPU: the sources compile with real NVRTC for sm_80/sm_90 (and gemm_sm90.cu for sm_90a: wgmma,
no spills, no wgmma serialization) with no warnings; dispatch (which kernel, grid, leading
dims) and argument checks on the driver double.
GPU (--gpu): float64 numpy references on fresh random data (the spec's fp32 thresholds:
4x4 identity, random shapes < 1e-3), odd shapes and tails, torch.matmul; every test with a
``tile`` runs each mma.sync tile and the wgmma kernel (on compute capability 9.0).
The cuBLASLt backend: test_matmul_cublaslt.py; shared helpers: _matmul_helpers.py.
"""
import struct

import numpy as np
import pytest

import barecuda as bc
from barecuda.kernels import _matmul as MM
from barecuda.kernels import _registry

gpu = pytest.mark.gpu

from _matmul_helpers import (LT_BACKENDS, alpha_beta_batch, assert_matches_float64, fake, from_dev,  # noqa: E402,F401
                             no_cublaslt, random_operands, to_dev)
# ------------------------------------------------------------------ CPU
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("defines", [MM._tc_defines(0, 0), MM._tc_defines(1, 0), MM._tc_defines(0, 1),
                                     MM._tc_defines(1, 1), (("GEMM_SIMT", 1),)])
@pytest.mark.kernel_sources
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


@pytest.mark.kernel_sources
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
# ------------------------------------------------------------------ GPU
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
    assert_matches_float64("builtin", dtype, ta, tb, np.random.default_rng(7 + 2 * ta + tb),
                            [(1, 1, 1), (1, 200, 64), (200, 1, 64), (128, 128, 32), (200, 136, 72), (257, 129, 96),
                             (37, 53, 29), (512, 384, 1024)])


@gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_matmul_alpha_beta_and_batches(dtype, tile):
    rng = np.random.default_rng(3)
    tol = {"float32": 1e-3, "bfloat16": 1e-2}[dtype]
    got, ref = alpha_beta_batch(rng, 3, 136, 72, 80, dtype)
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
        ad, bd, ref = random_operands(rng, m, n, k, ta, tb, dtype)
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
    got, ref = alpha_beta_batch(rng, bt, m, n, k, dtype)
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
