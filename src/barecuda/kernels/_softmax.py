"""softmax over the last axis, with a scale and an optional causal mask.

fp32, fp16, bf16 (fp32 math). Plan form: ``softmax.plan(...)`` (``args[0]`` is y).
"""
from barecuda.kernels import _args as A
from barecuda.kernels._opcall import op
from barecuda.kernels._registry import get

__all__ = ["softmax"]

KERNELS = [("softmax.cu", tuple(f"softmax_{c}_{v}" for c in ("f32", "f16", "bf16")
                                for v in ("v1", "v2", "v4", "v8", "s8")), ())]


def _prep(x, scale, causal, offset, out, stream):
    bx, code, n, cols, sx = A.row_input(x, "x", stream)
    if cols > 0x7fffffff:
        raise ValueError("x: rows longer than 2**31-1")
    scale = A.scalar_f32(scale, "scale")
    qlen = 0
    off = 0
    if causal:
        qlen = bx.shape[-2] if len(bx.shape) >= 2 else 1
        off = cols - qlen if offset is None else A.int_arg(offset, "offset", -(1 << 31), (1 << 31) - 1)
        if qlen < 1:
            qlen = 1
    elif offset is not None:
        raise ValueError("offset is only meaningful with causal=True")
    by, sy = A.row_out(out, x, bx, sx, stream)
    isz = bx.itemsize
    vec = A.vec_ok(isz, cols, ((bx, sx), (by, sy)))
    dev = int(bx.device)
    k, block = A.row_kernel(vec, cols, 16 // isz, lambda v: get("softmax.cu", f"softmax_{code}_{v}", (), dev))
    # a block a row (the kernel's row loop runs once; it loops when rows exceed the grid limit).
    # H200 bf16 / f32 32768x4096, % of spec: 81.4 / 85.7 (2026-11-27 02:3x UTC: softmax.cu's
    # SOFTMAX_PIPE=2 with the register cap, 6 / 4 blocks a multiprocessor) against 69.5 / 82.6
    # for the pipelined build (SOFTMAX_PIPE=1) a block a row in the same run; 64.3-67.4 /
    # 77.5-80.6 as a looping wave (2026-11-26); the load-at-use build with exp2f
    # (SOFTMAX_PIPE=0) 55.5 / 67.0 at best
    return k, min(n, 0x7fffffff), block, (by, bx, cols, sy, sx, A.f32(scale), qlen, off, n), by


@op
def softmax(x, *, scale=1.0, causal=False, offset=None, out=None, stream=None):
    """``softmax(scale * x)`` over the last axis.

    Parameters
    ----------
    x : device array (..., n) of float32, float16 or bfloat16
    scale : float
    causal : bool
        x is (..., q, k) scores: row i of each (q, k) block sees columns
        ``j <= i + offset``; the rest are 0.
    offset : int, optional
        Default ``k - q`` (the queries are the last q of the k positions).
    out : device array like x (contiguous), or x itself; default: new
    stream : optional
    """
    return _prep(x, scale, causal, offset, out, stream)


def _plan(x, *, scale=1.0, causal=False, offset=None, out=None, stream=None):
    """The launch of :func:`softmax` bound once (``args[0]`` is y)."""
    k, grid, block, args, _ = _prep(x, scale, causal, offset, out, stream)
    if not grid:
        raise ValueError("x has no rows: nothing to plan")
    return k.bind(grid, block, *args, stream=stream)


A.attach_plan(softmax, _plan)
