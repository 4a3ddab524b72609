"""Decode matvec (csrc/matvec.cu): dense f32/f16/bf16 and GGUF-quantized weights, batch 1..8,
residual and silu*mul epilogues.

CPU: matvec.cu compiles with real NVRTC with no warnings (every weight format for sm_90;
dense f16 and the 2-byte-aligned Q6_K for sm_80 too); argument checks raise before any
launch on the driver double; entry names, grid and packed parameters; the plan replays.
GPU (--gpu): float64 numpy references on fresh random data (odd N, K tails that take the
element-wise path, N not a multiple of the block's rows, batch 1..8, every activation
dtype); quantized weights against gguf's dequantization; epilogues; graph capture; torch.
"""
import struct

import numpy as np
import pytest

import barecuda as bc
from barecuda.kernels import _dequant as D
from barecuda.kernels import _args as A
from barecuda.kernels import _matvec as M
from barecuda.kernels import _registry

pytest.importorskip("gguf")
from _quant_helpers import QFORMATS, from_dev, lowered_ptx_get, random_blocks, reference  # noqa: E402

gpu = pytest.mark.gpu
DTYPES = ["float32", "float16", "bfloat16"]


def to_dev(x, dtype, stream=None):
    """(device array of ``dtype`` holding x rounded, the rounded values as float64)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "float32":
        return bc.to_device(x, stream=stream), x.astype(np.float64)
    if dtype == "float16":
        h = x.astype(np.float16)
        return bc.to_device(h, stream=stream), h.astype(np.float64)
    u = x.view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    back = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return bc.to_device(bits, stream=stream).view("bfloat16", shape=bits.shape), back


def check(got, ref, scale, dtype, what):
    """|got - ref| within fp32 accumulation error of sum|w||x| plus the output's rounding."""
    out_round = {"float32": 2.0 ** -23, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}[dtype]
    # the output's rounding: relative for normal numbers, half the subnormal spacing below them
    # (fp16 subnormals are 2**-24 apart: an output of 2e-7 may be off by 3e-8 however exact the sum)
    floor = {"float32": 2.0 ** -150, "float16": 2.0 ** -25, "bfloat16": 2.0 ** -134}[dtype]
    tol = 1e-5 * scale + np.maximum(out_round * np.abs(ref), floor) * 1.01 + 1e-30
    bad = np.abs(got - ref) > tol
    assert not bad.any(), (what, np.abs(got - ref).max(), np.argwhere(bad)[:4], got[bad][:4], ref[bad][:4], tol[bad][:4])


# ------------------------------------------------------------------ CPU: compile
@pytest.mark.kernel_sources
@pytest.mark.parametrize("arch,fmt", [("sm_90", f) for f in D.FORMATS] + [("sm_80", "f16"), ("sm_80", "q6_k")])
def test_matvec_source_compiles_without_warnings(arch, fmt):
    (src, names, defines), = [e for e in M.KERNELS if dict(e[2])["WFMT"] == D.FORMATS[fmt][0] and
                              "MV_R" not in dict(e[2]) and "MVD_PF" not in dict(e[2]) and "MVW_L2" not in dict(e[2])]
    oc = _registry.compile_code(src, defines, target="cubin", arch=arch, cache=True)   # shared with test_kernels_build
    assert oc.log.strip() == ""
    # + matvec_{f16,bf16}_tc[b][_res|_glu]; Q4_K, Q6_K: + matvec_{f16,bf16}_tcd[_res|_glu]; F16, BF16:
    # + matvec_<w>_tc[_res|_glu] (dense tensor cores, matvec_dense.cuh)
    assert len(names) == (36 if fmt == "f32" else 39 if fmt in D.DENSE else 54 if fmt in ("q4_k", "q6_k") else 48)


def test_kernels_table_covers_every_format_and_tuning():
    assert {dict(d)["WFMT"] for s, n, d in M.KERNELS} == {v[0] for v in D.FORMATS.values()}
    for fmt, n, k, epi in (("f16", 4096, 4096, None), ("bf16", 14336, 4096, "res"), ("f16", 4096, 14336, None),
                           ("f16", 14336, 4096, "glu"), ("f32", 14336, 4096, None)):
        want = (("WFMT", D.FORMATS[fmt][0]),) + M._dense_tuning(fmt, n, k, epi)
        assert any(d == want for s, names, d in M.KERNELS), want
    for fmt in ("q4_k", "q6_k", "q8_0", "q4_0", "q4_1"):
        assert (("WFMT", D.FORMATS[fmt][0]),) + M._quant_tuning(fmt) in [d for s, n, d in M.KERNELS]


