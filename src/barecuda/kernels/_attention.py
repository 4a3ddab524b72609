"""Attention ops: decode over a KV cache (split-KV, length read from device memory),
causal/full prefill flash attention, and the KV-cache append (csrc/attention_decode.cu: decode
and the append; csrc/attention_prefill.cu: prefill; csrc/attention_tile.cuh: the tile both share).

Layouts (elements; the last axis, the head dim D, is contiguous everywhere):

- decode ``q``: ``[n_heads, D]`` (rows may be strided, e.g. a slice of a fused QKV buffer);
  ``k_cache``/``v_cache``: ``[max_ctx, n_kv, D]`` (any token/head strides, multiples of 8), or
  ``[n_kv, max_ctx, D]`` with ``kv_layout='head_major'`` (faster: each head reads one run), or,
  with ``block_table``, pages ``[n_pages, page_size, n_kv, D]`` and an int32 table of page
  indices (logical page ``i`` of the sequence is ``block_table[i]``); ``length``: an int32
  device scalar (the number of cached tokens, plus ``len_offset``), read by the kernel, so a
  captured graph replays unchanged while the caller advances it.
- batched decode (B sequences of their own lengths, one launch): ``q`` ``[B, n_heads, D]``,
  ``length`` int32 ``[B]``, ``out`` ``[B, n_heads, D]``, and either contiguous caches
  ``[B, max_ctx, n_kv, D]`` (``[B, n_kv, max_ctx, D]`` head-major) or the shared pages with a
  ``[B, pages_per_sequence]`` table; ``kv_append`` takes ``k_new``/``v_new`` ``[B, n_kv, D]``
  and ``pos`` ``[B]`` the same way. A 3-D ``q`` is a batch only beside a batched cache (a 4-D
  contiguous cache, or a 2-D table); otherwise its leading axes are rows, as before.
- prefill ``q``: ``[S, n_heads, D]`` or ``[B, S, n_heads, D]``; ``k``/``v``:
  ``[S_kv, n_kv, D]`` / ``[B, S_kv, n_kv, D]``; causal masks key ``j`` for query ``i`` when
  ``j > i + causal_offset`` (0: PyTorch's ``is_causal``, top-left aligned).

GQA: query head ``h`` reads KV head ``h // (n_heads // n_kv)``.
"""
import math
from typing import Dict, Tuple

from barecuda.kernels import _args, _registry
from barecuda.kernels._matmul import smem_limit
from barecuda.kernels._opcall import op

__all__ = ["attention_decode", "plan_attention_decode", "attention_prefill", "plan_attention_prefill",
           "kv_append", "plan_kv_append", "decode_workspace_size"]

DEC_SOURCE = "attention_decode.cu"    # attn_decode_*, kv_append_* (and their f32 forms)
PF_SOURCE = "attention_prefill.cu"    # attn_prefill_*
HEAD_DIMS = (64, 80, 96, 128)
MAX_GROUP = 16      # query heads per KV head: a run-time argument of the decode kernel (one 16-row MMA tile)
DEC_WARPS = 8       # 8 warps x 3 stages of 128 keys (209 KB at d128; sm_80/86/89 fall back, see _dec_configs).
DEC_STAGES = 3      # H200 2026-11-27 06:26 UTC, same run, with DEC_MERGE=2 and SPLIT_OCC=1, us against 4 warps x 4
                    # stages: 32/8 d128 4k 10.24 / 10.17-10.20, 16k 22.65 / 22.69, 32k 39.25 / 39.27-39.36, d64 8k
                    # 9.34 / 10.02; the decode loop's node over 129 keys of a 4096-slot cache d128 5.17 / 5.69,
                    # d64 3.74 / 4.11, 1024 keys d128 6.14 / 6.56
DEC_L2PF = 0
SPLIT_WAVES = 1     # default n_splits: this many waves of resident blocks over the KV heads
SPLIT_OCC = 1       # default n_splits of plain plans: count at most this many blocks a multiprocessor (None: the
                    # occupancy's; PDL plans take PDL_OCC). H200 06:26 UTC, d64 8k: 16 splits 9.34 us (8 warps) /
                    # 10.02 (4 warps) against the occupancy's 33 / 49 splits 10.49 / 11.27; a short context in a
                    # big cache launches fewer idle blocks (d64 129 keys 3.74 against 4.65 us, 8 warps)
DEC_KPW = 16        # keys per warp per pipeline stage (16 or 32)
DEC_WPIPE = 3       # 3 (default since 2026-11-27 10:1x): the block's stages and key order, each warp copying,
                    # waiting for and reading its own keys of a stage (no block barrier per tile) and refilling a
                    # stage as soon as it has read it (DEC_STAGES tiles in flight); 2: the same, refilled at the
                    # next tile's start (DEC_STAGES - 1); 1: each warp streams its own contiguous share of the
                    # split; 0: one block-wide ring (the default before). H200 10:08 UTC, same run, us a call,
                    # the old default (wpipe 0, sync 1) -> this one (wpipe 3, sync 2): 32/8 d128 4k 10.30 -> 9.64,
                    # 16k 22.88 -> 22.06, 32k 39.37 -> 38.41, d64 8k 9.46 -> 9.02; the decode loop's node over 129
                    # keys d128 5.20 -> 4.77, d64 3.78 -> 3.44; 1024 keys 6.18 -> 5.69 (09:51: wpipe 2 within 0.1-0.4
                    # of 3; wpipe 1 32k 40.8, but 129 keys d128 4.47)
