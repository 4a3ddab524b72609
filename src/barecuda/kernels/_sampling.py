"""argmax over rows and token sampling (temperature, top-k, top-p) with Philox.

``sample`` is deterministic for a given (seed, offset): the uniform number of row r is
Philox4x32-10 with key ``seed`` and counter ``(offset + *offset_ptr, r)``. Pass the
decode position (a device int32) as ``offset`` so that a captured graph draws fresh
numbers each token without an argument change. Outputs are int32 token ids.
"""
from barecuda.kernels import _args as A
from barecuda.kernels._opcall import op
from barecuda.kernels._registry import get

__all__ = ["argmax", "sample"]

KERNELS = [("sampling.cu", tuple(f"{op}_{c}" for op in ("argmax", "sample") for c in ("f32", "f16", "bf16"))
            + ("philox_raw",), ())]
_MAX_GRID = 1 << 20
_SAMPLE_THREADS = 512          # SM_THREADS in sampling.cu (its shared histograms are sized for it)


def _logits(x, stream):
    bx, code, n, v, st = A.row_input(x, "logits", stream)
    if v > 0x7fffffff:
        raise ValueError("logits: rows longer than 2**31-1")
    return bx, code, n, v, st


def _out_ids(out, bx, stream):
    shape = tuple(bx.shape[:-1])
    return A.out_array(out, shape, "int32", bx, stream)


def _prep_argmax(x, out, stream):
    bx, code, n, v, st = _logits(x, stream)
    bo = _out_ids(out, bx, stream)
    A.same_device(("logits", bx), ("out", bo))
    k = get("sampling.cu", f"argmax_{code}", (), int(bx.device))
    block = 1024 if v >= 8192 else max(32, min(1024, ((v + 31) // 32) * 32))
    return k, min(n, _MAX_GRID), block, (bo, bx, n, v, st), bo


@op
def argmax(x, *, out=None, stream=None):
    """Index of the maximum of each row (the first on ties; NaN never wins), int32,
    shaped ``x.shape[:-1]``."""
    return _prep_argmax(x, out, stream)


def _argmax_plan(x, *, out=None, stream=None):
    """The launch of :func:`argmax` bound once."""
    k, grid, block, args, _ = _prep_argmax(x, out, stream)
    if not grid:
        raise ValueError("no rows: nothing to plan")
    return k.bind(grid, block, *args, stream=stream)


A.attach_plan(argmax, _argmax_plan)


def _prep_sample(x, temperature, top_k, top_p, seed, offset, out, stream):
    t = A.scalar_f32(temperature, "temperature")
    if t <= 0.0:
        return _prep_argmax(x, out, stream)           # greedy
    bx, code, n, v, st = _logits(x, stream)
    top_k = A.int_arg(0 if top_k is None else top_k, "top_k", 0, (1 << 31) - 1)
    top_p = A.scalar_f32(1.0 if top_p is None else top_p, "top_p")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p={top_p}: must be in (0, 1]")
    seed = A.int_arg(seed, "seed", 0, (1 << 64) - 1)
    off0 = 0
    boff = None
    if isinstance(offset, int):
        off0 = A.int_arg(offset, "offset", 0, (1 << 64) - 1)
    else:
        boff = A.array(offset, "offset", stream)
        if A.dt(boff) != "int32" or boff.size != 1:
            raise TypeError(f"offset: a device offset must be one int32, got {A.dt(boff)} {tuple(boff.shape)}")
        A.check_align(boff, "offset")
    bo = _out_ids(out, bx, stream)
    A.same_device(("logits", bx), ("out", bo), ("offset", boff))
    k = get("sampling.cu", f"sample_{code}", (), int(bx.device))
    return k, min(n, _MAX_GRID), _SAMPLE_THREADS, (bo, bx, n, v, st, A.f32(1.0 / t), top_k, A.f32(top_p), seed, off0,
                                                  A.ptr_or_0(boff)), bo


@op
def sample(logits, *, temperature=1.0, top_k=0, top_p=1.0, seed=0, offset=0, out=None, stream=None):
    """One token a row from ``softmax(logits / temperature)``, restricted to the top-k
    tokens (``top_k=0``: all; ties at the k-th are kept) and then to the nucleus of mass
    ``top_p``. ``temperature <= 0`` is greedy (:func:`argmax`).

    Parameters
    ----------
    logits : device array (..., vocab), float32/float16/bfloat16
    seed : int (64-bit)
    offset : int or device int32 array of one element
        Philox counter; with a device array the kernel reads it at run time.
    out : device int32 array shaped ``logits.shape[:-1]``, optional

    Returns
    -------
    int32 device array of token ids.
    """
    return _prep_sample(logits, temperature, top_k, top_p, seed, offset, out, stream)


def _sample_plan(logits, *, temperature=1.0, top_k=0, top_p=1.0, seed=0, offset=0, out=None, stream=None):
    """The launch of :func:`sample` bound once (``args[0]`` is the output)."""
    k, grid, block, args, _ = _prep_sample(logits, temperature, top_k, top_p, seed, offset, out, stream)
    if not grid:
        raise ValueError("no rows: nothing to plan")
    return k.bind(grid, block, *args, stream=stream)


A.attach_plan(sample, _sample_plan)
