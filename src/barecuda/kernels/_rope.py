"""Rotary position embedding on q (and k, in the same launch).

Layouts: ``"neox"`` (half split, HF transformers) and ``"llama"`` (interleaved pairs,
Meta's llama / GGUF). llama3 frequency scaling through ``scaling={"factor", "low_freq_factor",
"high_freq_factor", "original_max_position_embeddings"}``. The position may be a Python
int, a device int32 array of one element (read by the kernel: a captured graph needs no
argument change per token), or per-token device ``positions``.
"""
from barecuda.kernels import _args as A
from barecuda.kernels._opcall import op
from barecuda.kernels._registry import get

__all__ = ["rope"]

KERNELS = [("rope.cu", tuple(f"rope_{c}_{lay}" for c in ("f32", "f16", "bf16") for lay in ("llama", "neox")), ())]
_BLOCK = 128


def _geom(b, name):
    """(ntok, seqlen, heads, D, stride_tok, stride_head) of a (..., T, H, D) or (H, D) array."""
    shape = b.shape
    if len(shape) < 2:
        raise ValueError(f"{name}: expected (tokens, heads, head_dim) or (heads, head_dim), got {tuple(shape)}")
    D, H = shape[-1], shape[-2]
    seqlen = shape[-3] if len(shape) >= 3 else 1
    st = b.strides
    if st is None:
        st_h, st_t = D, H * D
        lead = shape[:-2]
        n = 1
        for s in lead:
            n *= s
        return n, seqlen, H, D, st_t, st_h
    if D > 1 and st[-1] != 1:
        raise ValueError(f"{name}: the head_dim axis must be contiguous")
    st_h = st[-2]
    n, st_t = A.collapse(shape[:-2], st[:-2], name, "one token axis")
    return n, seqlen, H, D, (st_t if st_t is not None else H * st_h), st_h


