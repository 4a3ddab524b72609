"""``matmul``: ``out = alpha * op(a) @ op(b) + beta * out`` (csrc/gemm.cu), fp32/fp16/bf16 with
fp32 accumulation, transposes, strided batches.

float16/bfloat16 run on tensor cores when the operands allow 16-byte copies: bases 16-byte
aligned, leading dims and batch strides multiples of 8 elements, and the contiguous extent of
each operand a multiple of 8 -- on compute capability 9.0 (H100/H200) through wgmma
(csrc/gemm_sm90.cu, built for sm_90a), elsewhere through mma.sync (csrc/gemm.cu); anything
else (and float32) runs the SIMT kernel, which takes any strides. A transposed *view*
(column-major strides) is read as such: no copy.

Shapes: ``a`` is ``[M, K]`` (``[K, M]`` with ``trans_a``), ``b`` is ``[K, N]`` (``[N, K]`` with
``trans_b``), either may have a leading batch axis (a 2-D operand is broadcast over the
batch); ``out`` is ``[M, N]`` or ``[batch, M, N]``, contiguous.

Backends: ``"builtin"`` (csrc/gemm.cu), ``"cublaslt"`` (NVIDIA's cuBLASLt, loaded at run
time from the pip wheel ``nvidia-cublas``/``nvidia-cublas-cu12`` or the system: see
_cublaslt.pyx) and ``"auto"``: cuBLASLt when it loads and takes the layout, for shapes where
it is faster (:func:`_auto_prefers_lt`), else builtin. Nothing requires cuBLASLt: when it is
missing (or fails on this machine) ``"auto"`` runs builtin, and ``"cublaslt"`` raises
``CublasLtNotFoundError`` naming the package to install.
"""
import threading
from typing import Any, Dict, Tuple

from barecuda.kernels import _args, _registry
from barecuda.kernels._opcall import op

__all__ = ["matmul", "plan_matmul", "BACKENDS"]

BACKENDS = ("auto", "builtin", "cublaslt")

SOURCE = "gemm.cu"
# the tensor-core tile (a specialization: module values read at call time)
# bf16, same-run tile sweeps (2026-11-26): 128x256 tile on 2x4 warps of 64x64, K tile 64, 3 stages,
# fragments double-buffered in registers: H100 395 TF/s at 4096^3 (0.45x cuBLAS's 874), 423 at
# 8192^3; with K 32 and 4 stages: H100 375 / 410, H200 376 / 405; the session's earlier default
# (128x128, 2x2 warps, K 64, 3 stages, no double buffering): H200 342 / 365. Double buffering on
# the 128x128 tile with K 64 spills (H200 199); 256x128 on 4x2 warps: H100 368; 5 stages: 372.
STAGES = 3
BM, BN = 128, 256
BK = 64
WARPS_M, WARPS_N = 2, 4
DB = 1              # 1: fragments double-buffered in registers (GEMM_DB)
PF = 0              # 1: tile copies carry the L2 256-byte prefetch hint (GEMM_PF)
GM = 8              # grouped raster height (GEMM_GM)
# The tile for GPUs whose per-block shared memory (opt-in) is below the default tile's
# (sm_86/sm_89: 99 KB; the default needs 153 KB): 128x128 on 2x2 warps, K 32, 4 stages = 74 KB.
SMALL_TILE = (128, 128, 2, 2, 32, 4, 0)     # BM, BN, WARPS_M, WARPS_N, BK, STAGES, DB
_DT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}
# The Hopper kernel (csrc/gemm_sm90.cu): wgmma.mma_async from 128-byte swizzled shared memory,
# 128x256x64 tiles on two warpgroups, WG_STAGES cp.async stages (48 KB each); f16/bf16 on
# compute capability 9.0 only (an sm_90a build: the registry builds it so from its BC_SM_A define).
SOURCE_WG = "gemm_sm90.cu"
WG = 1              # 1: use it where it runs (0: mma.sync everywhere)
WG_LAYOUTS = ((0, 0), (0, 1), (1, 0), (1, 1))      # the (trans_a, trans_b) it takes
WG_STAGES = 4
WG_BM, WG_BN = 128, 256


def _wg_defines(ta, tb):
    return (("BC_SM_A", 90), ("TRANS_A", ta), ("TRANS_B", tb)) \
        + ((("GEMM90_STAGES", WG_STAGES),) if WG_STAGES != 4 else ()) + ((("GEMM_GM", GM),) if GM != 8 else ())


