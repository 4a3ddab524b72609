"""barecuda.kernels._fused (csrc/fused.cu): the decode loop's fused matvecs.

CPU: every entry compiles (sm_80, sm_90, no log) and the argument checks fail before any
launch. GPU: each epilogue against a float64 numpy reference on fresh random data (weights
dense and quantized, odd row counts, the last block partly used). Tolerances: the
activations are float16/bfloat16, so results are compared relative to their largest
magnitude: 4e-3 (f16), 3e-2 (bf16); the sums of squares to 1e-5 relative (float32 atomics).
"""
import pytest

np = pytest.importorskip("numpy")

from barecuda.kernels import _fused as F  # noqa: E402
from barecuda.kernels import _registry  # noqa: E402

TOL = {"float16": 4e-3, "bfloat16": 3e-2}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("defines", [(("WFMT", 1),), (("WFMT", 12),), (("WFMT", 14),), (("WFMT", 3),),
                                     (("WFMT", 12), ("FM_R", 2), ("FM_TCD", 1)), (("WFMT", 14), ("FM_R", 2), ("FM_TCD", 1))])
@pytest.mark.kernel_sources
def test_fused_compiles(arch, defines):
    from barecuda._nvrtc import nvrtc_available
    if not nvrtc_available():
        pytest.skip("NVRTC is not installed")
    oc = _registry.compile_code("fused.cu", defines, target="cubin", arch=arch)
    assert not (getattr(oc, "log", "") or "").strip()


def test_fused_table():
    names = {n for src, names, _ in F.KERNELS if src == "fused.cu" for n in names}
    assert {"fmv_f16_qkv", "fmv_bf16_res", "fembed_f16"} <= names
    fmts = {dict(d)["WFMT"] for _, _, d in F.KERNELS}
    assert fmts == {0, 1, 30, 2, 3, 8, 12, 14}


def test_tuning_rows_even_for_qkv(monkeypatch):
    for fmt in ("f16", "bf16", "f32", "q4_k", "q6_k", "q4_1"):
        for n, k in ((576, 576), (6144, 4096), (4096, 14336), (32000, 4096)):
            _, r = F._tuning(fmt, n, k, "qkv")
            assert r % 2 == 0
    # the direct tensor-core loop; one super-block in flight a warp below _matvec.TCD_PF1_MAXK
    assert F._tuning("q4_k", 8192, 2048, "glu") == (F._TCD_DEFINES + (("FM_PF", 1),), 16)
    assert F._tuning("q4_k", 4096, 14336, "res") == (F._TCD_DEFINES, 16)
    assert F._tuning("q6_k", 8192, 2048, "glu") == (F._TCD6_DEFINES, 16)  # Q6_K, K % 512 == 0: the same
    assert F._tuning("q6_k", 8192, 2304, "glu")[1] == 1                  # an odd count of super-blocks
    monkeypatch.setattr(F, "TCD6", False)
    assert F._tuning("q6_k", 8192, 2048, "glu")[1] == 1
    monkeypatch.setattr(F, "TCD", False)
    assert F._tuning("q4_k", 8192, 2048, "glu")[1] == 1


