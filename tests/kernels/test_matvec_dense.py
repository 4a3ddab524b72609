"""Dense f16/bf16 matvec on tensor cores (csrc/matvec_dense.cuh: matvec_<x>_tc[_res|_glu]).

CPU: the op's choice of entry (batch, dtypes, alignment), its launch geometry and the
warps a block on the driver double. GPU (--gpu): every tensor-core entry against the float64
reference at any warps a block and the sweep's build variants (MVW_U, MVW_MB, MVW_PF,
MVW_ORD, MVW_L2): rows not a multiple of the 16-row tile, K tails of 8/16/24 weights and K
below one run, batch 1..8, residual and silu*mul epilogues; and through the op at batches
1..8.
"""
import struct

import numpy as np
import pytest

import barecuda as bc
from barecuda.kernels import _args as A
from barecuda.kernels import _matvec as M
from barecuda.kernels import _registry

pytest.importorskip("gguf")
from _quant_helpers import from_dev, lowered_ptx_get  # noqa: E402
from test_matvec import check, to_dev  # noqa: E402

gpu = pytest.mark.gpu


@pytest.fixture
def fake(fake, monkeypatch):
    monkeypatch.setattr(_registry, "get", lowered_ptx_get)
    return fake


def test_dense_tc_warps():
    # by tiles a multiprocessor (H200: 132): <= 2 -> 24 warps a multiprocessor's worth, <= 8 -> 8, else 4
    assert M.dense_tc_warps(4096, 4096, 132) == 12
    assert M.dense_tc_warps(14336, 4096, 132) == 8 and M.dense_tc_warps(4096, 14336, 132) == 12
    assert M.dense_tc_warps(28672, 4096, 132) == 4 and M.dense_tc_warps(128256, 4096, 132) == 4
    assert M.dense_tc_warps(16, 64, 132) == 1                       # one turn of runs: one warp
    assert M.dense_tc_warps(16, 4096 * 8, 132) == 16                # at most MVW_MAXW
    assert 1 <= M.dense_tc_warps(20000, 4096, 132, "glu") <= 16
    # batch 1 (dense_tc1's shapes): 8
    assert M.dense_tc_warps(4096, 4096, 132, None, 1) == 8 and M.dense_tc_warps(4096, 4096, 132, "res", 1) == 8


def test_dense_tc1_rule():
    # more than one and at most two 16-row tiles a multiprocessor, K <= 4096
    assert M.dense_tc1(4096, 4096, 132) and M.dense_tc1(4096, 1024, 132) and M.dense_tc1(2113, 4096, 132)
    assert not M.dense_tc1(2112, 4096, 132) and not M.dense_tc1(4225, 4096, 132)
    assert not M.dense_tc1(4096, 4104, 132) and not M.dense_tc1(4096, 14336, 132)
    assert not M.dense_tc1(14336, 4096, 132) and not M.dense_tc1(128256, 4096, 132)