# ------------------------------------------------------------------ CPU: checks on the double
@pytest.fixture
def fake(fake, monkeypatch):
    monkeypatch.setattr(_registry, "get", lowered_ptx_get)
    return fake


def test_matvec_checks_raise_before_launch(fake):
    w = bc.empty((24, 64), "float16")
    x = bc.empty((2, 64), "float16")
    q = D.QuantWeight(bc.empty((24 * 2 * 18,), "uint8"), "q4_0", (24, 64))
    n0 = fake.launch_count()
    with pytest.raises(TypeError, match="weight dtype"):
        M.matvec(bc.empty((24, 64), "int32"), x)
    with pytest.raises(ValueError, match="2-D"):
        M.matvec(bc.empty((24, 64, 1), "float16"), x)
    with pytest.raises(ValueError, match="K = 64"):
        M.matvec(w, bc.empty((2, 63), "float16"))
    with pytest.raises(ValueError, match="batch 9"):
        M.matvec(w, bc.empty((9, 64), "float16"))
    with pytest.raises(TypeError, match="dtype"):
        M.matvec(w, bc.empty((2, 64), "int32"))
    with pytest.raises(ValueError, match="shape"):
        M.matvec(w, x, out=bc.empty((2, 23), "float16"))
    with pytest.raises(TypeError, match="dtype"):
        M.matvec(w, x, out=bc.empty((2, 24), "float32"))
    with pytest.raises(ValueError, match="residual"):
        M.matvec(w, x, residual=bc.empty((24,), "float16"))
    with pytest.raises(TypeError, match="residual"):
        M.matvec(w, x, residual=bc.empty((2, 24), "bfloat16"))
    xo = bc.empty((2, 64), "float16")
    with pytest.raises(ValueError, match="overlaps x"):
        M.matvec(bc.empty((64, 64), "float16"), xo, out=xo)
    with pytest.raises(ValueError, match="16-byte aligned"):
        M.matvec(q, bc.empty((2 * 64 + 1,), "float16")[1:].view(shape=(2, 64)))
    with pytest.raises(ValueError, match="does not match"):
        M.matvec_silu_mul(w, bc.empty((25, 64), "float16"), x)
    with pytest.raises(ValueError, match="does not match"):
        M.matvec_silu_mul(q, w, x)
    with pytest.raises(ValueError, match="out= is required"):
        M.plan_matvec(w, x, out=None)
    assert fake.launch_count() == n0