DEC_TMA = 0         # 1 (sm_90, with DEC_WPIPE 3): the warps' rows come by bulk copy (cp.async.bulk, one row a
                    # lane, an mbarrier a stage and warp) instead of 16-byte cp.async. Correct (the decode GPU tests
                    # passed on it, H200 10:08) but slower: 4k 9.76, 16k 23.76, 32k 40.34, d64 8k 10.29, 129 keys
                    # d128 5.40 us; without the softmax math (probe 2) faster than cp.async at 16k/32k (19.19 /
                    # 35.00 against 20.25 / 36.47): the waits, not the copies, cost (not pursued)
DEC_MINCHUNK = 128  # keys a split takes at least (attention_decode.cu's default)
DEC_ONESPLIT = 256  # contexts up to this many keys run in one split: no merge (attention_decode.cu's default)
# Programmatic dependent launch (plan_attention_decode(pdl=True)): those plans use the DEC_PDL=1 build
# (griddepcontrol; Q and the length read through L2 after the wait). H200, 2026-11-27 02:29 UTC, chained
# graphs, us a call, the plain build / pdl plans (4 stages, no prefetch) / the DEC_PDL=1 build launched
# plainly: 32/8 d128 ctx 4096 12.4-12.6 / 13.8 / 13.7-14.0; 16k 25.2 / 26.0 / 26.2-26.4; 32k 41.6-41.8 /
# 42.8 / 42.6-43.2; 1024 keys 7.6 / 8.2 / 8.1; 129 keys 5.72 / 5.47 / 6.01 (d64: 4.14 / 4.03 / 5.5). So plain
# plans keep the build without griddepcontrol (DEC_PDL_PLAIN = 0), and PDL pays only at short contexts.
DEC_MERGE = 2       # the last block's split merge (attention_decode.cu): 2 = float4 partials, 16 splits a round; 0 = one
                    # element a thread, 8 splits a round (the default before 2026-11-27 06:2x); (1, the weights
                    # in shared memory: slower, removed 2026-11-27 10:1x). H200 06:21 UTC, same run, us a call,
                    # 0 -> 2: 32/8 d128 4k 12.66 -> 10.23, 16k 25.42 -> 23.06, 32k 41.87 -> 39.65, d64 8k 14.40 -> 11.42, 1024 keys
                    # 7.86 -> 6.61; 129 keys (one split, no merge) unchanged; without any merge (probe) 4k 8.57
DEC_SYNC = 2        # 2 (default since 2026-11-27 10:1x): split blocks count themselves done by thread 0 alone
                    # with one atom.acq_rel.gpu after a block barrier (no fence.sc); 1: thread 0 fences
                    # (__threadfence), counts, and the last fences again; 0: a fence in every thread first. H200
                    # 09:51 UTC, 1 -> 2 (block ring): 4k 10.20 -> 9.97, 16k 22.57 -> 22.32, 32k 39.07 -> 38.86, d64
                    # 8k 9.41 -> 9.13, 1024 keys 6.21 -> 5.88 us (06:2x, 0 -> 1: 4k 10.23 -> 10.18-10.21)
# (DEC_SPEC, an L2 prefetch of each split's first keys before the length is read, and DEC_LENFIRST,
# the length loaded before Q: measured no faster, H200 2026-11-27 06:2x, docs/kernels.md; removed
# from the kernel and here 2026-11-27 14:3x)
DEC_CLUSTER = 0     # 1: plan_attention_decode on sm_90 with <= 16 splits makes the splits of a KV head one
                    # thread-block cluster that merges through distributed shared memory (attention_decode.cu
                    # DEC_CLUSTER; no workspace). Correct (H200 tests, 2026-11-27 09:51) and slower everywhere (4k
                    # 15.9 us against 10.2, 32k 60.4 against 39.1): at 1 block a multiprocessor the H200 holds only 7
                    # clusters of 12-16 blocks at once (8 of them need two waves); at d64 (2 blocks/SM) 11.5 vs 9.4
DEC_PROBE = 0       # PROBE BUILDS ONLY (bench --floor-probe; wrong answers for 1-3): 1 no merge, 2 no merge and
                    # no softmax math, 3 = 2 without the Q and length loads, 4 the length taken as max_ctx
DEC_PDL_PLAIN = 0   # 1: plain plans use the griddepcontrol build too (the bench probe's comparison)
PDL_PF_KEYS = 0     # pdl=True plans: keys of each split prefetched into L2 before griddepcontrol.wait
                    # (256 / 1024: within noise of 0 at every context on the H200 run; 1024 loses 4 us at 16k-32k)
PDL_STAGES = None   # pdl=True plans: pipeline depth (None: DEC_STAGES); with the 4-warp pipeline of 02:29 UTC,
                    # 3 (two grids' blocks on a multiprocessor) lost 0.6-6 us a call at every context (the PDL
                    # measurements are of that pipeline and merge; the 8-warp default is not PDL-timed)
PDL_OCC = 1         # pdl=True plans: the default n_splits counts this many blocks a multiprocessor at most
PF_WARPS = 4
PF_STAGES = 2
PF_QREG = 1         # Q straight into registers; 2 blocks/SM (H200: 254 vs 250 TF/s causal)
PF_MINB = 2
PF_BN = 64
MAX_SPLITS = 1024
_LOG2E = 1.4426950408889634
_DT = ("f16", "bf16")


