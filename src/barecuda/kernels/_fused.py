"""The decode loop's fused matvecs (csrc/fused.cu): a Llama layer in five graph nodes.

:func:`fused_matvec` is ``y = x @ W.T`` for one activation row (float16/bfloat16) with one
of four epilogues that carry the rest of the layer:

- ``"scale"``: ``y = s * (x @ W.T)``, ``s = rsqrt(ss_in[0] / dim + eps)`` (1 without ``ss_in``):
  the RMSNorm's scale applied after the matvec (``x`` is already ``x * g``);
- ``"res"``: ``y += x @ W.T`` (in place, ``y`` is the residual stream), then
  ``ss_out[0] += sum(y**2)`` and ``xg = y * g``: the next RMSNorm's inputs;
- ``"glu"``: ``y = silu(s * x @ W.T) * (s * x @ up.T)``;
- ``"qkv"``: ``y = s * (x @ W.T)`` for rows ``row0..`` of the fused Q|K|V output, RoPE on
  Q and K (adjacent pairs, GGUF's layout; ``inv_freq`` float32 table of ``n_rot / 2``) at the
  position ``pos[0]`` (device int32), and the K and V rows written into ``k_cache`` /
  ``v_cache`` (``[max_ctx, n_kv, D]`` token-major or ``[n_kv, max_ctx, D]`` head-major) at
  that position.

:func:`embed_norm` is the token's first node: ``x = table[tok[0]]``, ``xg = x * g``,
``ss[0] = sum(x**2)``, ``ss[1:] = 0``.

Weights as :func:`barecuda.kernels.matvec` takes them (dense arrays or ``QuantWeight``).
Every op has a plan form (``.plan``/``plan_*``, ``out=`` required) for graphs.
"""
from barecuda.kernels import _args, _registry
from barecuda.kernels._dequant import DENSE, FORMATS, weight_facts
from barecuda.kernels._matvec import tcd_warps

__all__ = ["fused_matvec", "plan_fused_matvec", "embed_norm", "plan_embed_norm", "EPILOGUES"]

EPILOGUES = ("scale", "res", "glu", "qkv")
_WARPS = 4                      # FM_WARPS in fused.cu
_CODES = {"float16": "f16", "bfloat16": "bf16"}
_DENSE_DEFAULT = (1, 4)         # (FM_R, FM_U): the source's defaults
_QUANT_R = 2                    # quantized rows per warp (x and sum(x) shared; glu: 1)
_WIDE = (1, 2)                  # K >= 8192 (down)
_TALL = (4, 2)                  # N >= 8192 (the output head)
# Q4_K nodes run matvec.cu's direct tensor-core loop (fused.cu FM_TCD=1: a block a 16-row
# tile, its warps splitting K, as many as _matvec.tcd_warps gives the plain matvec).
TCD = True
_TCD_DEFINES = (("WFMT", FORMATS["q4_k"][0]), ("FM_R", _QUANT_R), ("FM_TCD", 1))
# Q6_K nodes with K % 512 == 0 the same way (mvc_tcd6: see matvec.cu / matvec_core.cuh)
TCD6 = True
_TCD6_DEFINES = (("WFMT", FORMATS["q6_k"][0]), ("FM_R", _QUANT_R), ("FM_TCD", 1))


def _tcd_pf(k):
    """Q4_K rows shorter than _matvec.TCD_PF1_MAXK: one super-block in flight a warp (FM_PF=1,
    as the plain matvec's MVD_PF=1: more warps a multiprocessor)."""
    from barecuda.kernels import _matvec
    return (("FM_PF", 1),) if k < _matvec.TCD_PF1_MAXK else ()


def _tuning(fmt, n, k, epi):
    """(defines, rows per warp) of the module serving this matvec."""
    t = FORMATS[fmt][0]
    if fmt == "q4_k" and TCD:
        return _TCD_DEFINES + _tcd_pf(k), 16
    if fmt == "q6_k" and TCD6 and k % 512 == 0:
        return _TCD6_DEFINES, 16
    if fmt not in DENSE:
        r = 1 if epi == "glu" else _QUANT_R
        return (("WFMT", t), ("FM_R", _QUANT_R)), r
    if epi != "glu" and k >= 8192:
        fr, fu = _WIDE
    elif epi == "scale" and n >= 8192:
        fr, fu = _TALL
    else:
        fr, fu = _DENSE_DEFAULT
    r = max(fr, 2) if epi == "qkv" else fr
    defines = (("WFMT", t),) if (fr, fu) == _DENSE_DEFAULT else (("WFMT", t), ("FM_R", fr), ("FM_U", fu))
    return defines, r


