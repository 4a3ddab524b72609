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
    # batch 1: the CUDA-core rows unless dense_tc1 says otherwise
    M.matvec(w, bc.empty((64,), "float16"))
    assert fake.last_launch().name == "matvec_f16_b1"
    monkeypatch.setattr(M, "dense_tc1", lambda n, k: True)
    M.matvec(w, bc.empty((64,), "float16"))
    assert fake.last_launch().name == "matvec_f16_tc"
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
        tc = {f"matvec_{code}_tc", f"matvec_{code}_tc_res", f"matvec_{code}_tc_glu"}
        (names,) = [n for s, n, d in M.KERNELS if d == (("WFMT", {"f16": 1, "bf16": 30}[fmt]),)]
        assert tc <= set(names)
        # the op's build (DENSE_TC_DEFINES) is prebuilt and warmed too
        (names,) = [n for s, n, d in M.KERNELS if d == (("WFMT", {"f16": 1, "bf16": 30}[fmt]),) + M.DENSE_TC_DEFINES]
        assert tc <= set(names)


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
    monkeypatch.setattr(M, "dense_tc1", lambda n, k: tc1)
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
