"""rmsnorm and layernorm over the last axis, with an optional fused residual add.

``y = norm(x + residual)``, also writing ``x + residual`` to ``residual_out`` (which
may be ``residual`` or ``x`` itself: the in-place update a transformer block wants).
fp32, fp16, bf16; fp32 math. Each op has a plan form (``rmsnorm.plan(...)``) that
returns a bound ``LaunchPlan`` whose ``args[0]`` is ``y`` and ``args[1]`` the residual
output (0 without a residual).
"""
from barecuda.kernels import _args as A
from barecuda.kernels._opcall import op
from barecuda.kernels._registry import get

__all__ = ["rmsnorm", "layernorm"]

VARIANTS = ("v1", "v2", "v4", "v8", "s8")
KERNELS = [("norms.cu", tuple(f"{op}_{c}_{v}" for op in ("rmsnorm", "layernorm")
                              for c in ("f32", "f16", "bf16") for v in VARIANTS), ())]


def _vector(v, name, bx, cols, stream):
    """A per-column parameter (weight, bias): ``cols`` contiguous elements of x's dtype."""
    if v is None:
        return None
    b = A.array(v, name, stream)
    if A.dt(b) != A.dt(bx):
        raise TypeError(f"{name}: dtype {A.dt(b)}, expected {A.dt(bx)} (that of x)")
    if b.size != cols or b.strides is not None and b.size > 1:
        raise ValueError(f"{name}: expected {cols} contiguous elements, got shape {tuple(b.shape)}")
    return b


def _prep(ln, x, weight, bias, eps, residual, residual_out, out, stream):
    bx, code, n, cols, sx = A.row_input(x, "x", stream)
    dev = int(bx.device)
    bw = _vector(weight, "weight", bx, cols, stream)
    bb = _vector(bias, "bias", bx, cols, stream)
    br = bh = None
    sr = sh = 0
    if residual is not None:
        br = A.operand(residual, "residual", bx, "x", stream, tuple(bx.shape))
        _, _, sr = A.rows(br, "residual")
        if residual_out is None:
            bh = A.out_array(None, bx.shape, A.dt(bx), bx, stream)
        elif residual_out is residual or residual_out is x:
            bh = br if residual_out is residual else bx
        else:
            bh = A.array(residual_out, "residual_out", stream)
            if A.dt(bh) != A.dt(bx) or tuple(bh.shape) != tuple(bx.shape):
                raise ValueError(f"residual_out: {A.dt(bh)} {tuple(bh.shape)}, expected {A.dt(bx)} {tuple(bx.shape)}")
        _, _, sh = A.rows(bh, "residual_out")
        A.check_align(bh, "residual_out")
    elif residual_out is not None:
        raise ValueError("residual_out given without residual")
    by, sy = A.row_out(out, x, bx, sx, stream)
    A.same_device(("x", bx), ("weight", bw), ("bias", bb), ("residual", br), ("residual_out", bh), ("out", by))
    eps = A.scalar_f32(eps, "eps")
    isz = bx.itemsize
    vec = A.vec_ok(isz, cols, ((bx, sx), (by, sy), (br, sr), (bh, sh), (bw, 0), (bb, 0)))
    fn = "layernorm" if ln else "rmsnorm"
    k, block = A.row_kernel(vec, cols, 16 // isz, lambda v: get("norms.cu", f"{fn}_{code}_{v}", (), dev))
    P = A.ptr_or_0
    if ln:
        args = (by, P(bh), bx, P(br), P(bw), P(bb), cols, sy, sh, sx, sr, A.f32(eps), n)
    else:
        args = (by, P(bh), bx, P(br), P(bw), cols, sy, sh, sx, sr, A.f32(eps), n)
    # a block a row (each kernel's row loop runs once): rmsnorm; layernorm f16/bf16 with each block
    # prefetching a row some 0.8 waves ahead into L2 (norms.cu's LN_LOOP=0, LN_PFD, LN_MINB);
    # layernorm f32 with the row kept packed (LN_RAW). 32768x4096, % of spec, H200 (2026-11-26
    # 22:58 and 2026-11-27 02:3x and 06:0x UTC): rmsnorm bf16 86.5; layernorm bf16 80.2-80.5 (the
    # looping wave of before: 77.5); layernorm f32 85.3 (78.7 looping); norms.cu's register
    # pipeline (RMS_PIPE/LN_PIPE) measured slower, off
    grid = n
    return k, grid, block, args, (by if br is None else (by, bh))


@op
def rmsnorm(x, weight=None, eps=1e-6, *, residual=None, residual_out=None, out=None, stream=None):
    """RMS normalisation over the last axis: ``y = h / sqrt(mean(h**2) + eps) * weight``
    with ``h = x`` or, given ``residual``, ``h = x + residual`` (also written to
    ``residual_out``: a new array, or ``residual``/``x`` itself for in place).

    Parameters
    ----------
    x : device array (..., n) of float32, float16 or bfloat16
        Rows with a contiguous last axis; leading axes may be strided.
    weight : device array (n,), same dtype, optional
    eps : float
    residual, residual_out : device arrays shaped like x, optional
    out : device array shaped like x (contiguous), or x itself; default: new
    stream : Stream or foreign stream, optional

    Returns
    -------
    y, or (y, residual_out) when ``residual`` is given (the caller's own arrays where given).
    """
    return _prep(False, x, weight, None, eps, residual, residual_out, out, stream)


@op
def layernorm(x, weight=None, bias=None, eps=1e-5, *, residual=None, residual_out=None, out=None, stream=None):
    """Layer normalisation over the last axis: ``y = (h - mean) / sqrt(var + eps) * weight + bias``
    (biased variance, as torch), ``h`` as in :func:`rmsnorm`. Returns y, or
    (y, residual_out) when ``residual`` is given."""
    return _prep(True, x, weight, bias, eps, residual, residual_out, out, stream)


def _plan(ln, x, weight, bias, eps, residual, residual_out, out, stream):
    k, grid, block, args, _ = _prep(ln, x, weight, bias, eps, residual, residual_out, out, stream)
    if not grid:
        raise ValueError("x has no rows: nothing to plan")
    return k.bind(grid, block, *args, stream=stream)


def _rms_plan(x, weight=None, eps=1e-6, *, residual=None, residual_out=None, out=None, stream=None):
    """The launch of :func:`rmsnorm` bound once: a ``LaunchPlan`` (``args[0]`` is y)."""
    return _plan(False, x, weight, None, eps, residual, residual_out, out, stream)


def _ln_plan(x, weight=None, bias=None, eps=1e-5, *, residual=None, residual_out=None, out=None, stream=None):
    """The launch of :func:`layernorm` bound once: a ``LaunchPlan`` (``args[0]`` is y)."""
    return _plan(True, x, weight, bias, eps, residual, residual_out, out, stream)


A.attach_plan(rmsnorm, _rms_plan)
A.attach_plan(layernorm, _ln_plan)