def test_matvec_dense_tensor_core_dispatch(fake, monkeypatch):
    w = bc.empty((37, 64), "float16")
    x4 = bc.empty((4, 64), "float16")
    y = M.matvec(w, x4)
    la = fake.last_launch()
    assert y.shape == (4, 37) and la.name == "matvec_f16_tc" and la.grid == (3, 1, 1)
    assert la.block == (32 * M.dense_tc_warps(37, 64, A.sm_count(0)), 1, 1)
    assert struct.unpack_from("<5Q", la.params, 0) == (w.ptr, 0, x4.ptr, y.ptr, 0)
    assert struct.unpack_from("<4i", la.params, 40) == (37, 64, 4, 1)
    # bf16 weights, residual, gate/up
    wb = bc.empty((40, 128), "bfloat16")
    xb = bc.empty((2, 128), "bfloat16")
    r = bc.empty((2, 40), "bfloat16")
    M.matvec(wb, xb, residual=r, out=r)
    assert fake.last_launch().name == "matvec_bf16_tc_res"
    M.matvec_silu_mul(wb, wb, xb)                                   # gate/up: from DENSE_TC_MIN_BATCH_GLU
    assert fake.last_launch().name == ("matvec_bf16_tc_glu" if M.DENSE_TC_MIN_BATCH_GLU <= 2 else "matvec_bf16_b2_glu")
    M.matvec_silu_mul(wb, wb, bc.empty((4, 128), "bfloat16"))
    la = fake.last_launch()
    assert la.name == "matvec_bf16_tc_glu" and la.grid == (3, 1, 1)
    # batch 1: the CUDA-core rows unless dense_tc1 says otherwise (4096 x <= 4096 on 132 multiprocessors)
    M.matvec(w, bc.empty((64,), "float16"))
    assert fake.last_launch().name == "matvec_f16_b1"
    sq = bc.empty((4096, 4096), "float16")
    x1 = bc.empty((1, 4096), "float16")
    if M.dense_tc1(4096, 4096, A.sm_count(0)):
        r1 = bc.empty((1, 4096), "float16")
        M.matvec(sq, x1, residual=r1, out=r1)
        la = fake.last_launch()
        assert la.name == "matvec_f16_tc_res" and la.grid == (256, 1, 1) and la.block == (32 * 8, 1, 1)
        M.matvec_silu_mul(sq, sq, x1)
        assert fake.last_launch().name == "matvec_f16_b1_glu"
        M.matvec(sq, bc.empty((1, 4096), "bfloat16"))
        assert fake.last_launch().name == "matvec_bf16_b1"
    M.matvec(bc.empty((4096, 14336), "float16"), bc.empty((14336,), "float16"))
    assert fake.last_launch().name == "matvec_f16_b1"
    M.matvec(bc.empty((14336, 4096), "float16"), x1)
    assert fake.last_launch().name == "matvec_f16_b1"
    monkeypatch.setattr(M, "dense_tc1", lambda n, k, sms: True)
    M.matvec(w, bc.empty((64,), "float16"))
    assert fake.last_launch().name == "matvec_f16_tc"
    M.matvec_silu_mul(w, w, bc.empty((64,), "float16"))                # gate/up: not at batch 1
    assert fake.last_launch().name == "matvec_f16_b1_glu"
    monkeypatch.undo()
    monkeypatch.setattr(_registry, "get", lowered_ptx_get)
    # x of another dtype, f32 weights, K not a multiple of 8, an unaligned x: the CUDA cores
    M.matvec(w, bc.empty((4, 64), "bfloat16"))
    assert fake.last_launch().name == "matvec_bf16_b4"
    M.matvec(bc.empty((37, 64), "float32"), bc.empty((4, 64), "float32"))
    assert fake.last_launch().name == "matvec_f32_b4"
    M.matvec(bc.empty((37, 60), "float16"), bc.empty((4, 60), "float16"))
    assert fake.last_launch().name == "matvec_f16_b4"
    xo = bc.empty((4 * 64 + 1,), "float16")[1:].view(shape=(4, 64))
    M.matvec(w, xo)
    assert fake.last_launch().name == "matvec_f16_b4"
    monkeypatch.setattr(M, "DENSE_TC", False)
    M.matvec(w, x4)
    assert fake.last_launch().name == "matvec_f16_b4"


def test_dense_tc_entries_in_the_table():
    for fmt, code in (("f16", "f16"), ("bf16", "bf16")):
        tc = {f"matvec_{code}_tc{s}" for s in ("", "_res", "_glu")}
        (names,) = [n for s, n, d in M.KERNELS if d == (("WFMT", {"f16": 1, "bf16": 30}[fmt]),)]
        assert tc <= set(names)
        # the op's build (DENSE_TC_DEFINES) is prebuilt and warmed too
        (names,) = [n for s, n, d in M.KERNELS if d == (("WFMT", {"f16": 1, "bf16": 30}[fmt]),) + M.DENSE_TC_DEFINES]
        assert tc <= set(names)