# Decode pipeline depth for GPUs whose per-block shared memory (opt-in) is below the
# default's (sm_86/sm_89: 99 KB; 4 stages of head dim 128 need 136 KB): 2 stages = 68 KB.
SMALL_DEC_STAGES = 2


def _dec_configs(stages=None):
    """(warps, stages) of the decode pipeline, best first: DEC_WARPS with ``stages`` (or
    DEC_STAGES), then, for devices whose per-block shared memory is smaller, 4 warps with 4
    stages (when the default has more warps) and 4 warps with SMALL_DEC_STAGES."""
    out = [(DEC_WARPS, stages or DEC_STAGES)]
    if DEC_WARPS != 4:
        out.append((4, 4))
    out.append((4 if DEC_WARPS != 4 else DEC_WARPS, SMALL_DEC_STAGES))
    return out


def _dec_defines(d, stages=None, pdl=False, warps=None, cluster=False):
    extra = (("DEC_KPW", DEC_KPW),) if DEC_KPW != 16 else ()
    extra += (("DEC_WPIPE", DEC_WPIPE),) if DEC_WPIPE != 3 else ()   # attention_decode.cu's defaults: 3, 2, 2
    extra += (("DEC_TMA", 1),) if DEC_TMA and DEC_WPIPE == 3 else ()
    extra += (("DEC_MINCHUNK", DEC_MINCHUNK),) if DEC_MINCHUNK != 128 else ()
    extra += (("DEC_ONESPLIT", DEC_ONESPLIT),) if DEC_ONESPLIT != 256 else ()
    extra += (("DEC_PDL", 1),) if pdl or DEC_PDL_PLAIN else ()
    extra += (("DEC_MERGE", DEC_MERGE),) if DEC_MERGE != 2 else ()
    extra += (("DEC_SYNC", DEC_SYNC),) if DEC_SYNC != 2 else ()
    extra += (("DEC_PROBE", DEC_PROBE),) if DEC_PROBE else ()
    extra += (("DEC_CLUSTER", 1),) if cluster else ()
    return (("HEAD_DIM", d), ("DEC_WARPS", warps or DEC_WARPS), ("DEC_STAGES", stages or DEC_STAGES),
            ("DEC_L2PF", DEC_L2PF)) + extra


_sms: Dict[Tuple[int, ...], int] = {}


def _rs(d):
    return d * 2 + 16


def decode_smem(d, group, stages=None, warps=None, cluster=False):
    w = warps or DEC_WARPS
    pipe = (stages or DEC_STAGES) * 2 * DEC_KPW * w * _rs(d)
    pipe += 8 * w * (stages or DEC_STAGES) if DEC_TMA and DEC_WPIPE == 3 else 0   # the bulk-copy ring's mbarriers
    merge = 4 * (2 * w * 16 + w * group * d) + (4 * group * (d + 1) if cluster else 0)
    return max(pipe, merge)


def prefill_smem(d, warps=None):
    q = 0 if PF_QREG else 16 * (warps or PF_WARPS) * _rs(d)
    return q + PF_STAGES * 2 * PF_BN * _rs(d)


def _pf_defines(d):
    return (("HEAD_DIM", d), ("PF_WARPS", PF_WARPS), ("PF_QREG", PF_QREG), ("PF_MINB", PF_MINB))


KERNELS = ([(DEC_SOURCE, tuple(f"{op}_{dt}" for op in ("attn_decode", "kv_append") for dt in _DT + ("f32",)),
             _dec_defines(d, st, warps=w)) for d in HEAD_DIMS for w, st in _dec_configs()]
           + [(PF_SOURCE, tuple(f"attn_prefill_{dt}" for dt in _DT), _pf_defines(d)) for d in HEAD_DIMS])


def _kernel(name, defines, smem, device, source=DEC_SOURCE):
    k = _registry.get(source, name, defines, device)
    if smem > 48 * 1024 and k.max_dynamic_shared_memory < smem:
        k.set_max_dynamic_shared_memory(smem)
    return k


def _dtname(b):
    """The dtype's name ('float16', 'bfloat16', ...): DeviceBuffer.dtype is a numpy dtype
    when numpy is installed, else a str."""
    return str(b.dtype)


def _half(b, name):
    code = {"float16": "f16", "bfloat16": "bf16"}.get(_dtname(b))
    if code is None:
        raise TypeError(f"{name}: dtype {_dtname(b)} is not supported (expected float16 or bfloat16)")
    return code


def _strides(b):
    st = b.strides
    if st is None:
        st, acc = [], 1
        for s in reversed(b.shape):
            st.append(acc)
            acc *= s
        st = st[::-1]
    return tuple(st)


def _check_vec(b, name):
    if b.ptr % 16:
        raise ValueError(f"{name}: address 0x{b.ptr:x} is not 16-byte aligned")
    st = _strides(b)
    if st[-1] != 1 and b.shape[-1] > 1:
        raise ValueError(f"{name}: the head dim (last axis) must be contiguous")
    for i, s in enumerate(st[:-1]):
        if b.shape[i] > 1 and s % 8:
            raise ValueError(f"{name}: stride {s} of axis {i} is not a multiple of 8 elements (16 bytes)")
    return st


def _scalar_i32(b, name):
    if _dtname(b) != "int32":
        raise TypeError(f"{name}: dtype {_dtname(b)}, expected int32 (a device scalar)")
    n = 1
    for s in b.shape:
        n *= s
    if n < 1:
        raise ValueError(f"{name}: empty")
    _args.check_align(b, name, 4)