def wg_smem():
    """Dynamic shared memory of the wgmma kernel (its stages, plus 1 KB to align them to 1024)."""
    return WG_STAGES * (WG_BM + WG_BN) * 64 * 2 + 1024


def _tile():
    """The default tile (module values, read at call time)."""
    return (BM, BN, WARPS_M, WARPS_N, BK, STAGES, DB)


def _tc_defines(ta, tb, tile=None):
    bm, bn, wm, wn, bk, st, db = tile or _tile()
    return (("TRANS_A", ta), ("TRANS_B", tb), ("GEMM_STAGES", st), ("GEMM_BK", bk), ("GEMM_BM", bm),
            ("GEMM_BN", bn), ("GEMM_WARPS_M", wm), ("GEMM_WARPS_N", wn)) + ((("GEMM_DB", 1),) if db else ()) \
        + ((("GEMM_PF", 1),) if PF else ()) + ((("GEMM_GM", GM),) if GM != 8 else ())


KERNELS = ([(SOURCE, ("gemm_tc_f16", "gemm_tc_bf16"), _tc_defines(ta, tb, t)) for t in (None, SMALL_TILE)
            for ta in (0, 1) for tb in (0, 1)]
           + [(SOURCE, ("gemm_simt_f32", "gemm_simt_f16", "gemm_simt_bf16"), (("GEMM_SIMT", 1),))]
           + [(SOURCE_WG, ("gemm_wg_f16", "gemm_wg_bf16"), _wg_defines(ta, tb)) for ta in (0, 1) for tb in (0, 1)])


def tc_smem(ta, tb, tile=None):
    bm, bn, _, _, bk, st, _ = tile or _tile()
    a = (bk * (bm * 2 + 16)) if ta else (bm * (bk * 2 + 16))
    b = (bn * (bk * 2 + 16)) if tb else (bk * (bn * 2 + 16))
    return st * (a + b)


_smem_optin: Dict[int, int] = {}
_ccs: Dict[int, Tuple[int, int]] = {}


def _cc(device):
    """The device's compute capability, cached per ordinal."""
    o = int(device)
    v = _ccs.get(o)
    if v is None:
        from barecuda._device import Device
        dev = device if isinstance(device, Device) else Device(o)
        cc = dev.compute_capability
        cc = cc() if callable(cc) else cc
        v = _ccs[o] = (int(cc[0]), int(cc[1]))
    return v


def smem_limit(device):
    """The device's opt-in shared memory per block (bytes), cached per ordinal."""
    o = int(device)
    v = _smem_optin.get(o)
    if v is None:
        from barecuda._device import Device
        dev = device if isinstance(device, Device) else Device(o)
        v = _smem_optin[o] = int(dev.attribute("max_shared_memory_per_block_optin"))
    return v


def _geom(x, name):
    """(batch, batch_stride, rows, cols, row_stride, col_stride) of a 2-D or 3-D array."""
    shape = tuple(x.shape)
    if len(shape) not in (2, 3):
        raise ValueError(f"{name}: expected a 2-D matrix or a 3-D batch of matrices, got shape {shape}")
    st = x.strides
    if st is None:
        st, acc = [], 1
        for s in reversed(shape):
            st.append(acc)
            acc *= s
        st = tuple(st[::-1])
    st = tuple(st)
    if len(shape) == 2:
        return 1, 0, shape[0], shape[1], st[0], st[1]
    return shape[0], (st[0] if shape[0] > 1 else 0), shape[1], shape[2], st[1], st[2]