def _prep(q, k, pos, positions, theta, layout, rotary_dim, scaling, out, out_k, stream):
    if layout not in ("neox", "llama"):
        raise ValueError(f"layout={layout!r}: expected 'neox' or 'llama'")
    bq = A.array(q, "q", stream)
    code = A.float_code(bq, "q")
    A.check_align(bq, "q")
    n, seqlen, hq, D, sqt, sqh = _geom(bq, "q")
    rot = D if rotary_dim is None else A.int_arg(rotary_dim, "rotary_dim", 2, D)
    if rot % 2:
        raise ValueError(f"rotary_dim={rot} must be even")
    if rot > 1024:
        raise ValueError(f"rotary_dim={rot}: at most 1024")
    bqo = bq if out is q else A.out_array(out, bq.shape, A.dt(bq), bq, stream, "out")
    n2, _, _, _, sqot, sqoh = _geom(bqo, "out")
    bk = bko = None
    hk = 0
    skt = skh = skot = skoh = 0
    if k is not None:
        bk = A.operand(k, "k", bq, "q", stream)
        nk, seqk, hk, Dk, skt, skh = _geom(bk, "k")
        if (nk, seqk, Dk) != (n, seqlen, D):
            raise ValueError(f"k: shape {tuple(bk.shape)} does not match q {tuple(bq.shape)} but in the heads axis")
        bko = bk if out_k is k else A.out_array(out_k, bk.shape, A.dt(bk), bk, stream, "out_k")
        _, _, _, _, skot, skoh = _geom(bko, "out_k")
    elif out_k is not None:
        raise ValueError("out_k given without k")
    bpos = bposs = None
    pos0 = 0
    if positions is not None:
        if pos not in (None, 0):
            raise ValueError("give pos or positions, not both")
        bposs = A.array(positions, "positions", stream)
        if A.dt(bposs) != "int32":
            raise TypeError(f"positions: dtype {A.dt(bposs)}, expected int32")
        if bposs.size < seqlen or (bposs.strides is not None and bposs.size > 1):
            raise ValueError(f"positions: expected {seqlen} contiguous int32, got shape {tuple(bposs.shape)}")
    elif pos is None or isinstance(pos, int):
        pos0 = A.int_arg(pos or 0, "pos", -(1 << 31), (1 << 31) - 1)
    else:
        bpos = A.array(pos, "pos", stream)
        if A.dt(bpos) != "int32" or bpos.size != 1:
            raise TypeError(f"pos: a device position must be one int32, got {A.dt(bpos)} {tuple(bpos.shape)}")
    A.check_align(bpos, "pos") if bpos is not None else None
    A.same_device(("q", bq), ("k", bk), ("out", bqo), ("out_k", bko), ("pos", bpos), ("positions", bposs))
    theta = A.scalar_f32(theta, "theta")
    l3 = (0.0, 1.0, 4.0, 8192.0)
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type", "llama3"))
        if kind != "llama3":
            raise ValueError(f"scaling type {kind!r}: only 'llama3' is supported")
        try:
            l3 = (float(scaling["factor"]), float(scaling.get("low_freq_factor", 1.0)),
                  float(scaling.get("high_freq_factor", 4.0)),
                  float(scaling.get("original_max_position_embeddings", 8192)))
        except KeyError as e:
            raise ValueError(f"scaling: missing {e}") from None
        if l3[0] <= 0 or l3[2] == l3[1]:
            raise ValueError("scaling: factor must be > 0 and high_freq_factor != low_freq_factor")
    kern = get("rope.cu", f"rope_{code}_{layout}", (), int(bq.device))
    P = A.ptr_or_0
    args = (bqo, bq, sqot, sqoh, sqt, sqh, hq,
            P(bko), P(bk), skot, skoh, skt, skh, hk,
            n, max(seqlen, 1), D, rot, P(bposs), P(bpos), pos0, A.f32(theta), *map(A.f32, l3))
    total = n * (rot // 2)                  # one thread a (token, rotated pair), looping over the heads
    if not total or not (hq + hk):
        return kern, 0, _BLOCK, args, (bqo if bk is None else (bqo, bko))
    gx = min(-(-total // _BLOCK), 1 << 20)
    gy = max(1, min(hq + hk, -(-(1 << 21) // total), 65535))   # split the heads: ~2M threads in flight
    grid = (gx, gy)
    return kern, grid, _BLOCK, args, (bqo if bk is None else (bqo, bko))


@op
def rope(q, k=None, *, pos=0, positions=None, theta=10000.0, layout="neox", rotary_dim=None,
         scaling=None, out=None, out_k=None, stream=None):
    """Rotate q (and k) by their positions.

    Parameters
    ----------
    q, k : device arrays (..., T, H, D) or (H, D) (one token), float32/float16/bfloat16
        The head_dim axis contiguous; k may have fewer heads (GQA).
    pos : int or device int32 array of one element
        Position of the first of the T tokens (token t is at pos + t).
    positions : device int32 array (T,), optional
        Per-token positions instead of ``pos``.
    theta : float
    layout : {'neox', 'llama'}
    rotary_dim : int, optional
        Rotate the first rotary_dim dims of each head (default all); the rest are copied.
    scaling : dict, optional
        llama3: ``factor``, ``low_freq_factor``, ``high_freq_factor``,
        ``original_max_position_embeddings``.
    out, out_k : device arrays like q / k, or q / k themselves (in place); default new

    Returns
    -------
    out, or (out, out_k) when k is given.
    """
    return _prep(q, k, pos, positions, theta, layout, rotary_dim, scaling, out, out_k, stream)


def _plan(q, k=None, *, pos=0, positions=None, theta=10000.0, layout="neox", rotary_dim=None,
          scaling=None, out=None, out_k=None, stream=None):
    """The launch of :func:`rope` bound once. With ``pos`` a device int32, replaying the
    plan (or a graph holding it) uses the position stored there at that time."""
    kern, grid, block, args, _ = _prep(q, k, pos, positions, theta, layout, rotary_dim, scaling, out, out_k, stream)
    if not grid:
        raise ValueError("nothing to rotate")
    return kern.bind(grid, block, *args, stream=stream)


A.attach_plan(rope, _plan)