def test_dense_bulk_geometry():
    # barriers (128-byte aligned), x, slots x rows; the most slots under the limit, ties: more warps
    assert M.bulk_smem(4096, 1, 27) == 256 + 8192 + 27 * 8192
    assert M.bulk_smem(4104, 2, 1) == 128 + 8320 + 2 * 8208
    assert M.bulk_geometry(4096, 1, 232448) == (16, 1, M.bulk_smem(4096, 1, 16))
    assert M.bulk_geometry(14336, 1, 232448) == (7, 1, M.bulk_smem(14336, 1, 7))
    assert M.bulk_geometry(4096, 2, 232448) == (13, 1, M.bulk_smem(4096, 2, 13))
    assert M.bulk_geometry(4096, 1, 232448, warps=8) == (8, 3, M.bulk_smem(4096, 1, 24))
    assert M.bulk_geometry(4096, 1, 232448, spw=2) == (13, 2, M.bulk_smem(4096, 1, 26))
    assert M.bulk_geometry(64, 1, 232448)[:2] == (16, 16)        # at most MVW_MAXW warps
    assert M.bulk_geometry(60000, 1, 232448) is None             # not one row and x
    for k, ns in ((4096, 1), (4096, 2), (14336, 1), (28672, 1), (14336, 2), (3000, 1)):
        w, spw, smem = M.bulk_geometry(k, ns, 232448)               # the most warps, then slots
        assert 1 <= w <= 16 and smem <= 232448 < M.bulk_smem(k, ns, w * (spw + 1))
        assert w == 16 or M.bulk_smem(k, ns, w + 1) > 232448


@pytest.mark.kernel_sources
@pytest.mark.parametrize("arch,wfmt", [("sm_90", 1), ("sm_80", 30)])
def test_dense_bulk_build_compiles_without_warnings(arch, wfmt):
    """The opt-in bulk-copy build (BULK_DEFINES; not in KERNELS, so not compiled by
    test_kernels_build) compiles with real NVRTC, its three entries present (sm_80: empty bodies)."""
    oc = _registry.compile_code("matvec.cu", (("WFMT", wfmt),) + M.BULK_DEFINES, target="cubin", arch=arch)
    assert oc.log.strip() == ""
    code = {1: "f16", 30: "bf16"}[wfmt]
    for s in ("", "_res", "_glu"):
        assert f"matvec_{code}_bk{s}\0".encode() in oc.code


def test_matvec_dense_bulk_dispatch(fake, monkeypatch):
    w = bc.empty((37, 64), "float16")
    x = bc.empty((64,), "float16")
    M.matvec(w, x)
    assert fake.last_launch().name == "matvec_f16_b1"            # DENSE_BULK off: the CUDA cores
    monkeypatch.setattr(M, "DENSE_BULK", True)
    y = M.matvec(w, x)
    la = fake.last_launch()
    wa, spw, smem = M.bulk_geometry(64, 1, 232448)
    assert y.shape == (37,) and la.name == "matvec_f16_bk" and la.grid == (min(37, A.sm_count(0)), 1, 1)
    assert la.block == (32 * wa, 1, 1) and la.shared == smem
    assert struct.unpack_from("<5Q", la.params, 0) == (w.ptr, 0, x.ptr, y.ptr, 0)
    assert struct.unpack_from("<4i", la.params, 40) == (37, 64, 1, spw)
    big = bc.empty((4096, 4096), "bfloat16")
    xb = bc.empty((1, 4096), "bfloat16")
    r = bc.empty((1, 4096), "bfloat16")
    plan = M.plan_matvec(big, xb, residual=r, out=r)
    plan()
    la = fake.last_launch()
    assert la.name == "matvec_bf16_bk_res" and la.grid == (A.sm_count(0), 1, 1)
    assert (la.block[0], la.shared) == (32 * 16, M.bulk_smem(4096, 1, 16))
    M.matvec_silu_mul(big, big, xb)
    la = fake.last_launch()
    assert la.name == "matvec_bf16_bk_glu" and la.shared == M.bulk_smem(4096, 2, 13)
    # batch 2, x of another dtype, f32, K % 8, unaligned x, a row too long, before 9.0: not the bulk entries
    M.matvec(w, bc.empty((2, 64), "float16"))
    assert fake.last_launch().name == "matvec_f16_tc"
    M.matvec(w, bc.empty((64,), "bfloat16"))
    assert fake.last_launch().name == "matvec_bf16_b1"
    M.matvec(bc.empty((37, 64), "float32"), bc.empty((64,), "float32"))
    assert fake.last_launch().name == "matvec_f32_b1"
    M.matvec(bc.empty((37, 60), "float16"), bc.empty((60,), "float16"))
    assert fake.last_launch().name == "matvec_f16_b1"
    M.matvec(w, bc.empty((65,), "float16")[1:])
    assert fake.last_launch().name == "matvec_f16_b1"
    M.matvec(bc.empty((2, 60000), "float16"), bc.empty((60000,), "float16"))
    assert fake.last_launch().name == "matvec_f16_b1"
    monkeypatch.setattr(M, "_cc", lambda d: (8, 0))
    M.matvec(w, x)
    assert fake.last_launch().name == "matvec_f16_b1"


