"""Matvec and dequantize rows (issue 23): GB/s on the weight bytes and % of spec bandwidth,
beside a device-copy row and cuBLAS (``torch.nn.functional.linear``) in the same run.

Section ``kernels_matvec`` (``--rows kernels_matvec``). Each row times one CUDA graph that
chains one matvec per weight over enough separate weights that the bytes touched per
replay exceed 512 MB (L2 is 50-60 MB on H100/H200), so every weight byte comes from HBM;
torch's row is the same chain captured in a torch CUDA graph. Bytes counted: the weight
as stored (quantized bytes for GGUF formats), plus x and y. Dequantize counts bytes read
plus bytes written. ``python -m barecuda.bench.kernels_matvec_rows [--sweep]`` prints the
table alone (``--sweep`` adds the dense tuning variants, MV_R x MV_U).
"""
import math
import sys

from barecuda.bench.report import Section
from barecuda.bench._kernel_timing import SPEC_GBS, _median, _spec, _time_plans, _torch, copy_gbs, load_source, torch_graph_us  # noqa: F401
# the no-math floors beside the dequantize rows (sweeps read _MIXES / SHAPES through this module)
from barecuda.bench._dequant_floors import _MIXES, SHAPES, dequant_floor_rows, dequant_shape_floor_rows  # noqa: F401

ORDER = 61
COLUMNS = [("us", 9), ("GB/s", 8), ("% spec", 7), ("torch GB/s", 11), ("vs torch", 9)]
ROTATE_BYTES = 512 << 20
_XCODE = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}

DENSE = [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 4096), (128256, 4096)]
QUANT = [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 4096)]


def _weights(bc, s, nbytes, make):
    n = max(2, math.ceil(ROTATE_BYTES / nbytes))
    return [make() for _ in range(n)]


def _quant_bufs(bc, s, n, k, qk, bb):
    """The rotation of n x k quantized weights (qk elements in bb bytes a block) as uint8
    buffers, each filled with 0x1c (f16 0x1c1c = 0.0039: sane scales everywhere)."""
    wbytes = n * k // qk * bb
    bufs = _weights(bc, s, wbytes, lambda: bc.empty((wbytes,), "uint8", stream=s))
    for b in bufs:
        b.memset(0x1c, stream=s)
    return wbytes, bufs


def _batch_xy(bc, s, nb, n, k, dtype):
    """x (nb, k) filled with 0x1c and y (nb, n), both of dtype."""
    x = bc.empty((nb, k), dtype, stream=s)
    x.memset(0x1c, stream=s)
    y = bc.empty((nb, n), dtype, stream=s)
    return x, y


def _torch_linear_us(torch, n, k, batch, dtype, count, reps=15):
    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    ws = [torch.full((n, k), 0.01, device="cuda", dtype=dt) for _ in range(count)]
    x = torch.full((batch, k), 0.01, device="cuda", dtype=dt)
    ys = [torch.empty((batch, n), device="cuda", dtype=dt) for _ in range(count)]

    def body():
        for w, y in zip(ws, ys):
            torch.matmul(x, w.t(), out=y)
    us = torch_graph_us(torch, body, count, reps)
    ws.clear()
    ys.clear()
    torch.cuda.empty_cache()
    return us