def test_matvec_launches_on_the_double(fake, monkeypatch):
    w = bc.empty((37, 64), "float16")
    x = bc.empty((3, 64), "bfloat16")
    y = M.matvec(w, x)
    assert y.shape == (3, 37) and y.dtype == "bfloat16"
    la = fake.last_launch()
    assert la.name == "matvec_bf16_b4" and la.block == (128, 1, 1) and la.grid == (10, 1, 1)
    ptrs = struct.unpack_from("<5Q", la.params, 0)
    assert ptrs == (w.ptr, 0, x.ptr, y.ptr, 0)
    assert struct.unpack_from("<4i", la.params, 40) == (37, 64, 3, 1)
    # K not a multiple of 8: the element-wise path (vec = 0)
    M.matvec(bc.empty((5, 13), "float16"), bc.empty((13,), "float16"))
    la = fake.last_launch()
    assert la.name == "matvec_f16_b1" and struct.unpack_from("<4i", la.params, 40) == (5, 13, 1, 0)
    # quantized, residual into out itself, batch 8
    q = D.QuantWeight(bc.empty((9 * 3 * 210,), "uint8"), "q6_k", (9, 768))
    x8 = bc.empty((8, 768), "float16")
    r = bc.empty((8, 9), "float16")
    assert M.matvec(q, x8, residual=r, out=r) is r
    la = fake.last_launch()
    assert la.name == "matvec_f16_tcb_res" and la.grid == (1, 1, 1)     # tensor cores: a block a 16-row tile
    assert la.block == (32 * M._TC_WARPS, 1, 1)
    # batch 1: the CUDA-core entries (MVQ_R = 2 rows a warp) below TC1_MIN_ROWS rows, as for
    # f32 x at any batch; the tensor cores (column layout) from there in the formats of TC1
    M.matvec(q, bc.empty((768,), "float16"))
    assert fake.last_launch().name == "matvec_f16_b1" and fake.last_launch().grid == (2, 1, 1)
    monkeypatch.setattr(M, "TC1_MIN_ROWS", 9)
    M.matvec(q, bc.empty((768,), "float16"))
    assert fake.last_launch().name == "matvec_f16_tc" and fake.last_launch().grid == (1, 1, 1)
    monkeypatch.setattr(M, "TC1", frozenset())
    M.matvec(q, bc.empty((768,), "float16"))
    assert fake.last_launch().name == "matvec_f16_b1"
    # Q4_K at batch 1, any N: the direct entries, the block's warps from the shape
    q4 = D.QuantWeight(bc.empty((40 * 4 * 144,), "uint8"), "q4_k", (40, 1024))
    M.matvec(q4, bc.empty((1024,), "bfloat16"))
    la4 = fake.last_launch()
    assert la4.name == "matvec_bf16_tcd" and la4.grid == (3, 1, 1)
    assert la4.block == (32 * M.tcd_warps(40, 1024, A.sm_count(0)), 1, 1) and la4.block[0] == 32 * 4
    assert M.tcd_warps(14336, 4096, 132) == 4 and M.tcd_warps(4096, 14336, 132) == 8
    assert M.tcd_warps(28672, 4096, 132) == 4 and M.tcd_warps(128, 256, 132) == 1
    # Q6_K at batch 1 with K % 512 == 0 (an even count of super-blocks a row): the direct entries
    q6 = D.QuantWeight(bc.empty((40 * 4 * 210,), "uint8"), "q6_k", (40, 1024))
    M.matvec(q6, bc.empty((1024,), "float16"))
    la6 = fake.last_launch()
    assert la6.name == "matvec_f16_tcd" and la6.grid == (3, 1, 1) and la6.block == la4.block
    monkeypatch.setattr(M, "TCD6", False)
    M.matvec(q6, bc.empty((1024,), "float16"))
    assert fake.last_launch().name == "matvec_f16_b1"
    M.matvec(q, bc.empty((8, 768), "float32"))
    assert fake.last_launch().name == "matvec_f32_b8" and fake.last_launch().grid == (2, 1, 1)
    assert struct.unpack_from("<5Q", la.params, 0) == (q.ptr, 0, x8.ptr, r.ptr, r.ptr)
    # a tall dense weight: 4 rows per warp; its gate/up form: one row per warp
    tall = bc.empty((8200, 64), "float16")
    x1 = bc.empty((64,), "float16")
    M.matvec(tall, x1)
    assert fake.last_launch().grid == (513, 1, 1)
    M.matvec_silu_mul(tall, tall, x1)
    assert fake.last_launch().grid == (2050, 1, 1)
    # gate/up
    g, u = bc.empty((16, 256), "float32"), bc.empty((16, 256), "float32")
    xf = bc.empty((256,), "float32")
    y = M.matvec_silu_mul(g, u, xf)
    la = fake.last_launch()
    assert y.shape == (16,) and la.name == "matvec_f32_b1_glu"
    assert struct.unpack_from("<2Q", la.params, 0) == (g.ptr, u.ptr)
    # plan
    out = bc.empty((3, 37), "bfloat16")
    plan = M.matvec.plan(w, x, out=out)
    n0 = fake.launch_count()
    plan()
    plan()
    assert fake.launch_count() == n0 + 2 and fake.last_launch().name == "matvec_bf16_b4"


