"""Decode matvec: ``y = x @ W.T`` for 1..8 rows of activations (csrc/matvec.cu).

Weights are dense (a ``[N, K]`` float32/float16/bfloat16 array, row-major) or a
:class:`~barecuda.kernels.QuantWeight` in a GGUF format (Q4_K, Q6_K, Q8_0, Q4_0, Q4_1;
dequantization fused). Activations ``x`` are ``[K]`` or ``[batch, K]`` (batch <= 8),
float32/float16/bfloat16; ``y`` has ``x``'s dtype and shape ``[N]`` / ``[batch, N]``.
Accumulation is fp32. Fused epilogues: ``residual=`` (``y = x @ W.T + r``) and
:func:`matvec_silu_mul` (``y = silu(x @ G.T) * (x @ U.T)``, gate and up in one launch).
"""
from barecuda.kernels import _args, _registry
from barecuda.kernels._dequant import DENSE, FORMATS, weight_facts as _weight
from barecuda.kernels._matmul import _cc, smem_limit
from barecuda.kernels._opcall import op

__all__ = ["matvec", "plan_matvec", "matvec_silu_mul", "plan_matvec_silu_mul"]

_WARPS = 4            # MV_WARPS in matvec.cu
_BUCKETS = (1, 2, 4, 8)
# Tuning (csrc/matvec.cu defines), from the sweep of tools/kernels_matvec_gpu.sh on an H200
# (docs/kernels.md): dense f16/bf16 rows of K >= 8192 keep 2 loads in flight per lane (MV_U=2,
# 6% faster at 4096x14336 than 4), tall matrices of shorter rows take 4 rows per warp
# (MV_R=4, 6% faster at 14336x4096); the rest, _glu entries and f32 weights use the source's
# defaults (MV_R=1, MV_U=4). Quantized weights take 2 rows per warp (MVQ_R=2: x and sum(x)
# shared; 5-20% faster), except Q4_1 (not measured); _glu entries are one row per warp in
# any module.
_WIDE = (("MV_R", 1), ("MV_U", 2))
_TALL = (("MV_R", 4), ("MV_U", 2))
_QTUNED = {"q4_k", "q6_k", "q8_0", "q4_0"}


def _dense_tuning(fmt, n, k, epi):
    if fmt == "f32" or epi == "glu":
        return ()
    if k >= 8192:
        return _WIDE
    if n >= 8192:
        return _TALL
    return ()


# Dense f16/bf16 weights with x of the same dtype on tensor cores (matvec_<x>_tc[_res|_glu] of
# the F16 / BF16 modules, csrc/matvec_dense.cuh: a block a 16-row tile, its warps split K,
# mma.sync m16n8k16 with the batch rows in the mma's 8 columns, weights straight from global
# memory into the A fragments): taken at a batch of DENSE_TC_MIN_BATCH or more, on the 16-byte
# path (vec), and at batch 1 where dense_tc1() says so. The block's warps are a launch choice
# (dense_tc_warps). H200 06:1x / 06:2x (docs/kernels.md): batch 8 at 4096x4096 / 14336x4096 /
# 4096x14336 / 28672x4096 10.57 / 31.54 / 31.14 / 60.06 us with MVW_L2=256 (the weight loads
# prefetch 256 bytes into L2) against 11.12 / 33.53 / 33.86 / 65.23 without, same run and
# warps; the CUDA-core entries took 32.2 / 65.9 / 103.5 us at batch 8 (06:1x).
DENSE_TC = True
DENSE_TC_MIN_BATCH = 2
# gate/up (_glu: two weights, 116 registers a thread) from batch 4: H200 06:2x, 14336x4096, the TC
# build without the L2 hint at 4 warps, 66.0 / 66.6 / 67.9 us at batch 2 / 4 / 8 against 63.1 /
# 73.1 / 120.2 us on the CUDA cores
DENSE_TC_MIN_BATCH_GLU = 4
DENSE_TC_DEFINES = (("MVW_L2", 256),)     # over (("WFMT", t),): MVW_U / MVW_MB / MVW_PF / MVW_ORD / MVW_L2
_DENSE_TC_MAX_WARPS = 16                  # MVW_MAXW