def _weight(w, name, stream):
    fmt, _, b, n, k = weight_facts(w, name, stream)
    return fmt, b, n, k


def _vec1(b, name, n, dtype, stream):
    """A contiguous device vector of n elements of dtype (checked)."""
    v = _args.array(b, name, stream)
    if _args.dt(v) != dtype:
        raise TypeError(f"{name}: dtype {_args.dt(v)}, expected {dtype}")
    size = 1
    for s in v.shape:
        size *= s
    if size != n:
        raise ValueError(f"{name}: {size} elements, expected {n}")
    if v.strides is not None and n > 1:
        _, _, st = _args.rows(v, name)
        if len(v.shape) > 1 or st != n:
            raise ValueError(f"{name}: must be contiguous")
    return v


def _prepare(epi, weight, x, out, up, ss_in, ss_out, xg, g, k_cache, v_cache, pos, inv_freq, dim, eps,
             row0, nq, nkv, head_dim, n_rot, kv_layout, stream, pdl=False):
    if epi not in EPILOGUES:
        raise ValueError(f"epilogue {epi!r}: one of {', '.join(EPILOGUES)}")
    fmt, wb, n, k = _weight(weight, "weight", stream)
    ub = None
    if epi == "glu":
        if up is None:
            raise ValueError("glu: up= is required")
        f2, ub, n2, k2 = _weight(up, "up", stream)
        if (f2, n2, k2) != (fmt, n, k):
            raise ValueError(f"up: {f2} [{n2}, {k2}] does not match gate: {fmt} [{n}, {k}]")
    elif up is not None:
        raise ValueError(f"up= is for the glu epilogue, not {epi!r}")
    xb = _args.array(x, "x", stream)
    code = _CODES.get(_args.dt(xb))
    if code is None:
        raise TypeError(f"x: dtype {_args.dt(xb)} is not supported (float16 or bfloat16)")
    dt = _args.dt(xb)
    xb = _vec1(xb, "x", k, dt, stream)
    _args.check_align(xb, "x")
    yb = _vec1(out, "out", n, dt, stream)
    if yb.ptr < xb.ptr + k * 2 and xb.ptr < yb.ptr + n * 2:
        raise ValueError("out: overlaps x (the matvec reads x while it writes out)")
    dense = fmt in DENSE
    if dense:
        isz = FORMATS[fmt][2]
        vw = 16 // isz
        vec = int(k % vw == 0 and wb.ptr % 16 == 0 and xb.ptr % 16 == 0 and (ub is None or ub.ptr % 16 == 0))
        for nm, b in (("weight", wb), ("up", ub)):
            if b is not None and b.ptr % isz:
                raise ValueError(f"{nm}: address 0x{b.ptr:x} is not aligned to {isz} bytes")
    else:
        vec = 0
    _args.same_device(("x", xb), ("weight", wb), ("up", ub), ("out", yb))
    eps = _args.scalar_f32(eps, "eps")
    z = 0
    ssi = sso = xgb = gb = kc = vc = pb = fb = z
    inv_dim = 0.0
    cps = chs = 0
    if ss_in is not None:
        if epi == "res":
            raise ValueError("ss_in= is not used by the res epilogue (its input is not normalized)")
        ssi = _vec1(ss_in, "ss_in", 1, "float32", stream)
    if epi != "res" and ss_in is not None:
        dim = _args.int_arg(dim if dim is not None else k, "dim", 1)
        inv_dim = 1.0 / dim
    if epi == "res":
        if ss_out is None or xg is None or g is None:
            raise ValueError("res: ss_out=, xg= and g= are required (the next norm's inputs)")
        sso = _vec1(ss_out, "ss_out", 1, "float32", stream)
        xgb = _vec1(xg, "xg", n, dt, stream)
        gb = _vec1(g, "g", n, dt, stream)
    if epi == "qkv":
        hd = _args.int_arg(head_dim, "head_dim", 2)
        nq = _args.int_arg(nq, "nq", 0)
        nkv = _args.int_arg(nkv, "nkv", 1)
        row0 = _args.int_arg(row0, "row0", 0)
        n_rot = _args.int_arg(n_rot if n_rot is not None else hd, "n_rot", 0, hd)
        if hd % 2 or nq % hd or nkv % hd or row0 % 2 or n_rot % 2:
            raise ValueError(f"qkv: head_dim {hd}, nq {nq}, nkv {nkv}, row0 {row0}, n_rot {n_rot}: "
                             "head_dim even, nq and nkv multiples of it, row0 and n_rot even")
        if row0 + n > nq + 2 * nkv:
            raise ValueError(f"qkv: rows {row0}..{row0 + n} exceed Q|K|V ({nq + 2 * nkv} rows)")
        if k_cache is None or v_cache is None or pos is None:
            raise ValueError("qkv: k_cache=, v_cache= and pos= are required")
        kc = _args.array(k_cache, "k_cache", stream)
        vc = _args.array(v_cache, "v_cache", stream)
        for nm, c in (("k_cache", kc), ("v_cache", vc)):
            if _args.dt(c) != dt:
                raise TypeError(f"{nm}: dtype {_args.dt(c)}, expected {dt}")
            if len(c.shape) != 3 or c.strides is not None:
                raise ValueError(f"{nm}: expected a contiguous 3-D cache, got shape {tuple(c.shape)}")
        if tuple(kc.shape) != tuple(vc.shape):
            raise ValueError(f"v_cache: shape {tuple(vc.shape)} differs from k_cache's {tuple(kc.shape)}")
        h_kv = nkv // hd
        if kv_layout == "head_major":
            if kc.shape[0] != h_kv or kc.shape[2] != hd:
                raise ValueError(f"k_cache: shape {tuple(kc.shape)}, expected [{h_kv}, max_ctx, {hd}]")
            cps, chs = hd, kc.shape[1] * hd
        elif kv_layout == "token_major":
            if kc.shape[1] != h_kv or kc.shape[2] != hd:
                raise ValueError(f"k_cache: shape {tuple(kc.shape)}, expected [max_ctx, {h_kv}, {hd}]")
            cps, chs = h_kv * hd, hd
        else:
            raise ValueError(f"kv_layout={kv_layout!r}: 'head_major' or 'token_major'")
        pb = _vec1(pos, "pos", 1, "int32", stream)
        if n_rot:
            if inv_freq is None:
                raise ValueError("qkv: inv_freq= (float32, n_rot / 2) is required when n_rot > 0")
            fb = _vec1(inv_freq, "inv_freq", n_rot // 2, "float32", stream)
        _args.same_device(("x", xb), ("k_cache", kc), ("v_cache", vc), ("pos", pb))
    else:
        hd = nq = nkv = row0 = n_rot = 0
    defines, r = _tuning(fmt, n, k, epi)
    kern = _registry.get("fused.cu", f"fmv_{code}_{epi}", defines, int(xb.device))
    if dict(defines).get("FM_TCD"):
        threads = 32 * tcd_warps(n, k, _args.sm_count(xb.device), epi)
        grid = -(-n // r)
    else:
        threads = 32 * _WARPS
        grid = -(-n // (_WARPS * r))
    import ctypes
    args = (wb, ub if ub is not None else 0, xb, yb, ssi, sso, xgb, gb, kc, vc, pb, fb,
            n, k, vec, ctypes.c_float(inv_dim), ctypes.c_float(eps), row0, nq, nkv, hd, n_rot, cps, chs, int(pdl))
    return kern, grid, threads, args, yb


def fused_matvec(epilogue, weight, x, *, out, up=None, ss_in=None, ss_out=None, xg=None, g=None, k_cache=None,
                 v_cache=None, pos=None, inv_freq=None, dim=None, eps=1e-5, row0=0, nq=0, nkv=0, head_dim=0,
                 n_rot=None, kv_layout="head_major", stream=None):
    """One fused decode matvec (see the module docstring for the epilogues).

    Parameters
    ----------
    epilogue : {"scale", "res", "glu", "qkv"}
    weight : device array [N, K] (float32/float16/bfloat16) or QuantWeight
    x : device array [K], float16 or bfloat16, 16-byte aligned
    out : device array [N] of x's dtype (for "res": the residual stream, updated in place)
    up : the second weight of "glu" (same format and shape)
    ss_in : float32 [1], optional
        Sum of squares of the unnormalized input; the result is scaled by
        ``rsqrt(ss_in / dim + eps)`` ("scale", "glu", "qkv").
    ss_out, xg, g : "res": float32 [1] to add ``sum(out**2)`` to, [N] for ``out * g``, the norm weight [N]
    k_cache, v_cache, pos, inv_freq, row0, nq, nkv, head_dim, n_rot, kv_layout : "qkv" (see above)
    dim, eps : the norm's length (default K) and epsilon
    """
    kern, grid, threads, args, y = _prepare(epilogue, weight, x, out, up, ss_in, ss_out, xg, g, k_cache, v_cache,
                                            pos, inv_freq, dim, eps, row0, nq, nkv, head_dim, n_rot, kv_layout, stream)
    kern.launch(grid, threads, *args, stream=stream)
    return out


def plan_fused_matvec(epilogue, weight, x, *, out, up=None, ss_in=None, ss_out=None, xg=None, g=None,
                      k_cache=None, v_cache=None, pos=None, inv_freq=None, dim=None, eps=1e-5, row0=0, nq=0,
                      nkv=0, head_dim=0, n_rot=None, kv_layout="head_major", pdl=False, stream=None):
    """:func:`fused_matvec` packed once: a LaunchPlan (``plan()`` replays it; ``graph.add_plan``).

    ``pdl=True`` launches it with programmatic stream serialization (``cuLaunchKernelEx``):
    it may start while the previous kernel on the stream finishes, prefetching its first
    weights before it waits for that kernel's results (griddepcontrol.wait). Such plans
    keep the overlap when a graph is made by stream capture (``barecuda.graph.capture``).
    """
    kern, grid, threads, args, y = _prepare(epilogue, weight, x, out, up, ss_in, ss_out, xg, g, k_cache, v_cache,
                                            pos, inv_freq, dim, eps, row0, nq, nkv, head_dim, n_rot, kv_layout, stream,
                                            pdl)
    if pdl:
        from barecuda import LaunchConfig
        return kern.bind_config(LaunchConfig(grid, threads, stream=stream, programmatic_serialization=True), *args)
    return kern.bind(grid, threads, *args, stream=stream)


def _embed_prepare(table, tok, x, xg, g, ss, stream):
    tb = _args.array(table, "table", stream)
    code = _CODES.get(_args.dt(tb))
    if code is None:
        raise TypeError(f"table: dtype {_args.dt(tb)} is not supported (float16 or bfloat16)")
    if len(tb.shape) != 2 or tb.strides is not None:
        raise ValueError(f"table: expected a contiguous [vocab, dim] array, got shape {tuple(tb.shape)}")
    dt = _args.dt(tb)
    dim = tb.shape[1]
    tk = _vec1(tok, "tok", 1, "int32", stream)
    xb = _vec1(x, "x", dim, dt, stream)
    xgb = _vec1(xg, "xg", dim, dt, stream)
    gb = _vec1(g, "g", dim, dt, stream)
    sb = _args.array(ss, "ss", stream)
    if _args.dt(sb) != "float32" or len(sb.shape) != 1 or sb.strides is not None or sb.shape[0] < 1:
        raise ValueError("ss: expected a contiguous float32 [n] array, n >= 1")
    _args.same_device(("table", tb), ("tok", tk), ("x", xb), ("xg", xgb), ("g", gb), ("ss", sb))
    kern = _registry.get("fused.cu", f"fembed_{code}", (("WFMT", 1),), int(tb.device))
    return kern, (tb, tk, xb, xgb, gb, sb, sb.shape[0], dim)


def embed_norm(table, tok, *, x, xg, g, ss, stream=None):
    """``x = table[tok[0]]; xg = x * g; ss[0] = sum(x**2); ss[1:] = 0`` in one launch (one block)."""
    kern, args = _embed_prepare(table, tok, x, xg, g, ss, stream)
    kern.launch(1, 512, *args, stream=stream)
    return x


def plan_embed_norm(table, tok, *, x, xg, g, ss, stream=None):
    """:func:`embed_norm` as a LaunchPlan."""
    kern, args = _embed_prepare(table, tok, x, xg, g, ss, stream)
    return kern.bind(1, 512, *args, stream=stream)


setattr(fused_matvec, "plan", plan_fused_matvec)      # the op's plan form (barecuda.kernels convention)
setattr(embed_norm, "plan", plan_embed_norm)

_NAMES = tuple(f"fmv_{c}_{e}" for c in ("f16", "bf16") for e in EPILOGUES) + ("fembed_f16", "fembed_bf16")
KERNELS = ([("fused.cu", _NAMES, (("WFMT", v[0]),) if k in DENSE else (("WFMT", v[0]), ("FM_R", _QUANT_R)))
            for k, v in FORMATS.items()]
           + [("fused.cu", _NAMES, (("WFMT", FORMATS[k][0]), ("FM_R", r), ("FM_U", u)))
              for k in ("f16", "bf16") for r, u in (_WIDE, _TALL)]
           + [("fused.cu", _NAMES, _TCD_DEFINES), ("fused.cu", _NAMES, _TCD_DEFINES + (("FM_PF", 1),)),
              ("fused.cu", _NAMES, _TCD6_DEFINES)])