def test_q4_k_nodes_launch_the_direct_loop(fake, monkeypatch):
    """Q4_K: a block a 16-row tile, _matvec.tcd_warps warps (the K split); the other
    quantized formats keep 4 warps of FM_R rows."""
    import barecuda as bc
    from barecuda.kernels import _args
    from barecuda.kernels import _matvec as M
    from barecuda.kernels._dequant import QuantWeight
    from _quant_helpers import lowered_ptx_get
    monkeypatch.setattr(_registry, "get", lowered_ptx_get)
    n, k = 37, 256 * 6
    w = QuantWeight(bc.zeros((n * k // 256 * 144,), "uint8"), "q4_k", (n, k))
    x, y = bc.zeros((k,), "float16"), bc.zeros((n,), "float16")
    sms = _args.sm_count(x.device)
    F.fused_matvec("scale", w, x, out=y)
    la = fake.last_launch()
    assert la.name == "fmv_f16_scale" and la.grid == (3, 1, 1)
    assert la.block == (32 * M.tcd_warps(n, k, sms), 1, 1) and la.block[0] <= 32 * 6
    F.fused_matvec("glu", w, x, up=w, out=y)
    assert fake.last_launch().block == (32 * M.tcd_warps(n, k, sms, "glu"), 1, 1)
    plan = F.plan_fused_matvec("scale", w, x, out=y)
    assert plan is not None
    monkeypatch.setattr(F, "TCD", False)
    F.fused_matvec("scale", w, x, out=y)
    la = fake.last_launch()
    assert la.grid == (5, 1, 1) and la.block == (32 * F._WARPS, 1, 1)


# -- the GPU ----------------------------------------------------------------------------

def _dev(bc, a, dtype):
    a = np.ascontiguousarray(a)
    if dtype == "bfloat16":
        u = (a.astype(np.float32).view(np.uint32) + 0x7FFF + ((a.astype(np.float32).view(np.uint32) >> 16) & 1)) >> 16
        raw = u.astype(np.uint16)
    elif dtype == "float16":
        raw = a.astype(np.float16)
    else:
        raw = a.astype(dtype)
    return bc.empty(a.shape, dtype).copy_from(raw.tobytes())


def _host(b, dtype):
    raw = bytes(b.copy_to())
    if dtype == "float16":
        return np.frombuffer(raw, np.float16).astype(np.float64).reshape(b.shape)
    if dtype == "bfloat16":
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64).reshape(b.shape)
    return np.frombuffer(raw, dtype).astype(np.float64).reshape(b.shape)


def _round(a, dtype):
    if dtype == "float16":
        return a.astype(np.float16).astype(np.float64)
    u = a.astype(np.float32).view(np.uint32)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def _weight(bc, rng, fmt, n, k):
    """(device weight, float64 reference [n, k])."""
    from barecuda.kernels._dequant import QuantWeight
    if fmt in ("f16", "bf16", "f32"):
        dt = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}[fmt]
        w = _round(rng.standard_normal((n, k)) / np.sqrt(k), dt) if fmt != "f32" else \
            rng.standard_normal((n, k)).astype(np.float32).astype(np.float64) / np.sqrt(k)
        return _dev(bc, w, dt), w
    import os
    import sys
    sys.path.insert(0, os.path.dirname(__file__))
    import _quant_helpers as QH
    if fmt in ("q4_k", "q6_k"):        # scales of a real model's size (the helper's overflow float16 sums)
        from barecuda.models.synthetic import random_blocks
        raw = random_blocks(rng, fmt.upper(), n, k, 1.0 / np.sqrt(k)).reshape(-1)
    else:
        raw = QH.random_blocks(rng, fmt, n * k)
    ref = QH.reference(raw, fmt, (n, k))
    buf = bc.empty((raw.size,), "uint8").copy_from(raw.tobytes())
    return QuantWeight(buf, fmt, (n, k)), ref


FMTS = ["f16", "bf16", "q4_k", "q6_k", "q8_0", "q4_0", "q4_1"]


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_scale_and_glu(fmt, dtype):
    if fmt not in ("f16", "bf16"):
        pytest.importorskip("gguf")
    import barecuda as bc
    rng = np.random.default_rng(1)
    n, k = 300, 512                                     # 300 rows: the last block partly used
    w, wr = _weight(bc, rng, fmt, n, k)
    u, ur = _weight(bc, rng, fmt, n, k)
    xg = _round(rng.standard_normal(k), dtype)
    ss_val = float(np.sum(rng.standard_normal(k) ** 2))
    xb, ss = _dev(bc, xg, dtype), _dev(bc, np.array([ss_val]), "float32")
    s = 1.0 / np.sqrt(ss_val / k + 1e-5)
    y = bc.empty((n,), dtype)
    F.fused_matvec("scale", w, xb, out=y, ss_in=ss, eps=1e-5)
    want = s * (wr @ xg)
    got = _host(y, dtype)
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < TOL[dtype]
    F.fused_matvec("scale", w, xb, out=y)                # no norm: s = 1
    want1 = wr @ xg
    assert np.max(np.abs(_host(y, dtype) - want1)) / np.max(np.abs(want1)) < TOL[dtype]
    F.fused_matvec("glu", w, xb, up=u, out=y, ss_in=ss, eps=1e-5)
    gt, up = s * (wr @ xg), s * (ur @ xg)
    want = gt / (1 + np.exp(-gt)) * up
    got = _host(y, dtype)
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["f16", "q4_k", "q8_0", "q6_k"])
def test_res_accumulates_norm_inputs(fmt):
    if fmt != "f16":
        pytest.importorskip("gguf")
    import barecuda as bc
    dtype = "float16"
    rng = np.random.default_rng(2)
    n, k = 258, 768
    w, wr = _weight(bc, rng, fmt, n, k)
    x = _round(rng.standard_normal(k), dtype)
    r = _round(rng.standard_normal(n), dtype)
    g = _round(1 + 0.1 * rng.standard_normal(n), dtype)
    xb, yb, gb = _dev(bc, x, dtype), _dev(bc, r, dtype), _dev(bc, g, dtype)
    xg = bc.zeros((n,), dtype)
    ss = _dev(bc, np.array([3.0]), "float32")
    F.fused_matvec("res", w, xb, out=yb, ss_out=ss, xg=xg, g=gb)
    want = r + wr @ x
    got = _host(yb, dtype)
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < TOL[dtype]
    assert abs(_host(ss, "float32")[0] - (3.0 + np.sum(got ** 2))) < 1e-5 * np.sum(got ** 2)
    assert np.max(np.abs(_host(xg, dtype) - got * g)) <= 2 ** -10 * np.max(np.abs(got * g))