def dense_tc1(n, k, sms):
    """Batch 1 (not gate/up) on the dense tensor-core entries: weights of more than one and at
    most two 16-row tiles a multiprocessor, rows of at most 4096 weights (H200 09:4x / 09:5x,
    4096x4096 f16 at 8 warps 10.54 / 10.47 / 10.44 us against 10.94 / 10.88 / 10.83 on the CUDA
    cores, torch.matmul 13.66 / 13.49 / 13.57; bf16 10.45 against 10.99). Elsewhere the CUDA-core
    row loops (14336x4096 29.1 against 31.2 us at 8 warps, 4096x14336 30.3 against 30.6 at 12,
    28672x4096 ~56 against 58.0). Only 4096x4096 was measured inside the rule."""
    tiles = -(-n // 16)
    return sms < tiles <= 2 * sms and k <= 4096


def dense_tc_warps(n, k, sms, epi=None, nb=8):
    """Warps a block of the dense tensor-core entries, by the ceil(N / 16) tiles: the best of
    the H200 runs at 06:1x / 06:2x, where the waves of 25 warps a multiprocessor (80 registers)
    decide. Up to 2 tiles a multiprocessor, 24 warps a multiprocessor's worth (4096 rows: 12;
    06:1x, no L2 hint, batch 1: 11.0 us against 12.3 at 16 warps and 11.3 at 6); up to 8 tiles
    a multiprocessor, 8 warps (14336 rows, MVW_L2=256, batch 8: 31.5 us against 35.3 at 4
    warps, a 1.13-wave grid); more, 4 warps (28672 rows, MVW_L2=256, batch 8: 60.1 us; 06:1x
    batch 1: 104 / 69 / 63 us at 1 / 2 / 4 warps). Batch 1 (``nb``, dense_tc1's shapes): 8
    warps (4096x4096, H200 09:5x: 10.47 us against 10.58 / 11.03 / 11.33 / 12.23 at 12 / 10 / 6
    / 4). At most one a turn of MVW_U (4) runs of 32 weights of the row, and MVW_MAXW."""
    tiles = -(-n // 16)
    turns = -(-k // (32 * dict(DENSE_TC_DEFINES).get("MVW_U", 4)))
    if nb == 1 and tiles <= 2 * sms:
        want = 8
    elif tiles <= 2 * sms:
        want = max(4, 24 * sms // tiles)
    elif tiles <= 8 * sms:
        want = 8
    else:
        want = 4
    return max(1, min(_DENSE_TC_MAX_WARPS, turns, want))


# Dense f16/bf16 weights at batch 1 through the bulk copy engine (matvec_<x>_bk[_res|_glu], an
# opt-in build of the F16 / BF16 modules: BULK_DEFINES; csrc/matvec_dense.cuh, sm_90 and later): a
# block a multiprocessor, whole rows streamed into a ring of shared-memory slots by
# cp.async.bulk, a warp a row. Off: on the H200 (09:4x / 09:5x, docs/kernels.md) no shape ran
# faster than the CUDA-core rows (4096x4096 12.1 against 10.9 us: the copies' ramp; its no-math
# probe 10.2 against a read floor of 9.1; 28672x4096 / 128256x4096 at 16 warps 56.8 / 235.4
# against 55.8-56.5 / 230.4-232.9). DENSE_BULK = True takes it at batch 1 wherever a row fits.
DENSE_BULK = False
BULK_DEFINES = (("MVW_BK", 1),)           # over (("WFMT", t),)
_BULK_MAX_WARPS = 16                      # MVW_MAXW


def dense_bulk1(n, k, epi=None):
    """Batch 1 on the bulk-copy entries (shape rule: DENSE_BULK)."""
    return DENSE_BULK


def bulk_smem(k, ns, slots):
    """Shared memory (bytes) of a bulk-copy block: the barriers, x, ``slots`` x ``ns`` rows
    (mv_dense_bulk's layout, each part 128-byte aligned)."""
    rb = 2 * k
    return ((8 * (slots + 1) + 127) & ~127) + ((rb + 127) & ~127) + slots * ns * rb


def bulk_geometry(k, ns, limit, warps=None, spw=None):
    """(warps a block, slots a warp, shared bytes) for rows of ``k`` 16-bit weights (``ns`` = 2
    for gate/up) under the opt-in shared-memory ``limit``: the most warps (a warp a row at a
    time), then the most slots that fit (slots = warps x slots a warp), or the given ``warps``
    / ``spw`` with as many of the other as fit. None when not even one slot fits. H200 09:5x:
    16 warps x 1 slot against 9 x 3 (4096-wide rows) 28672x4096 56.8 / 60.9 us, 128256x4096
    235.4 / 247.7, 14336x4096 29.7 / 32.6."""
    best = None
    for s in range(1, 257):
        if bulk_smem(k, ns, s) > limit:
            break
        for w in range(1, _BULK_MAX_WARPS + 1):
            if s % w or (warps and w != warps) or (spw and s // w != spw):
                continue
            if best is None or (w, s) > (best[0], best[0] * best[1]):
                best = (w, s // w)
    if best is None:
        return None
    return best[0], best[1], bulk_smem(k, ns, best[0] * best[1])


# Quantized weights with f16/bf16 activations take the tensor-core entries (matvec_<x>_tc*,
# csrc/matvec.cu: a block of MVT_W warps a 16-row tile) at a batch of TC_MIN_BATCH or more
# (the mma's 8 columns hold the batch rows, so a batch of 8 costs what a batch of 1 does),
# and at batch 1 in the formats of TC1 for N >= TC1_MIN_ROWS (the batch-1 column layout:
# column n of the mma holds x of group n of the chunk, so the scales are applied once a
# chunk, with no shuffles). H100 sweep, 2026-11-26 19:1x (docs/kernels.md): tall weights
# gain 2-4 points of spec over the CUDA-core entries (Q6_K 14336x4096 39.6% vs 37.2%, Q8_0
# 58.9 vs 56.6, Q4_0 43.3 vs 39.2, Q4_1 44.3 vs 41.9); at N = 4096 the 256 tiles leave the
# device half empty and the CUDA cores are as fast or faster (Q6_K 4096x14336 36.7% vs 33.5).
TC_MIN_BATCH = 2
# (batches take matvec_<x>_tcb*, the batch layout alone: the _tc entries also hold batch 1's
# column layout, whose registers (72 a thread against 63 for Q4_K f16) the batch layout
# would carry too)
TC1 = frozenset({"q4_k", "q6_k", "q8_0", "q4_0", "q4_1"})
TC1_MIN_ROWS = 8192
_TC_WARPS = 4         # MVT_W in matvec.cu
# Q4_K at batch 1 with f16/bf16 x, any N: matvec_<x>_tcd* (the same column layout, each
# thread's weights straight into registers, MVD_PF super-blocks ahead; no shared-memory
# staging): 50.6 / 54.4 / 34.3 / 56.7% of the H100's spec at 14336x4096 / 4096x14336 /
# 4096x4096 / 28672x4096 against 39.1 / 38.5 / 29.1% on the CUDA cores in the same run.
# Its warps a block (the K split) are a launch choice: tcd_warps().
TCD = True
# Q6_K the same way when K % 512 == 0 (mvc_tcd6: its 210-byte blocks sit 2 bytes off a
# 4-byte boundary every other super-block; rows of an even count of blocks keep that the
# same in every row of a tile): H200 02:4x, 9.21 / 23.07 / 23.43 / 39.23 us at 4096x4096 /
# 14336x4096 / 4096x14336 / 28672x4096 (31-51% of spec) against 12.29 (CUDA cores) / 34.53 /
# 37.89 (CUDA cores) / 63.89 us (staged column layout) in the same run
TCD6 = True
TCD_WARPS_PER_SM = 16         # warps the registers let a multiprocessor hold (118 a thread)
_TCD_MAX_WARPS = 16           # MVD_MAXW in matvec.cu
# Q4_K rows shorter than TCD_PF1_MAXK take MVD_PF=1 (one super-block in flight a warp: 68
# registers, 7 blocks of 4 warps a multiprocessor against 4 at MVD_PF=2's 112): H200 06:0x, same
# run, loads through L1 and subnormal nibbles (the defaults), default warps: 4096x4096 6.28 us
# against 6.43, 14336x4096 13.20 against 14.52, 28672x4096 23.50 against 24.79; 4096x14336
# keeps MVD_PF=2 (13.57 against 14.93 us)
TCD_PF1_MAXK = 8192


def tcd_defines(fmt, k):
    """Defines over the module's own of the batch-1 direct entries (matvec_<x>_tcd*)."""
    return (("MVD_PF", 1),) if fmt == "q4_k" and k < TCD_PF1_MAXK else ()


def tcd_warps(n, k, sms, epi=None):
    """Warps a block for the Q4_K batch-1 entries: enough that the ceil(N / 16) tiles fill
    the device in one wave of TCD_WARPS_PER_SM warps a multiprocessor (at least 4), at most
    one a super-block of the row (and half MVD_MAXW for gate/up)."""
    tiles = -(-n // 16)
    cap = _TCD_MAX_WARPS // 2 if epi == "glu" else _TCD_MAX_WARPS
    # at least 4 (H200 23:0x, MVD_V=2: 14336x4096 40.1% of spec at 4 warps against 39.2% at 2;
    # 28672x4096 46.9% at 2 or 4 against 43.9% at 1)
    return max(1, min(cap, k // 256, max(4, TCD_WARPS_PER_SM * sms // tiles)))


def _quant_tuning(fmt):
    return (("MVQ_R", 2),) if fmt in _QTUNED else ()


def _quant_geometry(defines, code, epi, tc=False):
    """(rows a block covers, threads a block) of a quantized module's entry for x dtype
    ``code``: the tensor-core entries (``tc``) or the CUDA-core ones."""
    d = dict(defines)
    if tc:
        return 16, 32 * d.get("MVT_W", _TC_WARPS)
    return _WARPS * (1 if epi == "glu" else d.get("MVQ_R", 1)), 32 * _WARPS


_EPI = {None: "", "res": "_res", "glu": "_glu"}
_CODES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}   # str(dtype) -> entry suffix


def _prepare(weight, up, x, residual, out, stream, epi):
    fmt, t, wb, n, k = _weight(weight, "weight", stream)
    ub = None
    if up is not None:
        f2, _, ub, n2, k2 = _weight(up, "up", stream)
        if (f2, n2, k2) != (fmt, n, k):
            raise ValueError(f"up: {f2} [{n2}, {k2}] does not match gate: {fmt} [{n}, {k}]")
    xb = _args.array(x, "x", stream)
    code = _CODES.get(_args.dt(xb))
    if code is None:
        raise TypeError(f"x: dtype {xb.dtype} is not supported (float32, float16 or bfloat16)")
    if len(xb.shape) not in (1, 2):
        raise ValueError(f"x: expected [K] or [batch, K], got shape {tuple(xb.shape)}")
    nb, kx, xs = _args.rows(xb, "x")
    if kx != k:
        raise ValueError(f"x: {kx} columns, but the weight has K = {k}")
    if xs != kx:
        raise ValueError("x: rows must be contiguous")
    if not 1 <= nb <= 8:
        raise ValueError(f"x: batch {nb} is outside 1..8 (matvec serves decode; use matmul for more rows)")
    _args.check_align(xb, "x")
    oshape = (n,) if len(xb.shape) == 1 else (nb, n)
    dense = fmt in DENSE
    if dense:
        isz = FORMATS[fmt][2]
        for nm, b in (("weight", wb), ("up", ub)):
            if b is not None and b.ptr % isz:
                raise ValueError(f"{nm}: address 0x{b.ptr:x} is not aligned to {isz} bytes")
        vw = 16 // isz
        vec = int(k % vw == 0 and wb.ptr % 16 == 0 and xb.ptr % 16 == 0 and (ub is None or ub.ptr % 16 == 0))
        tc_min = DENSE_TC_MIN_BATCH_GLU if epi == "glu" else DENSE_TC_MIN_BATCH
        bulk = None
        if (nb == 1 and vec and code == fmt != "f32" and dense_bulk1(n, k, epi)
                and _cc(xb.device) >= (9, 0)):
            bulk = bulk_geometry(k, 2 if epi == "glu" else 1, smem_limit(xb.device))
        if bulk is not None:
            tc = "bk"
            defines = (("WFMT", t),) + BULK_DEFINES
            threads, vec, smem = 32 * bulk[0], bulk[1], bulk[2]
            grid = min(n, _args.sm_count(xb.device))
        elif DENSE_TC and vec and code == fmt != "f32" and (
                nb >= tc_min or epi != "glu" and dense_tc1(n, k, _args.sm_count(xb.device))):
            tc = "tc"
            defines = (("WFMT", t),) + DENSE_TC_DEFINES
            rows_per_block = 16
            threads = 32 * dense_tc_warps(n, k, _args.sm_count(xb.device), epi, nb)
        else:
            tune = _dense_tuning(fmt, n, k, epi)
            defines = (("WFMT", t),) + tune
            rows_per_block = _WARPS * dict(tune).get("MV_R", 1)
            threads = 32 * _WARPS
            tc = ""
    else:
        if xb.ptr % 16:
            raise ValueError(f"x: address 0x{xb.ptr:x} is not 16-byte aligned (needed with {fmt} weights)")
        vec = 0
        tune = _quant_tuning(fmt)
        defines = (("WFMT", t),) + tune
        if code == "f32":
            tc = ""
        elif nb >= TC_MIN_BATCH:
            tc = "tcb"
        elif fmt == "q4_k" and TCD or fmt == "q6_k" and TCD6 and k % 512 == 0:
            tc = "tcd"
        else:
            tc = "tc" if fmt in TC1 and n >= TC1_MIN_ROWS else ""
        rows_per_block, threads = _quant_geometry(tune, code, epi, bool(tc))
        if tc == "tcd":
            threads = 32 * tcd_warps(n, k, _args.sm_count(xb.device), epi)
            defines += tcd_defines(fmt, k)
    _args.same_device(("x", xb), ("weight", wb), ("up", ub))
    rb = None
    if residual is not None:
        rb = _args.array(residual, "residual", stream)
        if _args.dt(rb) != _args.dt(xb):
            raise TypeError(f"residual: dtype {rb.dtype}, expected {xb.dtype}")
        if tuple(rb.shape) != oshape:
            raise ValueError(f"residual: shape {tuple(rb.shape)}, expected {oshape}")
        if rb.strides is not None and nb * n > 1:
            raise ValueError("residual: must be contiguous")
        _args.check_align(rb, "residual")
    y = _args.out_array(out, oshape, _args.dt(xb), xb, stream)
    xend = xb.ptr + nb * k * xb.itemsize
    if y.ptr < xend and xb.ptr < y.ptr + nb * n * xb.itemsize:
        raise ValueError("out: overlaps x (matvec reads x while it writes out)")
    bucket = next(b for b in _BUCKETS if b >= nb)
    entry = f"matvec_{code}_{tc}{_EPI[epi]}" if tc else f"matvec_{code}_b{bucket}{_EPI[epi]}"
    kern = _registry.get("matvec.cu", entry, defines, int(xb.device))
    args = (wb, ub if ub is not None else 0, xb, y, rb if rb is not None else 0, n, k, nb, vec)
    if tc == "bk":
        if kern.max_dynamic_shared_memory < smem:
            kern.set_max_dynamic_shared_memory(smem)
        return kern, grid, threads, args, y, smem
    return kern, -(-n // rows_per_block), threads, args, y


@op
def matvec(weight, x, *, residual=None, out=None, stream=None):
    """``y = x @ weight.T`` (+ ``residual``) for a batch of 1..8 activation rows.

    Parameters
    ----------
    weight : device array [N, K] (float32/float16/bfloat16) or QuantWeight
        Row-major; a ``QuantWeight`` in q4_k, q6_k, q8_0, q4_0, q4_1 (or a dense format).
        Quantized weights need K to be a multiple of the block (checked by QuantWeight)
        and a 16-byte aligned x.
    x : device array [K] or [batch, K], float32/float16/bfloat16, contiguous
    residual : device array, optional
        Same shape and dtype as the result, added in the epilogue (may be ``out`` itself).
    out : device array, optional
        ``[N]`` or ``[batch, N]`` in x's dtype, contiguous, not overlapping x.
    stream : Stream, optional

    Returns
    -------
    DeviceBuffer or the array given as ``out``
    """
    return _prepare(weight, None, x, residual, out, stream, "res" if residual is not None else None)


@op
def matvec_silu_mul(gate, up, x, *, out=None, stream=None):
    """``y = silu(x @ gate.T) * (x @ up.T)`` in one launch (the SwiGLU MLP's first half).

    ``gate`` and ``up`` have one format and shape ([N, K] arrays or QuantWeights; they may be
    views of one buffer); the rest as :func:`matvec`.
    """
    return _prepare(gate, up, x, None, out, stream, "glu")


def plan_matvec(weight, x, *, residual=None, out, stream=None):
    """The launch of :func:`matvec` packed once: ``plan()`` replays it, ``graph.add_plan(plan)``
    adds it to a graph. ``out`` is required (a plan writes into memory you name)."""
    if out is None:
        raise ValueError("plan_matvec: out= is required")
    r = _prepare(weight, None, x, residual, out, stream, "res" if residual is not None else None)
    return r[0].bind(r[1], r[2], *r[3], stream=stream, shared_mem=r[5] if len(r) == 6 else 0)


def plan_matvec_silu_mul(gate, up, x, *, out, stream=None):
    """:func:`matvec_silu_mul` as a plan (see :func:`plan_matvec`)."""
    if out is None:
        raise ValueError("plan_matvec_silu_mul: out= is required")
    r = _prepare(gate, up, x, None, out, stream, "glu")
    return r[0].bind(r[1], r[2], *r[3], stream=stream, shared_mem=r[5] if len(r) == 6 else 0)


_args.attach_plan(matvec, plan_matvec)
_args.attach_plan(matvec_silu_mul, plan_matvec_silu_mul)

_NAMES = tuple(f"matvec_{c}_b{b}{s}" for c in ("f32", "f16", "bf16") for b in _BUCKETS for s in ("", "_res", "_glu"))
_TC_NAMES = tuple(f"matvec_{c}_{t}{s}" for t in ("tc", "tcb") for c in ("f16", "bf16") for s in ("", "_res", "_glu"))
_TCD_NAMES = tuple(f"matvec_{c}_tcd{s}" for c in ("f16", "bf16") for s in ("", "_res", "_glu"))
_DENSE_TC_NAMES = {c: tuple(f"matvec_{c}_tc{s}" for s in ("", "_res", "_glu")) for c in ("f16", "bf16")}
KERNELS = ([("matvec.cu", _NAMES + (_DENSE_TC_NAMES.get(k, ()) if k in DENSE else _TC_NAMES)
             + (_TCD_NAMES if k in ("q4_k", "q6_k") else ()),
             (("WFMT", v[0]),) + (() if k in DENSE else _quant_tuning(k)))
            for k, v in FORMATS.items()]
           + [("matvec.cu", _NAMES, (("WFMT", FORMATS[k][0]),) + tune) for k in ("f16", "bf16") for tune in (_WIDE, _TALL)]
           + [("matvec.cu", _DENSE_TC_NAMES[k], (("WFMT", FORMATS[k][0]),) + DENSE_TC_DEFINES) for k in ("f16", "bf16")
              if DENSE_TC_DEFINES]
           + [("matvec.cu", _TCD_NAMES, (("WFMT", FORMATS["q4_k"][0]),) + _quant_tuning("q4_k") + tcd_defines("q4_k", 256))])