def test_q4_k_direct_entries_take_one_super_block_in_flight_below_8192(fake, monkeypatch):
    """Q4_K at batch 1: MVD_PF=1 (68 registers: more warps a multiprocessor) for rows shorter
    than TCD_PF1_MAXK, MVD_PF=2 from there; Q6_K keeps its module; the table ships both."""
    from _quant_helpers import lowered_ptx_get
    got = []
    monkeypatch.setattr(_registry, "get", lambda s, n, d=(), dev=None: got.append((n, d)) or lowered_ptx_get(s, n, d, dev))
    base = (("WFMT", 12),) + M._quant_tuning("q4_k")
    assert ("matvec.cu", M._TCD_NAMES, base + (("MVD_PF", 1),)) in M.KERNELS
    assert M.tcd_defines("q4_k", 4096) == (("MVD_PF", 1),) and M.tcd_defines("q4_k", 8192) == ()
    assert M.tcd_defines("q6_k", 4096) == ()
    for k, want in ((1024, base + (("MVD_PF", 1),)), (8192, base)):
        q4 = D.QuantWeight(bc.empty((40 * k // 256 * 144,), "uint8"), "q4_k", (40, k))
        M.matvec(q4, bc.empty((k,), "float16"))
        assert got[-1] == ("matvec_f16_tcd", want) and fake.last_launch().name == "matvec_f16_tcd"


# ------------------------------------------------------------------ GPU: dense
DENSE_SHAPES = [(1, 8), (3, 24), (37, 136), (129, 1000), (1000, 4096), (5, 13), (33, 4097), (7, 1)]


@gpu
@pytest.mark.parametrize("xdt", DTYPES)
@pytest.mark.parametrize("wdt", DTYPES)
def test_matvec_dense_matches_numpy(wdt, xdt):
    rng = np.random.default_rng()
    for n, k in DENSE_SHAPES:
        wd, w = to_dev(rng.standard_normal((n, k)), wdt)
        for nb in (1, 2, 3, 8):
            xd, x = to_dev(rng.standard_normal((nb, k)), xdt)
            ref = x @ w.T
            got = from_dev(M.matvec(wd, xd), xdt).reshape(nb, n)
            check(got, ref, np.abs(x) @ np.abs(w).T, xdt, (wdt, xdt, n, k, nb))
        xd, x = to_dev(rng.standard_normal(k), xdt)           # 1-D x -> 1-D y
        y = M.matvec(wd, xd)
        assert y.shape == (n,)
        check(from_dev(y, xdt), w @ x, np.abs(w) @ np.abs(x), xdt, (wdt, xdt, n, k, "1-D"))


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matvec_dense_epilogues(dtype):
    rng = np.random.default_rng()
    for n, k, nb in ((67, 512, 1), (300, 1032, 5), (9, 40, 8), (11, 21, 2)):
        wd, w = to_dev(rng.standard_normal((n, k)), dtype)
        ud, u = to_dev(rng.standard_normal((n, k)), dtype)
        xd, x = to_dev(rng.standard_normal((nb, k)) * 0.1, dtype)
        rd, r = to_dev(rng.standard_normal((nb, n)), dtype)
        scale = np.abs(x) @ np.abs(w).T
        check(from_dev(M.matvec(wd, xd, residual=rd), dtype).reshape(nb, n), x @ w.T + r, scale + np.abs(r), dtype, "res")
        M.matvec(wd, xd, residual=rd, out=rd)                 # in place: out is the residual
        check(from_dev(rd, dtype).reshape(nb, n), x @ w.T + r, scale + np.abs(r), dtype, "res in place")
        g, up = x @ w.T, x @ u.T
        ref = g / (1 + np.exp(-g)) * up
        got = from_dev(M.matvec_silu_mul(wd, ud, xd), dtype).reshape(nb, n)
        sc = (np.abs(x) @ np.abs(w).T) * np.abs(up) + (np.abs(x) @ np.abs(u).T) * np.abs(g)
        check(got, ref, sc * 2, dtype, "glu")


# ------------------------------------------------------------------ GPU: quantized
Q_SHAPES = {32: [(1, 32), (5, 96), (67, 32 * 77), (130, 32 * 9), (3, 4096)],
            256: [(1, 256), (5, 768), (3, 256 * 17), (67, 256 * 3), (130, 4096)]}


@gpu
@pytest.mark.parametrize("xdt", DTYPES)
@pytest.mark.parametrize("fmt", QFORMATS)
def test_matvec_quant_matches_gguf(fmt, xdt):
    rng = np.random.default_rng()
    qk = D.format_info(fmt)[2]
    for n, k in Q_SHAPES[qk]:
        raw = random_blocks(rng, fmt, n * k)
        w = reference(raw, fmt, (n, k))
        qw = D.QuantWeight(bc.to_device(raw), fmt, (n, k))
        for nb in (1, 3, 8):
            xd, x = to_dev(rng.standard_normal((nb, k)), xdt)
            got = from_dev(M.matvec(qw, xd), xdt).reshape(nb, n)
            check(got, x @ w.T, np.abs(x) @ np.abs(w).T, xdt, (fmt, xdt, n, k, nb))


@gpu
@pytest.mark.parametrize("fmt", QFORMATS)
def test_matvec_tensor_core_path(fmt, monkeypatch):
    """The tensor-core entries (batches >= TC_MIN_BATCH; here batch 1 too): exact against gguf's
    weights for f16 and bf16 x, rows not a multiple of the 16-row tile, K over several chunks and
    a partial one, residual and silu*mul epilogues (x small: silu(g) * u stays inside fp16)."""
    monkeypatch.setattr(M, "TC_MIN_BATCH", 1)
    rng = np.random.default_rng()
    qk = D.format_info(fmt)[2]
    for n, k in ((37, qk * 9), (20, qk * 12 + (qk * 3 if qk == 32 else 0))):
        rg, ru = random_blocks(rng, fmt, n * k), random_blocks(rng, fmt, n * k)
        wg, wu = reference(rg, fmt, (n, k)), reference(ru, fmt, (n, k))
        qg, qu = D.QuantWeight(bc.to_device(rg), fmt, (n, k)), D.QuantWeight(bc.to_device(ru), fmt, (n, k))
        for xdt, nb in (("float16", 1), ("bfloat16", 3), ("float16", 8)):
            xd, x = to_dev(rng.standard_normal((nb, k)) * 0.01, xdt)
            rd, r = to_dev(rng.standard_normal((nb, n)), xdt)
            sc = np.abs(x) @ np.abs(wg).T
            check(from_dev(M.matvec(qg, xd, residual=rd), xdt).reshape(nb, n), x @ wg.T + r, sc + np.abs(r), xdt,
                  (fmt, xdt, n, k, nb, "res"))
            g, up = x @ wg.T, x @ wu.T
            got = from_dev(M.matvec_silu_mul(qg, qu, xd), xdt).reshape(nb, n)
            s2 = sc * np.abs(up) + (np.abs(x) @ np.abs(wu).T) * np.abs(g)
            check(got, g / (1 + np.exp(-g)) * up, s2 * 2, xdt, (fmt, xdt, n, k, nb, "glu"))


@gpu
@pytest.mark.parametrize("warps,pf,v,extra", [(1, 2, 1, ()), (3, 2, 1, ()), (16, 2, 1, ()), (2, 3, 1, ()), (5, 3, 1, ()),
                                              (1, 2, 2, ()), (3, 2, 2, ()), (16, 2, 2, ()), (3, 1, 2, ()), (16, 1, 2, ()),
                                              (3, 2, 2, (("MVD4_LD", 0),)), (5, 3, 1, (("MVD4_LD", 0),)),
                                              (3, 2, 2, (("MVD4_SUB", 0),)),
                                              (1, 2, 2, (("MVD4_LD", 0), ("MVD4_SUB", 0))),
                                              (16, 2, 2, (("MVD4_LD", 0), ("MVD4_SUB", 0))),
                                              (5, 3, 2, (("MVD4_LD", 0), ("MVD4_SUB", 0))),
                                              (16, 1, 2, (("MVD_MINB", 2),)),
                                              (3, 1, 2, (("MVD4_ROLL", 1),)), (5, 2, 2, (("MVD4_ROLL", 1),)),
                                              (16, 2, 1, (("MVD4_ROLL", 1),)), (2, 3, 2, (("MVD4_ROLL", 1),)),
                                              (3, 1, 2, (("MVD4_L2", 256),)), (5, 2, 2, (("MVD4_L2", 256),)),
                                              (16, 1, 1, (("MVD4_L2", 128),)), (2, 3, 2, (("MVD4_L2", 128),)),
                                              (16, 1, 2, (("MVD4_L2", 256), ("MVD4_ROLL", 1))),
                                              (3, 2, 2, (("MVD4_L2", 256), ("MVD4_LD", 0))),
                                              (3, 1, 2, (("MVD4_L2", 0),)), (5, 2, 2, (("MVD4_L2", 0),))])
def test_matvec_q4_k_direct_entries(warps, pf, v, extra):
    """The Q4_K batch-1 entries (matvec_<x>_tcd*, weights straight into registers) with any
    warps a block (the K split, a launch choice; gate/up at most 8) and MVD_PF super-blocks
    ahead: warps with no super-block, rows past N, residual and silu*mul epilogues, f16 and
    bf16 x; MVD_V: the loop's variants (2, the default: sum(x) by shuffles, two mma chains; 1: by mma);
    MVD4_LD (1, the default: loads through L1; 0 past it), MVD4_SUB (1, the default: f16 x, nibbles
    as fp16 subnormals; 0 and bf16 x: the exponent trick), MVD_MINB=2 (the register cap), MVD4_ROLL=1
    (each part of a super-block's registers reloaded once used), MVD4_L2 (the loads' L2
    prefetch-size hint: 128, the default; 256; 0, the loads before 2026-11-27 09:5x)."""
    defines = ((("WFMT", 12),) + M._quant_tuning("q4_k") + ((("MVD_PF", pf),) if pf != 2 else ())
               + ((("MVD_V", v),) if v != 2 else ()) + extra)
    _check_direct_entries("q4_k", defines, ((37, 256 * 7), (16, 256 * 2), (5, 256 * 33)), warps, (warps, pf))


def _check_direct_entries(fmt, defines, shapes, warps, tag):
    """The three batch-1 direct entries (plain, _res, _glu) of fmt's module built with defines,
    each checked against the float64 reference at every (n, k) of shapes, f16 and bf16 x."""
    rng = np.random.default_rng()
    for n, k in shapes:
        rg, ru = random_blocks(rng, fmt, n * k), random_blocks(rng, fmt, n * k)
        wg, wu = reference(rg, fmt, (n, k)), reference(ru, fmt, (n, k))
        qg, qu = bc.to_device(rg), bc.to_device(ru)
        for xdt in ("float16", "bfloat16"):
            code = M._CODES[xdt]
            xd, x = to_dev(rng.standard_normal((1, k)) * 0.01, xdt)
            rd, r = to_dev(rng.standard_normal((1, n)), xdt)
            y = bc.empty((1, n), xdt)
            grid = -(-n // 16)
            _registry.get("matvec.cu", f"matvec_{code}_tcd", defines).launch(grid, 32 * warps, qg, 0, xd, y, 0, n, k, 1, 0)
            sc = np.abs(x) @ np.abs(wg).T
            check(from_dev(y, xdt).reshape(1, n), x @ wg.T, sc, xdt, tag + (xdt, n, k))
            _registry.get("matvec.cu", f"matvec_{code}_tcd_res", defines).launch(grid, 32 * warps, qg, 0, xd, y, rd, n, k, 1, 0)
            check(from_dev(y, xdt).reshape(1, n), x @ wg.T + r, sc + np.abs(r), xdt, tag + (xdt, n, k, "res"))
            _registry.get("matvec.cu", f"matvec_{code}_tcd_glu", defines).launch(grid, 32 * min(warps, 8), qg, qu, xd, y, 0, n, k, 1, 0)
            g, up = x @ wg.T, x @ wu.T
            s2 = sc * np.abs(up) + (np.abs(x) @ np.abs(wu).T) * np.abs(g)
            check(from_dev(y, xdt).reshape(1, n), g / (1 + np.exp(-g)) * up, s2 * 2, xdt, tag + (xdt, n, k, "glu"))


@gpu
@pytest.mark.parametrize("warps,pf,extra", [(1, 2, ()), (3, 2, ()), (16, 2, ()), (5, 3, ()), (3, 1, ()),
                                            (3, 2, (("MVD6_LD", 0),)), (16, 1, (("MVD6_LD", 0),)),
                                            (3, 2, (("MVD6_SUB", 0),)), (16, 1, (("MVD6_SUB", 0),)),
                                            (3, 2, (("MVD6_L2", 256),)), (16, 1, (("MVD6_L2", 256),)),
                                            (5, 2, (("MVD6_L2", 128),)), (1, 1, (("MVD6_L2", 128),)),
                                            (3, 2, (("MVD6_L2", 0),))])
def test_matvec_q6_k_direct_entries(warps, pf, extra):
    """The Q6_K batch-1 entries (matvec_<x>_tcd* of the Q6_K module: 13 aligned words a row
    and super-block, the odd super-blocks 2 bytes off a 4-byte boundary): any warps a block,
    MVD_PF super-blocks ahead, MVD6_LD=0 (loads past L1), MVD6_SUB=0 (the exponent trick; 1, the
    default: f16 x as subnormal quants, the - 32 from sum(x)), MVD6_L2 (the loads' L2 prefetch-size
    hint: 128, the default; 256; 0, the loads before 2026-11-27 09:5x), 1 row, rows past N,
    residual and silu*mul, f16 and bf16 x."""
    defines = (("WFMT", 14),) + M._quant_tuning("q6_k") + ((("MVD_PF", pf),) if pf != 2 else ()) + extra
    _check_direct_entries("q6_k", defines, ((37, 512 * 7), (16, 512), (1, 512 * 2), (5, 512 * 17)), warps,
                          (warps, pf, extra))


@gpu
@pytest.mark.parametrize("tune", [(("MVT_W", 8),), (("MVT_S", 3),), (("MVT_W", 6), ("MVT_S", 3))])
@pytest.mark.parametrize("fmt", QFORMATS)
def test_matvec_tensor_core_tuning_variants(fmt, tune):
    """The tensor-core entries built with other warps a tile (MVT_W: the K split) and staging
    depths (MVT_S; cut to what fits 48 KB): batch 1 (column layout) and batch 3, chunks
    left over by the split, a partial last chunk, rows past N."""
    if fmt == "q6_k" and dict(tune).get("MVT_W") == 8:
        pytest.skip("Q6_K's gate/up staging at 8 warps passes 48 KB (the module does not build)")
    rng = np.random.default_rng()
    _, t, qk, _ = D.format_info(fmt)
    defines = (("WFMT", t),) + M._quant_tuning(fmt) + tune
    for n, k in ((37, qk * 19), (16, qk * 5 + (qk * 3 if qk == 32 else 0))):
        raw = random_blocks(rng, fmt, n * k)
        w = reference(raw, fmt, (n, k))
        qb = bc.to_device(raw)
        for xdt, nb in (("float16", 1), ("bfloat16", 1), ("float16", 3)):
            xd, x = to_dev(rng.standard_normal((nb, k)), xdt)
            y = bc.empty((nb, n), xdt)
            rows, threads = M._quant_geometry(defines, M._CODES[xdt], None, True)
            for tc in ("tc", "tcb"):        # tcb: the batch layout alone (batch 1 included)
                kern = _registry.get("matvec.cu", f"matvec_{M._CODES[xdt]}_{tc}", defines)
                kern.launch(-(-n // rows), threads, qb, 0, xd, y, 0, n, k, nb, 0)
                check(from_dev(y, xdt).reshape(nb, n), x @ w.T, np.abs(x) @ np.abs(w).T, xdt,
                      (fmt, tune, xdt, n, k, nb, tc))


@gpu
@pytest.mark.parametrize("fmt", ["q4_k", "q6_k", "q8_0", "q4_1"])
def test_matvec_quant_epilogues(fmt):
    rng = np.random.default_rng()
    qk = D.format_info(fmt)[2]
    dtype = "float16"
    for n, k, nb in ((37, qk * 9, 1), (6, qk * 2, 4)):
        rg, ru = random_blocks(rng, fmt, n * k), random_blocks(rng, fmt, n * k)
        wg, wu = reference(rg, fmt, (n, k)), reference(ru, fmt, (n, k))
        both = bc.to_device(np.concatenate([rg, ru]))        # gate and up back to back in one buffer
        half = rg.size
        qg = D.QuantWeight(both[:half], fmt, (n, k))
        qu = D.QuantWeight(both[half:], fmt, (n, k)) if half % 16 == 0 else D.QuantWeight(bc.to_device(ru), fmt, (n, k))
        # small x: silu(g) * u of K-quant weights (|w| up to ~50) must stay inside fp16's range
        xd, x = to_dev(rng.standard_normal((nb, k)) * 0.01, dtype)
        rd, r = to_dev(rng.standard_normal((nb, n)), dtype)
        sc = np.abs(x) @ np.abs(wg).T
        check(from_dev(M.matvec(qg, xd, residual=rd), dtype).reshape(nb, n), x @ wg.T + r, sc + np.abs(r), dtype, "res")
        g, up = x @ wg.T, x @ wu.T
        got = from_dev(M.matvec_silu_mul(qg, qu, xd), dtype).reshape(nb, n)
        s2 = sc * np.abs(up) + (np.abs(x) @ np.abs(wu).T) * np.abs(g)
        check(got, g / (1 + np.exp(-g)) * up, s2 * 2, dtype, "glu")


@gpu
def test_matvec_plans_in_a_captured_graph():
    rng = np.random.default_rng()
    s = bc.Stream()
    n, k = 300, 2048
    wd, w = to_dev(rng.standard_normal((n, k)), "bfloat16", s)
    raw = random_blocks(rng, "q4_k", n * k)
    qw = D.QuantWeight(bc.to_device(raw, stream=s), "q4_k", (n, k))
    wq = reference(raw, "q4_k", (n, k))
    xd, x = to_dev(rng.standard_normal((2, k)), "bfloat16", s)
    y1 = bc.empty((2, n), "bfloat16", stream=s)
    y2 = bc.empty((2, n), "bfloat16", stream=s)
    s.synchronize()
    with s.capture() as g:
        M.matvec(wd, xd, out=y1, stream=s)
        M.matvec(qw, xd, residual=y1, out=y2, stream=s)
    g.keep_alive(wd, qw.data, xd, y1, y2)
    exe = g.instantiate()
    for _ in range(2):
        x32 = rng.standard_normal((2, k)).astype(np.float32)
        nd, x = to_dev(x32, "bfloat16", s)
        xd.copy_from(nd, stream=s)
        exe.launch(s)
        s.synchronize()
        ref = to_dev(x @ w.T, "bfloat16")[1] + x @ wq.T     # y1 is stored in bfloat16 before the residual add
        check(from_dev(y2, "bfloat16").reshape(2, n), ref, np.abs(x) @ (np.abs(w) + np.abs(wq)).T * 2, "bfloat16", "graph")
    plan = M.plan_matvec_silu_mul(wd, wd, xd, out=y1, stream=s)
    plan()
    s.synchronize()
    g1 = x @ w.T
    check(from_dev(y1, "bfloat16").reshape(2, n), g1 / (1 + np.exp(-g1)) * g1, (np.abs(x) @ np.abs(w).T) ** 2 * 2, "bfloat16", "plan")


@gpu
def test_matvec_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    for n, k in ((4096, 4096), (1000, 1536)):
        w = torch.from_numpy(rng.standard_normal((n, k)).astype(np.float32)).to("cuda", torch.float16)
        x = torch.from_numpy(rng.standard_normal((1, k)).astype(np.float32)).to("cuda", torch.float16)
        want = (x.double() @ w.double().T).cpu().numpy()
        y = torch.empty((1, n), dtype=torch.float16, device="cuda")
        M.matvec(w, x, out=y)
        torch.cuda.synchronize()
        got = y.double().cpu().numpy()
        ref_t = torch.matmul(x, w.T).double().cpu().numpy()
        err = np.abs(got - want).max()
        assert err <= np.abs(ref_t - want).max() * 2 + 1e-2, (n, k, err)


@gpu
@pytest.mark.parametrize("r,u", [(1, 2), (1, 8), (2, 2), (2, 4), (4, 2)])
def test_matvec_dense_tuning_variants(r, u):
    """The dense kernel built with other tuning defines (rows per warp MV_R, loads in flight
    MV_U: the bench's sweep) gives the same results: partial row groups, K tails."""
    rng = np.random.default_rng()
    for n, k, vec in ((37, 1000, 1), (4, 4096, 1), (9, 13, 0)):
        wd, w = to_dev(rng.standard_normal((n, k)), "float16")
        xd, x = to_dev(rng.standard_normal((1, k)), "float16")
        y = bc.empty((1, n), "float16")
        kern = _registry.get("matvec.cu", "matvec_f16_b1", (("WFMT", 1), ("MV_R", r), ("MV_U", u)))
        kern.launch(-(-n // (4 * r)), 128, wd, 0, xd, y, 0, n, k, 1, vec)
        check(from_dev(y, "float16").reshape(1, n), x @ w.T, np.abs(x) @ np.abs(w).T, "float16", (r, u, n, k))


@gpu
@pytest.mark.parametrize("fmt", ["q4_k", "q6_k", "q8_0", "q4_0"])
def test_matvec_quant_two_rows_per_warp(fmt):
    """MVQ_R=2 (the bench's quantized sweep): odd N leaves a warp with one row; batch 3 on
    the b4 entry; residual epilogue."""
    rng = np.random.default_rng()
    _, t, qk, _ = D.format_info(fmt)
    for n, k, nb in ((37, qk * 9, 1), (5, qk * 3, 3), (130, 4096, 4)):
        raw = random_blocks(rng, fmt, n * k)
        w = reference(raw, fmt, (n, k))
        qb = bc.to_device(raw)
        xd, x = to_dev(rng.standard_normal((nb, k)), "float16")
        rd, r = to_dev(rng.standard_normal((nb, n)), "float16")
        y = bc.empty((nb, n), "float16")
        bucket = 1 if nb == 1 else 4
        kern = _registry.get("matvec.cu", f"matvec_f16_b{bucket}_res", (("WFMT", t), ("MVQ_R", 2)))
        kern.launch(-(-n // 8), 128, qb, 0, xd, y, rd, n, k, nb, 0)
        check(from_dev(y, "float16").reshape(nb, n), x @ w.T + r, np.abs(x) @ np.abs(w).T + np.abs(r), "float16", (fmt, n, k, nb))