@pytest.mark.gpu
@pytest.mark.parametrize("fmt,tcd", [("q4_k", True), ("q4_k", False), ("q4_k", 2), ("q4_k", 3), ("q4_k", 4),
                                     ("q4_k", 5), ("q4_k", 6), ("q4_k", 7), ("q4_k", 8),
                                     ("q6_k", True), ("q6_k", False), ("q6_k", 6), ("q6_k", 7), ("q6_k", 9)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_q4_k_direct_loop_epilogues(fmt, tcd, dtype, monkeypatch):
    """Q4_K and Q6_K nodes on the direct tensor-core loops (and on the CUDA-core one): K of
    19 super-blocks (Q6_K: 18, it needs an even count) split over the block's warps
    unevenly, 37 rows (the last tile partly used), every epilogue, launched plainly and as
    programmatic-launch plans; tcd 2: the direct loop's first variant FM_V=1; tcd 3: its loads
    past L1 and the exponent-trick nibbles (MVD4_LD=0, MVD4_SUB=0: the defaults before 06:0x
    2026-11-27); tcd 4: two super-blocks in flight a warp (FM_PF=2; K here takes FM_PF=1); tcd 5:
    registers reloaded part by part (MVD4_ROLL=1); tcd 6 / 7: the loads' L2 prefetch-size hint
    (MVD4_L2 / MVD6_L2) 256 / 0 (the loads before 09:5x; 128 is the default); tcd 8: 256 with
    FM_PF=2; tcd 9 (Q6_K): one super-block in flight (FM_PF=1)."""
    pytest.importorskip("gguf")
    import barecuda as bc
    monkeypatch.setattr(F, "TCD", bool(tcd))
    monkeypatch.setattr(F, "TCD6", bool(tcd))
    if tcd == 2:
        monkeypatch.setattr(F, "_TCD_DEFINES", F._TCD_DEFINES + (("FM_V", 1),))
    if tcd == 3:
        monkeypatch.setattr(F, "_TCD_DEFINES", F._TCD_DEFINES + (("MVD4_LD", 0), ("MVD4_SUB", 0)))
    if tcd == 4:
        from barecuda.kernels import _matvec as M
        monkeypatch.setattr(M, "TCD_PF1_MAXK", 0)
    if tcd == 5:
        monkeypatch.setattr(F, "_TCD_DEFINES", F._TCD_DEFINES + (("MVD4_ROLL", 1),))
    if tcd in (6, 7, 8):
        hint = 0 if tcd == 7 else 256
        monkeypatch.setattr(F, "_TCD_DEFINES", F._TCD_DEFINES + (("MVD4_L2", hint),))
        monkeypatch.setattr(F, "_TCD6_DEFINES", F._TCD6_DEFINES + (("MVD6_L2", hint),))
    if tcd == 8:
        from barecuda.kernels import _matvec as M
        monkeypatch.setattr(M, "TCD_PF1_MAXK", 0)
    if tcd == 9:
        monkeypatch.setattr(F, "_TCD6_DEFINES", F._TCD6_DEFINES + (("FM_PF", 1),))
    rng = np.random.default_rng(5)
    n, k = 37, 256 * (19 if fmt == "q4_k" else 18)
    w, wr = _weight(bc, rng, fmt, n, k)
    u, ur = _weight(bc, rng, fmt, n, k)
    xh = _round(rng.standard_normal(k), dtype)
    ss_val = float(np.sum(rng.standard_normal(k) ** 2))
    xb, ss = _dev(bc, xh, dtype), _dev(bc, np.array([ss_val]), "float32")
    s = 1.0 / np.sqrt(ss_val / k + 1e-5)
    tol = TOL[dtype]
    for pdl in (False, True):
        y = bc.zeros((n,), dtype)
        F.plan_fused_matvec("scale", w, xb, out=y, ss_in=ss, eps=1e-5, pdl=pdl)()
        want = s * (wr @ xh)
        assert np.max(np.abs(_host(y, dtype) - want)) / np.max(np.abs(want)) < tol, ("scale", pdl)
        F.plan_fused_matvec("glu", w, xb, up=u, out=y, ss_in=ss, eps=1e-5, pdl=pdl)()
        gt, up = s * (wr @ xh), s * (ur @ xh)
        want = gt / (1 + np.exp(-gt)) * up
        assert np.max(np.abs(_host(y, dtype) - want)) / np.max(np.abs(want)) < tol, ("glu", pdl)
        r = _round(rng.standard_normal(n), dtype)
        g = _round(1 + 0.1 * rng.standard_normal(n), dtype)
        yb, gb, xg = _dev(bc, r, dtype), _dev(bc, g, dtype), bc.zeros((n,), dtype)
        sso = _dev(bc, np.array([2.0]), "float32")
        F.plan_fused_matvec("res", w, xb, out=yb, ss_out=sso, xg=xg, g=gb, pdl=pdl)()
        want = r + wr @ xh
        got = _host(yb, dtype)
        assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < tol, ("res", pdl)
        assert abs(_host(sso, "float32")[0] - (2.0 + np.sum(got ** 2))) < 1e-5 * np.sum(got ** 2)
        assert np.max(np.abs(_host(xg, dtype) - got * g)) <= 2 * tol * np.max(np.abs(got * g))


def _rope_ref(v, pos, inv, n_rot, hd):
    out = v.copy()
    for h in range(v.size // hd):
        for i in range(n_rot // 2):
            a, b = v[h * hd + 2 * i], v[h * hd + 2 * i + 1]
            t = np.float32(np.float32(pos) * np.float32(inv[i]))
            c, s = np.cos(np.float64(t)), np.sin(np.float64(t))
            out[h * hd + 2 * i], out[h * hd + 2 * i + 1] = a * c - b * s, b * c + a * s
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("fmt,layout,split", [("f16", "head_major", False), ("q4_k", "token_major", False),
                                              ("q8_0", "head_major", True), ("bf16", "head_major", False),
                                              ("q4_k", "head_major", True), ("q4_k/bf16", "head_major", False),
                                              ("q6_k", "head_major", True)])
def test_qkv_rope_and_cache(fmt, layout, split):
    if fmt not in ("f16", "bf16"):
        pytest.importorskip("gguf")
    import barecuda as bc
    dtype = "bfloat16" if fmt in ("bf16", "q4_k/bf16") else "float16"
    fmt = fmt.split("/")[0]
    rng = np.random.default_rng(3)
    hd, nh, nkv_h, k, max_ctx, pos = 64, 4, 2, 512, 16, 11
    nq, nkv = nh * hd, nkv_h * hd
    n_rot = 48                                            # partial rotary: the tail passes through
    rows = nq + 2 * nkv
    w, wr = _weight(bc, rng, fmt, rows, k)
    xg = _round(rng.standard_normal(k), dtype)
    ss_val = float(np.sum(rng.standard_normal(k) ** 2))
    s = 1.0 / np.sqrt(ss_val / k + 1e-5)
    inv = (10000.0 ** (-np.arange(0, n_rot, 2) / n_rot)).astype(np.float32)
    shape = (nkv_h, max_ctx, hd) if layout == "head_major" else (max_ctx, nkv_h, hd)
    kc, vc = bc.zeros(shape, dtype), bc.zeros(shape, dtype)
    y = bc.zeros((rows,), dtype)
    pb = bc.empty((1,), "int32").copy_from(np.array([pos], np.int32).tobytes())
    fb = bc.empty((n_rot // 2,), "float32").copy_from(inv.tobytes())
    xb, ssb = _dev(bc, xg, dtype), _dev(bc, np.array([ss_val]), "float32")
    parts = [(0, rows)] if not split else [(0, nq + nkv), (nq + nkv, nkv)]
    from barecuda.kernels._dequant import QuantWeight
    for r0, nr in parts:
        if isinstance(w, QuantWeight):
            bpr = w.data.shape[0] // rows
            wp = QuantWeight(w.data[r0 * bpr:(r0 + nr) * bpr], fmt, (nr, k))
        else:
            wp = w[r0:r0 + nr]
        F.fused_matvec("qkv", wp, xb, out=y[r0:r0 + nr], ss_in=ssb, eps=1e-5, k_cache=kc, v_cache=vc, pos=pb,
                       inv_freq=fb, row0=r0, nq=nq, nkv=nkv, head_dim=hd, n_rot=n_rot, kv_layout=layout)
    lin = s * (wr @ xg)
    q = _rope_ref(lin[:nq], pos, inv, n_rot, hd)
    kk = _rope_ref(lin[nq:nq + nkv], pos, inv, n_rot, hd)
    v = lin[nq + nkv:]
    got = _host(y, dtype)
    want = np.concatenate([q, kk, v])
    scale = np.max(np.abs(want))
    assert np.max(np.abs(got - want)) / scale < TOL[dtype]
    kh, vh = _host(kc, dtype), _host(vc, dtype)
    if layout == "token_major":
        kh, vh = kh.transpose(1, 0, 2), vh.transpose(1, 0, 2)
    assert np.max(np.abs(kh[:, pos].reshape(-1) - kk)) / scale < TOL[dtype]
    assert np.max(np.abs(vh[:, pos].reshape(-1) - v)) / scale < TOL[dtype]
    other = [p for p in range(max_ctx) if p != pos]
    assert not np.any(kh[:, other]) and not np.any(vh[:, other])     # nothing written elsewhere


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_embed_norm(dtype):
    import barecuda as bc
    rng = np.random.default_rng(4)
    vocab, dim = 50, 200
    table = _round(rng.standard_normal((vocab, dim)), dtype)
    g = _round(1 + 0.1 * rng.standard_normal(dim), dtype)
    tb, gb = _dev(bc, table, dtype), _dev(bc, g, dtype)
    tok = bc.empty((1,), "int32").copy_from(np.array([37], np.int32).tobytes())
    x, xg = bc.zeros((dim,), dtype), bc.zeros((dim,), dtype)
    ss = _dev(bc, np.arange(9, dtype=np.float64) + 1, "float32")
    F.embed_norm(tb, tok, x=x, xg=xg, g=gb, ss=ss)
    assert np.array_equal(_host(x, dtype), table[37])
    assert np.max(np.abs(_host(xg, dtype) - table[37] * g)) <= 2 ** -7 * np.max(np.abs(table[37] * g))
    got = _host(ss, "float32")
    assert abs(got[0] - np.sum(table[37] ** 2)) < 1e-5 * got[0] and not np.any(got[1:])


# -- the driver double: checks before any launch ------------------------------------------

def test_argument_checks(fake):
    import barecuda as bc
    x = bc.zeros((64,), "float16")
    w = bc.zeros((32, 64), "float16")
    y = bc.zeros((32,), "float16")
    with pytest.raises(ValueError, match="epilogue"):
        F.fused_matvec("nope", w, x, out=y)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        F.fused_matvec("scale", w, bc.zeros((64,), "float32"), out=y)
    with pytest.raises(ValueError, match="up= is required"):
        F.fused_matvec("glu", w, x, out=y)
    with pytest.raises(ValueError, match="ss_out=, xg= and g= are required"):
        F.fused_matvec("res", w, x, out=y)
    with pytest.raises(ValueError, match="k_cache=, v_cache= and pos= are required"):
        F.fused_matvec("qkv", w, x, out=y, nq=0, nkv=16, head_dim=16, row0=0)
    with pytest.raises(ValueError, match="exceed"):
        F.fused_matvec("qkv", w, x, out=y, nq=0, nkv=8, head_dim=8, row0=0)
    with pytest.raises(ValueError, match="out: 16 elements"):
        F.fused_matvec("scale", w, x, out=bc.zeros((16,), "float16"))
    with pytest.raises(ValueError, match="overlaps"):
        big = bc.zeros((96,), "float16")
        F.fused_matvec("scale", w, big[0:64], out=big[32:64])