def dense_rows(bc, s, torch=None, dtype="float16", shapes=DENSE, batches=(1,), floor=False):
    """Dense matvec rows (batch 1: the CUDA-core entries, or the tensor-core ones where
    _matvec.dense_tc1 says so (4096x4096); 2..8: the tensor-core ones), torch's
    beside each; ``floor``: first, per shape, the read-only stream (rd_floor, one pass) over the
    same rotation of weights, chained the same way: what a pure read of those bytes reaches."""
    from barecuda.kernels import _matvec as M
    out = []
    for n, k in shapes:
        if floor:
            wbytes = n * k * 2
            ws = _weights(bc, s, wbytes, lambda: bc.empty((n, k), dtype, stream=s))
            n16, sink = wbytes // 16, bc.zeros((4,), "uint32", stream=s)
            plans = [_floor_kernel().bind(-(-n16 // (256 * 4)), 256, w, n16, sink, stream=s) for w in ws]
            out.append((f"floor read-only {dtype} {n}x{k} (the rotation's weights)", _time_plans(bc, s, plans), wbytes, None))
            del plans, ws
        for batch in batches:
            wbytes = n * k * 2
            ws = _weights(bc, s, wbytes, lambda: bc.empty((n, k), dtype, stream=s))
            for w in ws:
                w.memset(0x1c, stream=s)
            x = bc.empty((batch, k), dtype, stream=s)
            x.memset(0x1c, stream=s)
            y = bc.empty((batch, n), dtype, stream=s)
            plans = [M.plan_matvec(w, x, out=y, stream=s) for w in ws]
            us = _time_plans(bc, s, plans)
            nbytes = wbytes + 2 * batch * (n + k)
            tus = None
            if torch is not None:
                try:
                    tus = _torch_linear_us(torch, n, k, batch, dtype, len(ws))
                except Exception as exc:   # noqa: BLE001 -- a bench row, not a test
                    tus = f"n/a ({type(exc).__name__})"
            out.append((f"matvec {dtype} {n}x{k} b{batch}", us, nbytes, tus))
            del plans, ws
    return out


def quant_rows(bc, s, fmts=("q4_k", "q6_k", "q8_0", "q4_0", "q4_1"), shapes=QUANT, xdtype="float16", batches=(1,)):
    from barecuda.kernels import _dequant as D
    from barecuda.kernels import _matvec as M
    out = []
    for fmt in fmts:
        _, _, qk, bb = D.format_info(fmt)
        for n, k in shapes:
            for batch in batches:
                wbytes, bufs = _quant_bufs(bc, s, n, k, qk, bb)
                x, y = _batch_xy(bc, s, batch, n, k, xdtype)
                plans = [M.plan_matvec(D.QuantWeight(b, fmt, (n, k)), x, out=y, stream=s) for b in bufs]
                us = _time_plans(bc, s, plans)
                out.append((f"matvec {fmt} x {_XCODE[xdtype]} {n}x{k} b{batch}", us, wbytes + 2 * batch * (n + k), None))
                del plans, bufs
    return out


def dequant_grid_rows(bc, s, fmts=("q4_k", "q6_k", "q8_0"), shape=(14336, 4096), per_sm=(0, 2, 4, 8, 12)):
    """dequantize -> f16 with other grid sizes (blocks a multiprocessor; 0: one block a
    segment group, no grid-stride loop). The default is ``_dequant.GRID_PER_SM``."""
    from barecuda.kernels import _dequant as D
    from barecuda.kernels import _args as A
    out = []
    n, k = shape
    for fmt in fmts:
        _, _, qk, bb = D.format_info(fmt)
        qbytes, obytes = n * k // qk * bb, n * k * 2
        bufs = _weights(bc, s, qbytes + obytes, lambda: bc.empty((qbytes,), "uint8", stream=s))
        for b in bufs:
            b.memset(0x1c, stream=s)
        y = bc.empty((n, k), "float16", stream=s)
        nblocks = qbytes // bb
        full = -(-nblocks // D._CTA_BLOCKS.get(fmt, D._SEG[qk] * D._WARPS))    # the op's grid (m = 0)
        for defines in ((),) + (((("DQ_DIRECT", 0),),) if fmt == "q4_k" else ()):
            kern = _registry_get("dequant.cu", f"dequant_{fmt}_f16", defines)
            tag = " DQ_DIRECT=0" if defines else ""
            for m in per_sm:
                grid = full if m == 0 else max(1, min(full, A.sm_count(0) * m))
                plans = [kern.bind(grid, 128, b, y, nblocks, stream=s) for b in bufs]
                us = _time_plans(bc, s, plans)
                out.append((f"sweep dequantize {fmt}{tag} -> f16 {n}x{k} grid {m or 'all'}/SM{_occ(kern)}", us,
                            qbytes + obytes, None))
                del plans
        del bufs
    return out


def _registry_get(*a):
    from barecuda.kernels import _registry
    return _registry.get(*a)


def dequant_rows(bc, s, fmts=("q4_k", "q6_k", "q8_0", "q4_0", "q4_1"), shape=(14336, 4096), dtype="float16", pdl=False):
    """dequantize -> dtype over the rotation, a chain of plans (``pdl``: plan_dequantize(pdl=True)
    plans, each overlapping the previous one's end through programmatic edges)."""
    from barecuda.kernels import _dequant as D
    out = []
    n, k = shape
    for fmt in fmts:
        _, _, qk, bb = D.format_info(fmt)
        qbytes = n * k // qk * bb
        obytes = n * k * (4 if dtype == "float32" else 2)
        bufs = _weights(bc, s, qbytes + obytes, lambda: bc.empty((qbytes,), "uint8", stream=s))
        for b in bufs:
            b.memset(0x1c, stream=s)
        y = bc.empty((n, k), dtype, stream=s)
        plans = [D.plan_dequantize(b, fmt, (n, k), dtype=dtype, out=y, pdl=pdl, stream=s) for b in bufs]
        us = _time_plans(bc, s, plans)
        out.append((f"dequantize {fmt} -> {_XCODE[dtype]} {n}x{k}" + (" (pdl plans)" if pdl else ""), us, qbytes + obytes, None))
        del plans, bufs
    return out


def sweep_rows(bc, s, shapes=((4096, 4096), (14336, 4096), (4096, 14336)), variants=((1, 2), (1, 4), (1, 8), (2, 2), (2, 4), (4, 2))):
    """Dense f16 batch-1 matvec built with other tuning defines (MV_R rows/warp, MV_U loads)."""
    from barecuda.kernels import _registry
    out = []
    for n, k in shapes:
        wbytes = n * k * 2
        ws = _weights(bc, s, wbytes, lambda: bc.empty((n, k), "float16", stream=s))
        x = bc.empty((1, k), "float16", stream=s)
        y = bc.empty((1, n), "float16", stream=s)
        for r, u in variants:
            kern = _registry.get("matvec.cu", "matvec_f16_b1", (("WFMT", 1), ("MV_R", r), ("MV_U", u)))
            grid = -(-n // (4 * r))
            plans = [kern.bind(grid, 128, w, 0, x, y, 0, n, k, 1, 1, stream=s) for w in ws]
            us = _time_plans(bc, s, plans)
            out.append((f"sweep f16 {n}x{k} R{r} U{u}{_occ(kern)}", us, wbytes, None))
        del ws
    return out


# (tensor-core entry?, extra defines over the format's default module)
QVARIANTS = ((False, ()), (True, ()), (True, (("MVT_S", 3),)), (True, (("MVT_W", 8),)),
             (True, (("MVT_W", 8), ("MVT_S", 3))), (True, (("MVT_W", 6), ("MVT_S", 3))))


def qsweep_variants(fmt):
    """The sweep's variants for ``fmt`` (Q6_K's gate/up entries do not fit 48 KB at 8 warps)."""
    return [v for v in QVARIANTS if not (fmt == "q6_k" and dict(v[1]).get("MVT_W") == 8)]


def tcd_sweep_rows(bc, s, shapes=((14336, 4096), (4096, 14336), (4096, 4096), (28672, 4096)),
                   warps=(None, 1, 2, 4, 8, 16), pfs=(2, 3), xdtype="float16", vs=(2,), fmt="q4_k", extras=((),)):
    """Q4_K (or Q6_K) batch 1 on the direct entries (matvec_f16_tcd): warps a block (None: the
    default, _matvec.tcd_warps) and super-blocks in flight a warp (MVD_PF)."""
    from barecuda.kernels import _args as A
    from barecuda.kernels import _dequant as D
    from barecuda.kernels import _matvec as M
    from barecuda.kernels import _registry
    _, wfmt, _, bb = D.format_info(fmt)
    out = []
    for n, k in shapes:
        wbytes = n * k // 256 * bb
        bufs = _weights(bc, s, wbytes, lambda: bc.empty((wbytes,), "uint8", stream=s))
        for b in bufs:
            b.memset(0x1c, stream=s)
        x = bc.empty((1, k), xdtype, stream=s)
        x.memset(0x1c, stream=s)
        y = bc.empty((1, n), xdtype, stream=s)
        dflt = M.tcd_warps(n, k, A.sm_count(0))
        for pf, v, ex in ((a, b, e) for a in pfs for b in vs for e in extras):
            defines = ((("WFMT", wfmt),) + M._quant_tuning(fmt) + ((("MVD_PF", pf),) if pf != 2 else ())
                       + ((("MVD_V", v),) if v != 2 else ()) + ex)
            kern = _registry.get("matvec.cu", f"matvec_{M._CODES[xdtype]}_tcd", defines)
            for w in warps:
                if w is not None and (w == dflt or w > k // 256):
                    continue
                nw = dflt if w is None else w
                plans = [kern.bind(-(-n // 16), 32 * nw, b, 0, x, y, 0, n, k, 1, 0, stream=s) for b in bufs]
                us = _time_plans(bc, s, plans)
                tag = (f"{nw} warps{' (default)' if w is None else ''} MVD_PF={pf}" + (f" MVD_V={v}" if fmt == "q4_k" else "")
                       + "".join(f" {a}={c}" for a, c in ex))
                out.append((f"sweep {fmt} direct {n}x{k} b1 {tag}{_occ(kern, 32 * nw)}", us, wbytes, None))
                del plans
        del bufs
    return out


def qsweep_rows(bc, s, fmts=("q4_k", "q6_k", "q8_0", "q4_0", "q4_1"), shapes=((14336, 4096), (4096, 14336), (4096, 4096)),
                batches=(1,), variants=None):
    """Quantized f16-x matvec, CUDA-core entries (matvec_f16_b<B>: MVQ_R rows a warp) against the
    tensor-core ones (matvec_f16_tc: MVT_W warps a 16-row tile), batch 1 and 8."""
    from barecuda.kernels import _dequant as D
    from barecuda.kernels import _matvec as M
    from barecuda.kernels import _registry
    out = []
    for fmt in fmts:
        _, t, qk, bb = D.format_info(fmt)
        base = (("WFMT", t),) + M._quant_tuning(fmt)
        for n, k in shapes:
            wbytes, bufs = _quant_bufs(bc, s, n, k, qk, bb)
            for nb in batches:
                x, y = _batch_xy(bc, s, nb, n, k, "float16")
                for tc, v in variants or qsweep_variants(fmt):
                    rows, threads = M._quant_geometry(base + v, "f16", None, tc)
                    name = "matvec_f16_tc" if tc else f"matvec_f16_b{next(c for c in (1, 2, 4, 8) if c >= nb)}"
                    kern = _registry.get("matvec.cu", name, base + v)
                    plans = [kern.bind(-(-n // rows), threads, b, 0, x, y, 0, n, k, nb, 0, stream=s) for b in bufs]
                    us = _time_plans(bc, s, plans)
                    tag = ("tensor cores" if tc else "CUDA cores") + "".join(f" {a}={c}" for a, c in v)
                    out.append((f"sweep {fmt} {n}x{k} b{nb} {tag}{_occ(kern, threads)}", us, wbytes, None))
            del bufs
    return out


# the 8B decode loop's fused Q4_K nodes: (label, epilogue, N, K)
FUSED_8B = (("qkv", "qkv", 6144, 4096), ("wo+res", "res", 4096, 4096), ("gate/up", "glu", 14336, 4096),
            ("down+res", "res", 4096, 14336))
# its Q6_K nodes (Q4_K_M): the V projection (a qkv node of its own), down+res, the output head
FUSED_8B_Q6 = (("v", "qkv", 1024, 4096), ("down+res", "res", 4096, 14336), ("head", "scale", 128256, 4096))


def fused_rows(bc, s, fmts=("q4_k", "f16"), pdl=(False,), nodes=None):
    """fused.cu's nodes (barecuda.kernels._fused, the decode loop's) at the 8B shapes, Q4_K on
    the direct tensor-core loop (_fused.TCD, the default) and on the CUDA-core one; f16 weights
    beside the standalone matvec rows. Bytes: the weights (both for gate/up). (Programmatic-launch
    plans cannot be graph nodes through add_plan: pdl=(True,) needs a captured graph.)"""
    from barecuda.kernels import _dequant as D
    from barecuda.kernels import _fused as F
    from barecuda.kernels import _matvec as M
    out = []
    old, base_tcd, old6, base6, pf1 = F.TCD, F._TCD_DEFINES, F.TCD6, F._TCD6_DEFINES, M.TCD_PF1_MAXK
    try:
        for fmt in fmts:
            _, t, qk, bb = D.format_info(fmt)
            for label, epi, n, k in nodes or (FUSED_8B_Q6 if fmt == "q6_k" else FUSED_8B):
                wbytes = n * k // qk * bb
                nw = 2 if epi == "glu" else 1
                bufs = _weights(bc, s, nw * wbytes, lambda: bc.empty((wbytes,), "uint8", stream=s))
                for b in bufs:
                    b.memset(0x11 if fmt != "f16" else 0, stream=s)
                ws = [D.QuantWeight(b, fmt, (n, k)) if fmt != "f16" else b.view("float16", (n, k))
                      for b in bufs]
                x = bc.empty((k,), "float16", stream=s)
                x.memset(0, stream=s)
                y = bc.empty((n,), "float16", stream=s)
                y.memset(0, stream=s)
                ss = bc.zeros((2,), "float32", stream=s)
                xg = bc.empty((n,), "float16", stream=s)
                g = bc.empty((n,), "float16", stream=s)
                g.memset(0, stream=s)
                hd = 128
                kc = bc.zeros((8, 256, hd), "float16", stream=s)
                vc = bc.zeros((8, 256, hd), "float16", stream=s)
                pos = bc.zeros((1,), "int32", stream=s)
                inv = bc.zeros((hd // 2,), "float32", stream=s)
                loops = (tuple((lb, True, e, m) for lb, e, m in FUSED_Q4_LOOPS) + (("CUDA cores", False, (), None),)
                         if fmt == "q4_k" else
                         tuple(("direct tensor cores" + "".join(f" {a}={c}" for a, c in e), True, e, None)
                               for e in FUSED_Q6_EXTRAS) + (("CUDA cores", False, (), None),) if fmt == "q6_k" else
                         (("CUDA cores", False, (), None),))
                for name, tcd, extra, maxk in loops:
                    F.TCD, F.TCD6 = tcd, tcd
                    M.TCD_PF1_MAXK = pf1 if maxk is None else maxk
                    if fmt == "q6_k":
                        F._TCD6_DEFINES = base6 + extra
                    else:
                        F._TCD_DEFINES = base_tcd + extra
                    for pd in pdl:
                        plans = []
                        for i, w in enumerate(ws):
                            kw = dict(out=y, stream=s, pdl=pd)
                            if epi == "glu":
                                kw.update(up=ws[(i + 1) % len(ws)], ss_in=ss[0:1])
                            elif epi == "res":
                                kw.update(ss_out=ss[0:1], xg=xg, g=g)
                            elif epi == "qkv":
                                kw.update(ss_in=ss[0:1], k_cache=kc, v_cache=vc, pos=pos, inv_freq=inv, nq=4096,
                                          nkv=1024, head_dim=hd, n_rot=hd, row0=5120 if n == 1024 else 0)
                            plans.append(F.plan_fused_matvec(epi, w, x, **kw))
                        us = _time_plans(bc, s, plans)
                        tag = name + (" pdl" if pd else "")
                        out.append((f"fused {fmt} {label} {n}x{k} {tag}", us, nw * wbytes, None))
                del ws, bufs
    finally:
        F.TCD, F._TCD_DEFINES, F.TCD6, F._TCD6_DEFINES, M.TCD_PF1_MAXK = old, base_tcd, old6, base6, pf1
    return out


def batch_tc_rows(bc, s, fmts=("q4_k", "q6_k"), shapes=((14336, 4096),), batches=(4, 8)):
    """Quantized batches on tensor cores: matvec_f16_tc (both layouts in one kernel) against
    matvec_f16_tcb (the batch layout alone, the default now)."""
    from barecuda.kernels import _dequant as D
    from barecuda.kernels import _matvec as M
    from barecuda.kernels import _registry
    out = []
    for fmt in fmts:
        _, t, qk, bb = D.format_info(fmt)
        base = (("WFMT", t),) + M._quant_tuning(fmt)
        rows, threads = M._quant_geometry(base, "f16", None, True)
        for n, k in shapes:
            wbytes, bufs = _quant_bufs(bc, s, n, k, qk, bb)
            for nb in batches:
                x, y = _batch_xy(bc, s, nb, n, k, "float16")
                for tc in ("tc", "tcb"):
                    kern = _registry.get("matvec.cu", f"matvec_f16_{tc}", base)
                    plans = [kern.bind(-(-n // rows), threads, b, 0, x, y, 0, n, k, nb, 0, stream=s) for b in bufs]
                    us = _time_plans(bc, s, plans)
                    out.append((f"{fmt} {n}x{k} b{nb} matvec_f16_{tc}{_occ(kern, threads)}", us,
                                wbytes + 2 * nb * (n + k), None))
            del bufs
    return out


def _occ(kern, threads=128):
    try:
        return f" [{kern.attribute('num_regs')} regs, {kern.max_active_blocks_per_sm(threads)} blk/SM]"
    except Exception:   # noqa: BLE001
        return ""


def matvec_section(ctx=None, sweep=False, progress=False):
    import barecuda as bc
    torch = _torch()
    s = bc.Stream()
    card, spec = _spec(bc)
    cp = copy_gbs(bc, s)
    if progress:
        print(f"  device copy: {cp:.0f} GB/s on {card}", flush=True)
    rows = []
    groups = [lambda: dense_rows(bc, s, torch, "float16", floor=True),
              lambda: quant_rows(bc, s, fmts=("q4_k", "q6_k")),
              lambda: dequant_rows(bc, s),
              lambda: dequant_rows(bc, s, pdl=True),
              lambda: dequant_rows(bc, s, fmts=("q4_k", "q8_0"), dtype="float32"),
              lambda: dequant_floor_rows(bc, s),
              lambda: dequant_shape_floor_rows(bc, s, mixes=(), shapes=[], rw=False),
              lambda: dense_rows(bc, s, torch, "bfloat16", shapes=[(4096, 4096), (14336, 4096), (4096, 14336)]),
              lambda: quant_rows(bc, s, fmts=("q8_0", "q4_0", "q4_1")),
              lambda: dense_rows(bc, s, torch, "float16", shapes=[(4096, 4096), (14336, 4096), (4096, 14336)], batches=(2, 8)),
              lambda: quant_rows(bc, s, fmts=("q4_k", "q6_k"), shapes=[(14336, 4096)], xdtype="bfloat16"),
              lambda: quant_rows(bc, s, fmts=("q4_k",), shapes=[(14336, 4096)], batches=(4, 8))]
    if sweep:
        groups.insert(1, lambda: sweep_rows(bc, s))
        groups.insert(3, lambda: qsweep_rows(bc, s))
        groups.insert(5, lambda: dequant_grid_rows(bc, s))
    for make in groups:
        got = make()
        rows += got
        if progress:        # the table comes at the end; a run cut short still shows its rows
            for label, us, nbytes, tus in got:
                print(f"  {label}: {us:.1f} us {nbytes / (us * 1e-6) / 1e9:.0f} GB/s torch {tus}", flush=True)
    sec = Section("kernels_matvec", f"matvec / dequantize on {card} (device copy {cp:.0f} GB/s"
                  + (f" = {100 * cp / spec:.1f}% of {spec:.0f} spec)" if spec else ")"), COLUMNS, data=[])
    sec.add("device copy 1 GiB (read+write)", ["", f"{cp:.0f}", f"{100 * cp / spec:.1f}" if spec else "-", "", ""])
    for label, us, nbytes, tus in rows:
        gbs = nbytes / (us * 1e-6) / 1e9
        pct = f"{100 * gbs / spec:.1f}" if spec else "-"
        if isinstance(tus, (int, float)):
            tg = nbytes / (tus * 1e-6) / 1e9
            tcol, ratio = f"{tg:.0f}", f"{tus / us:.2f}x"
        else:
            tcol, ratio = (tus or "-"), "-"
        sec.add(label, [f"{us:.1f}", f"{gbs:.0f}", pct, tcol, ratio])
        sec.data.append({"label": label, "us": us, "bytes": nbytes, "gbs": gbs, "spec_pct": 100 * gbs / spec if spec else None,
                         "torch_us": tus if isinstance(tus, (int, float)) else None, "copy_gbs": cp, "card": card})
    return sec


SECTIONS = {"kernels_matvec": matvec_section}
ALIASES = {"matvec": ("kernels_matvec",)}


def warm_jobs():
    """(source, entry, defines) of every matvec/dequantize/fused module the table, the GPU
    tests and the sweeps load: one compile each."""
    from barecuda.kernels import _dequant as D
    from barecuda.kernels import _matvec as M
    from barecuda.kernels import _registry
    jobs = [(src, names[0], d) for src, names, d in _registry.table() if src in ("matvec.cu", "dequant.cu", "fused.cu")]
    for r, u in ((1, 2), (1, 4), (1, 8), (2, 2), (2, 4), (4, 2)):
        jobs.append(("matvec.cu", "matvec_f16_b1", (("WFMT", 1), ("MV_R", r), ("MV_U", u))))
    for fmt in ("q4_k", "q6_k", "q8_0", "q4_0", "q4_1"):
        base = (("WFMT", D.FORMATS[fmt][0]),) + M._quant_tuning(fmt)
        for _, v in qsweep_variants(fmt):
            jobs.append(("matvec.cu", "matvec_f16_tc", base + v))
        if fmt != "q4_1":
            jobs.append(("matvec.cu", "matvec_f16_b1", (("WFMT", D.FORMATS[fmt][0]), ("MVQ_R", 2))))
    jobs.append(("matvec.cu", "matvec_f16_tcd", (("WFMT", 12),) + M._quant_tuning("q4_k") + (("MVD_PF", 3),)))
    for ex in Q6_EXTRAS[1:] + ((("MVD_PF", 1),),):
        jobs.append(("matvec.cu", "matvec_f16_tcd", (("WFMT", 14),) + M._quant_tuning("q6_k") + ex))
    from barecuda.kernels import _fused as F
    for ex in FUSED_Q6_EXTRAS[1:]:
        jobs.append(("fused.cu", "fmv_f16_scale", F._TCD6_DEFINES + ex))
    for ex in Q4_EXTRAS[1:]:
        jobs.append(("matvec.cu", "matvec_f16_tcd", (("WFMT", 12),) + M._quant_tuning("q4_k") + ex))
    for ex in ((("MVD_PF", 1),), (("MVD_PF", 1), ("MVD_MINB", 2)), (("MVD_PF", 1),) + Q4_OLD):
        jobs.append(("matvec.cu", "matvec_f16_tcd", (("WFMT", 12),) + M._quant_tuning("q4_k") + ex))
    for _, ex, maxk in FUSED_Q4_LOOPS:
        jobs.append(("fused.cu", "fmv_f16_scale", F._TCD_DEFINES + ex + (F._tcd_pf(0) if maxk is None else ())))
    jobs.append(("fused.cu", "fmv_f16_scale", (("WFMT", 12), ("FM_R", 2))))
    jobs.append(("fused.cu", "fmv_f16_scale", (("WFMT", 12), ("FM_R", 2), ("FM_TCD", 1), ("FM_V", 1))))
    jobs.append(("matvec.cu", "matvec_f16_tcd", (("WFMT", 12),) + M._quant_tuning("q4_k") + (("MVD_V", 1),)))
    jobs.append(("dequant.cu", "dequant_q4_k_f16", (("DQ_P8", 0), ("DQ_DIRECT", 0))))
    jobs.append(("dequant.cu", "dequant_q4_k_f16", (("DQ_DIRECT", 0),)))
    seen, out = set(), []
    for j in jobs:
        if (j[0], j[2]) not in seen:
            seen.add((j[0], j[2]))
            out.append(j)
    return out


def warm(procs=None):
    """Compile (or load from the cache) every module of warm_jobs(), in parallel processes."""
    import os
    import subprocess
    import time
    jobs = warm_jobs()
    procs = procs or os.cpu_count() or 4
    code = "import sys, ast; from barecuda.kernels import _registry; _registry.get(*ast.literal_eval(sys.argv[1]))"
    running, failed, t0 = [], [], time.time()
    for j in jobs + [None] * procs:
        while running and (len(running) >= procs or j is None):
            for p in list(running):
                if p[0].poll() is not None:
                    running.remove(p)
                    if p[0].returncode:
                        failed.append((p[1], p[0].stderr.read()[-800:]))
            if j is None and not running:
                break
            time.sleep(0.05)
        if j is not None:
            running.append((subprocess.Popen([sys.executable, "-c", code, repr(j)], stderr=subprocess.PIPE, text=True), j))
    print(f"warmed {len(jobs) - len(failed)}/{len(jobs)} modules in {time.time() - t0:.0f} s", flush=True)
    for j, err in failed:
        print("FAILED", j, err, flush=True)


def quick_section():
    """The batch-1 decisions: CUDA cores against tensor-core variants, the default path,
    dequantize grid sizes (one table, with the device copy)."""
    import barecuda as bc
    s = bc.Stream()
    card, spec = _spec(bc)
    cp = copy_gbs(bc, s)
    print(f"  device copy: {cp:.0f} GB/s on {card}", flush=True)
    groups = (lambda: tcd_sweep_rows(bc, s),
              lambda: qsweep_rows(bc, s, fmts=("q4_k",), variants=QVARIANTS[:2]),
              lambda: dequant_grid_rows(bc, s),
              lambda: qsweep_rows(bc, s, fmts=("q6_k", "q8_0")),
              lambda: qsweep_rows(bc, s, fmts=("q4_0", "q4_1"), shapes=((14336, 4096),), variants=QVARIANTS[:2]))
    for make in groups:
        try:
            got = make()
        except Exception as exc:   # noqa: BLE001 -- a sweep: the other groups still run
            print(f"  group failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        for label, us, nbytes, tus in got:
            gbs = nbytes / (us * 1e-6) / 1e9
            print(f"  {label}: {us:.1f} us {gbs:.0f} GB/s {100 * gbs / spec if spec else 0:.1f}%", flush=True)


# the direct loops' variants (matvec_core.cuh): Q6_K's loads past L1 (MVD6_LD=0, the default
# before 02:4x UTC) and exponent-trick quants (MVD6_SUB=0, the default before 06:4x UTC); Q4_K's
# loads past L1 (MVD4_LD=0) and exponent-trick nibbles (MVD4_SUB=0), its defaults before 06:3x UTC;
# both formats' loads without the L2 prefetch-size hint (MVD4_L2=0 / MVD6_L2=0: before 09:5x UTC)
Q6_EXTRAS = ((), (("MVD6_LD", 0),), (("MVD6_SUB", 0),), (("MVD6_L2", 0),))
FUSED_Q6_EXTRAS = ((), (("MVD6_SUB", 0),), (("MVD6_L2", 0),))
Q4_OLD = (("MVD4_LD", 0), ("MVD4_SUB", 0), ("MVD4_L2", 0))     # Q4_K's loop before 2026-11-27 06:0x
Q4_EXTRAS = ((), (("MVD4_LD", 0),), (("MVD4_SUB", 0),), (("MVD4_L2", 0),), Q4_OLD)
# the fused Q4_K nodes' direct-loop rows: (label, defines over _fused._TCD_DEFINES,
# _matvec.TCD_PF1_MAXK for the row or None: the default FM_PF choice)
FUSED_Q4_LOOPS = (("direct tensor cores", (), None), ("direct tensor cores FM_PF=2", (), 0),
                  ("direct tensor cores MVD4_L2=0 (before 09:5x)", (("MVD4_L2", 0),), None),
                  ("direct tensor cores FM_PF=2 MVD4_LD=0 MVD4_SUB=0 MVD4_L2=0 (before 06:0x)", Q4_OLD, 0))

# a read-only stream over a weight's bytes (the floor of a batch-1 matvec at that size): each
# thread XORs U 16-byte loads (L1::no_allocate) a turn; grid-stride over a grid of `blocks`
_FLOOR_SRC = r"""
extern "C" __global__ void __launch_bounds__(256) rd_floor(const uint4* __restrict__ p, long long n16, unsigned* out) {
    unsigned a = 0u;
    const long long T = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n16; i += 4 * T) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const long long j = i + u * T;
            if (j < n16)
                asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(p + j));
            else v[u] = make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) a ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (a == 0x9e3779b9u) out[0] = a;
}
"""


_FLOOR_KERN: list = []          # the rd_floor Kernel, once compiled


def _floor_kernel():
    """rd_floor, compiled once a process."""
    if not _FLOOR_KERN:
        import barecuda as bc
        _FLOOR_KERN.append(load_source(bc, _FLOOR_SRC, "rd_floor.cu").get_kernel("rd_floor"))
    return _FLOOR_KERN[0]


def floor_rows(bc, s, sizes):
    """The read-only stream (rd_floor) over rotations of `sizes` (label, bytes): one pass
    (every thread 4 loads, as many blocks as that takes) and grid-stride over 8 blocks a
    multiprocessor (full occupancy)."""
    from barecuda.kernels import _args as A
    kern = _floor_kernel()
    sink = bc.zeros((4,), "uint32", stream=s)
    out = []
    for label, nbytes in sizes:
        bufs = _weights(bc, s, nbytes, lambda: bc.empty((nbytes,), "uint8", stream=s))
        for b in bufs:
            b.memset(0x1c, stream=s)
        n16 = nbytes // 16
        for tag, grid in (("one pass", -(-n16 // (256 * 4))), ("8 blocks/SM", 8 * A.sm_count(0))):
            plans = [kern.bind(grid, 256, b, n16, sink, stream=s) for b in bufs]
            out.append((f"floor read-only {label} ({nbytes / 1e6:.1f} MB) {tag}", _time_plans(bc, s, plans), nbytes, None))
            del plans
        del bufs
    return out


def q4_main():
    """``--q4``: Q4_K at batch 1: the op's rows (Q6_K beside), the direct entries' variants (MVD_PF,
    warps, MVD_MINB, the loop before 06:0x), the read-only floor at the same byte counts, the
    fused Q4_K nodes."""
    import barecuda as _bc
    _s = _bc.Stream()
    _card, _sp = _spec(_bc)
    print(f"  device copy: {copy_gbs(_bc, _s):.0f} GB/s on {_card}", flush=True)
    shapes = ((4096, 4096), (14336, 4096), (4096, 14336), (28672, 4096))
    wide = ((4096, 4096), (4096, 14336))
    minb = (("MVD_MINB", 2),)
    sizes = [(f"Q4_K {n}x{k}", n * k // 256 * 144) for n, k in shapes]
    for _make in (lambda: quant_rows(_bc, _s, fmts=("q4_k", "q6_k")),
                  lambda: tcd_sweep_rows(_bc, _s, shapes=shapes, warps=(None,), pfs=(1, 2), extras=((), Q4_OLD)),
                  lambda: floor_rows(_bc, _s, sizes),
                  lambda: tcd_sweep_rows(_bc, _s, shapes=wide, warps=(12, 14), pfs=(1,)),
                  lambda: tcd_sweep_rows(_bc, _s, shapes=wide, warps=(6, 10, 12), pfs=(2,)),
                  lambda: tcd_sweep_rows(_bc, _s, shapes=shapes, warps=(None, 16), pfs=(1,), extras=(minb,)),
                  lambda: tcd_sweep_rows(_bc, _s, shapes=((14336, 4096),), warps=(None,), pfs=(1, 2), xdtype="bfloat16"),
                  lambda: fused_rows(_bc, _s, fmts=("q4_k",))):
        _print_group(_make, _sp)


def q6_main():
    """``--q6``: Q6_K at batch 1: the direct entries (warps, MVD_PF) against the CUDA cores and
    the staged column layout, the fused Q6_K nodes direct and on CUDA cores."""
    import barecuda as _bc
    _s = _bc.Stream()
    _card, _sp = _spec(_bc)
    print(f"  device copy: {copy_gbs(_bc, _s):.0f} GB/s on {_card}", flush=True)
    shapes = ((4096, 4096), (14336, 4096), (4096, 14336), (28672, 4096))
    for _make in (lambda: tcd_sweep_rows(_bc, _s, shapes=shapes, warps=(None,), pfs=(2,), fmt="q6_k", extras=Q6_EXTRAS),
                  lambda: tcd_sweep_rows(_bc, _s, shapes=shapes, warps=(None, 8), pfs=(1,), fmt="q6_k"),
                  lambda: qsweep_rows(_bc, _s, fmts=("q6_k",), shapes=shapes, variants=QVARIANTS[:2]),
                  lambda: fused_rows(_bc, _s, fmts=("q6_k",)),
                  lambda: tcd_sweep_rows(_bc, _s, shapes=((128256, 4096),), warps=(None,), pfs=(2,), fmt="q6_k",
                                         extras=Q6_EXTRAS),
                  lambda: tcd_sweep_rows(_bc, _s, shapes=shapes, warps=(None,), pfs=(2,), extras=Q4_EXTRAS)):
        _print_group(_make, _sp)


def fused_main():
    """``--fused``: the fused Q4_K nodes and the batch tensor-core entries, printed as they come."""
    import barecuda as _bc
    _s = _bc.Stream()
    _card, _sp = _spec(_bc)
    print(f"  device copy: {copy_gbs(_bc, _s):.0f} GB/s on {_card}", flush=True)
    for _make in (lambda: fused_rows(_bc, _s), lambda: batch_tc_rows(_bc, _s, fmts=("q4_k",), batches=(8,)),
                  lambda: tcd_sweep_rows(_bc, _s, warps=(None, 2, 4), pfs=(2,), vs=(1, 2)),
                  lambda: tcd_sweep_rows(_bc, _s, shapes=((4096, 4096),), warps=(4, 8), pfs=(3,), vs=(2,))):
        _print_group(_make, _sp)


def _print_group(make, sp):
    """Run one group of rows (``make()`` -> [(label, us, bytes, torch us)]) and print each row as
    it comes, with GB/s and % of the spec ``sp``; a group that fails is reported and skipped."""
    try:
        got = make()
    except Exception as exc:   # noqa: BLE001
        print(f"  group failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        return
    for label, us, nbytes, _ in got:
        gbs = nbytes / (us * 1e-6) / 1e9
        print(f"  {label}: {us:.2f} us {gbs:.0f} GB/s {100 * gbs / sp if sp else 0:.1f}%", flush=True)


if __name__ == "__main__":
    if "--warm" in sys.argv:
        warm()
        sys.exit(0)
    if "--quick" in sys.argv:
        quick_section()
        sys.exit(0)
    if "--q6" in sys.argv:           # Q6_K batch 1: direct entries against the CUDA cores / staged
        q6_main()
        sys.exit(0)
    if "--q4-floors" in sys.argv:    # Q4_K batch 1: the op's access pattern vs a repacked one, no math
        from barecuda.bench._q4k_floors import q4_floors_main
        q4_floors_main()
        sys.exit(0)
    if "--q4" in sys.argv:           # Q4_K batch 1: direct-loop variants, the read-only floor
        q4_main()
        sys.exit(0)
    if "--fused" in sys.argv:        # the fused Q4_K nodes and the batch tensor-core entries
        fused_main()
        sys.exit(0)
    sec = matvec_section(sweep="--sweep" in sys.argv, progress=True)
    out = sec.format()
    print("\n".join(out) if isinstance(out, list) else out)