def _cache_geometry(kb, vb, table, layout="token_major", name_k="k_cache"):
    """(max_ctx, n_kv, d, tok_stride, head_stride, page_size) of a contiguous or paged cache."""
    if layout not in ("token_major", "head_major"):
        raise ValueError(f"kv_layout={layout!r}: expected 'token_major' or 'head_major'")
    if table is None:
        want = "[max_ctx, n_kv, head_dim]" if layout == "token_major" else "[n_kv, max_ctx, head_dim]"
        if len(kb.shape) != 3:
            raise ValueError(f"{name_k}: expected {want}, got shape {tuple(kb.shape)}")
        st = _check_vec(kb, name_k)
        if layout == "token_major":
            max_ctx, n_kv, d = kb.shape
        else:
            n_kv, max_ctx, d = kb.shape
            st = (st[1], st[0], st[2])
        page = 0
    else:
        if layout != "token_major":
            raise ValueError("kv_layout='head_major' is for contiguous caches (pages are token-major)")
        if len(kb.shape) != 4:
            raise ValueError(f"{name_k}: with block_table expected pages [n_pages, page_size, n_kv, head_dim], "
                             f"got shape {tuple(kb.shape)}")
        n_pages, page, n_kv, d = kb.shape
        st = _check_vec(kb, name_k)
        if st[0] != page * st[1]:
            raise ValueError(f"{name_k}: pages must hold page_size consecutive token rows (stride {st[0]} != "
                             f"{page} x {st[1]})")
        st = st[1:]
        if _dtname(table) != "int32":
            raise TypeError(f"block_table: dtype {table.dtype}, expected int32")
        n_tab = 1
        for s in table.shape:
            n_tab *= s
        if table.strides is not None and n_tab > 1 and len(table.shape) == 1 and table.strides[0] != 1:
            raise ValueError("block_table: must be contiguous")
        _args.check_align(table, "block_table", 4)
        max_ctx = n_tab * page
    if tuple(vb.shape) != tuple(kb.shape) or _strides(vb) != _strides(kb):
        raise ValueError(f"v_cache: shape {tuple(vb.shape)} / strides must equal k_cache's {tuple(kb.shape)}")
    if vb.dtype != kb.dtype:
        raise TypeError(f"v_cache: dtype {vb.dtype} differs from k_cache's {kb.dtype}")
    _check_vec(vb, "v_cache")
    if d not in HEAD_DIMS and not (d % 16 == 0 and 16 <= d <= 256):
        raise ValueError(f"head_dim {d}: supported 64, 80, 96, 128 (any multiple of 16 up to 256)")
    return max_ctx, n_kv, d, st[0], st[1], page


def decode_workspace_size(n_heads, n_kv, head_dim, n_splits, batch=1):
    """Bytes of the decode workspace: partial outputs, their log-sum-exp, one counter per KV
    head, for each of ``batch`` sequences."""
    return 4 * batch * (n_heads * n_splits * (head_dim + 1) + n_kv)


class _Seq0:
    """Sequence 0 of a batched array: its address, dtype and device, its shape and strides
    without the leading (sequence) axis, and that axis' stride (``seq_stride``, elements)."""
    __slots__ = ("ptr", "dtype", "device", "shape", "strides", "seq_stride", "readonly")

    def __init__(self, b):
        st = _strides(b)
        self.ptr, self.dtype, self.device, self.readonly = b.ptr, b.dtype, b.device, getattr(b, "readonly", False)
        self.shape, self.strides, self.seq_stride = tuple(b.shape[1:]), tuple(st[1:]), st[0] if b.shape[0] > 1 else 0


def _batch(xb, kb, vb, tb, cnt, name_x, name_cnt):
    """``(nb, x, k, v, t, seq_stride, bt_stride)``: a batch of ``nb`` sequences when ``xb`` (q or
    k_new) is 3-D beside a batched cache (a 4-D contiguous cache, or a 2-D block table) -- the
    arrays then stand for sequence 0 (``_Seq0``) -- else ``(1, xb, kb, vb, tb, 0, 0)``."""
    batched = len(xb.shape) == 3 and (len(tb.shape) == 2 if tb is not None else len(kb.shape) == 4)
    if not batched:
        return 1, xb, kb, vb, tb, 0, 0
    nb = xb.shape[0]
    if nb < 1:
        raise ValueError(f"{name_x}: an empty batch")
    n = math.prod(cnt.shape)
    if n != nb:
        raise ValueError(f"{name_cnt}: {n} entries for a batch of {nb} sequences (one int32 a sequence)")
    if cnt.strides is not None and nb > 1 and (len(cnt.shape) != 1 or cnt.strides[0] != 1):
        raise ValueError(f"{name_cnt}: must be contiguous")
    seq = bt = 0
    if tb is None:
        if kb.shape[0] != nb or vb.shape[0] != nb:
            raise ValueError(f"k_cache/v_cache: {kb.shape[0]}/{vb.shape[0]} sequences for a batch of {nb}")
        kb, vb = _Seq0(kb), _Seq0(vb)
        if kb.seq_stride != vb.seq_stride:
            raise ValueError("k_cache/v_cache: the sequence strides must be equal")
        if kb.seq_stride % 8:
            raise ValueError(f"k_cache: sequence stride {kb.seq_stride} is not a multiple of 8 elements (16 bytes)")
        seq = kb.seq_stride
    else:
        if tb.shape[0] != nb:
            raise ValueError(f"block_table: {tb.shape[0]} rows for a batch of {nb} sequences")
        tb = _Seq0(tb)
        if tb.strides and tb.strides[0] != 1 and tb.shape[0] > 1:
            raise ValueError("block_table: each sequence's row must be contiguous")
        bt = tb.seq_stride
    return nb, _Seq0(xb), kb, vb, tb, seq, bt