# ------------------------------------------------------------------ GPU
# (n, k): rows past the last tile, K % 32 in {8, 16, 24}, K below one run, one row
TC_SHAPES = ((37, 256), (16, 32 * 9 + 8), (5, 32 * 33 + 16), (130, 1000), (1, 24), (33, 8), (300, 4096 + 24))


def _launch(code, suf, defines, warps, n, k, nb, w, u, x, y, r):
    kern = _registry.get("matvec.cu", f"matvec_{code}_tc{suf}", defines)
    kern.launch(-(-n // 16), 32 * warps, w, u if u is not None else 0, x, y, r if r is not None else 0, n, k, nb, 1)


@gpu
@pytest.mark.parametrize("extra,warps", [((), 1), ((), 3), ((), 16), ((("MVW_U", 2),), 5), ((("MVW_U", 8),), 2),
                                         ((("MVW_PF", 1),), 4), ((("MVW_MB", 2), ("MVW_U", 2)), 16),
                                         ((("MVW_PF", 1), ("MVW_U", 2)), 7), ((("MVW_ORD", 1),), 3),
                                         ((("MVW_L2", 256),), 5), ((("MVW_L2", 128), ("MVW_ORD", 1)), 16),
                                         ((("MVW_L2", 256), ("MVW_ORD", 1), ("MVW_PF", 1)), 2),
                                         ((("MVW_L2", 256),), 12), ((("MVW_L2", 128),), 8)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matvec_dense_tc_entries(dtype, extra, warps):
    """The three tensor-core entries of the module built with `extra`, launched with `warps`
    warps a block (warps with no run of K, rows past N), against the float64 reference."""
    code = M._CODES[dtype]
    defines = (("WFMT", 1 if dtype == "float16" else 30),) + extra
    rng = np.random.default_rng()
    for n, k in TC_SHAPES:
        wd, w = to_dev(rng.standard_normal((n, k)), dtype)
        ud, u = to_dev(rng.standard_normal((n, k)), dtype)
        for nb in (1, 2, 5, 8):
            xd, x = to_dev(rng.standard_normal((nb, k)) * 0.1, dtype)
            rd, r = to_dev(rng.standard_normal((nb, n)), dtype)
            y = bc.empty((nb, n), dtype)
            tag = (dtype, extra, warps, n, k, nb)
            sc = np.abs(x) @ np.abs(w).T
            _launch(code, "", defines, warps, n, k, nb, wd, None, xd, y, None)
            check(from_dev(y, dtype).reshape(nb, n), x @ w.T, sc, dtype, tag)
            _launch(code, "_res", defines, warps, n, k, nb, wd, None, xd, y, rd)
            check(from_dev(y, dtype).reshape(nb, n), x @ w.T + r, sc + np.abs(r), dtype, tag + ("res",))
            _launch(code, "_glu", defines, warps, n, k, nb, wd, ud, xd, y, None)
            g, up = x @ w.T, x @ u.T
            s2 = sc * np.abs(up) + (np.abs(x) @ np.abs(u).T) * np.abs(g)
            check(from_dev(y, dtype).reshape(nb, n), g / (1 + np.exp(-g)) * up, s2 * 2, dtype, tag + ("glu",))


@gpu
@pytest.mark.parametrize("tc1", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matvec_dense_tc_through_the_op(dtype, tc1, monkeypatch):
    """matvec / matvec_silu_mul at batches 1..8 on the op's choice (tensor cores from
    DENSE_TC_MIN_BATCH, gate/up from DENSE_TC_MIN_BATCH_GLU; tc1: batch 1 too), residual in
    place, a 1-D x."""
    monkeypatch.setattr(M, "dense_tc1", lambda n, k, sms: tc1)
    rng = np.random.default_rng()
    for n, k in ((1000, 4096), (77, 520), (4100, 64)):
        wd, w = to_dev(rng.standard_normal((n, k)), dtype)
        ud, u = to_dev(rng.standard_normal((n, k)), dtype)
        for nb in (1, 2, 3, 4, 7, 8):
            xd, x = to_dev(rng.standard_normal((nb, k)) * 0.1, dtype)
            sc = np.abs(x) @ np.abs(w).T
            check(from_dev(M.matvec(wd, xd), dtype).reshape(nb, n), x @ w.T, sc, dtype, (n, k, nb))
            rd, r = to_dev(rng.standard_normal((nb, n)), dtype)
            M.matvec(wd, xd, residual=rd, out=rd)
            check(from_dev(rd, dtype).reshape(nb, n), x @ w.T + r, sc + np.abs(r), dtype, (n, k, nb, "res"))
            g, up = x @ w.T, x @ u.T
            s2 = sc * np.abs(up) + (np.abs(x) @ np.abs(u).T) * np.abs(g)
            check(from_dev(M.matvec_silu_mul(wd, ud, xd), dtype).reshape(nb, n), g / (1 + np.exp(-g)) * up, s2 * 2,
                  dtype, (n, k, nb, "glu"))
        xd, x = to_dev(rng.standard_normal(k) * 0.1, dtype)
        check(from_dev(M.matvec(wd, xd), dtype), w @ x, np.abs(w) @ np.abs(x), dtype, (n, k, "1-D"))


# (n, k, grid, warps, slots a warp): fewer rows than blocks, one row, rows per block past the
# ring (many refills of each slot), K of one vector, K not a multiple of 32 vectors, long rows
BULK_CASES = ((37, 256, 132, 9, 3), (1, 24, 1, 1, 1), (3000, 4096, 132, 9, 3), (3000, 4096, 7, 2, 1),
              (500, 8, 5, 3, 2), (260, 8 * 37, 3, 4, 2), (300, 14336, 132, 7, 1), (130, 4096 + 24, 2, 16, 1),
              (1000, 520, 11, 5, 4))


def _launch_bulk(code, suf, defines, n, k, grid, warps, spw, w, u, x, y, r):
    kern = _registry.get("matvec.cu", f"matvec_{code}_bk{suf}", defines)
    smem = M.bulk_smem(k, 2 if suf == "_glu" else 1, warps * spw)
    if kern.max_dynamic_shared_memory < smem:
        kern.set_max_dynamic_shared_memory(smem)
    kern.launch(grid, 32 * warps, w, u if u is not None else 0, x, y, r if r is not None else 0, n, k, 1, spw,
                shared_mem=smem)


def _need_sm90():
    cc = bc.Device(0).compute_capability
    cc = cc() if callable(cc) else cc
    if tuple(cc) < (9, 0):
        pytest.skip("cp.async.bulk: sm_90 and later")


@gpu
@pytest.mark.parametrize("extra", [(), (("MVW_L2", 256),)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matvec_dense_bulk_entries(dtype, extra):
    """The three bulk-copy entries (batch 1) at the grids, warps and slots of BULK_CASES
    against the float64 reference; gate/up with half the slots (two rows a slot)."""
    _need_sm90()
    code = M._CODES[dtype]
    defines = (("WFMT", 1 if dtype == "float16" else 30),) + M.BULK_DEFINES + extra
    rng = np.random.default_rng()
    for n, k, grid, warps, spw in BULK_CASES:
        wd, w = to_dev(rng.standard_normal((n, k)), dtype)
        ud, u = to_dev(rng.standard_normal((n, k)), dtype)
        xd, x = to_dev(rng.standard_normal((1, k)) * 0.1, dtype)
        rd, r = to_dev(rng.standard_normal((1, n)), dtype)
        y = bc.empty((1, n), dtype)
        tag = (dtype, extra, n, k, grid, warps, spw)
        sc = np.abs(x) @ np.abs(w).T
        _launch_bulk(code, "", defines, n, k, grid, warps, spw, wd, None, xd, y, None)
        check(from_dev(y, dtype).reshape(1, n), x @ w.T, sc, dtype, tag)
        _launch_bulk(code, "_res", defines, n, k, grid, warps, spw, wd, None, xd, y, rd)
        check(from_dev(y, dtype).reshape(1, n), x @ w.T + r, sc + np.abs(r), dtype, tag + ("res",))
        if M.bulk_smem(k, 2, warps * spw) <= M.smem_limit(0):
            _launch_bulk(code, "_glu", defines, n, k, grid, warps, spw, wd, ud, xd, y, None)
            g, up = x @ w.T, x @ u.T
            s2 = sc * np.abs(up) + (np.abs(x) @ np.abs(u).T) * np.abs(g)
            check(from_dev(y, dtype).reshape(1, n), g / (1 + np.exp(-g)) * up, s2 * 2, dtype, tag + ("glu",))


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matvec_dense_bulk_through_the_op(dtype, monkeypatch):
    """matvec / matvec_silu_mul at batch 1 on the bulk entries (DENSE_BULK on; batch 2 the
    tensor cores): residual in place, 1-D and [1, K] x, plans replayed."""
    _need_sm90()
    monkeypatch.setattr(M, "DENSE_BULK", True)
    rng = np.random.default_rng()
    for n, k in ((1000, 4096), (77, 520), (4100, 64), (300, 14336), (4096, 4096)):
        wd, w = to_dev(rng.standard_normal((n, k)), dtype)
        ud, u = to_dev(rng.standard_normal((n, k)), dtype)
        xd, x = to_dev(rng.standard_normal((1, k)) * 0.1, dtype)
        sc = np.abs(x) @ np.abs(w).T
        check(from_dev(M.matvec(wd, xd), dtype).reshape(1, n), x @ w.T, sc, dtype, (n, k))
        rd, r = to_dev(rng.standard_normal((1, n)), dtype)
        M.matvec(wd, xd, residual=rd, out=rd)
        check(from_dev(rd, dtype).reshape(1, n), x @ w.T + r, sc + np.abs(r), dtype, (n, k, "res"))
        g, up = x @ w.T, x @ u.T
        s2 = sc * np.abs(up) + (np.abs(x) @ np.abs(u).T) * np.abs(g)
        check(from_dev(M.matvec_silu_mul(wd, ud, xd), dtype).reshape(1, n), g / (1 + np.exp(-g)) * up, s2 * 2,
              dtype, (n, k, "glu"))
        x1d, x1 = to_dev(rng.standard_normal(k) * 0.1, dtype)
        y = bc.empty((n,), dtype)
        plan = M.plan_matvec(wd, x1d, out=y)
        plan()
        plan()
        check(from_dev(y, dtype), w @ x1, np.abs(w) @ np.abs(x1), dtype, (n, k, "1-D plan"))