def _prep(a, b, out, trans_a, trans_b, alpha, beta, backend, stream, plan=False):
    """The launch (builtin) or ("lt", Matmul, pointers...) of one matmul, checked."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: expected one of {BACKENDS}")
    ab = _args.array(a, "a", stream)
    bb = _args.array(b, "b", stream)
    dt = str(ab.dtype)
    code = _DT.get(dt)
    if code is None:
        raise TypeError(f"a: dtype {dt} is not supported (float32, float16, bfloat16)")
    if str(bb.dtype) != dt:
        raise TypeError(f"b: dtype {bb.dtype} differs from a's {dt}")
    na, sa, ra, ca, rsa, csa = _geom(ab, "a")
    nb, sb, rb, cb, rsb, csb = _geom(bb, "b")
    m, k = (ca, ra) if trans_a else (ra, ca)
    k2, n = (cb, rb) if trans_b else (rb, cb)
    if k != k2:
        raise ValueError(f"inner dimensions differ: op(a) is {m}x{k}, op(b) is {k2}x{n}")
    if na != nb and na != 1 and nb != 1:
        raise ValueError(f"batch sizes differ: {na} and {nb}")
    nbat = max(na, nb)
    if nbat > 65535:
        raise ValueError(f"batch {nbat} > 65535")
    if m == 0 or n == 0:
        raise ValueError(f"empty result ({m}x{n})")
    # element (i, j) of op(a) is at i*am + j*ak
    am, ak = (csa, rsa) if trans_a else (rsa, csa)
    bk, bn = (csb, rsb) if trans_b else (rsb, csb)
    batched = len(ab.shape) == 3 or len(bb.shape) == 3
    oshape = (nbat, m, n) if batched else (m, n)
    _args.same_device(("a", ab), ("b", bb))
    alpha = _args.scalar_f32(alpha, "alpha")
    beta = _args.scalar_f32(beta, "beta")
    if beta != 0.0 and out is None:
        raise ValueError("beta != 0 needs out= (it is read as C)")
    ob = _args.out_array(out, oshape, ab.dtype, ab, stream)
    sc = m * n if batched else 0
    device = ab.device
    # k == 0 (out = beta * out, nothing to multiply) always runs builtin
    if k > 0 and (backend == "cublaslt" or (backend == "auto" and not plan and _auto_prefers_lt(code, m, n, k, nbat))):
        lt = _lt_layout(am, ak, m, k, bk, bn, n)
        if lt is None and backend == "cublaslt":
            raise ValueError("backend='cublaslt': each operand needs one unit stride (a row- or column-major "
                             f"view); a has strides ({am}, {ak}) and b ({bk}, {bn}) in op() order")
        if lt is not None:
            mm = _lt_matmul(device, dt, m, n, k, lt, nbat, sa, sb, sc, strict=backend == "cublaslt")
            if mm is not None:
                return "lt", mm, (ab, bb, ob, alpha, beta), None, None, ob
    if code != "f32" and k > 0:
        tc = _tc_layout(ab, am, ak, m, k, sa, bb, bk, bn, n, sb, ob)
        if tc is not None:
            ta, lda, tb, ldb = tc
            args = (ab, bb, ob, m, n, k, lda, ldb, n, sa, sb, sc, _args.f32(alpha), _args.f32(beta))
            if WG and (ta, tb) in WG_LAYOUTS and _cc(device) == (9, 0) and wg_smem() <= smem_limit(device):
                kern = _registry.get(SOURCE_WG, f"gemm_wg_{code}", _wg_defines(ta, tb), device)
                smem = wg_smem()
                if kern.max_dynamic_shared_memory < smem:
                    kern.set_max_dynamic_shared_memory(smem)
                grid = (((m + WG_BM - 1) // WG_BM) * ((n + WG_BN - 1) // WG_BN), 1, nbat)
                return kern, grid, 256, smem, args, ob
            tile = _tile()
            smem = tc_smem(ta, tb, tile)
            if smem > smem_limit(device):
                tile = SMALL_TILE
                smem = tc_smem(ta, tb, tile)
            kern = _registry.get(SOURCE, f"gemm_tc_{code}", _tc_defines(ta, tb, tile), device)
            if kern.max_dynamic_shared_memory < smem:
                kern.set_max_dynamic_shared_memory(smem)
            grid = (((m + tile[0] - 1) // tile[0]) * ((n + tile[1] - 1) // tile[1]), 1, nbat)
            return kern, grid, 32 * tile[2] * tile[3], smem, args, ob
    kern = _registry.get(SOURCE, f"gemm_simt_{code}", (("GEMM_SIMT", 1),), device)
    grid = ((n + 63) // 64, (m + 63) // 64, nbat)
    args = (ab, bb, ob, m, n, k, am, ak, bk, bn, n, sa, sb, sc, _args.f32(alpha), _args.f32(beta))
    return kern, grid, 256, 0, args, ob


def _operand(rows, cols, rs, cs, align=8):
    """(trans, ld) under which a kernel reads a rows x cols operand of element strides (rs, cs),
    or None: row-major (cs == 1), or its transpose stored row-major (rs == 1); the leading
    dimension and the contiguous extent multiples of ``align`` (8 for the tensor-core kernel)."""
    if cs == 1 and rs % align == 0 and cols % align == 0 and (rs >= cols or rows == 1):
        return 0, max(rs, cols)
    if rs == 1 and cs % align == 0 and rows % align == 0 and (cs >= rows or cols == 1):
        return 1, max(cs, rows)
    return None


def _tc_layout(ab, am, ak, m, k, sa, bb, bk, bn, n, sb, ob):
    """(trans_a, lda, trans_b, ldb) of the tensor-core kernel, or None when it cannot read them."""
    if ab.ptr % 16 or bb.ptr % 16 or ob.ptr % 4 or sa % 8 or sb % 8:
        return None
    a = _operand(m, k, am, ak)
    b = _operand(k, n, bk, bn)
    return None if a is None or b is None else a + b


# ---- cuBLASLt ---------------------------------------------------------------------------------
_lt_lock = threading.Lock()
_lt_cache: Dict[Tuple[Any, ...], Any] = {}     # (device ordinal, geometry) -> _cublaslt.Matmul
_lt_broken: Dict[int, BaseException] = {}      # device ordinal -> why "auto" gave up on cuBLASLt there
_lt_ws: Dict[Tuple[int, int], Any] = {}         # (device ordinal, stream key) -> the op function's workspace
_LT_CACHE_MAX = 256


def _auto_prefers_lt(code, m, n, k, nbat):
    """The "auto" decision table (H100/H200 same-run rows, docs/kernels.md): fp16/bf16 from
    64^3 multiply-adds (at 64^3 the two tie, launch-bound; from 128^3 up cuBLASLt wins: 7.2 vs
    8.8 us at 128^3, 10.5 vs 83 us at 16x4096x4096, 2.1-2.4x the builtin mma.sync TF/s at 4k-8k,
    1.45-1.64x the wgmma kernel's on the H200);
    fp32 from 128^3 (at 64^3 the builtin SIMT kernel issues faster, 9.4 vs 12.4 us; at 2048^3
    cuBLASLt is 3.2x faster; between the two not measured)."""
    return m * n * k * nbat >= ((1 << 21) if code == "f32" else (1 << 18))


def _lt_layout(am, ak, m, k, bk, bn, n):
    """(trans_a, lda, trans_b, ldb) for cuBLASLt (one unit stride per operand), or None."""
    a = _operand(m, k, am, ak, 1)
    b = _operand(k, n, bk, bn, 1)
    return None if a is None or b is None else (bool(a[0]), a[1], bool(b[0]), b[1])


def _lt_matmul(device, dtype, m, n, k, lt, nbat, sa, sb, sc, strict):
    """The cached cuBLASLt Matmul for this geometry; None ("auto") when cuBLASLt is missing
    or failed on this device (remembered); strict ("cublaslt"): the error is raised."""
    ordinal = int(device)
    if not strict and ordinal in _lt_broken:
        return None
    ta, lda, tb, ldb = lt
    key = (ordinal, dtype, m, n, k, ta, lda, tb, ldb, nbat, sa, sb, sc)
    mm = _lt_cache.get(key)
    if mm is not None:
        return mm
    try:
        from barecuda.kernels import _cublaslt
    except ImportError as exc:          # a build without the extension module
        if strict:
            raise
        _lt_broken[ordinal] = exc
        return None
    try:
        _cublaslt.load()
        mm = _cublaslt.Matmul(device, dtype, m, n, k, ta, lda, tb, ldb, n, nbat, sa, sb, sc)
    except (_cublaslt.CublasLtNotFoundError, _cublaslt.CublasLtError) as exc:
        if strict:
            raise
        if isinstance(exc, _cublaslt.CublasLtNotFoundError) or getattr(exc, "call", "") == "cublasLtCreate":
            _lt_broken[ordinal] = exc
        return None
    with _lt_lock:
        if len(_lt_cache) >= _LT_CACHE_MAX:
            _lt_cache.pop(next(iter(_lt_cache)))
        _lt_cache[key] = mm
    return mm


def _stream_key(stream):
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    h = getattr(stream, "handle_int", None)
    if h is None:
        cs = getattr(stream, "__cuda_stream__", None)
        h = cs()[1] if callable(cs) else getattr(stream, "cuda_stream", id(stream))
    return int(h)


def _lt_workspace(device, stream, need):
    """The op function's workspace for (device, stream): one matmul at a time per stream,
    so streams do not share one (allocated once, ordered on that stream)."""
    from barecuda.kernels import _cublaslt
    key = (int(device), _stream_key(stream))
    ws = _lt_ws.get(key)
    if ws is None or ws.nbytes < need:
        from barecuda import empty
        size = max(need, _cublaslt.DEFAULT_WORKSPACE)
        ws = empty((size,), "uint8", device=device) if stream is None else \
            empty((size,), "uint8", device=device, stream=stream)
        _lt_ws[key] = ws
    return ws


def _lt_run(mm, ops, stream):
    """Run the cuBLASLt call (the op's Python path); the workspace it used."""
    ab, bb, ob, alpha, beta = ops
    ws = _lt_workspace(ab.device, stream, mm.workspace_size)
    mm.run(ab.ptr, bb.ptr, ob.ptr, alpha, beta, ws.ptr, ws.nbytes, stream)
    return ws


@op
def matmul(a, b, *, out=None, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, backend="auto", stream=None):
    """``alpha * op(a) @ op(b) + beta * out`` with fp32 accumulation.

    Parameters
    ----------
    a, b : device arrays (float32, float16 or bfloat16, the same), 2-D or 3-D (batched)
    out : device array ``[M, N]`` / ``[batch, M, N]``, optional (required when ``beta != 0``)
    trans_a, trans_b : bool
        Read ``a`` as ``[K, M]`` / ``b`` as ``[N, K]`` and use its transpose.
    alpha, beta : float
    backend : ``'auto'``, ``'builtin'`` or ``'cublaslt'``
        ``'cublaslt'`` raises ``CublasLtNotFoundError`` (naming the pip package) when the
        library is missing, ``ValueError`` for a layout it cannot read (no unit stride);
        ``'auto'`` never needs it (module docstring). The cuBLASLt path uses a 32 MiB
        workspace per (device, stream), allocated on first use: under stream capture,
        call once on that stream before capturing, or use :func:`plan_matmul`. A
        repeated call (same signature and stream) is an op hit there too: one
        ``cublasLtMatmul`` from C (``_oplt``).
    stream : stream-like, optional

    Returns
    -------
    DeviceBuffer or ``out``
    """
    kern, grid, block, smem, args, ob = _prep(a, b, out, trans_a, trans_b, alpha, beta, backend, stream)
    if kern == "lt":        # a cuBLASLt call, not a kernel launch: run here; @op records it (_oplt)
        ws = _lt_run(grid, block, stream)
        return grid, None, None, block + (ws,), ob
    return kern, grid, block, args, ob, smem


def plan_matmul(a, b, *, out=None, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, backend="auto",
                stream=None, workspace=None):
    """:func:`matmul` packed once (give ``out=``; it is written on every replay).

    ``backend="builtin"`` or ``"auto"``: a ``LaunchPlan`` of the builtin kernel (replay it,
    or add it to a graph with ``graph.add_plan``). ``backend="cublaslt"``: a
    ``_cublaslt.MatmulPlan`` whose ``launch(stream=None)`` queues cuBLASLt again with
    everything prepared; it owns its workspace (or uses ``workspace=``, a device buffer of
    at least ``plan.matmul.workspace_size`` bytes not used by concurrent work), so it is safe
    to record under stream capture (``graph.add_plan`` takes kernel launches only).
    """
    kern, grid, block, smem, args, ob = _prep(a, b, out, trans_a, trans_b, alpha, beta, backend, stream,
                                              plan=True)
    if kern != "lt":
        return kern.bind(grid, block, *args, stream=stream, shared_mem=smem)
    from barecuda.kernels import _cublaslt
    mm = grid
    ab, bb, ob, alpha, beta = block
    if workspace is None:
        from barecuda import empty
        size = max(mm.workspace_size, 1)
        ws = empty((size,), "uint8", device=ab.device) if stream is None else \
            empty((size,), "uint8", device=ab.device, stream=stream)
    else:
        ws = _args.array(workspace, "workspace", stream)
    return _cublaslt.MatmulPlan(mm, ab.ptr, bb.ptr, ob.ptr, alpha, beta, ws.ptr, ws.nbytes, stream,
                                keep=(ab, bb, ob, ws, a, b, out))