def _default_splits(kernel, n_kv, max_ctx, smem, device, occ_max=None, warps=None):
    warps = warps or DEC_WARPS
    key = (int(device), smem, warps, DEC_STAGES, DEC_KPW, occ_max)
    per = _sms.get(key)
    if per is None:
        from barecuda._device import Device
        dev = device if isinstance(device, Device) else Device(int(device))
        sms = dev.attribute("multiprocessor_count")
        occ = max(1, kernel.max_active_blocks_per_sm(warps * 32, smem))
        if occ_max:
            occ = min(occ, occ_max)
        per = _sms[key] = sms * occ
    # one wave: blocks resident at once, divided among the KV heads (rounded down)
    bn = DEC_KPW * warps
    return max(1, min((max_ctx + bn - 1) // bn, (per * SPLIT_WAVES) // n_kv, MAX_SPLITS))


def _arrays(stream, **named):
    """The device arrays of the named arguments, in order (``block_table`` may be None)."""
    return [None if n == "block_table" and x is None else _args.array(x, n, stream) for n, x in named.items()]


def _prep_decode(q, k_cache, v_cache, length, out, scale, len_offset, block_table, n_splits, workspace, stream,
                 kv_layout="token_major", pdl=False, cluster=False):
    """(kernel, grid, block, smem, args, out, workspace) of a decode launch; with ``cluster``
    (plans, DEC_CLUSTER) an 8th item: the cluster dims, or None when the launch is plain."""
    qb, kb, vb, lb, tb = _arrays(stream, q=q, k_cache=k_cache, v_cache=v_cache, length=length,
                                 block_table=block_table)
    ta = tb
    code = "f32" if _dtname(qb) == "float32" else _half(qb, "q")
    if kb.dtype != qb.dtype or vb.dtype != qb.dtype:
        raise TypeError(f"k_cache/v_cache: dtypes {kb.dtype}/{vb.dtype} differ from q's {qb.dtype}")
    _scalar_i32(lb, "length")
    qa, ka, va = qb, kb, vb       # the arrays (launch arguments); qb, kb, vb, tb: sequence 0's geometry
    nb, qb, kb, vb, tb, seq_st, bt_st = _batch(qb, kb, vb, tb, lb, "q", "length")
    max_ctx, n_kv, d, tok_st, head_st, page = _cache_geometry(kb, vb, tb, kv_layout)
    q_seq = qb.seq_stride if nb > 1 else 0
    n_heads, dq, q_st = _args.rows(qb, "q")
    if dq != d:
        raise ValueError(f"q: head dim {dq} differs from the cache's {d}")
    if n_heads % n_kv:
        raise ValueError(f"q: {n_heads} heads is not a multiple of the cache's {n_kv} KV heads")
    group = n_heads // n_kv
    if group > MAX_GROUP:
        raise ValueError(f"GQA group {group} > {MAX_GROUP} query heads per KV head is not supported")
    if qb.ptr % 16 or q_st % 8:
        raise ValueError("q: rows must be 16-byte aligned (address and row stride)")
    if nb > 1 and q_seq % 8:
        raise ValueError(f"q: sequence stride {q_seq} is not a multiple of 8 elements (16 bytes)")
    _args.same_device(("q", qb), ("k_cache", kb), ("v_cache", vb), ("length", lb), ("block_table", tb))
    ob = _args.out_array(out, tuple(qa.shape), qa.dtype, qa, stream)
    _args.check_align(ob, "out", 4)
    o_seq = n_heads * d if nb > 1 else 0
    len_offset = _args.int_arg(len_offset, "len_offset", -(1 << 31), (1 << 31) - 1)
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    scale = _args.scalar_f32(scale, "scale")
    device = qb.device
    if code == "f32":       # the plain kernel: one block per query head, no split, no workspace
        kern = _kernel("attn_decode_f32", _dec_defines(d), 0, device)
        args = (qa, ka, va, ob, lb, len_offset, max_ctx, tok_st, head_st, q_st, d, 0 if ta is None else ta, page,
                group, _args.f32(scale), q_seq, o_seq, seq_st, bt_st)
        return (kern, (n_heads, 1, nb), DEC_WARPS * 32, 0, args, ob, None) + ((None,) if cluster else ())
    limit = smem_limit(device)
    for warps, stages in _dec_configs(PDL_STAGES if pdl else None):   # sm_80 (163 KB a block), sm_86/89 (99 KB):
        smem = decode_smem(d, group, stages, warps)                      # fewer warps or stages when needed
        if smem <= limit:
            break
    defines = _dec_defines(d, stages, pdl, warps)
    kern = _kernel(f"attn_decode_{code}", defines, smem, device)
    if n_splits is None:
        n_splits = _default_splits(kern, n_kv * nb, max_ctx, smem, device, PDL_OCC if pdl else SPLIT_OCC, warps)
    n_splits = _args.int_arg(n_splits, "n_splits", 1, MAX_SPLITS)
    if cluster:
        cl = _cluster_launch(code, d, group, stages, warps, pdl, n_splits, n_kv, device)
        if cl is not None:
            kern, smem = cl
            args = (qa, ka, va, ob, 0, 0, lb, len_offset, max_ctx, tok_st, head_st, q_st, d,
                    0 if ta is None else ta, page, n_heads, n_splits, _args.f32(scale * _LOG2E), group, 0,
                    q_seq, o_seq, seq_st, bt_st, 0)
            return kern, (n_splits, n_kv, nb), warps * 32, smem, args, ob, None, (n_splits, 1, 1)
    ws = None
    if n_splits > 1:
        need = decode_workspace_size(n_heads, n_kv, d, n_splits, nb)
        if workspace is None:
            from barecuda._buffer import zeros
            ws = zeros((need,), "uint8", device=device, stream=stream)
        else:
            ws = _args.array(workspace, "workspace", stream)
            if ws.nbytes < need:
                raise ValueError(f"workspace: {ws.nbytes} bytes, need {need} (decode_workspace_size); it must "
                                 "be zeroed once before first use and not shared by concurrent calls")
            _args.check_align(ws, "workspace", 16)
    part = 0 if ws is None else ws        # a buffer argument keeps the workspace alive in plans
    counters = 0 if ws is None else ws.ptr + 4 * n_heads * n_splits * (d + 1)
    args = (qa, ka, va, ob, part, counters, lb, len_offset, max_ctx, tok_st, head_st, q_st, d,
            0 if ta is None else ta, page, n_heads, n_splits, _args.f32(scale * _LOG2E), group,
            PDL_PF_KEYS if pdl and ta is None else 0, q_seq, o_seq, seq_st, bt_st,
            decode_workspace_size(n_heads, n_kv, d, n_splits) // 4 if nb > 1 else 0)
    return (kern, (n_splits, n_kv, nb), warps * 32, smem, args, ob, ws) + ((None,) if cluster else ())


def _cluster_launch(code, d, group, stages, warps, pdl, n_splits, n_kv, device):
    """(kernel, smem) of the DEC_CLUSTER build when a plan may take it (DEC_CLUSTER set, sm_90+,
    no PDL, 2..16 splits, the device holding at least one such cluster at once), else None."""
    from barecuda.kernels._matmul import _cc
    if not DEC_CLUSTER or pdl or not 2 <= n_splits <= 16 or _cc(device) < (9, 0):
        return None
    smem = decode_smem(d, group, stages, warps, cluster=True)
    if smem > smem_limit(device):
        return None
    kern = _kernel(f"attn_decode_{code}", _dec_defines(d, stages, False, warps, cluster=True), smem, device)
    if n_splits > 8:
        kern.set_attribute("non_portable_cluster_size_allowed", 1)
    from barecuda import LaunchConfig
    if kern.max_active_clusters(LaunchConfig((n_splits, n_kv), warps * 32, shared_mem=smem,
                                             cluster=(n_splits, 1, 1))) < 1:
        return None
    return kern, smem


@op
def attention_decode(q, k_cache, v_cache, length, *, out=None, scale=None, len_offset=0, block_table=None,
                     n_splits=None, workspace=None, kv_layout="token_major", stream=None):
    """One query token per head against a KV cache: ``softmax(q k^T * scale) v`` over the
    first ``length[0] + len_offset`` cached tokens (clamped to the cache), GQA.

    Parameters
    ----------
    q : device array, float16 or bfloat16 (or float32: a plain kernel, one block per head, no split), ``[n_heads, D]``
    k_cache, v_cache : device arrays ``[max_ctx, n_kv, D]`` (or pages, with ``block_table``)
    length : int32 device scalar, read by the kernel at run time
    out : ``[n_heads, D]``, optional
    scale : float, default ``1/sqrt(D)``
    len_offset : int added to ``length[0]`` (1 when ``length`` holds the new token's position)
    block_table : int32 device array of page indices, optional (paged KV cache)
    n_splits : int, optional
        KV splits (flash-decoding); default: enough blocks to fill the device for ``max_ctx``.
        With more than one, a workspace of :func:`decode_workspace_size` bytes holds the
        partial results; the last block of each KV head merges them.
    workspace : device buffer, optional; zeroed before its first use, never shared by
        concurrent calls (its counters re-arm themselves after every launch)
    kv_layout : ``'token_major'`` (``[max_ctx, n_kv, D]``) or ``'head_major'``
        (``[n_kv, max_ctx, D]``: each head's keys contiguous, the faster layout to read)
    stream : stream-like, optional

    Returns
    -------
    DeviceBuffer or ``out``
    """
    kern, grid, block, smem, args, ob, ws = _prep_decode(q, k_cache, v_cache, length, out, scale, len_offset,
                                                        block_table, n_splits, workspace, stream, kv_layout)
    # (a workspace made here, workspace=None with n_splits > 1, is zeroed per call: such a call
    # is not recorded and takes this path every time; pass workspace= for the one-launch path)
    return kern, grid, block, args, ob, smem


def plan_attention_decode(q, k_cache, v_cache, length, *, out=None, scale=None, len_offset=0, block_table=None,
                          n_splits=None, workspace=None, kv_layout="token_major", pdl=False, stream=None):
    """The launch of :func:`attention_decode`, packed once: a ``LaunchPlan`` (call it to
    replay, or ``graph.add_plan`` it). Give ``out=`` (the plan writes there on every replay).
    Its workspace is allocated once and kept alive by the plan's arguments.

    ``pdl=True`` (float16/bfloat16) launches it with programmatic stream serialization
    (``cuLaunchKernelEx``): it may start while the previous kernel on the stream finishes
    (optionally asking the L2 for the first ``PDL_PF_KEYS`` keys of each split) and waits
    for that kernel's results (``griddepcontrol.wait``) before it reads Q, the length or the
    cache, so the previous kernel may write any of them. Such plans keep the overlap in a
    graph made by stream capture (``barecuda.graph.capture``) or by
    ``graph.add_plan(plan, depends_on=<the previous kernel node>)`` (a programmatic edge). Measured on the H200 it saves 0.1-0.25 us a node at ~129 keys and costs ~1 us at
    1k-32k keys against the plain plan (docs/kernels.md)."""
    kern, grid, block, smem, args, ob, ws, cluster = _prep_decode(q, k_cache, v_cache, length, out, scale,
                                                                  len_offset, block_table, n_splits, workspace,
                                                                  stream, kv_layout, pdl, cluster=True)
    if cluster is not None:      # DEC_CLUSTER: the splits of a KV head are one cluster (sm_90)
        from barecuda import LaunchConfig
        return kern.bind_config(LaunchConfig(grid, block, shared_mem=smem, stream=stream, cluster=cluster), *args)
    if pdl and kern.name != "attn_decode_f32":     # the f32 kernel has no griddepcontrol.wait: a plain launch
        from barecuda import LaunchConfig
        return kern.bind_config(LaunchConfig(grid, block, shared_mem=smem, stream=stream,
                                             programmatic_serialization=True), *args)
    return kern.bind(grid, block, *args, stream=stream, shared_mem=smem)


# ------------------------------------------------------------------ KV append
def _prep_append(k_new, v_new, k_cache, v_cache, pos, pos_offset, block_table, stream, kv_layout="token_major"):
    knb, vnb, kb, vb, pb, tb = _arrays(stream, k_new=k_new, v_new=v_new, k_cache=k_cache, v_cache=v_cache, pos=pos,
                                       block_table=block_table)
    code = "f32" if _dtname(kb) == "float32" else _half(kb, "k_cache")
    for n, b in (("k_new", knb), ("v_new", vnb), ("v_cache", vb)):
        if b.dtype != kb.dtype:
            raise TypeError(f"{n}: dtype {b.dtype} differs from k_cache's {kb.dtype}")
    _scalar_i32(pb, "pos")
    kna, vna, ka, va, ta = knb, vnb, kb, vb, tb   # the arrays (launch arguments); the rest: sequence 0's geometry
    nb, knb, kb, vb, tb, seq_st, bt_st = _batch(knb, kb, vb, tb, pb, "k_new", "pos")
    src_seq = 0
    if knb is not kna:            # a batch: v_new must be one too, with the same sequence stride
        if tuple(vna.shape) != tuple(kna.shape):
            raise ValueError(f"v_new: shape {tuple(vna.shape)} differs from k_new's {tuple(kna.shape)}")
        vnb = _Seq0(vna)
        src_seq = knb.seq_stride
        if vnb.seq_stride != src_seq:
            raise ValueError("k_new/v_new: the sequence strides must be equal")
        if src_seq % 8:
            raise ValueError(f"k_new: sequence stride {src_seq} is not a multiple of 8 elements (16 bytes)")
    max_ctx, n_kv, d, tok_st, head_st, page = _cache_geometry(kb, vb, tb, kv_layout)
    rk = _args.rows(knb, "k_new")
    rv = _args.rows(vnb, "v_new")
    if rk[:2] != (n_kv, d) or rv[:2] != (n_kv, d):
        raise ValueError(f"k_new/v_new: expected {n_kv} rows of {d} (one token's K and V), got "
                         f"{rk[:2]} and {rv[:2]}")
    if rk[2] != rv[2]:
        raise ValueError("k_new/v_new: the row strides must be equal")
    for n, b in (("k_new", knb), ("v_new", vnb)):
        if b.ptr % 16:
            raise ValueError(f"{n}: address 0x{b.ptr:x} is not 16-byte aligned")
    if rk[2] % 8:
        raise ValueError("k_new: row stride not a multiple of 8 elements")
    _args.same_device(("k_cache", kb), ("k_new", knb), ("v_new", vnb), ("v_cache", vb), ("pos", pb),
                      ("block_table", tb))
    pos_offset = _args.int_arg(pos_offset, "pos_offset", -(1 << 31), (1 << 31) - 1)
    kern = _kernel(f"kv_append_{code}", _dec_defines(d), 0, kb.device)
    n = n_kv * d // (4 if code == "f32" else 8)      # 16-byte chunks
    block = 128 if n >= 128 else ((n + 31) // 32) * 32
    grid = ((n + block - 1) // block, nb)
    args = (kna, vna, ka, va, pb, pos_offset, max_ctx, tok_st, head_st, rk[2], 0 if ta is None else ta, page, n_kv,
            src_seq, seq_st, bt_st)
    return kern, grid, block, args


@op
def kv_append(k_new, v_new, k_cache, v_cache, pos, *, pos_offset=0, block_table=None, kv_layout="token_major",
              stream=None):
    """Write one token's K and V (``[n_kv, D]`` each) into the cache at token
    ``pos[0] + pos_offset``, read from device memory at run time (nothing is written when it
    falls outside the cache). With ``block_table`` the cache is paged (see the module doc).
    A batch (``[B, n_kv, D]`` beside a batched cache, ``pos`` ``[B]``) writes each sequence's
    token at its own position, in one launch."""
    kern, grid, block, args = _prep_append(k_new, v_new, k_cache, v_cache, pos, pos_offset, block_table, stream,
                                           kv_layout)
    return kern, grid, block, args, None


def plan_kv_append(k_new, v_new, k_cache, v_cache, pos, *, pos_offset=0, block_table=None, kv_layout="token_major",
                   stream=None):
    """:func:`kv_append` packed once: a ``LaunchPlan``."""
    kern, grid, block, args = _prep_append(k_new, v_new, k_cache, v_cache, pos, pos_offset, block_table, stream,
                                           kv_layout)
    return kern.bind(grid, block, *args, stream=stream)


# ------------------------------------------------------------------ prefill
def _prep_prefill(q, k, v, out, causal, scale, causal_offset, stream):
    qb = _args.array(q, "q", stream)
    kb = _args.array(k, "k", stream)
    vb = _args.array(v, "v", stream)
    code = _half(qb, "q")
    for n, b in (("k", kb), ("v", vb)):
        if b.dtype != qb.dtype:
            raise TypeError(f"{n}: dtype {b.dtype} differs from q's {qb.dtype}")
    nd = len(qb.shape)
    if nd not in (3, 4) or len(kb.shape) != nd or len(vb.shape) != nd:
        raise ValueError(f"q/k/v: expected [S, heads, D] or [B, S, heads, D] each (same rank), got "
                         f"{tuple(qb.shape)}, {tuple(kb.shape)}, {tuple(vb.shape)}")
    qs, ks, vs = _check_vec(qb, "q"), _check_vec(kb, "k"), _check_vec(vb, "v")
    if nd == 3:
        qsh, ksh, vsh = (1,) + tuple(qb.shape), (1,) + tuple(kb.shape), (1,) + tuple(vb.shape)
        qs, ks, vs = (0,) + qs, (0,) + ks, (0,) + vs
    else:
        qsh, ksh, vsh = tuple(qb.shape), tuple(kb.shape), tuple(vb.shape)
    bsz, sq, nh, d = qsh
    if ksh != vsh:
        raise ValueError(f"k/v: shapes differ: {ksh} vs {vsh}")
    if ksh[0] != bsz or ksh[3] != d:
        raise ValueError(f"k: shape {tuple(kb.shape)} does not match q's batch {bsz} and head dim {d}")
    skv, nkv = ksh[1], ksh[2]
    if nkv < 1 or nh % nkv:
        raise ValueError(f"q: {nh} heads is not a multiple of k's {nkv} KV heads")
    if d not in HEAD_DIMS and not (d % 16 == 0 and 16 <= d <= 256):
        raise ValueError(f"head_dim {d}: supported 64, 80, 96, 128 (any multiple of 16 up to 256)")
    if sq < 1 or skv < 1:
        raise ValueError("q/k: empty sequence")
    if bsz > 65535 or nh > 65535:
        raise ValueError("batch and heads must each be <= 65535")
    _args.same_device(("q", qb), ("k", kb), ("v", vb))
    ob = _args.out_array(out, tuple(qb.shape), qb.dtype, qb, stream)
    _args.check_align(ob, "out", 16)
    os_ = (sq * nh * d, nh * d, d, 1)
    causal_offset = _args.int_arg(causal_offset, "causal_offset", -(1 << 30), 1 << 30)
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    scale = _args.scalar_f32(scale, "scale")
    smem = prefill_smem(d)
    kern = _kernel(f"attn_prefill_{code}", _pf_defines(d), smem, qb.device, PF_SOURCE)
    bm = 16 * PF_WARPS
    grid = ((sq + bm - 1) // bm, nh, bsz)
    args = (qb, kb, vb, ob, sq, skv, nh // nkv, qs[1], qs[2], qs[0], ks[1], ks[2], ks[0], vs[1], vs[2], vs[0],
            os_[1], os_[2], os_[0], 1 if causal else 0, causal_offset, _args.f32(scale * _LOG2E))
    return kern, grid, PF_WARPS * 32, smem, args, ob


@op
def attention_prefill(q, k, v, *, causal=True, scale=None, causal_offset=0, out=None, stream=None):
    """Flash attention (online softmax, fp32 accumulation) for a prompt: ``q`` ``[S, H, D]`` or
    ``[B, S, H, D]``, ``k``/``v`` ``[S_kv, H_kv, D]`` / ``[B, S_kv, H_kv, D]`` (GQA when
    ``H_kv < H``), float16 or bfloat16; ``out`` has ``q``'s shape (contiguous). With ``causal``,
    query ``i`` sees keys ``j <= i + causal_offset``."""
    kern, grid, block, smem, args, ob = _prep_prefill(q, k, v, out, causal, scale, causal_offset, stream)
    return kern, grid, block, args, ob, smem


def plan_attention_prefill(q, k, v, *, causal=True, scale=None, causal_offset=0, out=None, stream=None):
    """:func:`attention_prefill` packed once: a ``LaunchPlan``."""
    kern, grid, block, smem, args, ob = _prep_prefill(q, k, v, out, causal, scale, causal_offset, stream)
    return kern.bind(grid, block, *args, stream=stream, shared_mem=smem)
