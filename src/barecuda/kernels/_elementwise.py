"""Elementwise ops over rows (silu_mul, gelu, add, mul) and the embedding gather.

Row ops take arrays with a contiguous last axis (leading axes may be strided), fp32,
fp16, bf16, fp32 math. ``silu_mul(gate_up)`` with one array splits its last axis in
half ([gate | up], a fused projection). ``embedding`` reads the token ids from device
memory (int32 or int64), so a captured graph needs no argument change per token.
Plan forms: ``<op>.plan(...)`` (``args[0]`` is the output).
"""
from barecuda.kernels import _args as A
from barecuda.kernels._opcall import op
from barecuda.kernels._registry import get

__all__ = ["silu_mul", "gelu", "silu", "add", "mul", "embedding"]

_OPS = ("silu_mul", "add", "mul", "gelu", "gelu_tanh", "silu")
KERNELS = [("elementwise.cu",
            tuple(f"ew_{op}_{c}_{v}" for op in _OPS for c in ("f32", "f16", "bf16") for v in ("vec", "scalar"))
            + tuple(f"embedding_{i}_u{u}" for i in ("i32", "i64") for u in (16, 8, 4, 2, 1)), ())]
_BLOCK = 256
_MAX_GRID = 1 << 20


def _prep_ew(op, a, b, out, stream, split=False):
    """The launch of row op ``op`` (ew_<op>): (kernel, grid, block, args, result)."""
    ba = A.array(a, "a" if not split else "gate_up", stream)
    code = A.float_code(ba, "a")
    A.check_align(ba, "a")
    n, d, sa = A.rows(ba, "a")
    shape = tuple(ba.shape)
    bb = None
    sb = 0
    pa = ba
    pb = 0
    if split:
        if d % 2:
            raise ValueError(f"gate_up: the last axis ({d}) must be even ([gate | up])")
        d //= 2
        shape = shape[:-1] + (d,)
        isz = ba.itemsize
        pb = ba.ptr + d * isz            # the up half: same rows, offset by d elements
        sb = sa
    elif b is not None:
        bb = A.operand(b, "b", ba, "a", stream, shape)
        _, _, sb = A.rows(bb, "b")
        pb = bb
    if out is a and not split:
        by, sy = ba, sa
    elif out is not None and out is b:
        by, sy = bb, sb
    else:
        by = A.out_array(out, shape, A.dt(ba), ba, stream)
        sy = d
    A.same_device(("a", ba), ("b", bb), ("out", by))
    isz = ba.itemsize
    vec = A.vec_ok(isz, d, ((ba, sa), (by, sy), (bb, sb))) and (not split or (d * isz) % 16 == 0)
    vn = 16 // isz if vec else 1
    total = n * (d // vn)
    grid = min(-(-total // _BLOCK), _MAX_GRID)
    k = get("elementwise.cu", f"ew_{op}_{code}_{'vec' if vec else 'scalar'}", (), int(ba.device))
    return k, grid, _BLOCK, (by, pa, pb, n, d, sy, sa, sb), by


def _bind(prep, stream):
    k, grid, block, args, _ = prep
    if not grid:
        raise ValueError("empty input: nothing to plan")
    return k.bind(grid, block, *args, stream=stream)


@op
def silu_mul(gate, up=None, *, out=None, stream=None):
    """SwiGLU: ``silu(gate) * up``. With ``up=None``, ``gate`` is ``[gate | up]`` along
    its last axis (a fused projection) and the result has half its width."""
    return _prep_ew("silu_mul", gate, up, out, stream, split=up is None)


@op
def gelu(x, *, approximate="none", out=None, stream=None):
    """GELU: exact (``approximate='none'``, erf) or the tanh approximation (``'tanh'``)."""
    return _prep_ew(_gelu_op(approximate), x, None, out, stream)


@op
def silu(x, *, out=None, stream=None):
    """SiLU: ``x * sigmoid(x)``."""
    return _prep_ew("silu", x, None, out, stream)


@op
def add(a, b, *, out=None, stream=None):
    """``a + b`` (same shape; out may be a or b)."""
    return _prep_ew("add", a, _need(b), out, stream)


@op
def mul(a, b, *, out=None, stream=None):
    """``a * b`` (same shape; out may be a or b)."""
    return _prep_ew("mul", a, _need(b), out, stream)


def _need(b):
    if b is None:
        raise TypeError("b: expected a device array, got None")
    return b


def _gelu_op(approximate):
    if approximate == "none":
        return "gelu"
    if approximate == "tanh":
        return "gelu_tanh"
    raise ValueError(f"approximate={approximate!r}: expected 'none' or 'tanh'")


A.attach_plan(silu_mul, lambda gate, up=None, *, out=None, stream=None: _bind(
    _prep_ew("silu_mul", gate, up, out, stream, split=up is None), stream))
A.attach_plan(gelu, lambda x, *, approximate="none", out=None, stream=None: _bind(
    _prep_ew(_gelu_op(approximate), x, None, out, stream), stream))
A.attach_plan(silu, lambda x, *, out=None, stream=None: _bind(_prep_ew("silu", x, None, out, stream), stream))
A.attach_plan(add, lambda a, b, *, out=None, stream=None: _bind(_prep_ew("add", a, _need(b), out, stream), stream))
A.attach_plan(mul, lambda a, b, *, out=None, stream=None: _bind(_prep_ew("mul", a, _need(b), out, stream), stream))


# ------------------------------------------------------------------ embedding
def _prep_emb(table, ids, out, stream):
    bt = A.array(table, "table", stream)
    if len(bt.shape) != 2:
        raise ValueError(f"table: expected (vocab, dim), got {tuple(bt.shape)}")
    vocab, dim = bt.shape
    _, _, st = A.rows(bt, "table")
    bi = A.array(ids, "ids", stream)
    icode = {"int32": "i32", "int64": "i64"}.get(A.dt(bi))
    if icode is None:
        raise TypeError(f"ids: dtype {A.dt(bi)}, expected int32 or int64")
    if bi.strides is not None and bi.size > 1:
        raise ValueError("ids: must be contiguous")
    A.check_align(bi, "ids")
    ntok = bi.size
    shape = tuple(bi.shape) + (dim,)
    bo = A.out_array(out, shape, A.dt(bt), bt, stream)
    A.same_device(("table", bt), ("ids", bi), ("out", bo))
    isz = bt.itemsize
    row_bytes = dim * isz
    u = 16
    while u > 1 and (row_bytes % u or bt.ptr % u or bo.ptr % u or (st * isz) % u):
        u //= 2
    k = get("elementwise.cu", f"embedding_{icode}_u{u}", (), int(bt.device))
    block = max(32, min(256, ((row_bytes // u + 31) // 32) * 32))
    grid = min(ntok, _MAX_GRID)
    return k, grid, block, (bo, bt, bi, ntok, vocab, row_bytes // u, row_bytes, st * isz), bo


@op
def embedding(table, ids, *, out=None, stream=None):
    """``out[..., :] = table[ids[...], :]``: rows of a (vocab, dim) table gathered by
    device token ids (int32/int64, any shape). An id outside [0, vocab) gives a zero row.
    Any dtype (the rows are copied as bytes)."""
    return _prep_emb(table, ids, out, stream)


def _emb_plan(table, ids, *, out=None, stream=None):
    """The launch of :func:`embedding` bound once: replays read the ids stored then."""
    k, grid, block, args, _ = _prep_emb(table, ids, out, stream)
    if not grid:
        raise ValueError("no ids: nothing to plan")
    return k.bind(grid, block, *args, stream=stream)


A.attach_plan(embedding, _emb_plan)
